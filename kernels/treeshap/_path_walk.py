"""The Numba kernels of path extraction (``_walk``) and of the per-tree walk program (``_tree_program``), which
``paths.py`` calls. Kept apart so that a process which only extracts the paths of an ensemble small enough for
``paths._walk_numpy`` (a GPU build, for one) never imports Numba."""
from __future__ import annotations

import numba
import numpy as np

from .. import _background, _registry
from ._walk_codes import EV_DOWN, EV_EDGE_LEAF, EV_LEAF, EV_UP, PROGRAM_MAX_LEVELS, PROGRAM_MAX_Q, PROGRAM_MIN_REACH

_background.prepare_numba_module()      # the compile notice, and the shipped cache entries before any kernel runs
_registry.register_shipped(__name__, ("treeshap-paths",))   # the warm-up group that compiles these kernels

__all__ = ["walk", "walk_program"]

_ALL_ONES = np.uint32(0xFFFFFFFF)


@numba.njit(cache=True)
def _walk(cl, cr, cd, feat, thr, cover, is_cat, node_cat_ptr, node_cat_nwords, node_words, fill,
          n_paths_out, n_elem_out, n_words_out,
          path_ptr, o_feature, o_lower, o_upper, o_missing, o_catptr, o_catnw, o_words, o_outside, o_zero,
          o_leaf_node, o_tree):
    """Depth-first walk of every tree; at each leaf, merge the path's splits by feature.

    With ``fill=False`` it only counts (paths, merged elements, category words); with ``fill=True`` it writes.
    """
    T, N = cl.shape
    stack_node = np.empty(N + 1, np.int64)
    stack_side = np.empty(N + 1, np.int64)
    r_feat = np.empty(N + 1, np.int64)
    r_node = np.empty(N + 1, np.int64)
    r_left = np.empty(N + 1, np.bool_)
    order = np.empty(N + 1, np.int64)
    p = 0
    e_out = 0
    w_out = 0
    for t in range(T):
        sp = 0
        stack_node[0] = 0
        stack_side[0] = 0
        while sp >= 0:
            node = stack_node[sp]
            if cl[t, node] < 0:
                # leaf: ancestors are stack_node[0:sp]; side 1 = went left, 2 = went right
                d = sp
                for a in range(d):
                    r_node[a] = stack_node[a]
                    r_feat[a] = feat[t, stack_node[a]]
                    r_left[a] = stack_side[a] == 1
                # stable insertion sort of indices by feature
                for a in range(d):
                    order[a] = a
                for a in range(1, d):
                    key = order[a]
                    b = a - 1
                    while b >= 0 and r_feat[order[b]] > r_feat[key]:
                        order[b + 1] = order[b]
                        b -= 1
                    order[b + 1] = key
                if fill:
                    path_ptr[p] = e_out
                    o_leaf_node[p] = node
                    o_tree[p] = t
                a = 0
                while a < d:
                    f = r_feat[order[a]]
                    b = a
                    while b < d and r_feat[order[b]] == f:
                        b += 1
                    lo = -np.inf
                    hi = np.inf
                    miss = True
                    z = 1.0
                    has_cat = False
                    nw = 0
                    outside = True
                    for q in range(a, b):
                        k = order[q]
                        pn = r_node[k]
                        child = cl[t, pn] if r_left[k] else cr[t, pn]
                        pc = cover[t, pn]
                        z *= cover[t, child] / pc if pc > 0 else 0.0
                        miss = miss and (cd[t, pn] == child)
                        if is_cat[t, pn]:
                            has_cat = True
                            nw = max(nw, node_cat_nwords[t, pn])
                            if r_left[k]:
                                outside = False
                        else:
                            th = thr[t, pn]
                            if r_left[k]:
                                hi = min(hi, th)
                            else:
                                lo = max(lo, th)
                    if fill:
                        o_feature[e_out] = f
                        o_lower[e_out] = lo
                        o_upper[e_out] = hi
                        o_missing[e_out] = miss
                        o_zero[e_out] = z
                        o_outside[e_out] = outside if has_cat else False
                        if has_cat:
                            o_catptr[e_out] = w_out
                            o_catnw[e_out] = nw
                            for w in range(nw):
                                acc = _ALL_ONES
                                for q in range(a, b):
                                    k = order[q]
                                    pn = r_node[k]
                                    if not is_cat[t, pn]:
                                        continue
                                    nwn = node_cat_nwords[t, pn]
                                    if w < nwn:
                                        word = node_words[node_cat_ptr[t, pn] + w]
                                    else:
                                        word = np.uint32(0)
                                    if not r_left[k]:
                                        word = ~word
                                    acc &= word
                                o_words[w_out + w] = acc
                        else:
                            o_catptr[e_out] = -1
                            o_catnw[e_out] = 0
                    if has_cat:
                        w_out += nw
                    e_out += 1
                    a = b
                p += 1
                sp -= 1
                continue
            side = stack_side[sp]
            if sp >= N:
                raise ValueError("tree structure has a cycle or is deeper than its node count")
            if side == 0:
                stack_side[sp] = 1
                sp += 1
                stack_node[sp] = cl[t, node]
                stack_side[sp] = 0
            elif side == 1:
                stack_side[sp] = 2
                sp += 1
                stack_node[sp] = cr[t, node]
                stack_side[sp] = 0
            else:
                sp -= 1
    if fill:
        path_ptr[p] = e_out
    n_paths_out[0] = p
    n_elem_out[0] = e_out
    n_words_out[0] = w_out


