"""Optimizers: SGD, Momentum, Adagrad, Adam, FTRL-Proximal, sparse-aware; one rule per module.

Importing the package imports every module in it, so a rule added as a new file is registered.
"""
import importlib
import pkgutil

from .base import OPTIMIZERS, Optimizer, make_optimizer, register

for _mod in pkgutil.iter_modules(__path__):
    if _mod.name != "base":
        importlib.import_module(f"{__name__}.{_mod.name}")

from .adagrad import Adagrad  # noqa: E402
from .adam import Adam  # noqa: E402
from .ftrl import FTRL  # noqa: E402
from .momentum import Momentum  # noqa: E402
from .sgd import SGD  # noqa: E402

__all__ = ["Optimizer", "SGD", "Momentum", "Adagrad", "Adam", "FTRL", "OPTIMIZERS", "make_optimizer",
           "register"]
