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
a lower-triangular nonlinear system in ``z``. Newton's method solves it, vectorised over the
batch: the residual ``M ρ`` is exact and costs O(occurrences) (per-row running sums over the
examples, like the accumulators); the Jacobian ``I + M·diag(dρ/dz)`` is built once per batch
(a ``B×B`` triangular solve per iteration) and converges in 2–3 iterations on a stream in
steady state. The result is what the per-example learner would have predicted and learnt, for
these terms; the other layers (embeddings, MLPs) still see the batch at once.

Two further per-example rules, both from Vowpal Wabbit's default update:

* ``implicit``: each example's own update is taken at the point it leads to (implicit /
  importance-invariant SGD): ``ρ_k = σ(z_k − K_kk ρ_k) − y_k`` with ``K_kk = Σ η x²`` the
  example's self-influence. A large step cannot overshoot the label.
* ``normalize``: the step sizes of these terms are divided by ``√(mean over the batch of an
  example's Σ x²)`` (the number of active features, for one-hot ones), so one learning rate
  suits a 5-field stream and a 40-field one.

The accumulators (Adagrad, FTRL) add each example's squared gradient at its prediction, as a
per-example learner would; the pushed gradient is scaled so that the store's one update of a
row equals the sum of that row's per-example updates (exact for SGD, Adagrad and FTRL without
L1: their step is linear in the gradient at fixed squares).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_ITERATIONS = 12
TOLERANCE = 1e-4          # stop when the next Newton step would move no logit by more than this
HEAVY_MIN, HEAVY_DIV = 8, 32  # a row max(8, B/32) examples of a batch share: the Jacobian's dense block
IMPLICIT_ITERATIONS = 6   # scalar Newton steps for the implicit residual (monotone, quadratic) ...
WARM_ITERATIONS = 3       # ... and from the previous iteration's residual


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
    """σ by tanh: 4× faster than ``ops.dense.sigmoid`` on a batch and exact to 1e-16 in absolute
    terms, which is what residuals need (that one keeps the relative precision of probabilities
    near 0, which predictions and their log-odds need)."""
    return 0.5 * (1.0 + np.tanh(0.5 * z))


