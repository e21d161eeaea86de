"""Quadrature TreeSHAP kernels of the CPU engine: SHAP values and interactions per path, rows in SIMD-wide blocks.

For a path of m merged conditions with zero fractions z_e and one fractions o_e (0 or 1 for the row), write
g_e(t) = z_e + t (o_e - z_e). Then phi_i = v (o_i - z_i) int_0^1 prod_{e != i} g_e(t) dt and, for i != j,
phi_ij = v (o_i - z_i)(o_j - z_j) / 2 int_0^1 prod_{e != i, j} g_e(t) dt (the Shapley weights are Beta integrals).
The integrands are polynomials of degree <= m - 1, so Gauss-Legendre with Q = ceil(m / 2) nodes on [0, 1] is exact.
With c_e(t) = (o_e - z_e) / g_e(t), phi_i = v sum_q w_q P(t_q) c_i(t_q) where P is the product over all conditions.
c_e takes one of two values per node, (1 - z) / (z + t (1 - z)) or -1 / (1 - t), computed once per block of rows,
so the per-row work is multiplications and FMAs without divisions; a condition with z = o = 0 makes P = 0, and the
path correctly contributes nothing. The rows of a block sit in the innermost loop, where LLVM vectorises them.

Each kernel is a ``prange`` loop over work items ``[lo, hi)``; the engine passes all of them, ``[0, work_items(...))``.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from .. import _background, _registry
from .._items import borrow
from ._cpu_kernels import _satisfies

# the warm-up groups that compile these kernels (their Numba cache entries ship with hitml)
_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap", "treeshap-interactions"))

BLOCKS = (8, 32, 128)  # row-block widths: the innermost (vectorised) loop; wider is faster per row (measured)
_TILE = 16         # tile of the interaction matrix's transposed copy
_FM = {"contract"}  # FMA contraction only, so the NaN tests stay exact


def gauss_legendre(q_max: int) -> tuple[np.ndarray, np.ndarray]:
    """Nodes and weights on [0, 1]: row Q holds the Q-node rule in its first Q entries (row 0 unused)."""
    t = np.zeros((q_max + 1, max(q_max, 1)))
    w = np.zeros_like(t)
    for q in range(1, q_max + 1):
        x, wx = np.polynomial.legendre.leggauss(q)
        t[q, :q] = (x + 1.0) / 2.0
        w[q, :q] = wx / 2.0
    return t, w


@numba.njit(inline="always")
def _block_rows(X, r0, nb, xb):
    """xb[f, l] = X[r0 + l, f]; lanes past the last row repeat it (computed, never written out)."""
    M = X.shape[1]
    for l in range(xb.shape[1]):
        r = r0 + (l if l < nb else nb - 1)
        for f in range(M):
            xb[f, l] = X[r, f]


@numba.njit(inline="always")
def _dims(X, path_ptr, leaf_value, max_len, bw):
    """(M, K, P, q_max, n_blocks): features, outputs, paths, quadrature points, row blocks."""
    return (X.shape[1], leaf_value.shape[1], len(path_ptr) - 1, (max_len + 1) // 2,
            (X.shape[0] + bw - 1) // bw)


@numba.njit(inline="always")
def _block_start(X, b, q_max, max_len, bw):
    """Block b: (first row, rows in it, its rows feature-major, and the quadrature scratch ob, Pq, C)."""
    r0 = b * bw
    nb = min(bw, X.shape[0] - r0)
    xb = np.empty((X.shape[1], bw))
    _block_rows(X, r0, nb, xb)
    q = max(q_max, 1)
    return r0, nb, xb, np.empty(bw, np.bool_), np.empty((q, bw)), np.empty((max(max_len, 1), q, bw))


@numba.njit(inline="always")
def _item_range(item, n_split, gpi, G):
    """Work item -> (row block, first path group, end of its groups): the block's groups in n_split parts."""
    b = item // n_split
    g0 = (item - b * n_split) * gpi
    return b, g0, min(G, g0 + gpi)


@numba.njit(inline="always")
def _path_at(order, path_ptr, pi):
    """(path, its first element, its length) of the pi-th path visited."""
    p = order[pi]
    return p, path_ptr[p], path_ptr[p + 1] - path_ptr[p]


