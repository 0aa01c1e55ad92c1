"""Logloss and AUC, written once: per-example losses, their mean, and the exact AUC; the
per-example losses of the other loss kinds (multi-class logloss, squared error).

The trainer's progressive figures (``progressive.py``), the synthetic stream's grade of its
planted model (``readers/synthetic.py``) and the benchmarks all use these.

>>> round(logloss([1, 0], [0.8, 0.4]), 4), auc([1, 0, 1, 0], [0.9, 0.1, 0.4, 0.4])
(0.367, 0.875)
"""
from __future__ import annotations

import numpy as np

EPS = 1e-7          # probabilities are clipped to [EPS, 1 - EPS]


def log_losses(labels, probs, eps: float = EPS) -> np.ndarray:
    """The negative log-likelihood of each label under its probability (float64)."""
    p = np.clip(np.asarray(probs, np.float64), eps, 1 - eps)
    y = np.asarray(labels, np.float64)
    return -(y * np.log(p) + (1 - y) * np.log1p(-p))


def class_log_losses(labels, probs, eps: float = EPS) -> np.ndarray:
    """``-log p[y]`` of each example: ``probs [n, K]`` class probabilities, ``labels`` class
    indices (float64; the probability clipped to at least ``eps``).

    >>> class_log_losses([0, 2], [[0.5, 0.25, 0.25], [0.5, 0.25, 0.25]]).round(4)
    array([0.6931, 1.3863])
    """
    p = np.asarray(probs, np.float64)
    p = p.reshape(len(p), -1)
    y = np.asarray(labels).astype(np.int64).reshape(-1)
    return -np.log(np.maximum(p[np.arange(len(y)), y], eps))


def squared_errors(labels, outputs) -> np.ndarray:
    """``(output - label)²`` of each example (float64): the ``mse`` loss per example."""
    d = np.asarray(outputs, np.float64).reshape(-1) - np.asarray(labels, np.float64).reshape(-1)
    return d * d


def logloss(labels, probs, eps: float = EPS) -> float:
    """Mean negative log-likelihood of the labels under the probabilities; nan when empty."""
    losses = log_losses(labels, probs, eps)
    return float(losses.mean()) if losses.size else float("nan")


def rankdata(x: np.ndarray) -> np.ndarray:
    """1-based ranks, ties sharing their mean rank (``scipy.stats.rankdata``'s default, without
    importing scipy.stats: a third of a second at start-up)."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.r_[True, xs[1:] != xs[:-1]])
    ends = np.r_[starts[1:], len(xs)]
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.repeat((starts + ends + 1) / 2.0, ends - starts)
    return ranks


def auc(labels, scores) -> float:
    """Area under the ROC curve (Mann-Whitney U, ties count one half); nan without both classes."""
    y = np.asarray(labels, np.float64) > 0.5
    pos = int(y.sum())
    neg = len(y) - pos
    if pos == 0 or neg == 0:
        return float("nan")
    ranks = average_ranks(np.asarray(scores, dtype=np.float64))
    return float((ranks[y].sum() - pos * (pos + 1) / 2.0) / (pos * neg))


def average_ranks(x: np.ndarray) -> np.ndarray:
    """1-based ranks of ``x``, ties sharing their average rank (scipy's ``rankdata``)."""
    order = np.argsort(x, kind="stable")
    _, first, counts = np.unique(x[order], return_index=True, return_counts=True)
    ranks = np.empty(len(x), np.float64)
    ranks[order] = np.repeat(first + (counts + 1) / 2.0, counts)
    return ranks