def walk(cl, cr, cd, feat, thr, cover, is_cat, node_cat_ptr, node_cat_nwords, node_words) -> tuple[np.ndarray, ...]:
    """``_walk`` counted, then written: ``(path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nwords,
    cat_words, cat_outside_ok, zero_fraction, leaf_node, tree)`` (see ``paths.extract_paths``)."""
    counts = [np.zeros(1, np.int64) for _ in range(3)]
    e1 = np.zeros(0, np.int64)
    f1 = np.zeros(0, np.float64)
    b1 = np.zeros(0, np.bool_)
    i32 = np.zeros(0, np.int32)
    u32 = np.zeros(0, np.uint32)
    _walk(cl, cr, cd, feat, thr, cover, is_cat, node_cat_ptr, node_cat_nwords, node_words, False, counts[0],
          counts[1], counts[2], e1, i32, f1, f1, b1, e1, i32, u32, b1, f1, e1, i32)
    P, E, W = (int(c[0]) for c in counts)
    out = (np.zeros(P + 1, np.int64), np.empty(E, np.int32), np.empty(E, np.float64), np.empty(E, np.float64),
           np.empty(E, np.bool_), np.empty(E, np.int64), np.empty(E, np.int32), np.empty(W, np.uint32),
           np.empty(E, np.bool_), np.empty(E, np.float64), np.empty(P, np.int64), np.empty(P, np.int32))
    _walk(cl, cr, cd, feat, thr, cover, is_cat, node_cat_ptr, node_cat_nwords, node_words, True, counts[0],
          counts[1], counts[2], *out)
    return out


@numba.njit(cache=True)
def _class_keep(nodes, leaf_m, src, lo, hi, keep):
    """keep[p, i]: node i of tree src[p] has a leaf below it (itself included) whose path has lo < m <= hi distinct
    features (leaf_m as _tree_program's count pass writes it)."""
    N = nodes.shape[1]
    parent = np.full(N, -1, np.int64)
    for p in range(src.shape[0]):
        t = src[p]
        for i in range(N):
            parent[i] = -1
        for i in range(N):
            if leaf_m[t, i] == -2:                       # a split node the walk from the root reaches
                parent[nodes[t, i, 0]] = i
                parent[nodes[t, i, 1]] = i
        keep[p, :] = False
        for i in range(N):
            m = leaf_m[t, i]
            if m >= 0 and lo[p] < m <= hi[p]:
                j = i
                while j >= 0 and not keep[p, j]:
                    keep[p, j] = True
                    j = parent[j]