@numba.njit(inline="always")
def _group_outputs(group_out, g, K):
    """The outputs [k_lo, k_hi) that path group g feeds (all K when group_out[g] < 0)."""
    k = group_out[g]
    return (0, K) if k < 0 else (k, k + 1)


@numba.njit(inline="always")
def _one_fractions(xb, e, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside, ob):
    """ob[l] = whether lane l's row satisfies path element e."""
    bw = len(ob)
    f = feature[e]
    if cat_ptr[e] < 0:
        lo = lower[e]
        hi = upper[e]
        mo = missing_ok[e]
        no_lo = lo == -np.inf
        for l in range(bw):
            x = xb[f, l]
            ob[l] = mo if x != x else ((no_lo or lo < x) and x <= hi)  # noqa: PLR0124 (NaN)
    else:
        for l in range(bw):
            ob[l] = _satisfies(xb[f, l], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                               cat_outside)


@numba.njit(inline="always")
def _path_weights(xb, s0, m, Q, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                  zero_fraction, tq, wq, ob, Pq, C):
    """Pq[q, l] = w_q prod_e g_e(t_q) and C[t, q, l] = c_t(t_q) for the block's lanes l."""
    bw = Pq.shape[1]
    for q in range(Q):
        wv = wq[Q, q]
        for l in range(bw):
            Pq[q, l] = wv
    for t in range(m):
        e = s0 + t
        _one_fractions(xb, e, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside, ob)
        z = zero_fraction[e]
        for q in range(Q):
            tt = tq[Q, q]
            g1 = z + tt * (1.0 - z)
            g0 = z * (1.0 - tt)
            c1 = (1.0 - z) / g1
            c0 = -1.0 / (1.0 - tt)
            for l in range(bw):
                o = ob[l]
                Pq[q, l] *= g1 if o else g0
                C[t, q, l] = c1 if o else c0


@numba.njit(parallel=True, cache=True, error_model="numpy", fastmath=_FM)
def shap_quad_kernel(X, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                     zero_fraction, leaf_value, max_len, tq, wq, tab_off, tab, order, group_ptr, group_out, feat_ptr,
                     feats, gpi, bw, out, lo, hi):
    """out[i, f, k] += path-dependent SHAP of row i (bias column untouched), rows in blocks of ``bw``.

    Runs work items ``[lo, hi)`` (all: ``[0, work_items(len(X), bw, len(group_ptr) - 1, gpi))``). Work items are
    (row block, ``gpi`` consecutive path groups): group g is the paths ``order[group_ptr[g]:group_ptr[g + 1]]``,
    all of output ``group_out[g]`` (boosted multiclass: the sums of one output, (M, bw) doubles, are kept and then
    added to that output's column of the block's rows) or of every output when ``group_out[g] < 0``; only the
    group's features ``feats[feat_ptr[g]:feat_ptr[g + 1]]`` are summed and added (fashion_mnist-small: about 13 of
    784 per class). Each output of a row is summed by one
    group, in path order, so the result does not depend on ``gpi``, the block width or the threads. A path with
    ``tab_off[p] >= 0`` reads its values from the pattern table ``tab[tab_off[p]:]`` (one row of m values per
    pattern of satisfied conditions, bit t for condition t; see _cpu_tables); the others run the quadrature.
    """
    X, path_ptr, feature, lower, upper = borrow(X), borrow(path_ptr), borrow(feature), borrow(lower), borrow(upper)
    missing_ok, cat_ptr, cat_nwords = borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, zero_fraction = borrow(cat_words), borrow(cat_outside), borrow(zero_fraction)
    leaf_value, tq, wq, tab_off, tab = borrow(leaf_value), borrow(tq), borrow(wq), borrow(tab_off), borrow(tab)
    order, group_ptr, group_out, feat_ptr = borrow(order), borrow(group_ptr), borrow(group_out), borrow(feat_ptr)
    feats, out = borrow(feats), borrow(out)
    M, K, _, q_max, _ = _dims(X, path_ptr, leaf_value, max_len, bw)
    G = len(group_ptr) - 1
    n_split = (G + gpi - 1) // gpi
    for item in prange(lo, hi):
        b, g0, g1 = _item_range(item, n_split, gpi, G)
        r0, nb, xb, ob, Pq, C = _block_start(X, b, q_max, max_len, bw)
        s = np.empty(bw)
        pat = np.empty(bw, np.int64)
        acc = np.empty((1 if group_out[0] >= 0 else K, M, bw))
        for g in range(g0, g1):
            k_lo, k_hi = _group_outputs(group_out, g, K)
            for j in range(feat_ptr[g], feat_ptr[g + 1]):           # only the features the group uses
                f = feats[j]
                for k in range(k_hi - k_lo):
                    for l in range(bw):
                        acc[k, f, l] = 0.0
            for pi in range(group_ptr[g], group_ptr[g + 1]):
                p, s0, m = _path_at(order, path_ptr, pi)
                if m == 0:
                    continue
                off = tab_off[p]
                Q = (m + 1) // 2
                if off >= 0:
                    for l in range(bw):
                        pat[l] = 0
                    for t in range(m):
                        _one_fractions(xb, s0 + t, feature, lower, upper, missing_ok, cat_ptr, cat_nwords,
                                       cat_words, cat_outside, ob)
                        for l in range(bw):
                            pat[l] |= np.int64(ob[l]) << t
                    for l in range(bw):
                        pat[l] = off + pat[l] * m
                else:
                    _path_weights(xb, s0, m, Q, feature, lower, upper, missing_ok, cat_ptr, cat_nwords,
                                  cat_words, cat_outside, zero_fraction, tq, wq, ob, Pq, C)
                for t in range(m):
                    if off >= 0:
                        for l in range(bw):
                            s[l] = tab[pat[l] + t]
                    else:
                        for l in range(bw):
                            s[l] = 0.0
                        for q in range(Q):
                            for l in range(bw):
                                s[l] += Pq[q, l] * C[t, q, l]
                    f = feature[s0 + t]
                    for k in range(k_lo, k_hi):
                        v = leaf_value[p, k]
                        if v != 0.0:
                            for l in range(bw):
                                acc[k - k_lo, f, l] += s[l] * v
            for l in range(nb):
                for j in range(feat_ptr[g], feat_ptr[g + 1]):
                    f = feats[j]
                    for k in range(k_lo, k_hi):
                        out[r0 + l, f, k] += acc[k - k_lo, f, l]


