"""Numba kernels of interventional TreeSHAP in time linear in rows plus background (see _patterns.py).

Background histograms per path (rows in blocks, paths in parallel), coefficient tables per path (from the
histogram's non-empty fail sets, enumerating their supersets), then explained rows in blocks, each looking up its
pattern's table row per path. Long paths use the sparse pair form: each explained row against the distinct fail
sets of the background. Every sum runs in one fixed order (paths ascending per output entry; fail sets ascending
per table entry), so results do not depend on the thread count; the GPU twin keeps the same orders.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import prange

from ._cpu_kernels import _satisfies

_BG_BLOCK = 2048   # background rows per block (paths of one chunk scan a block while it is in cache)
_ROW_BLOCK = 64    # explained rows per work item (transposed, with a feature-major copy of their output)


@numba.njit(inline="always")
def _pattern(row, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside):
    """Bit t set iff ``row`` satisfies element s + t of the path."""
    a = np.int64(0)
    for t in range(m):
        e = s + t
        if _satisfies(row[feature[e]], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside):
            a |= np.int64(1) << t
    return a


@numba.njit(inline="always")
def _popcount(v):
    c = 0
    while v:
        v &= v - 1
        c += 1
    return c


@numba.njit(inline="always")
def _block_patterns(XT, nb, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                    pat):
    """pat[i] = the pattern of row i (of ``nb``) of the feature-major block ``XT`` (M, >= nb) on path element s..
    s+m; numeric elements in branch-free loops over the rows (they vectorise), categorical ones per row."""
    for i in range(nb):
        pat[i] = 0
    for t in range(m):
        e = s + t
        col = XT[feature[e]]
        if cat_ptr[e] >= 0:
            for i in range(nb):
                if _satisfies(col[i], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside):
                    pat[i] |= np.int64(1) << t
            continue
        lo = lower[e]
        hi = upper[e]
        nan_ok = missing_ok[e]
        if lo == -np.inf:
            for i in range(nb):
                x = col[i]
                pat[i] |= np.int64((x <= hi) | (nan_ok & (x != x))) << t  # noqa: PLR0124 - x != x is NaN, branch-free in numba
        else:
            for i in range(nb):
                x = col[i]
                pat[i] |= np.int64(((lo < x) & (x <= hi)) | (nan_ok & (x != x))) << t  # noqa: PLR0124 - NaN test


@numba.njit(inline="always")
def _transpose_block(X, i0, i1, XT):
    for i in range(i0, i1):
        for f in range(X.shape[1]):
            XT[f, i - i0] = X[i, f]


@numba.njit(parallel=True, cache=True)
def background_histograms(R, wint, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                          cat_outside, hist_off, mode, hist):
    """hist[hist_off[p] + s] += wint[j] for each background row j whose fail set (the complement of its pattern) on
    path p (of ``pidx``) is s. Background rows in feature-major blocks; the paths of a block in parallel. Paths with
    ``mode`` 2 (the right leaf of a sibling pair) are skipped: ``mirror_histograms`` derives theirs."""
    nR, M = R.shape
    Q = len(pidx)
    RT = np.empty((M, _BG_BLOCK))
    for b0 in range(0, nR, _BG_BLOCK):
        b1 = min(nR, b0 + _BG_BLOCK)
        nb = b1 - b0
        _transpose_block(R, b0, b1, RT)
        for q in prange(Q):
            p = pidx[q]
            if mode[p] == 2:
                continue
            pat = np.empty(_BG_BLOCK, np.int64)
            s = path_ptr[p]
            m = path_ptr[p + 1] - s
            off = hist_off[p] + (np.int64(1) << m) - 1
            _block_patterns(RT, nb, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                            cat_outside, pat)
            for j in range(nb):
                hist[off - pat[j]] += wint[b0 + j]


@numba.njit(parallel=True, cache=True)
def value_tables(pidx, path_ptr, hist, hist_off, total, WP, WQ, tab_off, tab):
    """tab[tab_off[p] + a * d + t]: the (Shapley or Banzhaf) value of path element t for an explained row of
    pattern a, per unit leaf value, averaged over the background (histogram / total)."""
    for q in prange(len(pidx)):
        p = pidx[q]
        d = path_ptr[p + 1] - path_ptr[p]
        full = (np.int64(1) << d) - 1
        ho = hist_off[p]
        to = tab_off[p]
        nacc = np.zeros(full + 1)
        for i in range((full + 1) * d):
            tab[to + i] = 0.0
        for s in range(full + 1):
            cnt = hist[ho + s]
            if cnt == 0:
                continue
            g = cnt / total
            ps = _popcount(s)
            c = full ^ s
            u = np.int64(0)
            while True:  # the supersets a = s | u of s, u ascending over the subsets of c
                a = s | u
                qn = d - ps - _popcount(u)
                nacc[a] += g * WQ[ps, qn]
                if ps > 0:
                    wp = g * WP[ps, qn]
                    base = to + a * d
                    for t in range(d):
                        if (s >> t) & 1:
                            tab[base + t] += wp
                if u == c:
                    break
                u = (u - c) & c
        for a in range(full + 1):
            base = to + a * d
            for t in range(d):
                if not (a >> t) & 1:
                    tab[base + t] = nacc[a]


@numba.njit(parallel=True, cache=True)
def interaction_tables(pidx, path_ptr, hist, hist_off, total, WP, WQ, WPP, WPQ, WQQ, tab_off, tab):
    """tab[tab_off[p] + (a * d + t1) * d + t2]: shap's interaction value of path elements (t1, t2) for an explained
    row of pattern a per unit leaf value; the diagonal holds the Shapley value minus the row's off-diagonal sum."""
    for q in prange(len(pidx)):
        p = pidx[q]
        d = path_ptr[p + 1] - path_ptr[p]
        full = (np.int64(1) << d) - 1
        ho = hist_off[p]
        to = tab_off[p]
        nA = full + 1
        main_q = np.zeros(nA)
        main_p = np.zeros((nA, d))
        qq = np.zeros(nA)
        pq = np.zeros((nA, d))
        pp = np.zeros((nA, d, d))
        for s in range(nA):
            cnt = hist[ho + s]
            if cnt == 0:
                continue
            g = cnt / total
            ps = _popcount(s)
            c = full ^ s
            u = np.int64(0)
            while True:
                a = s | u
                qn = d - ps - _popcount(u)
                main_q[a] += g * WQ[ps, qn]
                qq[a] += g * WQQ[ps, qn]
                if ps > 0:
                    wp = g * WP[ps, qn]
                    wpq = g * WPQ[ps, qn]
                    wpp = g * WPP[ps, qn]
                    for t in range(d):
                        if (s >> t) & 1:
                            main_p[a, t] += wp
                            pq[a, t] += wpq
                            for t2 in range(t + 1, d):
                                if (s >> t2) & 1:
                                    pp[a, t, t2] += wpp
                if u == c:
                    break
                u = (u - c) & c
        for a in range(nA):
            base = to + a * d * d
            for t1 in range(d):
                in1 = (a >> t1) & 1
                diag = main_p[a, t1] if in1 else main_q[a]
                for t2 in range(d):
                    if t2 == t1:
                        continue
                    in2 = (a >> t2) & 1
                    if in1 and in2:
                        v = pp[a, min(t1, t2), max(t1, t2)]
                    elif in1:
                        v = pq[a, t1]
                    elif in2:
                        v = pq[a, t2]
                    else:
                        v = qq[a]
                    tab[base + t1 * d + t2] = v
                    diag -= v
                tab[base + t1 * d + t1] = diag