@numba.njit(cache=True)
def _tree_program(nodes, thr, zero, n_features, fold, fill, src, every, keep, ok, q_of, levels, n_ev, ev_ptr, evi,
                  evd, leaf_m):
    """Count (``fill`` False: ``ok``, ``q_of``, ``levels``, ``n_ev`` per walk) or write (``fill`` True: the events
    of the walks marked ``ok`` from ``ev_ptr``) the depth-first walk p of tree ``src[p]``, into the children i with
    ``keep[p, i]`` only (a walk over a class of the tree's leaves; the rest of the tree is left out), or into every
    child where ``every``. Where ``leaf_m`` has rows, the count pass also writes leaf_m[t, i]: the number of
    distinct features on the path to leaf i of tree t, -2 for the split nodes the walk enters (``leaf_m`` starts
    at -1).

    Events: DOWN into level d (``evi = (kind | d << 2 | left << 9 | nan_here << 10 | first << 11, feature, previous
    level of the feature on the path or -1, 0)``, ``evd = (threshold, merged zero fraction of the feature before,
    after)``; ``left``: the edge is the split's left child, where ``x <= t`` goes; ``first``: the first child the
    walk enters), LEAF at level d (``evi[1]`` its path index; only a root that is a leaf) and UP from level d (the
    DOWN's fields, ``first << 11`` when it leaves the first child the walk entered); an edge into a leaf is one
    EDGE_LEAF event (DOWN, LEAF and UP together: the DOWN's fields, the leaf's path index in ``evi[3]``) where
    ``fold``, else DOWN, LEAF and UP events. A walk is ``ok`` when the splits it enters are numeric with thresholds
    that are neither NaN nor -inf (where ``x <= t`` and PathSet's bounds could disagree), it has at most
    PROGRAM_MAX_LEVELS levels, at most 2 PROGRAM_MAX_Q merged features on a path, and no path's zero-fraction
    product is below PROGRAM_MIN_REACH without being 0."""
    T, N = src.shape[0], nodes.shape[1]
    track = not fill and leaf_m.shape[0] > 0
    stack = np.empty(N + 1, np.int64)
    stage = np.empty(N + 1, np.int64)
    reach = np.empty(N + 1)
    sv_last = np.empty(N + 1, np.int64)
    sv_z = np.empty(N + 1)
    last = np.full(n_features, -1, np.int64)     # level of the latest edge on each feature on the current path
    zm = np.ones(n_features)                     # merged zero fraction of each feature on the current path
    for p in range(T):
        t = src[p]
        e = ev_ptr[p] if fill else 0
        if fill and not ok[p]:
            continue
        good = True
        sp = 0
        stack[0] = 0
        stage[0] = 0
        reach[0] = 1.0
        distinct = 0
        max_lev = 0
        max_m = 0
        count = 0
        while True:
            node = stack[sp]
            left = nodes[t, node, 0]
            kl = left >= 0 and (every or keep[p, left])
            kr = left >= 0 and (every or keep[p, nodes[t, node, 1]])
            if left >= 0 and stage[sp] < (1 if kl else 0) + (1 if kr else 0):
                if sp >= N:
                    raise ValueError("tree structure has a cycle or is deeper than its node count")
                code = nodes[t, node, 3]
                f = code if code >= 0 else -1 - code
                th = thr[t, node]
                if code < 0 or th != th or th == -np.inf:  # noqa: PLR0124 (NaN test)
                    good = False
                first = stage[sp] == 0
                if first and track:
                    leaf_m[t, node] = -2
                child = left if first and kl else nodes[t, node, 1]
                stage[sp] += 1
                d = sp + 1
                zp = zm[f]
                zn = zp * zero[t, child]
                leaf = fold and nodes[t, child, 0] < 0
                if fill:
                    evi[e, 0] = (EV_EDGE_LEAF if leaf else EV_DOWN) | (d << 2) | ((1 if child == left else 0) << 9) | \
                        ((1 if nodes[t, node, 2] == child else 0) << 10) | ((1 if first else 0) << 11)
                    evi[e, 1] = f
                    evi[e, 2] = last[f]
                    evi[e, 3] = nodes[t, child, 1] if leaf else 0
                    evd[e, 0] = th
                    evd[e, 1] = zp
                    evd[e, 2] = zn
                    e += 1
                count += 1
                if leaf:            # DOWN, LEAF and UP in one event: nothing to stack
                    max_lev = max(max_lev, d)
                    m = distinct + (1 if last[f] < 0 else 0)
                    max_m = max(max_m, m)
                    if track:
                        leaf_m[t, child] = m
                    r = reach[sp] * zero[t, child]
                    if r != 0.0 and r < PROGRAM_MIN_REACH:
                        good = False
                    continue
                sv_last[d] = last[f]
                sv_z[d] = zp
                if last[f] < 0:
                    distinct += 1
                last[f] = d
                zm[f] = zn
                reach[d] = reach[sp] * zero[t, child]
                sp = d
                stack[sp] = child
                stage[sp] = 0
                continue
            if left < 0:
                if fill:
                    evi[e, 0] = EV_LEAF | (sp << 2)
                    evi[e, 1] = nodes[t, node, 1]
                    evi[e, 2] = -1
                    evi[e, 3] = 0
                    evd[e, 0] = 0.0
                    evd[e, 1] = 0.0
                    evd[e, 2] = 0.0
                    e += 1
                count += 1
                max_lev = max(max_lev, sp)
                max_m = max(max_m, distinct)
                if track:
                    leaf_m[t, node] = distinct
                if reach[sp] != 0.0 and reach[sp] < PROGRAM_MIN_REACH:
                    good = False
            if sp == 0:
                break
            d = sp
            parent = stack[d - 1]
            code = nodes[t, parent, 3]
            f = code if code >= 0 else -1 - code
            if fill:
                evi[e, 0] = EV_UP | (d << 2) | ((1 if stage[d - 1] == 1 else 0) << 11)
                evi[e, 1] = f
                evi[e, 2] = sv_last[d]
                evi[e, 3] = 0
                evd[e, 0] = 0.0
                evd[e, 1] = sv_z[d]
                evd[e, 2] = zm[f]
                e += 1
            count += 1
            if sv_last[d] < 0:
                distinct -= 1
            last[f] = sv_last[d]
            zm[f] = sv_z[d]
            sp -= 1
        if not fill:
            q = max(1, (max_m + 1) // 2)
            ok[p] = good and max_lev < PROGRAM_MAX_LEVELS and q <= PROGRAM_MAX_Q
            q_of[p] = q
            levels[p] = max_lev + 1
            n_ev[p] = count


def walk_program(nodes: np.ndarray, thr: np.ndarray, zero: np.ndarray, n_features: int, fold_leaves: bool,
                 split: int) -> tuple[np.ndarray, ...]:
    """``paths.walk_program`` on the dense trees' arrays (``nodes`` (T, N, 4) int32, ``thr`` and ``zero`` (T, N)
    float64, C-contiguous)."""
    M = max(int(n_features), 1)
    fold = bool(fold_leaves)
    T = nodes.shape[0]
    N = nodes.shape[1]
    src = np.arange(T, dtype=np.int64)
    keep = np.ones((1, 1), np.bool_)
    every = True
    ok, q_of, levels, n_ev = (np.zeros(T, t) for t in (np.bool_, np.int64, np.int64, np.int64))
    leaf_m = np.full((T, N) if split > 0 else (0, 0), -1, np.int64)
    no_ev, no_evi, no_evd, no_m = np.zeros(1, np.int64), np.zeros((0, 4), np.int32), np.zeros((0, 3)), leaf_m[:0]
    _tree_program(nodes, thr, zero, M, fold, False, src, every, keep, ok, q_of, levels, n_ev, no_ev, no_evi, no_evd,
                  leaf_m)
    if split > 0 and T:
        longest = leaf_m.max(axis=1)
        big = np.iinfo(np.int64).max
        shortest = np.where(leaf_m >= 0, leaf_m, big).min(axis=1)
        two = (longest > split) & (shortest <= split)
        if two.any():          # the walks of the trees split in two: counted again, each class apart
            src = np.repeat(src, np.where(two, 2, 1))
            second = np.r_[False, src[1:] == src[:-1]]
            first_of_two = np.r_[second[1:], False]
            lo = np.where(second, split, -1).astype(np.int64)
            hi = np.where(first_of_two, split, big).astype(np.int64)
            keep = np.empty((src.size, N), np.bool_)
            _class_keep(nodes, leaf_m, src, lo, hi, keep)
            every = False
            ok, q_of, levels, n_ev = (np.zeros(src.size, t) for t in (np.bool_, np.int64, np.int64, np.int64))
            _tree_program(nodes, thr, zero, M, fold, False, src, every, keep, ok, q_of, levels, n_ev, no_ev, no_evi,
                          no_evd, no_m)
            tree_ok = np.ones(T, np.bool_)      # a tree's walks are taken together or not at all
            np.logical_and.at(tree_ok, src, ok)
            ok &= tree_ok[src]
    ptr = np.zeros(src.size + 1, np.int64)
    ptr[1:] = np.cumsum(np.where(ok, n_ev, 0))
    evi = np.empty((int(ptr[-1]), 4), np.int32)
    evd = np.empty((int(ptr[-1]), 3))
    _tree_program(nodes, thr, zero, M, fold, True, src, every, keep, ok, q_of, levels, n_ev, ptr, evi, evd, no_m)
    return src, ok, q_of.astype(np.int32), levels.astype(np.int32), ptr, evi, evd
