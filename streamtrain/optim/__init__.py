"""Optimizers: SGD, Momentum, Adagrad, Adam, FTRL-Proximal, sparse-aware."""
from .rules import FTRL, OPTIMIZERS, SGD, Adagrad, Adam, Momentum, Optimizer, make_optimizer

__all__ = ["Optimizer", "SGD", "Momentum", "Adagrad", "Adam", "FTRL", "OPTIMIZERS", "make_optimizer"]
