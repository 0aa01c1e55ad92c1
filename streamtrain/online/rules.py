"""The update rules inside the compiled per-example loop (``kernels.learn``): each optimizer
module's own functions (``optim/<rule>.py``: ``rule``, ``rate``, ``rate_step``) compiled inline
and picked by the rule group's code (``terms.SGD``, ``ADAGRAD``, ``FTRL``). ``_step`` is a
coordinate's update; ``_prepare`` + ``_apply`` the same step in the form the implicit residual
needs (``tests/test_optim.py`` holds them equal). numba caches ``kernels.learn`` by its own file:
after editing a rule here or in ``optim/``, remove the ``__pycache__/*.nbi`` caches.
"""
from __future__ import annotations

from ..compiled import numba  # numba as streamtrain.compiled loads it (start-up: see there)

njit = numba.njit

from ..optim import adagrad, ftrl, sgd  # noqa: E402
from .terms import ADAGRAD, SGD  # noqa: E402


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _row(hyper, g_):
    """Group ``g_``'s hyperparameters as a tuple: a value, not the array view ``hyper[g_]``
    (numba builds and reference-counts a view at every use)."""
    return hyper[g_, 0], hyper[g_, 1], hyper[g_, 2], hyper[g_, 3]


def _compiled(fn):
    return njit(cache=True, nogil=True, error_model="numpy", inline="always")(fn)


#: the rules ``_step`` runs, at their index in ``terms.KERNEL_RULES`` (the code ``kernel_rule`` gives)
RULES = (sgd.rule, adagrad.rule, ftrl.rule)
_sgd, _adagrad, _ftrl = _compiled(sgd.rule), _compiled(adagrad.rule), _compiled(ftrl.rule)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _step(code, h, w, n, z, g, sq):
    """One coordinate's update by gradient ``g`` with squared gradient ``sq``: (w, n, z), by
    the rule's own function (``optim/<rule>.py: rule``)."""
    h5 = (h[0], h[1], h[2], h[3], 0.0)
    if code == SGD:
        return _sgd(h5, w, n, z, g, sq)
    if code == ADAGRAD:
        return _adagrad(h5, w, n, z, g, sq)
    return _ftrl(h5, w, n, z, g, sq)


# one global per function (a tuple of them would be called through pointers, not inlined)
_rate_sgd, _rate_adagrad, _rate_ftrl = _compiled(sgd.rate), _compiled(adagrad.rate), _compiled(ftrl.rate)
_rate_step_sgd, _rate_step_adagrad, _rate_step_ftrl = (
    _compiled(sgd.rate_step), _compiled(adagrad.rate_step), _compiled(ftrl.rate_step))


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _prepare(code, h, n, sq):
    """For a linear slot with accumulator ``n`` about to add ``sq``: (√(n + sq), the step size
    ``dw/d(−g)``), by the rule's own ``rate`` (optim/<rule>.py)."""
    if code == SGD:
        return _rate_sgd(h, n, sq)
    if code == ADAGRAD:
        return _rate_adagrad(h, n, sq)
    return _rate_ftrl(h, n, sq)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _apply(code, h, w, n, z, root0, root, rate, g, sq):
    """``_step`` of a linear slot with ``√n`` before (``root0``) and after, and the rate, known:
    the rule's own ``rate_step``."""
    if code == SGD:
        return _rate_step_sgd(h, w, n, z, root0, root, rate, g, sq)
    if code == ADAGRAD:
        return _rate_step_adagrad(h, w, n, z, root0, root, rate, g, sq)
    return _rate_step_ftrl(h, w, n, z, root0, root, rate, g, sq)