@numba.njit(parallel=True, cache=True, error_model="numpy", fastmath=_FM)
def interaction_quad_kernel(X, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                            cat_outside, zero_fraction, leaf_value, max_len, tq, wq, order, group_ptr, group_out, gpi,
                            bw, mirror, out, strides, lo, hi):
    """Work items ``[lo, hi)`` of the interaction values of row i, feature pair (f, g), output k added to
    ``out[i*s0 + f*s1 + g*s2 + k*s3]`` (``strides`` in elements, so the caller picks the layout), both triangles,
    bias entry untouched. Work items are (row block, ``gpi`` path groups) as in the SHAP kernel: group g, the paths
    ``order[group_ptr[g]:group_ptr[g + 1]]``, writes only output ``group_out[g]`` (every output when negative).
    ``mirror``: write the upper triangle and copy it to the lower one at the end (dense outputs); else write both
    entries of each pair at once (sparse ones, where copying the whole matrix would cost more than the pairs)."""
    X, path_ptr, feature, lower, upper = borrow(X), borrow(path_ptr), borrow(feature), borrow(lower), borrow(upper)
    missing_ok, cat_ptr, cat_nwords = borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, zero_fraction = borrow(cat_words), borrow(cat_outside), borrow(zero_fraction)
    leaf_value, tq, wq, order = borrow(leaf_value), borrow(tq), borrow(wq), borrow(order)
    group_ptr, group_out, out, strides = borrow(group_ptr), borrow(group_out), borrow(out), borrow(strides)
    M, K, _, q_max, _ = _dims(X, path_ptr, leaf_value, max_len, bw)
    G = len(group_ptr) - 1
    n_split = (G + gpi - 1) // gpi
    for item in prange(lo, hi):
        b, g0, g1 = _item_range(item, n_split, gpi, G)
        r0, nb, xb, ob, Pq, C = _block_start(X, b, q_max, max_len, bw)
        S = np.empty((max(q_max, 1), bw))
        s = np.empty(bw)
        sr, sf, sg, sk = strides[0], strides[1], strides[2], strides[3]
        for g in range(g0, g1):
            k_lo, k_hi = _group_outputs(group_out, g, K)
            for pi in range(group_ptr[g], group_ptr[g + 1]):
                p, s0, m = _path_at(order, path_ptr, pi)
                if m == 0:
                    continue
                Q = (m + 1) // 2
                _path_weights(xb, s0, m, Q, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                              cat_outside, zero_fraction, tq, wq, ob, Pq, C)
                # half weights; S = sum of c over the path (the diagonal needs sum_{u != t} c_u)
                for q in range(Q):
                    for l in range(bw):
                        Pq[q, l] *= 0.5
                        S[q, l] = 0.0
                    for t in range(m):
                        for l in range(bw):
                            S[q, l] += C[t, q, l]
                for t in range(m):
                    ft = feature[s0 + t]
                    # diagonal: phi_t - sum_{u != t} phi_tu = sum_q w_q P c_t (1 - (S - c_t) / 2)
                    for l in range(bw):
                        s[l] = 0.0
                    for q in range(Q):
                        for l in range(bw):
                            c = C[t, q, l]
                            s[l] += Pq[q, l] * c * (2.0 - S[q, l] + c)
                    for k in range(k_lo, k_hi):
                        v = leaf_value[p, k]
                        if v != 0.0:
                            o = ft * (sf + sg) + k * sk + r0 * sr
                            for l in range(nb):
                                out[o + l * sr] += s[l] * v
                    for u in range(t + 1, m):
                        fu = feature[s0 + u]
                        for l in range(bw):
                            s[l] = 0.0
                        for q in range(Q):
                            for l in range(bw):
                                s[l] += Pq[q, l] * C[t, q, l] * C[u, q, l]
                        a = min(ft, fu)
                        c2 = max(ft, fu)
                        # a repeated feature (hand-built paths) pairs with itself: both orders on the diagonal
                        mult = 2.0 if a == c2 else 1.0
                        for k in range(k_lo, k_hi):
                            v = leaf_value[p, k] * mult
                            if v != 0.0:
                                o = a * sf + c2 * sg + k * sk + r0 * sr
                                for l in range(nb):
                                    out[o + l * sr] += s[l] * v
                                if not mirror and a != c2:
                                    o = c2 * sf + a * sg + k * sk + r0 * sr
                                    for l in range(nb):
                                        out[o + l * sr] += s[l] * v
            # mirror the upper triangle in tiles, so that the transposed writes stay within a few pages
            for l in range(nb if mirror else 0):
                for fb in range(0, M, _TILE):
                    for gb in range(fb, M, _TILE):
                        for f in range(fb, min(fb + _TILE, M)):
                            for h in range(max(gb, f + 1), min(gb + _TILE, M)):
                                for k in range(k_lo, k_hi):
                                    r = (r0 + l) * sr + k * sk
                                    out[r + h * sf + f * sg] = out[r + f * sf + h * sg]


def work_items(n_rows: int, bw: int, n_groups: int, gpi: int) -> int:
    """The number of work items of a quadrature kernel's call: row blocks of ``bw`` rows times runs of ``gpi`` of
    the ``n_groups`` path groups."""
    return -(-n_rows // bw) * -(-n_groups // gpi)

ACC_BYTES = 1 << 21  # a work item's SHAP sums (outputs x features x rows) kept within about one core's L2


def block_for(n_rows: int, threads: int, row_values: int = 0, groups: int = 1) -> tuple[int, int]:
    """(block, groups per work item): the widest block of at most half the rows (8 when rows are few) whose
    ``row_values`` doubles per row (an item's SHAP sums) fit ACC_BYTES and whose row blocks times ``groups`` path
    groups give every thread two work items; then all groups in one item when the blocks alone give two per thread,
    else one group per item (more items: the threads' shares of them differ by less)."""
    b = BLOCKS[0]
    for w in BLOCKS[::-1]:
        if n_rows >= 2 * w and (n_rows // w) * groups >= 2 * threads and row_values * w * 8 <= ACC_BYTES:
            b = w
            break
    return b, groups if -(-n_rows // b) >= 2 * threads else 1
