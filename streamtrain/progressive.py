"""Progressive validation: predict each batch before learning from it, score the predictions.

One tracker per kind of loss, chosen by what the loss layer declares (``quality``):
``Progressive`` (binary: logloss, AUC, calibration), ``MultiClass`` (``softmax_ce``: logloss,
top-1 accuracy), ``Regression`` (``mse``: RMSE, MAE). Each ``update`` returns the batch's
per-example losses (the drift monitor's input, computed once); ``figures()`` holds only the
figures that apply to the model, and ``names`` the two of the progress line.

Logloss is a running sum. AUC comes from two histograms of the predicted log-odds (positives
and negatives, 2^16 bins over [-30, 30]), so memory stays constant over a months-long stream;
pairs that share a bin count half, which moves the AUC by well under 1e-4 in practice.
"""
from __future__ import annotations

import numpy as np

from . import lazy
from .scores import EPS, class_log_losses, log_losses, squared_errors

BINS = 1 << 16
LIMIT = 30.0
BIN_EPS = 1e-13         # the bins' clip of p (log-odds within ±LIMIT)
_FLOATS = (np.dtype(np.float32), np.dtype(np.float64))
_PASS = np.array([BIN_EPS, EPS, LIMIT, BINS / (2 * LIMIT)])    # binary_pass's constants
_kernels = lazy.module("streamtrain._progressive_kernels")      # numba: not paid at start-up


def logit_bins(p: np.ndarray) -> np.ndarray:
    p = np.clip(np.asarray(p, np.float64), BIN_EPS, 1 - BIN_EPS)
    z = np.log(p) - np.log1p(-p)
    return np.clip(((z + LIMIT) * (BINS / (2 * LIMIT))).astype(np.int64), 0, BINS - 1)


def auc_from_hist(pos: np.ndarray, neg: np.ndarray) -> float:
    n_pos, n_neg = pos.sum(), neg.sum()
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    neg_below = np.cumsum(neg) - neg
    return float((pos * neg_below).sum() + 0.5 * (pos * neg).sum()) / (float(n_pos) * float(n_neg))


class Progressive:
    """Running logloss / AUC / calibration over every example seen (binary labels)."""

    names = ("logloss", "auc")

    def __init__(self):
        self.pos = np.zeros(BINS, np.int64)
        self.neg = np.zeros(BINS, np.int64)
        self.count = 0
        self.loss_sum = 0.0
        self.label_sum = 0.0
        self.pred_sum = 0.0

    def update(self, labels: np.ndarray, p: np.ndarray) -> np.ndarray:
        """Add a batch; returns its per-example losses (the drift monitor's input, computed once)."""
        labels = np.ascontiguousarray(labels).reshape(-1)
        p = np.ascontiguousarray(p, np.float64).reshape(-1)
        if len(p) != len(labels) or labels.dtype not in _FLOATS:
            return self._update(labels, p)
        losses = np.empty(len(p))
        sums = _kernels().binary_pass(labels, p, self.pos, self.neg, losses, _PASS)   # O(batch), not O(BINS)
        self.count += len(labels)
        self.loss_sum += sums[0]
        self.label_sum += sums[1]
        self.pred_sum += sums[2]
        return losses

    def _update(self, labels, p) -> np.ndarray:
        """``update`` in numpy (labels that are not floats): the compiled pass's arithmetic."""
        bins = logit_bins(p)
        positive = labels > 0.5
        np.add.at(self.pos, bins[positive], 1)
        np.add.at(self.neg, bins[~positive], 1)
        self.count += len(labels)
        losses = log_losses(labels, p)
        self.loss_sum += float(losses.sum())
        self.label_sum += float(labels.sum())
        self.pred_sum += float(p.sum())
        return losses

    @property
    def logloss(self) -> float:
        return self.loss_sum / self.count if self.count else float("nan")

    @property
    def auc(self) -> float:
        return auc_from_hist(self.pos, self.neg)

    @property
    def observed_ctr(self) -> float:
        return self.label_sum / self.count if self.count else float("nan")

    @property
    def predicted_ctr(self) -> float:
        return self.pred_sum / self.count if self.count else float("nan")

    def figures(self) -> dict:
        return {"logloss": self.logloss, "auc": self.auc, "predicted_ctr": self.predicted_ctr,
                "observed_ctr": self.observed_ctr}


