"""Numba kernels of interventional TreeSHAP in time linear in rows plus background (see _patterns.py).

Background histograms per path (rows in blocks: each distinct path condition tested once per row into 64-row bit
masks, then each path's fail sets counted from its conditions' masks, paths in parallel), coefficient tables per
path (from the histogram's non-empty fail sets, enumerating their supersets), then explained rows in blocks, each
looking up its pattern's table row per path. Long paths use the sparse pair form: each explained row against the distinct fail
sets of the background. Every sum runs in one fixed order (paths ascending per output entry; fail sets ascending
per table entry), so results do not depend on the thread count; the GPU twin keeps the same orders.
"""
from __future__ import annotations

import numba
import numpy as np
from numba import types
from numba.extending import intrinsic

from .. import _background, _registry
from .._items import borrow, items
from ._cpu_kernels import _satisfies

# the warm-up groups that compile these kernels (their Numba cache entries ship with hitml)
_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap-interventional", "treeshap-interventional-interactions"))

# paths of at most this many elements count their background fail sets by bit-sliced ANDs (2^(m+1) word ANDs per 64
# rows); longer ones build each row's fail set (m bit extractions per row) and add its weight
_SLICED_MAX = 8
_ROW_BLOCK = 64    # explained rows per work item (transposed, with a feature-major copy of their output)
# rows_kernel's block for values: the widest power of two up to _MAX_ROW_BLOCK whose transposed rows and output copy
# stay within _ROW_BLOCK_BYTES (a fraction of an L2): each path's metadata and table lines are then fetched once per
# wide block instead of once per 64 rows (measurements: docs/design/treeshap.md, section 6).
_MAX_ROW_BLOCK = 1024
_ROW_BLOCK_BYTES = 1 << 18
# interactions sum in a feature-major copy of the block's output too ((M+1)^2 K entries per row) where at least
# _MIN_INTERACTION_BLOCK rows of it fit _INTERACTION_BLOCK_BYTES; wider outputs are written in place, row by row
_INTERACTION_BLOCK_BYTES = 1 << 21
_MIN_INTERACTION_BLOCK = 8


def row_block(n_features: int, out_width: int, n_rows: int, threads: int, interactions: bool) -> int:
    """rows_kernel's rows per work item. Values: the widest power of two whose (n_features + out_width + 1) float64
    per row fit _ROW_BLOCK_BYTES, at most _MAX_ROW_BLOCK and at most an eighth of each thread's share of ``n_rows``
    (so that every thread gets blocks), at least _ROW_BLOCK. Interactions: the widest power of two up to _ROW_BLOCK
    whose rows fit _INTERACTION_BLOCK_BYTES, if at least _MIN_INTERACTION_BLOCK (a feature-major copy of the output,
    see ``copies_output``), else _ROW_BLOCK."""
    if interactions:
        b = _ROW_BLOCK
        while b >= _MIN_INTERACTION_BLOCK and not copies_output(n_features, out_width, b, True):
            b //= 2
        return b if b >= _MIN_INTERACTION_BLOCK else _ROW_BLOCK
    b = _MAX_ROW_BLOCK
    while b > _ROW_BLOCK and (b * 8 * (n_features + out_width + 1) > _ROW_BLOCK_BYTES or 8 * threads * b > n_rows):
        b //= 2
    return b


def copies_output(n_features: int, out_width: int, rblock: int, interactions: bool) -> bool:
    """Whether rows_kernel sums a block of ``rblock`` rows in a feature-major copy of its output: values always,
    interactions where the block's rows (n_features + out_width + 1 float64 each) fit _INTERACTION_BLOCK_BYTES."""
    return not interactions or rblock * 8 * (n_features + out_width + 1) <= _INTERACTION_BLOCK_BYTES


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


@intrinsic
def _ctpop(typingctx, x):
    """The number of set bits of a uint64 (LLVM's ctpop: one popcnt instruction where the CPU has it)."""
    def codegen(context, builder, signature, args):
        return builder.ctpop(args[0])
    return types.uint64(types.uint64), codegen


@numba.njit(cache=True)
def transpose_block(X, i0, i1, XT):
    """XT[:, :i1 - i0] = X[i0:i1].T."""
    _transpose_block(X, i0, i1, XT)


