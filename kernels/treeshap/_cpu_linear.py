"""Per-tree path-dependent TreeSHAP in O(nodes x Q) per row and tree (Linear TreeShap by Gauss-Legendre quadrature).

Two kernels. ``program_values`` is the CPU engine's (``cpu.options.shap_linear``): it runs the walk programs of
``paths.tree_program``, as the GPU's linear.cu does. ``linear_shap_values`` is the first form, kept as the tests' twin
of both: it reads shap's ``TreeEnsemble`` dense arrays directly (the arrays
``paths.extract_paths`` reads, with its rules: ``x <= threshold`` goes left, NaN follows ``children_default``, a
default child that is neither child takes NaN nowhere, ``z = cover(child) / cover(parent)`` and 0 where the parent's
cover is 0, rows rounded through the model's input dtype and compared in float64).

Derivation
----------
Per leaf L of value v, merge the splits of its root-to-leaf path by feature: feature f has one fraction
``o_f`` (product over its occurrences of 1 if the row takes that branch, else 0) and zero fraction ``z_f`` (product of
the cover ratios). With ``g_f(t) = z_f + t (o_f - z_f)`` the path-dependent Shapley value of f is the Beta integral

    phi_f(L) = v (o_f - z_f) int_0^1 prod_{h != f} g_h(t) dt,

a polynomial integrand of degree <= D - 1 (D = merged elements on the path), which Gauss-Legendre with
``Q = ceil(D / 2)`` nodes integrates exactly. Writing ``P_L(t) = prod_h g_h(t)`` and ``c_f(t) = (o_f - z_f) / g_f(t)``
(where ``g_f`` is not identically 0), ``phi_f(L) = sum_q w_q c_f(t_q) v P_L(t_q)``. Q is taken per tree from its
longest merged path, so every leaf of the tree uses the same nodes and ``P`` can be shared:

* Top-down, each node n carries ``P_n(t_q)``, the product of the merged factors of the features on its path (a
  feature not on the path counts as ``o = z = 1``, factor 1). Crossing an edge on feature f replaces the factor of f:
  ``P_child = P_n g'_f / g_f`` with ``(o', z') = (o o_e, z z_e)``.
* Bottom-up, ``S_n(q) = sum over leaves L below n of v_L P_L(t_q)``.
* Telescoping: along a path, feature f's edges e_1, ..., e_r give ``c_{e_r} = sum_i (c_{e_i} - c_{e_{i-1}})``
  (``c_{e_0} = 0``, the absent feature). So each edge e on f adds ``sum_q (c_e - c_prev)(t_q) S_child(q)`` to phi_f:
  a leaf below collects ``c`` of the LAST occurrence of f above it, as the per-leaf formula needs. The difference
  has a form without cancellation: ``c_e - c_prev = (o' z - o z') / (g g') = z o (o_e - z_e) / (g g')``.
  The single terms are rational in t, but the quadrature is applied to their sum pointwise, which is the leaf's
  polynomial, so the result stays exact.
* Zero factors: with ``z >= 0``, ``g(t_q) = z (1 - t_q) + o t_q`` vanishes at a Gauss node only when ``o = z = 0``
  (a zero-cover child the row does not take), for every node at once. Then every leaf below has ``P_L = 0`` and
  contributes nothing (``phi_f(L)`` has the factor ``o_f - z_f = 0`` for that feature and ``g = 0`` for the others).
  ``P`` is kept as the product of the NONZERO factors plus a count of zero factors per row; a leaf's S is 0 while
  the count is positive, and the edge coefficient's numerator ``z o (o_e - z_e)`` is 0 whenever the old or the new
  factor is zero, so dividing by the nonzero factors only never divides by 0.

Gauss weights are folded into ``P`` at the root, so ``phi_f += sum_q C_e(q) S_child(q)`` with
``C_e = z o (o_e - z_e) / (g g')``. The one fractions are 0 or 1 and the zero fractions depend on the node only, so
an edge has three cases per row (o = 0; o = 1 and o_e = 0; o = 1 and o_e = 1): ``g'/g`` and ``C_e`` at the Q nodes
are computed once per edge for the three, and a row picks its case (no division per row). Per row and tree: one
visit of every node, O(Q) multiply-adds per edge and output, against O(L D^2) for the per-path DP. The bias column
is ``base_offset + sum over trees of sum_L v_L prod_path z``, as ``PathSet.bias``.

Rows run in blocks of ``BLOCK`` lanes (innermost loop, vectorised); every row visits the same nodes in the same
order, so the walk is shared by the block (a GPU kernel can give one row per thread and walk the tree in lockstep).
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from numba import prange

from .. import _background, _registry
from ._cpu_quad import _block_rows, gauss_legendre
from .paths import PROGRAM_MAX_Q, tree_arrays

_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap",))   # the CPU engine's per-tree kernel (program_values)

__all__ = ["linear_shap_values", "program_values"]

_FM = {"contract"}  # FMA contraction only: NaN tests stay exact
BLOCK = 128         # rows per block: the innermost, vectorised loop (a constant, so it has no remainder)


@numba.njit  # not cached: a prototype outside the shipped kernels (compile on first use in each process)
def _tree_stats(cl, cr, feat, cover, values, M, max_depth, max_merged, expect):
    """Per tree: deepest leaf, most distinct features on a root-to-leaf path, and sum_L v_L prod z (outputs)."""
    T, N = cl.shape
    K = values.shape[2]
    stack = np.empty(N + 1, np.int64)
    stage = np.empty(N + 1, np.int64)
    zprod = np.empty(N + 1)
    fcount = np.zeros(M, np.int64)
    for t in range(T):
        sp = 0
        stack[0] = 0
        stage[0] = 0
        zprod[0] = 1.0
        distinct = 0
        for k in range(K):
            expect[t, k] = 0.0
        max_depth[t] = 0
        max_merged[t] = 0
        while sp >= 0:
            node = stack[sp]
            if cl[t, node] >= 0 and stage[sp] < 2:
                if sp >= N:
                    raise ValueError("tree structure has a cycle or is deeper than its node count")
                child = cl[t, node] if stage[sp] == 0 else cr[t, node]
                stage[sp] += 1
                f = feat[t, node]
                if fcount[f] == 0:
                    distinct += 1
                fcount[f] += 1
                pc = cover[t, node]
                z = cover[t, child] / pc if pc > 0 else 0.0
                sp += 1
                stack[sp] = child
                stage[sp] = 0
                zprod[sp] = zprod[sp - 1] * z
                continue
            if cl[t, node] < 0:
                max_depth[t] = max(max_depth[t], sp)
                max_merged[t] = max(max_merged[t], distinct)
                for k in range(K):
                    expect[t, k] += zprod[sp] * values[t, node, k]
            sp -= 1
            if sp >= 0:
                f = feat[t, stack[sp]]
                fcount[f] -= 1
                if fcount[f] == 0:
                    distinct -= 1


@numba.njit(parallel=True, error_model="numpy", fastmath=_FM)
def _linear_kernel(X, cl, cr, cd, feat, thr, cover, values, q_of_tree, depth, tq, wq, out):
    """out[i, f, k] = sum over trees of phi_f (features only; the caller fills the bias column), rows in blocks."""
    n, M = X.shape
    T = cl.shape[0]
    K = values.shape[2]
    bw = BLOCK                              # a compile-time constant: the lane loops have a known trip count
    q_max = max(1, q_of_tree.max())
    D = depth + 2
    n_blocks = (n + bw - 1) // bw
    for b in prange(n_blocks):
        r0 = b * bw
        nb = min(bw, n - r0)
        xb = np.empty((M, bw))
        _block_rows(X, r0, nb, xb)              # lanes past the last row repeat it (never written out)
        P = np.empty((D, q_max, bw))        # w_q x product of the nonzero merged factors at the node of depth d
        CB = np.empty((D, q_max))           # C_e of the edge into depth d for the cases 1 and 2 (case 0: 0) ...
        CC = np.empty((D, q_max))
        MB = np.empty((D, bw))              # ... and the lanes in case 1 and in case 2 (0 or 1)
        MC = np.empty((D, bw))
        tb = np.empty(bw)
        tc = np.empty(bw)
        S = np.empty((D, K, q_max, bw))     # sum over the finished leaves below the node of v P
        zc = np.empty((D, bw))              # zero factors on the path (a count, in a double)
        nd = np.empty(D, np.int64)
        stage = np.empty(D, np.int64)
        sf = np.empty(D, np.int64)          # feature of the edge into depth d, and its merged (z, o) before it
        sz = np.empty(D)
        so = np.empty((D, bw))
        fo = np.ones((M, bw))               # merged one fraction per feature on the current path (1: absent)
        fz = np.ones(M)                     # merged zero fraction (row-independent)
        # the three cases of an edge for a lane, by its old merged one fraction op and its branch o_e:
        # 0: op = 0 (then o' = 0), 1: op = 1 and o_e = 0, 2: op = 1 and o_e = 1; per case and Gauss node the
        # factor ratio g'/g and coefficient C_e are row-independent, so they are computed once per edge
        ratio = np.empty((3, q_max))
        ma = np.empty(bw)
        mb = np.empty(bw)
        mc = np.empty(bw)
        acc = np.zeros((M, K, bw))
        for t in range(T):
            if cl[t, 0] < 0:
                continue                    # a single leaf: bias only
            Q = q_of_tree[t]
            d = 0
            nd[0] = 0
            stage[0] = 0
            for q in range(Q):
                wv = wq[Q, q]
                for l in range(bw):
                    P[0, q, l] = wv
            for l in range(bw):
                zc[0, l] = 0.0
            while True:
                node = nd[d]
                if cl[t, node] >= 0 and stage[d] < 2:
                    left = stage[d] == 0
                    child = cl[t, node] if left else cr[t, node]
                    stage[d] += 1
                    f = feat[t, node]
                    th = thr[t, node]
                    nan_here = cd[t, node] == child
                    pc = cover[t, node]
                    ze = cover[t, child] / pc if pc > 0 else 0.0
                    zp = fz[f]
                    zn = zp * ze
                    sf[d + 1] = f
                    sz[d + 1] = zp
                    fz[f] = zn
                    # zero factors (o = z = 0) count as 1 in P and are counted in zc instead
                    inc_a = (1 if zn == 0.0 else 0) - (1 if zp == 0.0 else 0)
                    inc_b = 1 if zn == 0.0 else 0
                    a0 = 1.0 if zp == 0.0 else 0.0
                    an = 1.0 if zn == 0.0 else 0.0
                    for q in range(Q):                  # branch-free, so that the divisions vectorise
                        tt = tq[Q, q]
                        g0 = zp * (1.0 - tt) + a0       # op = 0 (1 where it is a zero factor)
                        g1 = zp + tt * (1.0 - zp)       # op = 1 (> 0)
                        gn0 = zn * (1.0 - tt) + an      # o' = 0 (1 where it is a zero factor)
                        gn1 = zn + tt * (1.0 - zn)      # o' = 1 (> 0)
                        ratio[0, q] = gn0 / g0
                        ratio[1, q] = gn0 / g1
                        ratio[2, q] = gn1 / g1
                        CB[d + 1, q] = -zn / (g1 * gn0)  # z o (o_e - z_e) / (g g'); 0 for op = 0
                        CC[d + 1, q] = (zp - zn) / (g1 * gn1)
                    lf = 1.0 if left else 0.0
                    nh = 1.0 if nan_here else 0.0
                    fa = float(inc_a)
                    fb = float(inc_b)
                    for l in range(bw):                 # branch-free: the branches taken are data
                        x = xb[f, l]
                        isn = 1.0 if x != x else 0.0  # noqa: PLR0124 (NaN test)
                        le = 1.0 if x <= th else 0.0   # 0 for NaN
                        go = (1.0 - isn) * (le * lf + (1.0 - le) * (1.0 - lf)) + isn * nh
                        op = fo[f, l]                   # 0 or 1
                        so[d + 1, l] = op
                        ma[l] = 1.0 - op
                        mb[l] = op * (1.0 - go)
                        mc[l] = op * go
                        MB[d + 1, l] = mb[l]
                        MC[d + 1, l] = mc[l]
                        zc[d + 1, l] = zc[d, l] + ma[l] * fa + mb[l] * fb
                        fo[f, l] = op * go
                    Pd = P[d]
                    Pn = P[d + 1]
                    for q in range(Q):
                        ra, rb, rc = ratio[0, q], ratio[1, q], ratio[2, q]
                        for l in range(bw):
                            Pn[q, l] = Pd[q, l] * (ma[l] * ra + mb[l] * rb + mc[l] * rc)
                    d += 1
                    nd[d] = child
                    stage[d] = 0
                    continue
                if cl[t, node] < 0:
                    for l in range(bw):
                        mb[l] = 1.0 if zc[d, l] == 0.0 else 0.0
                    Pd = P[d]
                    for k in range(K):
                        v = values[t, node, k]
                        Sd = S[d, k]
                        for q in range(Q):
                            for l in range(bw):
                                Sd[q, l] = v * mb[l] * Pd[q, l]
                if d == 0:
                    break
                f = sf[d]
                fz[f] = sz[d]
                for l in range(bw):
                    fo[f, l] = so[d, l]
                first = stage[d - 1] == 1          # the parent's first child: its sum starts here
                for k in range(K):
                    Sd = S[d, k]
                    Su = S[d - 1, k]
                    for l in range(bw):
                        tb[l] = 0.0
                        tc[l] = 0.0
                    for q in range(Q):
                        cb = CB[d, q]
                        cc = CC[d, q]
                        if first:
                            for l in range(bw):
                                s = Sd[q, l]
                                tb[l] += cb * s
                                tc[l] += cc * s
                                Su[q, l] = s
                        else:
                            for l in range(bw):
                                s = Sd[q, l]
                                tb[l] += cb * s
                                tc[l] += cc * s
                                Su[q, l] += s
                    a = acc[f, k]
                    mbd = MB[d]
                    mcd = MC[d]
                    for l in range(bw):
                        a[l] += mbd[l] * tb[l] + mcd[l] * tc[l]
                d -= 1
        for l in range(nb):
            for f in range(M):
                for k in range(K):
                    out[r0 + l, f, k] = acc[f, k, l]


def linear_shap_values(children_left, children_right, children_default, features, thresholds, values,
                       node_sample_weight, base_offset, X, *, input_dtype=np.float64, categories=None) -> np.ndarray:
    """Path-dependent SHAP values of the rows ``X`` for shap ``TreeEnsemble`` arrays, per tree in O(nodes x Q).

    Parameters
    ----------
    children_left, children_right, children_default, features : numpy.ndarray of int, shape (T, max_nodes)
        shap ``TreeEnsemble`` node arrays (a negative left child marks a leaf).
    thresholds : numpy.ndarray of float, shape (T, max_nodes)
        Split thresholds (``x <= threshold`` goes left).
    values : numpy.ndarray of float, shape (T, max_nodes, K) or (T, max_nodes)
        Node values (leaves are used).
    node_sample_weight : numpy.ndarray of float, shape (T, max_nodes)
        Node covers (non-negative).
    base_offset : float or array-like of shape (K,)
        The model's base value (added to the bias column).
    X : numpy.ndarray, shape (n, M)
        Rows; rounded through ``input_dtype``, then compared in float64. NaN follows ``children_default``.
    input_dtype : numpy dtype, default float64
        The dtype the model compares rows in (float32 for XGBoost and scikit-learn).
    categories : tuple, optional
        ``(is_categorical, node_cat_ptr, node_cat_nwords, cat_words)`` as for ``extract_paths``; categorical
        splits are not supported by this prototype.

    Returns
    -------
    numpy.ndarray of float64, shape (n, M + 1, K)
        SHAP values, the bias (cover-weighted expectation plus ``base_offset``) in column M.

    Raises
    ------
    NotImplementedError
        If a reachable split is categorical.
    ValueError
        On malformed arrays, a split feature outside ``[0, M)`` or a negative or non-finite cover.

    See Also
    --------
    hitml.kernels.treeshap.paths.extract_paths : the same array rules, per path.
    """
    cl, cr, cd, ft, th, cov, vals = tree_arrays(children_left, children_right, children_default, features, thresholds,
                                                values, node_sample_weight)
    K = vals.shape[2]
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got shape {X.shape}")
    M = X.shape[1]
    T, N = cl.shape
    internal = cl >= 0
    if categories is not None and np.any(np.asarray(categories[0], dtype=bool) & internal):
        raise NotImplementedError("categorical splits are not supported by the linear TreeSHAP prototype")
    if np.any(internal & ((ft < 0) | (ft >= M))):
        bad = ft[internal & ((ft < 0) | (ft >= M))][0]
        raise ValueError(f"split feature index {bad} is outside [0, n_features={M})")
    if np.any(internal & ((cr < 0) | (cr >= N) | (cl >= N))):
        raise ValueError("internal node with an invalid child index")
    # the zero-factor rule needs z >= 0 (see the module docstring): covers of split nodes and their children
    tt, nn = np.nonzero(internal)
    used = np.concatenate([cov[tt, nn], cov[tt, cl[tt, nn]], cov[tt, cr[tt, nn]]])
    if not np.all(np.isfinite(used) & (used >= 0)):
        raise ValueError("node_sample_weight must be finite and non-negative at split nodes and their children")
    base = np.broadcast_to(np.asarray(base_offset, dtype=np.float64).reshape(-1), (K,))

    max_depth = np.zeros(T, np.int64)
    max_merged = np.zeros(T, np.int64)
    expect = np.zeros((T, K))
    _tree_stats(cl, cr, ft, cov, vals, M, max_depth, max_merged, expect)
    q_of_tree = np.maximum(1, (max_merged + 1) // 2).astype(np.int64)
    tq, wq = gauss_legendre(int(q_of_tree.max(initial=1)))
    Xf = np.ascontiguousarray(X.astype(input_dtype, copy=False).astype(np.float64, copy=False))
    out = np.zeros((X.shape[0], M + 1, K))
    if X.shape[0]:
        _linear_kernel(Xf, cl, cr, cd, ft, th, cov, vals, q_of_tree, int(max_depth.max(initial=0)), tq, wq, out)
    out[:, M, :] = base + expect.sum(0)
    return out


# ----------------------------------------------------------------------------------------- the engine's kernel
@numba.njit(parallel=True, cache=True, error_model="numpy", fastmath=_FM)
def program_values(X, bw, evi, evd, tree_ev, tree_q, tree_k, levels, tq, wq, lval, out):
    """out[i, f, k] += phi_f of the trees of the walk program (``paths.tree_program``, leaves folded or not), rows in
    blocks of ``bw`` lanes: the CPU engine's per-tree kernel, the twin of linear.cu (the same events and formulas).

    As ``_linear_kernel``: per event the factor ratios and edge coefficients at the Gauss nodes are computed once
    for the block's rows, and a lane picks its case by 0/1 multipliers (branch-free, so the lane loops vectorise);
    zero factors are counted per level (``zc``) instead of multiplied. X is (n, M) float64 (rounded through the
    model's input dtype); trees ``t`` have events ``evi/evd[tree_ev[t]:tree_ev[t + 1]]``, ``tree_q[t]`` Gauss nodes
    (rules ``tq, wq`` as ``gauss_legendre``), at most ``levels`` levels, and feed output ``tree_k[t]`` only (every
    output where it is -1: a boosted multiclass tree walks one output, not K); ``lval`` (P, K) are the leaf values by
    path index."""
    n, M = X.shape
    T = tree_q.shape[0]
    K = lval.shape[1]
    D = levels + 1
    q_max = max(1, tree_q.max())
    n_blocks = (n + bw - 1) // bw
    for b in prange(n_blocks):
        r0 = b * bw
        nb = min(bw, n - r0)
        xb = np.empty((M, bw))
        _block_rows(X, r0, nb, xb)
        P = np.empty((D, q_max, bw))
        S = np.empty((D, K, q_max, bw))
        on = np.ones((D, bw))              # merged one fraction after the edge into each level (0 or 1)
        MB = np.empty((D, bw))             # the edge into each level: lanes in case 1 (op = 1, o_e = 0) ...
        MC = np.empty((D, bw))             # ... and in case 2 (op = 1, o_e = 1)
        zc = np.zeros((D, bw))             # zero factors on the path to each level (a count, in a double)
        r0_ = np.empty(q_max)
        r1_ = np.empty(q_max)
        r2_ = np.empty(q_max)
        cb = np.empty(q_max)
        cc = np.empty(q_max)
        ma = np.empty(bw)
        mb = np.empty(bw)
        mc = np.empty(bw)
        live = np.empty(bw)
        tb = np.empty(bw)
        tc = np.empty(bw)
        acc = np.zeros((M, K, bw))
        for t in range(T):
            Q = tree_q[t]
            k_lo = tree_k[t] if tree_k[t] >= 0 else 0
            k_hi = tree_k[t] + 1 if tree_k[t] >= 0 else K
            for q in range(Q):
                wv = wq[Q, q]
                for l in range(bw):
                    P[0, q, l] = wv
            for e in range(tree_ev[t], tree_ev[t + 1]):
                code = evi[e, 0]
                kind = code & 3
                d = (code >> 2) & 127
                f = evi[e, 1]
                pd = evi[e, 2]
                zp = evd[e, 1]
                zn = evd[e, 2]
                if kind == 1:                       # LEAF (only a root that is a leaf)
                    for k in range(k_lo, k_hi):
                        v = lval[evi[e, 1], k]
                        for q in range(Q):
                            for l in range(bw):
                                S[d, k - k_lo, q, l] = v * (1.0 if zc[d, l] == 0.0 else 0.0) * P[d, q, l]
                    continue
                for q in range(Q):                  # the row-independent part, once per event
                    tt = tq[Q, q]
                    g1 = zp + tt * (1.0 - zp)
                    gn0 = zn * (1.0 - tt) + (1.0 if zn == 0.0 else 0.0)
                    gn1 = zn + tt * (1.0 - zn)
                    r0_[q] = gn0 / (zp * (1.0 - tt) + (1.0 if zp == 0.0 else 0.0))
                    r1_[q] = gn0 / g1
                    r2_[q] = gn1 / g1
                    cb[q] = -zn / (g1 * gn0)
                    cc[q] = (zp - zn) / (g1 * gn1)
                first = ((code >> 11) & 1) == 1
                if kind == 2:                       # UP from level d
                    for k in range(k_lo, k_hi):
                        j = k - k_lo
                        for l in range(bw):
                            tb[l] = 0.0
                            tc[l] = 0.0
                        for q in range(Q):
                            cbq = cb[q]
                            ccq = cc[q]
                            if first:
                                for l in range(bw):
                                    s = S[d, j, q, l]
                                    tb[l] += cbq * s
                                    tc[l] += ccq * s
                                    S[d - 1, j, q, l] = s
                            else:
                                for l in range(bw):
                                    s = S[d, j, q, l]
                                    tb[l] += cbq * s
                                    tc[l] += ccq * s
                                    S[d - 1, j, q, l] += s
                        for l in range(bw):
                            acc[f, k, l] += MB[d, l] * tb[l] + MC[d, l] * tc[l]
                    continue
                th = evd[e, 0]
                lf = 1.0 if (code >> 9) & 1 else 0.0
                nh = 1.0 if (code >> 10) & 1 else 0.0
                fa = (1.0 if zn == 0.0 else 0.0) - (1.0 if zp == 0.0 else 0.0)   # a zero factor made or undone
                fb = 1.0 if zn == 0.0 else 0.0
                for l in range(bw):                 # DOWN and EDGE_LEAF: the row's branch and case, branch-free
                    x = xb[f, l]
                    isn = 1.0 if x != x else 0.0  # noqa: PLR0124 (NaN test)
                    le = 1.0 if x <= th else 0.0
                    go = (1.0 - isn) * (le * lf + (1.0 - le) * (1.0 - lf)) + isn * nh
                    op = 1.0 if pd < 0 else on[pd, l]
                    ma[l] = 1.0 - op
                    mb[l] = op * (1.0 - go)
                    mc[l] = op * go
                    live[l] = 1.0 if zc[d - 1, l] + ma[l] * fa + mb[l] * fb == 0.0 else 0.0
                if kind == 0:                       # DOWN into level d
                    for l in range(bw):
                        on[d, l] = mc[l]
                        MB[d, l] = mb[l]
                        MC[d, l] = mc[l]
                        zc[d, l] = zc[d - 1, l] + ma[l] * fa + mb[l] * fb
                    for q in range(Q):
                        ra, rb, rc = r0_[q], r1_[q], r2_[q]
                        for l in range(bw):
                            P[d, q, l] = P[d - 1, q, l] * (ma[l] * ra + mb[l] * rb + mc[l] * rc)
                    continue
                # EDGE_LEAF: DOWN into a leaf at level d, its LEAF and its UP
                for k in range(k_lo, k_hi):
                    j = k - k_lo
                    v = lval[evi[e, 3], k]
                    for l in range(bw):
                        tb[l] = 0.0
                        tc[l] = 0.0
                    for q in range(Q):
                        ra, rb, rc = r0_[q], r1_[q], r2_[q]
                        cbq = cb[q]
                        ccq = cc[q]
                        if first:
                            for l in range(bw):
                                s = v * live[l] * (P[d - 1, q, l] * (ma[l] * ra + mb[l] * rb + mc[l] * rc))
                                tb[l] += cbq * s
                                tc[l] += ccq * s
                                S[d - 1, j, q, l] = s
                        else:
                            for l in range(bw):
                                s = v * live[l] * (P[d - 1, q, l] * (ma[l] * ra + mb[l] * rb + mc[l] * rc))
                                tb[l] += cbq * s
                                tc[l] += ccq * s
                                S[d - 1, j, q, l] += s
                    for l in range(bw):
                        acc[f, k, l] += mb[l] * tb[l] + mc[l] * tc[l]
        for l in range(nb):
            for f in range(M):
                for k in range(K):
                    out[r0 + l, f, k] += acc[f, k, l]


@functools.lru_cache(maxsize=None)
def program_rules() -> tuple[np.ndarray, np.ndarray]:
    """The Gauss-Legendre rules of the program kernels (``gauss_legendre(PROGRAM_MAX_Q)``), built once."""
    return gauss_legendre(PROGRAM_MAX_Q)
