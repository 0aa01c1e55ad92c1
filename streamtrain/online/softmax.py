"""The compiled per-example loop of a softmax over ``K`` logits (``softmax_ce`` with
``sequential: true``): example ``k``'s logits are ``base[k]`` (the rest of the graph's) plus its
linear terms at their current values, which examples ``0..k−1`` have updated; then every row it
touches (``K`` weights: an embedding of dim ``K`` summed over its fields, a bias or a linear fc
of dim ``K``) steps by its rule, coordinate ``c`` with gradient ``s·(p_c − [c = y_k])·x``.

As the loop of one logit (``kernels.learn``) does: an example's rows are gathered once, a row
twice in an example summed (``kernels._gather``), ``s = 1/√max(Σx², 1)`` with ``normalize`` (the
squared gradients the accumulators add are the unscaled ones, ``(r·x)²``), each coordinate's
step the optimizer module's own ``rule`` (``rules._step``). There is no implicit step: a
softmax has no closed form for it (the ``implicit`` option is for one logit).
"""
from __future__ import annotations

import numpy as np

from ..compiled import numba  # numba as streamtrain.compiled loads it (start-up: see there)

njit = numba.njit

from .kernels import _gather  # noqa: E402
from .rules import _row, _step  # noqa: E402


@njit(cache=True, nogil=True, error_model="numpy")
def learn(base, y, normalize, rules, occ, slots):
    """Per example in order: its ``K`` logits and class probabilities, then its update of the
    rows it touches, in place (``slots``: ``kernels.Slots`` of ``[rows, K]`` arrays; ``occ``:
    ``kernels.Occurrences`` of one logit's linear terms). ``y``: class indices. Returns (logits
    ``[B, K]``, residuals ``p − onehot(y)`` ``[B, K]``: the gradient of the rest of the logits)."""
    code, hyper = rules
    ptr, row, x, twice, fixed, fx = occ.ptr, occ.row, occ.x, occ.repeats, occ.fixed, occ.fx
    W, N, Z, grp = slots
    B, K = base.shape
    P = W.shape[0]
    none = np.zeros((P, 1))                  # (``_gather`` sums one weight per slot: none here)
    seen = np.full((P if twice else 0, 2), -1, np.int64)
    most = 1
    for k in range(B):
        most = max(most, ptr[k + 1] - ptr[k] + len(fixed))
    uj, ux = np.empty(most, np.int64), np.empty(most)
    zs, rhos = np.empty((B, K)), np.empty((B, K))
    r = np.empty(K)
    for k in range(B):
        _, m = _gather(k, ptr, row, x, none, seen, uj, ux, twice, fixed, fx)
        top = -np.inf
        for c in range(K):
            zc = base[k, c]
            for i in range(m):
                zc += ux[i] * W[np.uint64(uj[i]), c]
            zs[k, c] = zc
            top = max(top, zc)
        total = 0.0
        for c in range(K):
            r[c] = np.exp(zs[k, c] - top)
            total += r[c]
        label = np.int64(y[k])
        for c in range(K):
            r[c] = r[c] / total - (1.0 if c == label else 0.0)
            rhos[k, c] = r[c]
        norm = 0.0
        for i in range(m):
            norm += ux[i] ** 2
        s = 1.0 / np.sqrt(max(norm, 1.0)) if normalize else 1.0
        for i in range(m):
            j = np.uint64(uj[i])
            g_ = grp[j]
            rule, h = code[g_], _row(hyper, g_)
            for c in range(K):
                g = r[c] * ux[i]
                W[j, c], N[j, c], Z[j, c] = _step(rule, h, W[j, c], N[j, c], Z[j, c], s * g, g * g)
    return zs, rhos