@items("len(ucond)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def condition_masks(RT, nb, ucond, ufeat, ulo, uhi, uok, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                    cat_outside, masks, lo, hi):
    """masks[u, w] bit i: background row 64 w + i (of the ``nb`` rows of the feature-major block ``RT``) satisfies
    distinct condition u. A numeric condition is ``(ulo, uhi]`` (``ulo`` -inf: no lower bound) with NaN passing iff
    ``uok``; ``ucond[u] >= 0`` names a categorical path element, tested as the element itself."""
    RT, ucond, ufeat, ulo, uhi, uok = borrow(RT), borrow(ucond), borrow(ufeat), borrow(ulo), borrow(uhi), borrow(uok)
    lower, upper, missing_ok, cat_ptr = borrow(lower), borrow(upper), borrow(missing_ok), borrow(cat_ptr)
    cat_nwords, cat_words, cat_outside = borrow(cat_nwords), borrow(cat_words), borrow(cat_outside)
    masks = borrow(masks)
    nw = (nb + 63) // 64
    for u in range(lo, hi):
        col = RT[ufeat[u]]
        e = ucond[u]
        c_lo = ulo[u]
        c_hi = uhi[u]
        ok = uok[u]
        for w in range(nw):
            i0 = w * 64
            r = min(64, nb - i0)
            word = np.uint64(0)
            if e >= 0:
                for i in range(r):
                    if _satisfies(col[i0 + i], e, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                                  cat_outside):
                        word |= np.uint64(1) << np.uint64(i)
            elif c_lo == -np.inf:
                for i in range(r):
                    x = col[i0 + i]
                    word |= np.uint64((x <= c_hi) | (ok & (x != x))) << np.uint64(i)  # noqa: PLR0124 - NaN test
            else:
                for i in range(r):
                    x = col[i0 + i]
                    word |= np.uint64(((c_lo < x) & (x <= c_hi)) | (ok & (x != x))) << np.uint64(i)  # noqa: PLR0124 - NaN test
            masks[u, w] = word


@items("len(pidx)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def fail_counts(nb, b0, wint, weighted, pidx, path_ptr, uid, neg, masks, hist_off, mode, hist, lo, hi):
    """hist[hist_off[p] + s] += the weight of the block's background rows whose fail set on path p is s, from the
    bit masks of the path's conditions (``uid``; ``neg``: the element is the condition's complement). Without
    weights, paths of up to _SLICED_MAX elements split each 64-row word into its 2^m fail sets by ANDs and count
    each with a popcount; weighted or longer paths build each row's fail set and add its weight. Paths with ``mode`` 2
    (the right leaf of a sibling pair) are skipped: ``mirror_histograms`` derives theirs. Integer sums: the order
    of rows and threads does not matter."""
    wint, pidx, path_ptr, uid, neg = borrow(wint), borrow(pidx), borrow(path_ptr), borrow(uid), borrow(neg)
    masks, hist_off, mode, hist = borrow(masks), borrow(hist_off), borrow(mode), borrow(hist)
    nw = (nb + 63) // 64
    for q in range(lo, hi):
        p = pidx[q]
        if mode[p] == 2:
            continue
        s = path_ptr[p]
        m = path_ptr[p + 1] - s
        nbins = np.int64(1) << m
        cnt = np.zeros(nbins, np.int64)
        if m <= _SLICED_MAX and not weighted:
            cur = np.empty(nbins, np.uint64)
            for w in range(nw):
                r = nb - w * 64
                cur[0] = np.uint64(0xFFFFFFFFFFFFFFFF) if r >= 64 else (np.uint64(1) << np.uint64(r)) - np.uint64(1)
                h = 1
                for t in range(m):
                    mk = masks[uid[s + t], w]
                    if neg[s + t]:
                        mk = ~mk
                    for c in range(h):
                        x = cur[c]
                        cur[c] = x & mk
                        cur[c + h] = x & ~mk
                    h *= 2
                for c in range(nbins):
                    cnt[c] += np.int64(_ctpop(cur[c]))
        else:
            fails = np.empty(64, np.int64)
            for w in range(nw):
                r = min(64, nb - w * 64)
                for i in range(r):
                    fails[i] = 0
                for t in range(m):
                    mk = masks[uid[s + t], w]
                    if not neg[s + t]:
                        mk = ~mk
                    for i in range(r):
                        fails[i] |= np.int64((mk >> np.uint64(i)) & np.uint64(1)) << t
                j0 = b0 + w * 64
                for i in range(r):
                    cnt[fails[i]] += wint[j0 + i] if weighted else 1
        ho = hist_off[p]
        for c in range(nbins):
            hist[ho + c] += cnt[c]


@items("len(pidx)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def value_tables(pidx, path_ptr, hist, hist_off, total, WP, WQ, tab_off, tab, lo, hi):
    """tab[tab_off[p] + a * d + t]: the (Shapley or Banzhaf) value of path element t for an explained row of
    pattern a, per unit leaf value, averaged over the background (histogram / total)."""
    pidx, path_ptr, hist, hist_off, WP = borrow(pidx), borrow(path_ptr), borrow(hist), borrow(hist_off), borrow(WP)
    WQ, tab_off, tab = borrow(WQ), borrow(tab_off), borrow(tab)
    for q in range(lo, hi):
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


@items("len(pidx)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def interaction_tables(pidx, path_ptr, hist, hist_off, total, WP, WQ, WPP, WPQ, WQQ, tab_off, tab, lo, hi):
    """tab[tab_off[p] + (a * d + t1) * d + t2]: shap's interaction value of path elements (t1, t2) for an explained
    row of pattern a per unit leaf value; the diagonal holds the Shapley value minus the row's off-diagonal sum."""
    pidx, path_ptr, hist, hist_off, WP = borrow(pidx), borrow(path_ptr), borrow(hist), borrow(hist_off), borrow(WP)
    WQ, WPP, WPQ, WQQ, tab_off, tab = borrow(WQ), borrow(WPP), borrow(WPQ), borrow(WQQ), borrow(tab_off), borrow(tab)
    for q in range(lo, hi):
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


@items("-(-X.shape[0] // rblock)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def rows_kernel(X, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                leaf_value, tab_off, tab, mode, pair_k, interactions, copy, M1, rblock, out, lo, hi):
    """Over the paths ``pidx``: values (``interactions`` false, ``out`` (n, M+1, K)): out[i, feature[t], k] +=
    leaf_value[p, k] * tab[p][pattern of row i on p][t]; interactions (``out`` (n, (M+1)^2, K), the flattened
    (n, M+1, M+1, K)): out[i, f1 * M1 + f2, k] += leaf_value[p, k] * tab[p][pattern][t1, t2]. Rows in blocks of
    ``rblock`` (row_block), transposed; with ``copy`` (``copies_output``: values always, interactions where it fits)
    they sum in a feature-major copy of the block's output (loaded from and stored back to ``out``, so each entry
    still sums its paths in order), else in place. Values of
    a sibling pair (``mode`` 1 for its left path, 2 for its right) come from the left path's combined table, leaf
    values folded in, into output ``pair_k``."""
    X, pidx, path_ptr, feature, lower = borrow(X), borrow(pidx), borrow(path_ptr), borrow(feature), borrow(lower)
    upper, missing_ok, cat_ptr, cat_nwords = borrow(upper), borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, leaf_value = borrow(cat_words), borrow(cat_outside), borrow(leaf_value)
    tab_off, tab, mode, pair_k, out = borrow(tab_off), borrow(tab), borrow(mode), borrow(pair_k), borrow(out)
    n, M = X.shape
    K = leaf_value.shape[1]
    W = out.shape[1]
    for b in range(lo, hi):
        i0 = b * rblock
        i1 = min(n, i0 + rblock)
        nb = i1 - i0
        XT = np.empty((M, rblock))
        _transpose_block(X, i0, i1, XT)
        pat = np.empty(rblock, np.int64)
        acc = np.empty((0, 0, 0))
        if copy:
            acc = np.empty((W, K, rblock))
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
            width = m * m if interactions else m
            for i in range(nb):
                pat[i] = to + pat[i] * width          # the row's table row
            if mode[p] == 1:
                for t in range(m):
                    dst = acc[feature[s + t], pair_k[p]]
                    for i in range(nb):
                        dst[i] += tab[pat[i] + t]
                continue
            if copy:
                for t1 in range(m if interactions else 1):
                    f1 = feature[s + t1] * M1 if interactions else 0
                    for t2 in range(m):
                        f2 = f1 + feature[s + t2]
                        o = t1 * m + t2 if interactions else t2
                        for k in range(K):
                            v = leaf_value[p, k]
                            if v == 0.0:
                                continue
                            dst = acc[f2, k]
                            for i in range(nb):
                                dst[i] += tab[pat[i] + o] * v
                continue
            for i in range(nb):
                base = pat[i]
                for t1 in range(m):
                    f1 = feature[s + t1] * M1
                    for t2 in range(m):
                        c = tab[base + t1 * m + t2]
                        f2 = f1 + feature[s + t2]
                        for k in range(K):
                            v = leaf_value[p, k]
                            if v != 0.0:
                                out[i0 + i, f2, k] += c * v
        if copy:
            for i in range(nb):
                for f in range(W):
                    for k in range(K):
                        out[i0 + i, f, k] = acc[f, k, i]


@items("len(pidx)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def background_patterns(R, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words,
                        cat_outside, out, lo, hi):
    """out[q, j]: the fail set (complement of the pattern) of background row j on path pidx[q]."""
    R, pidx, path_ptr, feature, lower = borrow(R), borrow(pidx), borrow(path_ptr), borrow(feature), borrow(lower)
    upper, missing_ok, cat_ptr, cat_nwords = borrow(upper), borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, out = borrow(cat_words), borrow(cat_outside), borrow(out)
    nR = R.shape[0]
    for q in range(lo, hi):
        p = pidx[q]
        s = path_ptr[p]
        m = path_ptr[p + 1] - s
        full = (np.int64(1) << m) - 1
        for j in range(nR):
            out[q, j] = full ^ _pattern(R[j], s, m, feature, lower, upper, missing_ok, cat_ptr, cat_nwords,
                                        cat_words, cat_outside)


@items("-(-X.shape[0] // _ROW_BLOCK)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def sparse_rows(X, pidx, path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords, cat_words, cat_outside,
                leaf_value, fs_ptr, fs_set, fs_w, total, WP, WQ, WPP, WPQ, WQQ, interactions, out, lo, hi):
    """Long paths: each explained row against the distinct background fail sets fs_set[fs_ptr[q]:fs_ptr[q+1]] of
    path pidx[q] (weights fs_w, ascending sets). ``out`` is (n, M+1, K) for values, (n, M+1, M+1, K) flattened to
    (n, (M+1)^2, K) for interactions (``interactions`` true)."""
    X, pidx, path_ptr, feature, lower = borrow(X), borrow(pidx), borrow(path_ptr), borrow(feature), borrow(lower)
    upper, missing_ok, cat_ptr, cat_nwords = borrow(upper), borrow(missing_ok), borrow(cat_ptr), borrow(cat_nwords)
    cat_words, cat_outside, leaf_value = borrow(cat_words), borrow(cat_outside), borrow(leaf_value)
    fs_ptr, fs_set, fs_w, WP, WQ = borrow(fs_ptr), borrow(fs_set), borrow(fs_w), borrow(WP), borrow(WQ)
    WPP, WPQ, WQQ, out = borrow(WPP), borrow(WPQ), borrow(WQQ), borrow(out)
    n = X.shape[0]
    K = leaf_value.shape[1]
    M1 = int(np.sqrt(out.shape[1])) if interactions else out.shape[1]
    maxd = 0
    for q in range(len(pidx)):
        maxd = max(maxd, path_ptr[pidx[q] + 1] - path_ptr[pidx[q]])
    for b in range(lo, hi):
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


@items("len(pidx)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def mirror_histograms(pidx, path_ptr, mode, pair_bit, hist_off, hist, lo, hi):
    """The histogram of each right sibling (``mode`` 2): the left's with the split element's bit flipped."""
    pidx, path_ptr, mode, pair_bit = borrow(pidx), borrow(path_ptr), borrow(mode), borrow(pair_bit)
    hist_off, hist = borrow(hist_off), borrow(hist)
    for q in range(lo, hi):
        p = pidx[q]
        if mode[p] != 1:
            continue
        m = path_ptr[p + 1] - path_ptr[p]
        b = np.int64(1) << pair_bit[p]
        hl = hist_off[p]
        hr = hist_off[p + 1]
        for s in range(np.int64(1) << m):
            hist[hr + s] = hist[hl + (s ^ b)]


@items("len(pidx)")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def combine_pairs(pidx, path_ptr, mode, pair_bit, pair_k, leaf_value, tab_off, tab, lo, hi):
    """The left table of each sibling pair becomes left * v_left + right(pattern with the split bit flipped) *
    v_right, for output pair_k."""
    pidx, path_ptr, mode, pair_bit = borrow(pidx), borrow(path_ptr), borrow(mode), borrow(pair_bit)
    pair_k, leaf_value, tab_off, tab = borrow(pair_k), borrow(leaf_value), borrow(tab_off), borrow(tab)
    for q in range(lo, hi):
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