@numba.njit(parallel=True, cache=True)
def rows_kernel(X, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                leaf_value, tab_off, tab, mode, pair_k, interactions, M1, out):
    """Over the paths ``pidx``: values (``interactions`` false, ``out`` (n, M+1, K)): out[i, feature[t], k] +=
    leaf_value[p, k] * tab[p][pattern of row i on p][t]; interactions (``out`` (n, (M+1)^2, K), the flattened
    (n, M+1, M+1, K)): out[i, f1 * M1 + f2, k] += leaf_value[p, k] * tab[p][pattern][t1, t2]. Rows in blocks,
    transposed; values sum in a feature-major copy of the block's output (loaded from and stored back to ``out``,
    so each entry still sums its paths in order). Values of a sibling pair (``mode`` 1 for its left path, 2 for its
    right) come from the left path's combined table, leaf values folded in, into output ``pair_k``."""
    n, M = X.shape
    K = leaf_value.shape[1]
    W = out.shape[1]
    nblocks = (n + _ROW_BLOCK - 1) // _ROW_BLOCK
    for b in prange(nblocks):
        i0 = b * _ROW_BLOCK
        i1 = min(n, i0 + _ROW_BLOCK)
        nb = i1 - i0
        XT = np.empty((M, _ROW_BLOCK))
        _transpose_block(X, i0, i1, XT)
        pat = np.empty(_ROW_BLOCK, np.int64)
        acc = np.empty((0, 0, 0))
        if not interactions:
            acc = np.empty((W, K, _ROW_BLOCK))
            for i in range(nb):
                for f in range(W):
                    for k in range(K):
                        acc[f, k, i] = out[i0 + i, f, k]
        for q in range(len(pidx)):
            p = pidx[q]
            if mode[p] == 2:
                continue
            s = path_ptr[p]
            m = path_ptr[p + 1] - s
            to = tab_off[p]
            _block_patterns(XT, nb, s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                            cat_outside, pat)
            if not interactions:
                for i in range(nb):
                    pat[i] = to + pat[i] * m          # the row's table row
            if mode[p] == 1:
                for t in range(m):
                    dst = acc[feature[s + t], pair_k[p]]
                    for i in range(nb):
                        dst[i] += tab[pat[i] + t]
                continue
            if not interactions:
                for t in range(m):
                    f = feature[s + t]
                    for k in range(K):
                        v = leaf_value[p, k]
                        if v == 0.0:
                            continue
                        dst = acc[f, k]
                        for i in range(nb):
                            dst[i] += tab[pat[i] + t] * v
                continue
            for i in range(nb):
                base = to + pat[i] * m * m
                for t1 in range(m):
                    f1 = feature[s + t1] * M1
                    for t2 in range(m):
                        c = tab[base + t1 * m + t2]
                        f2 = f1 + feature[s + t2]
                        for k in range(K):
                            v = leaf_value[p, k]
                            if v != 0.0:
                                out[i0 + i, f2, k] += c * v
        if not interactions:
            for i in range(nb):
                for f in range(W):
                    for k in range(K):
                        out[i0 + i, f, k] = acc[f, k, i]


