"""Numba tree-walking kernel for interventional TreeSHAP: per (x, r) pair, only the nodes x or r reaches."""
from __future__ import annotations

import numba
import numpy as np

from .. import _background, _registry
from .._items import borrow, items
from ._cpu_kernels import _transform

# the warm-up groups that compile these kernels (their Numba cache entries ship with hitml)
_background.prepare_numba_module()      # the compile notice; the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap-transforms",))

_PAIR_BUFFER = 1 << 15  # float64 terms buffered per task for non-identity transforms


@numba.njit(inline="always")
def _child(v, t, node, nodes, thr, ncp, ncn, words):
    """The child value ``v`` goes to at internal ``node`` of tree ``t`` (-1: NaN with no usable default)."""
    if v != v:  # noqa: PLR0124 - v != v is the NaN test of this numba kernel
        return nodes[t, node, 2]
    if nodes[t, node, 3] < 0:  # categorical
        nw = ncn[t, node]
        if v >= 0.0 and v < 32.0 * nw:
            c = np.int64(v)
            if (words[ncp[t, node] + c // 32] >> np.uint32(c % 32)) & np.uint32(1):
                return nodes[t, node, 0]
        return nodes[t, node, 1]
    if v <= thr[t, node]:
        return nodes[t, node, 0]
    return nodes[t, node, 1]


@numba.njit(inline="always")
def _walk_tree(t, xrow, rrow, nodes, thr, vals, ncp, ncn, words, W, side, afeat, st_node, st_len, st_feat, mx, mr,
               dst):
    """Walk tree ``t`` for the pair (x, r): leaves add to ``mx``/``mr`` (margins) and SHAP terms to ``dst[f]``."""
    K = vals.shape[1]
    top = 1
    st_node[0] = 0
    st_len[0] = 0
    st_feat[0] = -1
    alen = 0
    nx = 0
    nr = 0
    while top > 0:
        top -= 1
        node = st_node[top]
        while alen > st_len[top]:  # undo what the branch just finished had fixed
            alen -= 1
            f = afeat[alen]
            if side[f] == 1:
                nx -= 1
            else:
                nr -= 1
            side[f] = 0
        f = st_feat[top]
        if f >= 0:  # the r side of a branch on f
            side[f] = 2
            afeat[alen] = f
            alen += 1
            nr += 1
        while node >= 0 and nodes[t, node, 0] >= 0:
            f = nodes[t, node, 3]
            if f < 0:
                f = -1 - f
            sf = side[f]
            if sf == 1:
                node = _child(xrow[f], t, node, nodes, thr, ncp, ncn, words)
                continue
            if sf == 2:
                node = _child(rrow[f], t, node, nodes, thr, ncp, ncn, words)
                continue
            cx = _child(xrow[f], t, node, nodes, thr, ncp, ncn, words)
            cr_ = _child(rrow[f], t, node, nodes, thr, ncp, ncn, words)
            if cx == cr_:
                node = cx
                continue
            if cr_ >= 0:  # r's side waits on the stack
                st_node[top] = cr_
                st_len[top] = alen
                st_feat[top] = f
                top += 1
            side[f] = 1
            afeat[alen] = f
            alen += 1
            nx += 1
            node = cx
        if node < 0:
            continue
        leaf = nodes[t, node, 1]
        if nr == 0:
            for k in range(K):
                mx[k] += vals[leaf, k]
        if nx == 0:
            for k in range(K):
                mr[k] += vals[leaf, k]
            if nr == 0:
                continue
        nd = nx + nr
        wpos = W[nx - 1, nd] if nx > 0 else 0.0
        wneg = -W[nx, nd] if nr > 0 else 0.0
        for a in range(alen):
            f = afeat[a]
            wt = wpos if side[f] == 1 else wneg
            for k in range(K):
                dst[f, k] += wt * vals[leaf, k]
    while alen > 0:  # leave side clean for the next walk
        alen -= 1
        side[afeat[alen]] = 0


@items("X.shape[0] * n_blocks")
@numba.njit(nogil=True, cache=True, error_model="numpy")
def tree_walk_kernel(X, R, y, code, n_blocks, nodes, thr, vals, ncp, ncn, words, base_offset, W, wr, part, lo, hi):
    """part[i * n_blocks + b] = sum over background rows r of block b of the (rescaled) SHAP of (x_i, r).

    For each tree, a depth-first walk follows x and r together; where they split on a feature not yet fixed on the
    walk, it branches (the feature taken from x on one side, from r on the other); a feature fixed earlier on the
    walk sends both to the side it was fixed to. A leaf reached with nx features from x and nr from r credits
    ``W[nx-1, nx+nr] * v`` to each x feature and ``-W[nx, nx+nr] * v`` to each r feature (shap's dense_independent).
    Column M collects the (transformed) prediction on r. Trees are looped outside background rows (a tree stays in
    cache); other transforms than identity, and weighted background rows (``wr``, all 1.0 for none), buffer each
    pair's terms until its margins are complete; the caller divides by the total weight.
    """
    X, R, y, nodes, thr, vals = borrow(X), borrow(R), borrow(y), borrow(nodes), borrow(thr), borrow(vals)
    ncp, ncn, words, base_offset, W = borrow(ncp), borrow(ncn), borrow(words), borrow(base_offset), borrow(W)
    wr, part = borrow(wr), borrow(part)
    n, M = X.shape
    nR = R.shape[0]
    T, N = thr.shape
    K = vals.shape[1]
    bsize = (nR + n_blocks - 1) // n_blocks
    weighted = False
    for j in range(nR):
        if wr[j] != 1.0:
            weighted = True
    for task in range(lo, hi):
        i = task // n_blocks
        j0 = min(nR, (task % n_blocks) * bsize)
        j1 = min(nR, j0 + bsize)
        acc = part[task]
        xrow = X[i]
        yi = y[i]
        side = np.zeros(M, np.int8)
        afeat = np.empty(min(M, N) + 1, np.int64)
        st_node = np.empty(N + 1, np.int64)
        st_len = np.empty(N + 1, np.int64)
        st_feat = np.empty(N + 1, np.int64)
        # one call site of the (inlined) tree walk for both cases (its body is pasted once): the identity,
        # unweighted, sums every pair straight into acc (dst = part[task:task + 1]) and one margin row as it goes
        # (step 0); other transforms buffer sub-blocks of pairs in tmp until their margins are complete
        ident = code == 0 and not weighted
        B = max(1, j1 - j0) if ident else max(1, min(j1 - j0, _PAIR_BUFFER // max(M * K, 1)))
        step = 0 if ident else 1
        tmp = np.zeros((1 if ident else B, M, K))
        dst = part[task:task + 1] if ident else tmp
        mx = np.zeros((1 if ident else B, K))
        mr = np.zeros((1 if ident else B, K))
        for s0 in range(j0, j1, B):
            s1 = min(j1, s0 + B)
            if not ident:
                for jj in range(s1 - s0):
                    for k in range(K):
                        mx[jj, k] = base_offset[k]
                        mr[jj, k] = base_offset[k]
            for t in range(T):
                for j in range(s0, s1):
                    jj = (j - s0) * step
                    _walk_tree(t, xrow, R[j], nodes, thr, vals, ncp, ncn, words, W, side, afeat, st_node, st_len,
                               st_feat, mx[jj], mr[jj], dst[jj])
            if ident:
                continue
            for jj in range(s1 - s0):
                for k in range(K):
                    a_, b_ = mx[jj, k], mr[jj, k]
                    wj = wr[s0 + jj]
                    rescale = wj
                    if code != 0 and a_ != b_:
                        rescale = (_transform(code, a_, yi) - _transform(code, b_, yi)) / (a_ - b_) * wj
                    for f in range(M):
                        acc[f, k] += tmp[jj, f, k] * rescale
                        tmp[jj, f, k] = 0.0
                    acc[M, k] += _transform(code, b_, 0.0) * wj
        if ident:
            for k in range(K):
                acc[M, k] += mr[0, k] + (j1 - j0) * base_offset[k]