class MultiClass:
    """Running multi-class logloss (``-log p[y]``, mean) and top-1 accuracy (ties: the lowest
    class) over every example seen; predictions ``[n, K]`` class probabilities, labels class indices."""

    names = ("logloss", "accuracy")

    def __init__(self):
        self.count = 0
        self.loss_sum = 0.0
        self.hits = 0

    def update(self, labels: np.ndarray, p: np.ndarray) -> np.ndarray:
        labels = np.asarray(labels).reshape(-1)
        p = np.asarray(p).reshape(len(labels), -1)
        losses = class_log_losses(labels, p)
        self.count += len(labels)
        self.loss_sum += float(losses.sum())
        self.hits += int((p.argmax(axis=1) == labels.astype(np.int64)).sum())
        return losses

    @property
    def logloss(self) -> float:
        return self.loss_sum / self.count if self.count else float("nan")

    @property
    def accuracy(self) -> float:
        return self.hits / self.count if self.count else float("nan")

    def figures(self) -> dict:
        return {"logloss": self.logloss, "accuracy": self.accuracy}


class Regression:
    """Running RMSE and MAE of the outputs against the labels over every example seen, and the
    labels' standard deviation: the RMSE of always predicting their mean, the baseline a model
    must beat (the regression counterpart of the entropy of the observed CTR).

    The per-example losses ``update`` returns (the drift detectors') are the squared errors over
    the labels' variance so far (1 when it is 0): the terms of 1 − R², in the same units whatever
    the label's, so that the detectors' defaults hold for a price as for a rating. With
    ``normalized=False`` (AutoML's candidates) they are the plain squared errors: each candidate
    has a tracker of its own, born at its own example, whose variance so far is of other labels
    than another's, so divided by it two candidates' losses of one example would not compare."""

    names = ("rmse", "mae", "label_stddev")     # (the progress line: the RMSE to beat beside the RMSE)

    def __init__(self, normalized: bool = True):
        self.normalized = normalized
        self.count = 0
        self.sq_sum = 0.0
        self.abs_sum = 0.0
        self.label_sum = 0.0
        self.label_sq_sum = 0.0

    def update(self, labels: np.ndarray, outputs: np.ndarray) -> np.ndarray:
        losses = squared_errors(labels, outputs)
        y = np.asarray(labels, np.float64).reshape(-1)
        self.count += len(losses)
        self.sq_sum += float(losses.sum())
        self.abs_sum += float(np.sqrt(losses).sum())
        self.label_sum += float(y.sum())
        self.label_sq_sum += float(y @ y)
        var = self.label_variance if self.normalized else 0.0
        return losses / var if var > 0 else losses

    @property
    def rmse(self) -> float:
        return float(np.sqrt(self.sq_sum / self.count)) if self.count else float("nan")

    @property
    def mae(self) -> float:
        return self.abs_sum / self.count if self.count else float("nan")

    @property
    def label_stddev(self) -> float:
        return float(np.sqrt(self.label_variance))

    @property
    def label_variance(self) -> float:
        if not self.count:
            return float("nan")
        mean = self.label_sum / self.count
        return max(self.label_sq_sum / self.count - mean * mean, 0.0)

    def figures(self) -> dict:
        return {"rmse": self.rmse, "mae": self.mae, "label_stddev": self.label_stddev}


class Unscored:
    """A loss that declares no ``quality`` (a plug-in's): no figures, no per-example losses."""

    names = ()
    count = 0

    def update(self, labels, p) -> None:
        return None

    def figures(self) -> dict:
        return {}


TRACKERS = {"binary": Progressive, "multiclass": MultiClass, "regression": Regression}


def tracker_class(loss_layer):
    """The tracker class for a loss layer's declared ``quality`` (``Unscored`` without one)."""
    return TRACKERS.get(getattr(loss_layer, "quality", None), Unscored)


class Window:
    """The same figures over the last ``size`` examples (kept as recent batches), by a tracker
    of class ``tracker`` (binary by default)."""

    def __init__(self, size: int = 100_000, tracker=Progressive):
        self.size = size
        self.tracker = tracker
        self._parts: list[tuple[np.ndarray, np.ndarray]] = []
        self._n = 0

    def update(self, labels, p) -> None:
        labels = np.asarray(labels, np.float32).reshape(-1)
        p = np.asarray(p, np.float64)
        p = p.reshape(len(labels), -1) if p.ndim > 1 else p.reshape(-1)
        self._parts.append((labels, p))
        self._n += len(labels)
        while self._parts and self._n - len(self._parts[0][0]) >= self.size:
            self._n -= len(self._parts.pop(0)[0])

    def figures(self):
        prog = self.tracker()
        if self._parts:
            prog.update(np.concatenate([a for a, _ in self._parts]),
                        np.concatenate([b for _, b in self._parts]))
        return prog
