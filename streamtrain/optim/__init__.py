"""Optimizers: SGD, Momentum, Adagrad, Adam, FTRL-Proximal, sparse-aware; one rule per module.

Importing the package imports every module in it, so a rule added as a new file is registered.
"""
from streamtrain.registry import import_modules

from .base import OPTIMIZERS, Optimizer, make_optimizer, register

import_modules(__name__, __path__)

from .adagrad import Adagrad  # noqa: E402
from .adam import Adam  # noqa: E402
from .ftrl import FTRL  # noqa: E402
from .momentum import Momentum  # noqa: E402
from .sgd import SGD  # noqa: E402

__all__ = ["Optimizer", "SGD", "Momentum", "Adagrad", "Adam", "FTRL", "OPTIMIZERS", "make_optimizer",
           "register"]