def _by_row_then_example(row, ex):
    """(order, same): the order sorting occurrences by (row, example), and for each sorted
    occurrence but the first whether it has the row of the one before. Layers list a row's
    occurrences in example order already, so a stable sort by row suffices (a radix sort when
    the rows fit in 16 bits); otherwise, or if some layer did not, a sort by the combined key."""
    if len(row) and row.max() < 1 << 16:
        order = np.argsort(row.astype(np.uint16), kind="stable")
        r, e = row[order], ex[order]
        same = r[1:] == r[:-1]
        if not (same & (e[1:] < e[:-1])).any():
            return order, same
    order = np.argsort(row * (int(ex.max(initial=0)) + 1) + ex)
    r = row[order]
    return order, r[1:] == r[:-1]


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
        # occurrences by (row, example): per-row running sums follow the examples' order; the
        # terms' rows are disjoint ranges, so each term's occurrences end up in one slice
        order, same = _by_row_then_example(row, ex)
        ex, row, x = ex[order], row[order], x[order]
        dup = same & (ex[1:] == ex[:-1])
        if dup.any():
            # one row twice in one example (a repeated value of a multi-valued field): one
            # occurrence with the summed coefficient, as the example's gradient sees it
            start = np.flatnonzero(np.r_[True, ~dup])
            ex, row, x = ex[start], row[start], np.add.reduceat(x, start)
            same = row[1:] == row[:-1]
        self.ex, self.row, self.x = ex, row, x
        n = len(ex)
        first = np.ones(n, bool)
        first[1:] = ~same
        self.seg_start = np.flatnonzero(first)
        self.seg_id = np.cumsum(first) - 1
        self.last = np.r_[self.seg_start[1:] - 1, n - 1] if n else np.zeros(0, np.int64)
        # per slice of terms that share an update rule: the rule and the rows' optimizer state
        cuts = np.searchsorted(row, [lo for lo, _ in self.bounds] + [base])
        self.groups = []
        for i, t in enumerate(terms):
            a, b = int(cuts[i]), int(cuts[i + 1])
            if a == b:
                continue
            local = row[a:b] - self.bounds[i][0]
            opt = optimizers[t.param]
            st = {k: np.asarray(states[t.param][k], np.float64).reshape(-1)[local] for k in opt.rate_slots}
            prev = self.groups[-1] if self.groups else None
            if prev is not None and prev[0].stop == a and prev[1].get_config() == opt.get_config() \
                    and prev[2].keys() == st.keys():
                st = {k: np.concatenate([prev[2][k], v]) for k, v in st.items()}
                self.groups[-1] = (slice(prev[0].start, b), opt, st)
            else:
                self.groups.append((slice(a, b), opt, st))
        norms = np.bincount(ex, x * x, minlength=batch_size)
        self.scale = 1.0 / np.sqrt(max(norms.mean(), 1.0)) if normalize and n else 1.0

    # ---- per-row running sums over the examples ------------------------------------------
    def running(self, values, inclusive: bool):
        """Per occurrence: the sum of ``values`` over its row's occurrences in examples before it
        (and its own, if ``inclusive``)."""
        c = np.cumsum(values)
        base = c[self.seg_start] - values[self.seg_start]
        out = c - base[self.seg_id]
        return out if inclusive else out - values

    def rates(self, r):
        """Per occurrence: the step size of that example's update of the row (normalized), and
        the row's accumulated squared gradients up to and including the example."""
        cum = self.running((r[self.ex] * self.x) ** 2, inclusive=True)
        eta = np.empty(len(cum))
        for sel, opt, st in self.groups:
            eta[sel] = opt.rates(st, cum[sel])
        return eta * self.scale, cum

    def lower_times(self, eta_x, v):
        """``(M v)_k = Σ_{o in k} x_o · Σ_{earlier occurrences o' of the row} η_o' x_o' v_o'``."""
        earlier = self.running(eta_x * v[self.ex], inclusive=False)
        return np.bincount(self.ex, self.x * earlier, minlength=self.B)

    def matrix(self, eta_x):
        """M as a ``B×B`` float32 array (it only steers Newton: the residual is exact) whose
        strictly lower triangle is M's; the rest is never read by a lower triangular solve. A
        row many examples share (the bias, numeric fields, frequent values) goes into a dense
        block multiplied by BLAS; a row a few examples share adds its pairs of occurrences
        (``m(m−1)/2``); a row one example touches adds nothing."""
        B, n = self.B, len(self.ex)
        seg_len = np.diff(np.append(self.seg_start, n))
        m = seg_len[self.seg_id]
        heavy_seg = seg_len >= max(HEAVY_MIN, B // HEAVY_DIV)
        heavy = heavy_seg[self.seg_id]
        cols = int(heavy_seg.sum())
        if cols:
            h = np.flatnonzero(heavy)
            X = np.zeros((B, cols), np.float32)
            E = np.zeros((B, cols), np.float32)
            at = (self.ex[h], (np.cumsum(heavy_seg) - 1)[self.seg_id[h]])
            X[at] = self.x[h]                       # (row, example) pairs are unique
            E[at] = eta_x[h]
            M = X @ E.T
        else:
            M = np.zeros((B, B), np.float32)
        light = np.flatnonzero(~heavy & (m >= 2))
        if len(light):
            later = (self.seg_start[self.seg_id[light]] + m[light]) - light - 1
            j = np.repeat(light, later)
            starts = np.cumsum(later) - later
            k = j + 1 + (np.arange(len(j)) - np.repeat(starts, later))
            np.add.at(M.reshape(-1), self.ex[k] * B + self.ex[j], (self.x[k] * eta_x[j]).astype(np.float32))
        return M

    def implicit_residual(self, z, y, kd, start=None):
        """ρ with ρ = σ(z − kd ρ) − y, and dρ/dz; Newton from ``start`` (default σ(z) − y)."""
        p = _sigmoid(z)
        if not self.implicit:
            return p - y, p * (1 - p)
        rho = p - y if start is None else start
        for _ in range(IMPLICIT_ITERATIONS if start is None else WARM_ITERATIONS):
            q = _sigmoid(z - kd * rho)
            rho = rho - (rho - q + y) / (1 + q * (1 - q) * kd)
        q = _sigmoid(z - kd * rho)
        d = q * (1 - q)
        return rho, d / (1 + d * kd)

    # ---- Newton ----------------------------------------------------------------------------
    def solve(self, z0, y) -> Solution:
        z0 = np.asarray(z0, np.float64)
        y = np.asarray(y, np.float64)
        z = z0.copy()
        converged, it, rho, M, previous = False, 0, None, None, 0.0
        for it in range(1, MAX_ITERATIONS + 1):
            self.eta, self.cum = self.rates(_sigmoid(z) - y)
            eta_x = self.eta * self.x
            kd = np.bincount(self.ex, eta_x * self.x, minlength=self.B) if self.implicit else np.zeros(self.B)
            rho, drho = self.implicit_residual(z, y, kd, rho)
            F = z - z0 + self.lower_times(eta_x, rho)        # exact, whatever the Jacobian
            if M is None:
                # the Jacobian I + M·diag(dρ/dz) keeps the first iteration's step sizes: later
                # ones barely move it, and Newton with it still converges to the exact F = 0
                M = self.matrix(eta_x)
            # (I + M D) δ = F  ⇔  (D⁻¹ + M) u = F with δ = D⁻¹ u: only the diagonal changes
            d = np.maximum(drho, 1e-12)
            np.fill_diagonal(M, 1.0 / d)
            from scipy.linalg import solve_triangular   # lazily: scipy costs start-up time
            step = solve_triangular(M, F.astype(np.float32), lower=True, check_finite=False) / d
            z -= step
            size = float(np.max(np.abs(step), initial=0.0))
            # the next step, by the contraction the last two showed: stop when it would not matter
            ratio = min(size / previous, 1.0) if previous else 1.0
            if size * ratio < TOLERANCE:
                converged = True
                break
            previous = size
        # the last step moved z by less than the tolerance: its step sizes still hold
        rho, _ = self.implicit_residual(z, y, kd, rho)
        return Solution(z, rho, it, converged)

    # ---- what to push ----------------------------------------------------------------------
    def gradients(self, sol: Solution, dtype) -> list[tuple[str, np.ndarray, np.ndarray]]:
        """Per term: (param, gradient, squares) over its ``rows`` such that the store's one
        update equals the sum of the per-example updates: ``g̃ = Σ_k η_k g_k / η_last``."""
        eta, cum = self.eta, self.cum
        moved = np.bincount(self.row, eta * sol.rho[self.ex] * self.x, minlength=self.R)
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
