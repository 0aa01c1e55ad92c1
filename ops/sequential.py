"""Per-example online learning inside a mini-batch, for the terms of the logit that are linear
in their parameters (the wide part, numeric weights, the bias).

A per-example learner predicts example ``k`` after it has learnt examples ``0..k-1``; a
mini-batch predicts all of them with the parameters from before the batch. For a linear term
``z_k = Σ_o x_o · w[row_o]`` the difference is known in closed form: example ``j``'s update
moves ``w[row]`` by ``-η_j · ρ_j · x_j`` (``η`` the optimizer's per-coordinate step size at the
accumulator it has reached after example ``j``; ``ρ_j`` the logit gradient of example ``j``),
so example ``k`` sees

    z_k = z0_k − Σ_{j<k} M_kj ρ_j,    M_kj = Σ_{rows both touch} x_k · η_j · x_j.

``ρ_j = σ(z_j) − y_j`` depends on ``z_j`` and the step sizes depend on the gradients, so this is
a lower-triangular nonlinear system in ``z``; Newton's method solves it with one triangular
solve per iteration (``B×B``, vectorised over the batch) and usually converges in 3–5
iterations. The result is what the per-example learner would have predicted and learnt, for
these terms; the other layers (embeddings, MLPs) still see the batch at once.

Two further per-example rules, both from Vowpal Wabbit's default update:

* ``implicit``: each example's own update is taken at the point it leads to (implicit /
  importance-invariant SGD): ``ρ_k = σ(z_k − K_kk ρ_k) − y_k`` with ``K_kk = Σ η x²`` the
  example's self-influence. A large step cannot overshoot the label.
* ``normalize``: the step sizes of these terms are divided by ``√(mean number of active linear
  features per example)``, so one learning rate suits a 5-field stream and a 40-field one.

The accumulators (Adagrad, FTRL) add each example's squared gradient at its prediction, as a
per-example learner would; the pushed gradient is scaled so that the store's one update of a
row equals the sum of that row's per-example updates (exact for SGD, Adagrad and FTRL without
L1: their step is linear in the gradient at fixed squares).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.linalg import solve_triangular

MAX_ITERATIONS = 12
TOLERANCE = 1e-4          # largest change of a logit in the last Newton step (error ~ its square)
IMPLICIT_ITERATIONS = 8   # at most, scalar Newton steps for the implicit residual (monotone)


@dataclass
class LinearTerm:
    """One parameter's contribution to the logit: ``z[example[o]] += x[o] * w[pos[o]]`` for each
    occurrence ``o`` (``pos``: the pulled row of a table, or the flat index of a dense parameter)."""

    param: str
    example: np.ndarray
    pos: np.ndarray
    x: np.ndarray
    rows: int                 # rows of a table pulled this batch, or the dense parameter's size
    shape: tuple              # the shape of the parameter's gradient: (rows, 1) or the dense shape


@dataclass
class Solution:
    z: np.ndarray             # the sequential logits (float64 [B]): what the examples are predicted with
    rho: np.ndarray           # the logit gradient of each example's update (implicit residual)
    iterations: int
    converged: bool


def _sigmoid(z):
    return 0.5 * (1.0 + np.tanh(0.5 * z))


class Sequential:
    """The occurrences of one batch's linear terms, sorted once; ``solve`` runs Newton."""

    def __init__(self, terms: list[LinearTerm], optimizers: dict, states: dict, batch_size: int,
                 *, implicit: bool = True, normalize: bool = True):
        self.terms, self.B = terms, batch_size
        self.implicit = implicit
        ex, row, x, self.bounds = [], [], [], []
        base = 0
        for t in terms:
            keep = t.x != 0
            ex.append(t.example[keep])
            row.append(t.pos[keep] + base)
            x.append(np.asarray(t.x, np.float64)[keep])
            self.bounds.append((base, base + t.rows))
            base += t.rows
        self.R = base
        ex = np.concatenate(ex) if ex else np.zeros(0, np.int64)
        row = np.concatenate(row) if row else np.zeros(0, np.int64)
        x = np.concatenate(x) if x else np.zeros(0)
        # occurrences by (row, example): per-row running sums of squared gradients; the terms'
        # rows are disjoint ranges, so each term's occurrences end up in one slice
        order = np.argsort(row * batch_size + ex, kind="stable")
        self.ex, self.row, self.x = ex[order], row[order], x[order]
        n = len(self.ex)
        first = np.ones(n, bool)
        first[1:] = self.row[1:] != self.row[:-1]
        self.seg_start = np.flatnonzero(first)
        self.seg_id = np.cumsum(first) - 1
        last = np.ones(n, bool)
        last[:-1] = first[1:]
        self.last = np.flatnonzero(last)
        # per slice of terms that share an update rule: the rule and the rows' optimizer state
        cuts = np.searchsorted(self.row, [lo for lo, _ in self.bounds] + [base])
        self.groups = []
        for i, t in enumerate(terms):
            a, b = int(cuts[i]), int(cuts[i + 1])
            if a == b:
                continue
            local = self.row[a:b] - self.bounds[i][0]
            st = {k: np.asarray(v, np.float64).reshape(-1)[local] for k, v in states[t.param].items()}
            opt = optimizers[t.param]
            prev = self.groups[-1] if self.groups else None
            if prev is not None and prev[0].stop == a and prev[1].get_config() == opt.get_config() \
                    and prev[2].keys() == st.keys():
                st = {k: np.concatenate([prev[2][k], v]) for k, v in st.items()}
                self.groups[-1] = (slice(prev[0].start, b), opt, st)
            else:
                self.groups.append((slice(a, b), opt, st))
        norms = np.bincount(self.ex, self.x * self.x, minlength=batch_size)
        self.scale = 1.0 / np.sqrt(max(norms.mean(), 1.0)) if normalize and n else 1.0
        self._coupling_plan(first)

    def _coupling_plan(self, first):
        """How to build M each iteration. A row many examples share (the bias, numeric fields,
        frequent values) goes into a dense ``[B, rows]`` block multiplied by BLAS; a row a few
        examples share contributes its pairs of occurrences directly (``m(m−1)/2`` of them); a
        row one example touches contributes nothing off the diagonal."""
        B, n = self.B, len(self.ex)
        seg_len = np.diff(np.append(self.seg_start, n))
        m = seg_len[self.seg_id]                                   # per occurrence: its row's count
        dense_at = max(4, B // 5)
        heavy = m >= dense_at
        self.heavy = np.flatnonzero(heavy)
        _, col = np.unique(self.row[self.heavy], return_inverse=True)
        self.heavy_cols = int(col.max()) + 1 if len(col) else 0
        self.heavy_flat = self.ex[self.heavy] * self.heavy_cols + col.reshape(-1)
        self.heavy_x = self._heavy_matrix(self.x[self.heavy])
        # pairs (earlier, later) of occurrences of a light shared row; occurrences are sorted by
        # (row, example), so "later" is simply a later position within the row's segment
        light = np.flatnonzero(~heavy & (m >= 2))
        later = (self.seg_start[self.seg_id[light]] + seg_len[self.seg_id[light]]) - light - 1
        o1 = np.repeat(light, later)
        starts = np.cumsum(later) - later
        o2 = o1 + 1 + (np.arange(len(o1)) - np.repeat(starts, later))
        differ = self.ex[o1] != self.ex[o2]                        # same example twice: diagonal only
        self.pair_j, pair_k = o1[differ], o2[differ]
        self.pair_ex_j, self.pair_ex_k = self.ex[self.pair_j], self.ex[pair_k]
        self.pair_at = self.pair_ex_k * B + self.pair_ex_j
        self.pair_xk = self.x[pair_k]

    def _heavy_matrix(self, values):
        """``[B, heavy rows]`` with ``values`` (one per heavy occurrence) in place."""
        n = self.B * self.heavy_cols
        return np.bincount(self.heavy_flat, values, minlength=n).reshape(self.B, self.heavy_cols).astype(np.float64)

    # ---- the pieces, for a residual r ------------------------------------------------------
    def cumulative_squares(self, r):
        """Per occurrence: the row's accumulated squared gradients up to and including it."""
        sq = (r[self.ex] * self.x) ** 2
        c = np.cumsum(sq)
        before = c[self.seg_start] - sq[self.seg_start]
        return c - before[self.seg_id]

    def rates(self, r):
        cum = self.cumulative_squares(r)
        eta = np.empty(len(cum))
        for sel, opt, st in self.groups:
            eta[sel] = opt.rates(st, cum[sel])
        return eta * self.scale, cum

    def coupling(self, eta):
        """The coupling for step sizes ``eta``: ``(L, kd, pairs, E)`` where ``L``'s strictly
        lower triangle is M (above it: whatever the dense product gives, which a lower
        triangular solve never reads), ``kd`` the self-influence, ``pairs`` the light rows'
        entries and ``E`` the heavy rows' ``η·x`` (for products with M without forming it)."""
        B = self.B
        ex_x = eta * self.x
        kd = np.bincount(self.ex, ex_x * self.x, minlength=B)
        pairs = self.pair_xk * ex_x[self.pair_j]
        L = np.bincount(self.pair_at, pairs, minlength=B * B).reshape(B, B).astype(np.float64, copy=False)
        E = None
        if self.heavy_cols:
            E = self._heavy_matrix(ex_x[self.heavy])
            L += self.heavy_x @ E.T
        return L, kd, pairs, E

    def lower_times(self, pairs, E, v):
        """``M v`` from the pieces of ``coupling``: O(occurrences + pairs), no ``B×B`` product."""
        out = np.bincount(self.pair_ex_k, pairs * v[self.pair_ex_j], minlength=self.B).astype(np.float64)
        if E is not None:
            ev = E * v[:, None]
            before = np.cumsum(ev, axis=0) - ev                        # Σ over earlier examples
            out += np.einsum("kc,kc->k", self.heavy_x, before)
        return out

    def implicit_residual(self, z, y, kd, start=None):
        """ρ with ρ = σ(z − kd ρ) − y, and dρ/dz; Newton from ``start`` (default σ(z) − y)."""
        p = _sigmoid(z)
        rho = p - y if start is None else start
        if not self.implicit:
            return p - y, p * (1 - p)
        for _ in range(IMPLICIT_ITERATIONS):
            q = _sigmoid(z - kd * rho)
            d = q * (1 - q)
            delta = (rho - q + y) / (1 + d * kd)
            rho = rho - delta
            if np.max(np.abs(delta), initial=0.0) < 1e-12:
                break
        q = _sigmoid(z - kd * rho)
        d = q * (1 - q)
        return rho, d / (1 + d * kd)

    # ---- Newton ----------------------------------------------------------------------------
    def solve(self, z0, y) -> Solution:
        z0 = np.asarray(z0, np.float64)
        y = np.asarray(y, np.float64)
        z = z0.copy()
        converged, it, rho = False, 0, None
        for it in range(1, MAX_ITERATIONS + 1):
            eta, _ = self.rates(_sigmoid(z) - y)
            L, kd, pairs, E = self.coupling(eta)
            if not self.implicit:
                kd = np.zeros_like(kd)
            rho, drho = self.implicit_residual(z, y, kd, rho)
            F = z - z0 + self.lower_times(pairs, E, rho)
            L *= drho[None, :]                                     # J = I + M·diag(dρ/dz)
            step = solve_triangular(L, F, lower=True, unit_diagonal=True, check_finite=False)
            z -= step
            if np.max(np.abs(step), initial=0.0) < TOLERANCE:
                converged = True
                break
        # the last step moved z by less than the tolerance: its self-influence still holds
        rho, _ = self.implicit_residual(z, y, kd, rho)
        self.final_r = _sigmoid(z) - y
        return Solution(z, rho, it, converged)

    # ---- what to push ----------------------------------------------------------------------
    def gradients(self, sol: Solution, dtype) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Per term: (param, gradient, squares) over its ``rows`` such that the store's one
        update equals the sum of the per-example updates: ``g̃ = Σ_k η_k g_k / η_last``."""
        eta, cum = self.rates(self.final_r)
        g = sol.rho[self.ex] * self.x
        moved = np.bincount(self.row, eta * g, minlength=self.R)
        squares = np.zeros(self.R)
        final = np.ones(self.R)
        squares[self.row[self.last]] = cum[self.last]
        final[self.row[self.last]] = eta[self.last] / self.scale
        grad = moved / final
        out = []
        for t, (lo, hi) in zip(self.terms, self.bounds):
            out.append((t.param, grad[lo:hi].astype(dtype).reshape(t.shape),
                        squares[lo:hi].astype(dtype).reshape(t.shape)))
        return out
