"""The compiled per-example loop (numba, cached): predict example ``k`` of a batch after the
examples ``0..k−1`` have updated the terms the engine owns, then update them by ``k``.

Everything is float64 and flat. *Linear* slots ``j`` (one weight each: a row of a dim-1 table, an
entry of a dense parameter) hold ``w[j]``, the accumulator ``n[j]`` and FTRL's ``z[j]``; *FM*
rows ``q`` hold ``d`` coordinates each in ``V[q]``, ``Vn[q]``, ``Vz[q]``. Every slot / row has a
rule group ``g``: ``code[g]`` (``terms.SGD``, ``ADAGRAD``, ``FTRL``) and ``hyper[g]`` (SGD: lr;
Adagrad: lr, eps; FTRL: alpha, beta, l1, l2). A coordinate's update is ``_step`` (FM rows:
the optimizer module's own ``rule`` function, compiled in ``rules.py``: ``RULES``) or
``_prepare`` + ``_apply`` (linear slots: the same step in the form the implicit residual needs,
reusing √n and the step size; ``tests/test_optim.py`` holds them equal to the rule). ``combine``
(prep.py) turns a batch's net change into the one gradient (and squares) whose single
``step`` lands on it. numba caches a kernel by this file: after editing a rule in
``optim/``, remove the ``__pycache__/*.nbi`` caches (numba does not see the dependency). numpy's error model: a division by zero gives inf (the trainer then skips
the batch as non-finite) instead of raising inside the loop, and costs no check per division.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from ..compiled import numba  # numba as streamtrain.compiled loads it (start-up: see there)

njit = numba.njit

from ..prefetch import prefetch  # noqa: E402
from .prep import by_example, combine  # noqa: F401, E402 - the engine's other kernels, named here too
from .residual import _implicit, _residual  # noqa: E402
from .rules import RULES, _adagrad, _apply, _prepare, _row, _step  # noqa: F401, E402 - (tests use them here)
from .terms import ADAGRAD, FTRL, SGD  # noqa: E402

#: The records ``learn`` takes (numba passes namedtuples as typed tuples: no cost per access).
#: ``Rules``: per rule group, its code (its index in ``RULES``) and hyperparameters ``[G, 4]``.
Rules = namedtuple("Rules", "code hyper")
#: Occurrences grouped by example (``ptr[k]:ptr[k+1]`` are example ``k``'s): slot or row, the
#: coefficient, and for FM the field, each field's term and the number of terms; ``repeats``:
#: whether an example may hold a slot / row twice (if not, the examples' slots / rows are not
#: looked up in ``seen``, a random access per occurrence). Linear ones only: ``fixed``, slots
#: every example has after those (once each, none of them among its others: a dense
#: parameter's, a bias), with example ``k``'s coefficients in row ``k`` of ``fx``; and ``x``
#: empty: every coefficient 1, a slot of -1 padding (a grid of unweighted terms).
Occurrences = namedtuple("Occurrences", "ptr row x field term nterms repeats fixed fx")
#: A block of parameters flattened: weights, accumulator, FTRL's z, and each slot's rule group.
Slots = namedtuple("Slots", "w n z grp")


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _one_group(grp):
    """Whether every slot / row has one rule group (then the loops hoist its rule and
    hyperparameters, and vectorise), and which: (one, g)."""
    g0 = grp[0] if len(grp) else 0
    for g_ in grp:
        if g_ != g0:
            return False, g0
    return True, g0


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _gather(k, lptr, lslot, lx, L, seen, uj, ux, twice, fixed, fx):
    """Example ``k``'s linear part of the logit (its occurrences in order, then its ``fixed``
    slots) and its features, one per slot (a slot twice: coefficients summed), into
    ``uj``/``ux``: returns (part, count). ``seen[j]`` is (the last example that had slot ``j``,
    its place in that example's list); unless the example may hold a slot ``twice``, the slots
    are listed as they come."""
    part, m = _gather_rows(k, lptr, lslot, lx, L, seen, uj, ux, twice)
    for f in range(len(fixed)):              # (not in ``seen``: no other occurrence is one of them)
        x = fx[k, f]
        if x != 0.0:
            part, m = _listed(x, np.uint64(fixed[f]), L, uj, ux, part, m)
    return part, m


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _listed(x, j, L, uj, ux, part, m):
    """Slot ``j`` with coefficient ``x`` listed as the example's ``m``-th: (part + x·w_j, m + 1)."""
    uj[m] = j
    ux[m] = 0.0 + x
    return part + x * L[j, 0], m + 1


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _gather_rows(k, lptr, lslot, lx, L, seen, uj, ux, twice):
    """``_gather``'s occurrences (``ptr[k]:ptr[k+1]``). No coefficients (``lx`` empty: a grid
    of unweighted terms): each is 1, and padding is a slot of -1."""
    part = 0.0
    m = 0
    unit = len(lx) == 0
    if not twice:
        for i in range(np.uint64(lptr[k]), np.uint64(lptr[k + 1])):
            if unit:
                if lslot[i] >= 0:
                    part, m = _listed(1.0, np.uint64(lslot[i]), L, uj, ux, part, m)
                continue
            x = lx[i]
            if x != 0.0:
                part, m = _listed(x, np.uint64(lslot[i]), L, uj, ux, part, m)
        return part, m
    for i in range(np.uint64(lptr[k]), np.uint64(lptr[k + 1])):     # (unsigned: no wraparound)
        if unit and lslot[i] < 0:
            continue
        x = 1.0 if unit else lx[i]
        if x == 0.0:                         # a missing numeric value, or padding: not a feature
            continue
        j = np.uint64(lslot[i])
        part += x * L[j, 0]
        if seen[j, 0] != k:
            seen[j, 0] = k
            seen[j, 1] = m
            uj[m] = j
            ux[m] = 0.0 + x                  # (as a zeroed accumulator would: 0.0 + x)
            m += 1
        else:
            ux[np.uint64(seen[j, 1])] += x
    return part, m


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _fm_value(k, fptr, frow, fx, ffield, fterm, V, E, S, nterms, seen, funiq, track):
    """The FM terms of example ``k`` at the current ``V``: fills E (per field) and S (per term)
    for the example's fields and returns ``Σ_t ½ (|S_t|² − Σ_f |E_f|²)``, and lists the
    example's rows in ``funiq`` (``seen`` as in ``_gather``; only if asked to ``track`` them):
    (value, rows, a row twice). One pass: an example's occurrences come field after field."""
    d = V.shape[1]
    for t in range(nterms):
        for c in range(d):
            S[t, c] = 0.0
    phi = 0.0
    mq = 0
    twice = False
    i, end = np.uint64(fptr[k]), np.uint64(fptr[k + 1])
    while i < end:
        f = ffield[i]
        fu = np.uint64(f)
        empty = True
        while i < end and ffield[i] == f:
            q, x = np.uint64(frow[i]), fx[i]     # (unsigned: no negative-index wraparound)
            i += np.uint64(1)
            if x == 0.0:                     # nothing (a dense term's padding)
                continue
            if track:
                if seen[q, 0] != k:
                    seen[q, 0] = k
                    seen[q, 1] = mq
                    funiq[mq] = q
                    mq += 1
                else:
                    twice = True
            if empty:                        # E_f = 0 + x·v: written, not zeroed then added to
                for c in range(d):
                    E[fu, c] = 0.0 + x * V[q, c]
                empty = False
            else:
                for c in range(d):
                    E[fu, c] += x * V[q, c]
        if empty:
            for c in range(d):
                E[fu, c] = 0.0
        t = np.uint64(fterm[fu])
        for c in range(d):
            S[t, c] += E[fu, c]
        for c in range(d):
            phi -= 0.5 * E[fu, c] * E[fu, c]
    for t in range(nterms):
        for c in range(d):
            phi += 0.5 * S[t, c] * S[t, c]
    return phi, mq, twice


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _update_fm(k, rho, fptr, frow, fx, ffield, fterm, E, S, V, Vn, Vz, vgrp, code, hyper, one_adagrad, h,
               mq, twice, seen, funiq, G):
    """The example's FM rows' steps: a row's gradient ``ρ·x·(S_t − E_f)`` (summed over its
    occurrences), then its rule. All rows Adagrad and each once in the example (the usual case):
    each occurrence's gradient goes straight into its row's step, no gradient buffer."""
    d = V.shape[1]
    if one_adagrad and not twice:
        for i in range(np.uint64(fptr[k]), np.uint64(fptr[k + 1])):     # (unsigned: no wraparound)
            q, f, x = np.uint64(frow[i]), np.uint64(ffield[i]), fx[i]     # (unsigned: no negative-
            if x == 0.0:                                                    # index wraparound code)
                continue
            t, rx = np.uint64(fterm[f]), rho * x
            for c in range(d):
                g = 0.0 + rx * (S[t, c] - E[f, c])
                V[q, c], Vn[q, c], _ = _adagrad(h, V[q, c], Vn[q, c], 0.0, g, g * g)
        return
    for i in range(mq):
        for c in range(d):
            G[i, c] = 0.0
    for i in range(fptr[k], fptr[k + 1]):
        q, f, x = frow[i], ffield[i], fx[i]
        if x == 0.0:
            continue
        t, at, rx = fterm[f], seen[q, 1], rho * x
        for c in range(d):
            G[at, c] += rx * (S[t, c] - E[f, c])
    for i in range(mq):                      # the rule picked per row: straight arithmetic per
        q = funiq[i]                         # coordinate (and no slices: a view per row costs)
        g_ = vgrp[q]
        rule = code[g_]
        if rule == ADAGRAD:
            h_ = (hyper[g_, 0], hyper[g_, 1])
            for c in range(d):
                g = G[i, c]
                V[q, c], Vn[q, c], _ = _adagrad(h_, V[q, c], Vn[q, c], 0.0, g, g * g)
        else:
            for c in range(d):
                g = G[i, c]
                V[q, c], Vn[q, c], Vz[q, c] = _step(rule, _row(hyper, g_), V[q, c], Vn[q, c], Vz[q, c], g, g * g)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _prefetch(k, lptr, lslot, L, seen, fptr, frow, V, Vn, fseen, lookup, flookup):
    """Ask for example ``k``'s rows (linear slots, FM rows, their slots and, if it looks them up,
    ``seen`` entries) ahead of it: they are scattered over a block larger than the L2 cache; the
    loads overlap."""
    for i in range(np.uint64(lptr[k]), np.uint64(lptr[k + 1])):
        prefetch(L, lslot[i])
        if lookup:
            prefetch(seen, lslot[i])
    for i in range(np.uint64(fptr[k]), np.uint64(fptr[k + 1])):
        prefetch(V, frow[i])
        prefetch(Vn, frow[i])
        if flookup:
            prefetch(fseen, frow[i])


@njit(cache=True, nogil=True, error_model="numpy")
def learn(base, y, implicit, normalize, rules, linear, lslots, fm, fslots, kind):
    """Per example ``k`` in order: its logit, ``base[k]`` (the rest of the logit) plus the owned
    terms at their current values, which examples ``0..k−1`` have updated; its residual ρ
    (implicit if asked); then its update of every linear slot and FM coordinate it touches.
    Updates the parameter arrays in place; returns (z, ρ). ``rules``: a ``Rules``; ``linear``,
    ``fm``: ``Occurrences``; ``lslots`` (flat), ``fslots`` (``[rows, d]``): ``Slots``.

    Linear occurrences in example order (example ``k``'s are ``lptr[k]:lptr[k+1]``): slot
    ``lslot``, coefficient ``lx``. FM occurrences likewise (``fptr``): row ``frow``, coefficient
    ``fx``, field ``ffield`` (of term ``fterm[field]``), grouped by field within an example.

    Speed (the arithmetic is the rules' own, bit for bit): a linear slot's w, n, z and √n sit
    side by side in ``L`` (one cache line instead of four), an example's slots are gathered into
    short contiguous arrays that one rule group steps in vectorised loops, and FM rows seen
    once in the example (the usual case) take their Adagrad step straight from the gradient.

    ``kind``: the loss, as a type: None for logistic, True for squared error (``_residual``),
    so that each loss compiles its own loop without the other's branches (a bool argument
    tested per example cost the logistic loop 5-10 %)."""
    squared = kind is not None               # (a constant of the compiled loop: see above)
    code, hyper = rules
    lptr, lslot, lx, ltwice = linear.ptr, linear.row, linear.x, linear.repeats
    lfixed, lfx = linear.fixed, linear.fx
    w, n, z, grp = lslots
    fptr, frow, fx, ffield, fterm, nterms, ftwice = fm.ptr, fm.row, fm.x, fm.field, fm.term, fm.nterms, fm.repeats
    V, Vn, Vz, vgrp = fslots
    B, P, Q, d = len(base), len(w), V.shape[0], V.shape[1]
    L = np.empty((P, 4))
    for j in range(P):
        L[j, 0], L[j, 1], L[j, 2], L[j, 3] = w[j], n[j], z[j], np.sqrt(n[j])
    one, g0 = _one_group(grp)
    lc, lh = (code[g0], _row(hyper, g0)) if len(code) else (SGD, (0.0, 0.0, 0.0, 0.0))
    l1 = lc == FTRL and lh[2] > 0
    seen = np.full((P if ltwice else 0, 2), -1, np.int64)     # (only if looked up)
    most = 1
    for k in range(B):
        most = max(most, lptr[k + 1] - lptr[k] + len(lfixed))
    uj = np.empty(most, np.int64)            # the example's slots and, per slot, its coefficient,
    ux, uw, un, uz, ur0 = np.empty(most), np.empty(most), np.empty(most), np.empty(most), np.empty(most)
    usq, uroot, urate = np.empty(most), np.empty(most), np.empty(most)     # state and step
    E = np.zeros((max(len(fterm), 1), d))
    S = np.zeros((max(nterms, 1), d))
    fone, fg = _one_group(vgrp)
    fm_adagrad = fone and Q > 0 and code[fg] == ADAGRAD
    ftrack = ftwice or not fm_adagrad        # the FM rows' places in ``funiq``: a row twice, or per-row rules
    fseen = np.full((Q if ftrack else 0, 2), -1, np.int64)
    funiq = np.empty(Q if ftrack else 0, np.int64)
    fmost = 1
    for k in range(B):
        fmost = max(fmost, fptr[k + 1] - fptr[k])
    G = np.zeros((fmost, d))                 # the example's FM rows' gradients (a row twice)
    zs, rhos = np.empty(B), np.empty(B)
    for k in range(B):
        if k + 2 < B:
            _prefetch(k + 2, lptr, lslot, L, seen, fptr, frow, V, Vn, fseen, ltwice, ftrack)
        part, m = _gather(k, lptr, lslot, lx, L, seen, uj, ux, ltwice, lfixed, lfx)
        zk = base[k] + part
        mq, twice = 0, False
        if nterms:
            phi, mq, twice = _fm_value(k, fptr, frow, fx, ffield, fterm, V, E, S, nterms, fseen, funiq, ftrack)
            zk += phi
        r = _residual(zk, y[k], squared)
        norm = 0.0
        for i in range(m):
            norm += ux[i] ** 2
        s = 1.0 / np.sqrt(max(norm, 1.0)) if normalize else 1.0
        # each feature's squared gradient, √n after it and step size for residual r, and the
        # example's K = Σ s·x²·rate (its logit's move per unit residual); one rule group:
        # straight loops over the example's slots (written out here: a call costs)
        K = 0.0
        if one:
            for i in range(m):
                un[i] = L[np.uint64(uj[i]), 1]
            for i in range(m):
                usq[i] = (r * ux[i]) ** 2
            for i in range(m):
                uroot[i], urate[i] = _prepare(lc, lh, un[i], usq[i])
            for i in range(m):
                K += s * ux[i] * ux[i] * urate[i]
            l1_present = l1
        else:
            l1_present = False
            for i in range(m):
                j = uj[i]
                g_ = grp[j]
                usq[i] = (r * ux[i]) ** 2
                uroot[i], urate[i] = _prepare(code[g_], _row(hyper, g_), L[j, 1], usq[i])
                K += s * ux[i] * ux[i] * urate[i]
                if code[g_] == FTRL and hyper[g_, 2] > 0:
                    l1_present = True
        rho = r
        if implicit and m:
            rho = _implicit(zk, y[k], r, K, l1_present, m, uj, ux, L, grp, code, hyper, s, usq, uroot, urate,
                            squared)
        if one:                              # the features' steps: gathered, stepped, scattered
            for i in range(m):
                j = np.uint64(uj[i])
                uw[i], uz[i], ur0[i] = L[j, 0], L[j, 2], L[j, 3]
            for i in range(m):
                uw[i], un[i], uz[i] = _apply(lc, lh, uw[i], un[i], uz[i], ur0[i], uroot[i], urate[i],
                                             s * rho * ux[i], usq[i])
            for i in range(m):
                j = np.uint64(uj[i])
                L[j, 0], L[j, 1], L[j, 2], L[j, 3] = uw[i], un[i], uz[i], uroot[i]
        else:
            for i in range(m):
                j = uj[i]
                g_ = grp[j]
                L[j, 0], L[j, 1], L[j, 2] = _apply(code[g_], _row(hyper, g_), L[j, 0], L[j, 1], L[j, 2], L[j, 3],
                                                   uroot[i], urate[i], s * rho * ux[i], usq[i])
                L[j, 3] = uroot[i]
        if nterms:
            _update_fm(k, rho, fptr, frow, fx, ffield, fterm, E, S, V, Vn, Vz, vgrp, code, hyper, fm_adagrad,
                       (hyper[fg, 0], hyper[fg, 1]), mq, twice, fseen, funiq, G)
        zs[k] = zk
        rhos[k] = rho
    for j in range(P):
        w[j], n[j], z[j] = L[j, 0], L[j, 1], L[j, 2]
    return zs, rhos