@numba.njit(parallel=True, cache=True)
def background_patterns(R, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                        cat_outside, out):
    """out[q, j]: the fail set (complement of the pattern) of background row j on path pidx[q]."""
    nR = R.shape[0]
    for q in prange(len(pidx)):
        p = pidx[q]
        s = path_ptr[p]
        m = path_ptr[p + 1] - s
        full = (np.int64(1) << m) - 1
        for j in range(nR):
            out[q, j] = full ^ _pattern(R[j], s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords,
                                        cat_words, cat_outside)


@numba.njit(parallel=True, cache=True)
def sparse_rows(X, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                leaf_value, fs_ptr, fs_set, fs_w, total, WP, WQ, WPP, WPQ, WQQ, interactions, out):
    """Long paths: each explained row against the distinct background fail sets fs_set[fs_ptr[q]:fs_ptr[q+1]] of
    path pidx[q] (weights fs_w, ascending sets). ``out`` is (n, M+1, K) for values, (n, M+1, M+1, K) flattened to
    (n, (M+1)^2, K) for interactions (``interactions`` true)."""
    n = X.shape[0]
    K = leaf_value.shape[1]
    M1 = int(np.sqrt(out.shape[1])) if interactions else out.shape[1]
    maxd = 0
    for q in range(len(pidx)):
        maxd = max(maxd, path_ptr[pidx[q] + 1] - path_ptr[pidx[q]])
    nb = (n + _ROW_BLOCK - 1) // _ROW_BLOCK
    for b in prange(nb):
        acc = np.empty((maxd, maxd))
        i0 = b * _ROW_BLOCK
        i1 = min(n, i0 + _ROW_BLOCK)
        for q in range(len(pidx)):
            p = pidx[q]
            s0 = path_ptr[p]
            m = path_ptr[p + 1] - s0
            full = (np.int64(1) << m) - 1
            for i in range(i0, i1):
                a = _pattern(X[i], s0, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                             cat_outside)
                na = full ^ a
                qn = m - _popcount(a)
                acc[:m, :m] = 0.0
                mq = 0.0
                qq = 0.0
                for r in range(fs_ptr[q], fs_ptr[q + 1]):
                    s = fs_set[r]
                    if s & na:
                        continue
                    g = fs_w[r] / total
                    ps = _popcount(s)
                    mq += g * WQ[ps, qn]
                    if interactions:
                        qq += g * WQQ[ps, qn]
                    if ps == 0:
                        continue
                    wp = g * WP[ps, qn]
                    wpq = g * WPQ[ps, qn] if interactions else 0.0
                    wpp = g * WPP[ps, qn] if interactions else 0.0
                    for t in range(m):
                        if (s >> t) & 1:
                            acc[t, t] += wp
                            if interactions:
                                for t2 in range(m):
                                    if t2 == t:
                                        continue
                                    if (s >> t2) & 1:
                                        acc[t, t2] += wpp
                                    elif (na >> t2) & 1:
                                        acc[t, t2] += wpq
                # fill the Q rows: main value mq on the diagonal, qq between Q features, pq mirrored
                for t in range(m):
                    if (na >> t) & 1:
                        acc[t, t] = mq
                        if interactions:
                            for t2 in range(m):
                                if t2 == t:
                                    continue
                                if (na >> t2) & 1:
                                    acc[t, t2] = qq
                                elif (a >> t2) & 1:
                                    acc[t, t2] = acc[t2, t]
                for t in range(m):
                    f = feature[s0 + t]
                    if not interactions:
                        c = acc[t, t]
                        for k in range(K):
                            v = leaf_value[p, k]
                            if v != 0.0:
                                out[i, f, k] += c * v
                        continue
                    diag = acc[t, t]
                    for t2 in range(m):
                        if t2 != t:
                            diag -= acc[t, t2]
                    for t2 in range(m):
                        c = diag if t2 == t else acc[t, t2]
                        idx = f * M1 + feature[s0 + t2]
                        for k in range(K):
                            v = leaf_value[p, k]
                            if v != 0.0:
                                out[i, idx, k] += c * v


@numba.njit(cache=True)
def sibling_pairs(path_ptr, tree_index, feature, lower, upper, missing_ok, cat_ptr, leaf_value, same, mode, pair_k,
                  pair_bit):
    """Sibling leaves whose paths differ in one numeric element only, split at one threshold with the parent's
    interval unbounded and NaN sent to exactly one of them: every row satisfies exactly one of the two conditions,
    so the right leaf's pattern is the left's with that bit flipped, and one table lookup serves both (WOODELF's
    neighbour-leaf trick). Marks mode[p] = 1, mode[p + 1] = 2, pair_bit[p] = the element, pair_k[p] = the output
    (one output with a nonzero value at most, the same for both); ``same[p]``: paths p and p + 1 have tables in one
    chunk."""
    P = len(path_ptr) - 1
    K = leaf_value.shape[1]
    p = 0
    while p < P - 1:
        q = p + 1
        s0 = path_ptr[p]
        m = path_ptr[q] - s0
        s1 = path_ptr[q]
        ok = same[p] and tree_index[p] == tree_index[q] and m > 0 and path_ptr[q + 1] - s1 == m
        k = 0
        if ok and K > 1:
            kp = -1
            for j in range(K):
                for r in (p, q):
                    if leaf_value[r, j] != 0.0:
                        if kp >= 0 and kp != j:
                            ok = False
                        kp = j
            k = max(kp, 0)
        diff = -1
        if ok:
            for t in range(m):
                e0 = s0 + t
                e1 = s1 + t
                if feature[e0] != feature[e1] or cat_ptr[e0] >= 0 or cat_ptr[e1] >= 0:
                    ok = False
                    break
                if lower[e0] == lower[e1] and upper[e0] == upper[e1] and missing_ok[e0] == missing_ok[e1]:
                    continue
                if diff < 0 and lower[e0] == -np.inf and upper[e1] == np.inf and upper[e0] == lower[e1] \
                        and missing_ok[e0] != missing_ok[e1]:
                    diff = t
                    continue
                ok = False
                break
        if ok and diff >= 0:
            mode[p] = 1
            mode[q] = 2
            pair_bit[p] = diff
            pair_k[p] = k
            p += 2
        else:
            p += 1


@numba.njit(parallel=True, cache=True)
def mirror_histograms(pidx, path_ptr, mode, pair_bit, hist_off, hist):
    """The histogram of each right sibling (``mode`` 2): the left's with the split element's bit flipped."""
    for q in prange(len(pidx)):
        p = pidx[q]
        if mode[p] != 1:
            continue
        m = path_ptr[p + 1] - path_ptr[p]
        b = np.int64(1) << pair_bit[p]
        hl = hist_off[p]
        hr = hist_off[p + 1]
        for s in range(np.int64(1) << m):
            hist[hr + s] = hist[hl + (s ^ b)]


@numba.njit(parallel=True, cache=True)
def combine_pairs(pidx, path_ptr, mode, pair_bit, pair_k, leaf_value, tab_off, tab):
    """The left table of each sibling pair becomes left * v_left + right(pattern with the split bit flipped) *
    v_right, for output pair_k."""
    for q in prange(len(pidx)):
        p = pidx[q]
        if mode[p] != 1:
            continue
        m = path_ptr[p + 1] - path_ptr[p]
        b = np.int64(1) << pair_bit[p]
        k = pair_k[p]
        vl = leaf_value[p, k]
        vr = leaf_value[p + 1, k]
        tl = tab_off[p]
        tr = tab_off[p + 1]
        for a in range(np.int64(1) << m):
            for t in range(m):
                tab[tl + a * m + t] = tab[tl + a * m + t] * vl + tab[tr + (a ^ b) * m + t] * vr
