"""Root-to-leaf path extraction from shap TreeEnsemble dense arrays into a flat, merged PathSet."""
from __future__ import annotations

from dataclasses import dataclass, replace

import numba
import numpy as np

from .. import _aot, _registry
from .._background import register_compile_notice

register_compile_notice()  # a one-line notice while Numba compiles these kernels (first use only)
_registry.register_shipped(__name__, ("treeshap-paths",))   # the warm-up group that compiles these kernels
# every TreeSHAP module imports this one first: the shipped cache entries are in place before any kernel runs
_aot.seed_numba_cache()

__all__ = ["DenseTrees", "PathSet", "extract_paths", "program_split", "tree_events", "tree_program", "walk_program"]

_ALL_ONES = np.uint32(0xFFFFFFFF)


def path_elements(path_ptr: np.ndarray, pidx: np.ndarray) -> np.ndarray:
    """The element indices of paths ``pidx`` (int64), path after path, each path's in order."""
    starts = path_ptr[pidx]
    lens = path_ptr[pidx + 1] - starts
    return (np.repeat(starts - (np.cumsum(lens) - lens), lens) + np.arange(int(lens.sum()))).astype(np.int64)


@dataclass(frozen=True)
class DenseTrees:
    """The dense node arrays of the trees ``(T, N)`` that ``extract_paths`` got, packed for tree-walking kernels.

    ``nodes[t, i] = (left, right, default, code)``: a leaf has ``left < 0`` and ``right`` = its path's index (its
    value is ``PathSet.leaf_value[right]``); at an internal node ``default`` is the child NaN goes to
    (-1: neither child, NaN reaches no leaf); ``code = f`` is a numeric split on feature ``f`` (``x <= thresholds``
    goes left), ``code = -1 - f`` a categorical split on ``f``: ``x`` goes left iff ``0 <= x``,
    ``c = int(x) < 32 * node_cat_nwords`` and bit ``c % 32`` of ``cat_words[node_cat_ptr + c // 32]`` is set.
    """

    nodes: np.ndarray              # int32 (T, N, 4)
    thresholds: np.ndarray         # float64 (T, N)
    node_cat_ptr: np.ndarray       # int64 (T, N)
    node_cat_nwords: np.ndarray    # int32 (T, N)
    cat_words: np.ndarray          # uint32 (W,)
    zero: np.ndarray | None = None  # float64 (T, N): the zero fraction of the edge into each node (1 at a root)

    @property
    def n_trees(self) -> int:
        return self.nodes.shape[0]

    def restrict(self, tree_limit: int) -> "DenseTrees":
        """The first ``tree_limit`` trees."""
        t = min(int(tree_limit), self.n_trees)
        return replace(self, nodes=self.nodes[:t], thresholds=self.thresholds[:t],
                       node_cat_ptr=self.node_cat_ptr[:t], node_cat_nwords=self.node_cat_nwords[:t],
                       zero=None if self.zero is None else self.zero[:t])


@dataclass(frozen=True)
class PathSet:
    """All root-to-leaf paths of a tree ensemble, one path per leaf, duplicate features merged.

    Element ``e`` of a path is satisfied by a value ``x`` when:

    * ``x`` is NaN: iff ``missing_ok[e]`` (the path follows the default child at every merged split);
    * otherwise iff ``(lower[e] == -inf or lower[e] < x) and x <= upper[e]`` (shap's ``x <= t`` goes left rule;
      ``lower == -inf`` means "no lower bound", so ``x = -inf`` satisfies it), and, when ``cat_ptr[e] >= 0``, the
      category test below also holds.

    Category test: ``c = int(x)`` (truncation). If ``0 <= x`` and ``c < 32 * cat_nwords[e]`` the answer is bit
    ``c % 32`` of ``cat_words[cat_ptr[e] + c // 32]``; otherwise (negative, too large or infinite x) the answer is
    ``cat_outside_ok[e]``. A left child of a categorical node stores the node's LEFT set with
    ``cat_outside_ok = False``; the right child stores its complement (within the stored words) with
    ``cat_outside_ok = True``, so categories beyond the stored bitset go right (XGBoost: categories outside the
    split's set go left only when they are in the LEFT set given by the adapter).

    Paths are ordered by tree, then leaves in depth-first (left first) order, so ``tree_index`` is non-decreasing.
    ``trees`` (optional, set by ``extract_paths``) keeps the dense node arrays for kernels that walk the trees.

    See Also
    --------
    extract_paths : builds it from shap's ``TreeEnsemble`` arrays.
    shap_values : the engine that consumes it.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, shap_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] - X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> paths.n_paths, paths.n_features, paths.n_outputs
    (32, 3, 1)
    """

    n_features: int
    n_outputs: int
    path_ptr: np.ndarray        # int64 (P+1,)
    feature: np.ndarray         # int32 (E,)
    lower: np.ndarray           # float64 (E,)
    upper: np.ndarray           # float64 (E,)
    missing_ok: np.ndarray      # bool (E,)
    cat_ptr: np.ndarray         # int64 (E,), -1 = no categorical constraint
    cat_nwords: np.ndarray      # int32 (E,)
    cat_words: np.ndarray       # uint32 (W,)
    zero_fraction: np.ndarray   # float64 (E,)
    leaf_value: np.ndarray      # float64 (P, K)
    tree_index: np.ndarray      # int32 (P,)
    base_offset: np.ndarray     # float64 (K,)
    input_dtype: np.dtype = np.dtype(np.float64)
    cat_outside_ok: np.ndarray | None = None  # bool (E,): category test result for categories outside the bitset
    trees: DenseTrees | None = None            # dense node arrays of the same trees, when known

    def __post_init__(self) -> None:
        if self.cat_outside_ok is None:
            object.__setattr__(self, "cat_outside_ok", np.zeros(len(self.feature), dtype=bool))

    @property
    def n_paths(self) -> int:
        return len(self.path_ptr) - 1

    @property
    def n_trees(self) -> int:
        return int(self.tree_index[-1]) + 1 if len(self.tree_index) else 0

    @property
    def max_length(self) -> int:
        """Longest merged path (number of stored elements, root excluded)."""
        return int(np.diff(self.path_ptr).max()) if self.n_paths else 0

    def restrict(self, tree_limit: int | None) -> "PathSet":
        """The paths of trees with ``tree_index < tree_limit``; ``None`` keeps every tree."""
        if tree_limit is None:
            return self
        tree_limit = int(tree_limit)
        if tree_limit < 0:
            raise ValueError(f"tree_limit must be None or >= 0, got {tree_limit}")
        p = int(np.searchsorted(self.tree_index, tree_limit, side="left"))
        if p == self.n_paths:
            return self
        e = int(self.path_ptr[p])
        return replace(
            self,
            path_ptr=self.path_ptr[: p + 1],
            feature=self.feature[:e],
            lower=self.lower[:e],
            upper=self.upper[:e],
            missing_ok=self.missing_ok[:e],
            cat_ptr=self.cat_ptr[:e],
            cat_nwords=self.cat_nwords[:e],
            zero_fraction=self.zero_fraction[:e],
            cat_outside_ok=self.cat_outside_ok[:e],
            leaf_value=self.leaf_value[:p],
            tree_index=self.tree_index[:p],
            trees=None if self.trees is None else self.trees.restrict(tree_limit),
        )

    def select(self, keep: np.ndarray) -> "PathSet":
        """The paths where the boolean mask ``keep`` (P,) is true, in their order (category words are shared).

        Its ``bias()`` counts ``base_offset`` and the kept paths only: a caller that splits a PathSet adds the
        parent's bias once.
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (self.n_paths,):
            raise ValueError(f"keep must have shape ({self.n_paths},), got {keep.shape}")
        lens = np.diff(self.path_ptr)[keep]
        ptr = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        idx = path_elements(self.path_ptr, np.flatnonzero(keep))
        return replace(
            self,
            path_ptr=ptr,
            feature=self.feature[idx],
            lower=self.lower[idx],
            upper=self.upper[idx],
            missing_ok=self.missing_ok[idx],
            cat_ptr=self.cat_ptr[idx],
            cat_nwords=self.cat_nwords[idx],
            zero_fraction=self.zero_fraction[idx],
            cat_outside_ok=self.cat_outside_ok[idx],
            leaf_value=self.leaf_value[keep],
            tree_index=self.tree_index[keep],
            trees=None,
        )

    def bias(self, tree_limit: int | None = None) -> np.ndarray:
        """Expected value under cover weighting: base_offset + sum_p prod(zero_fraction_p) * leaf_value_p, (K,)."""
        ps = self.restrict(tree_limit)
        prob = _path_probability(ps.path_ptr, ps.zero_fraction)
        return ps.base_offset + prob @ ps.leaf_value


def _path_probability(path_ptr: np.ndarray, zero_fraction: np.ndarray) -> np.ndarray:
    """The product of each path's zero fractions, multiplied in element order from 1.0 (the bytes of a loop over
    each path), element position by element position across all paths: NumPy only, nothing to compile."""
    start = path_ptr[:-1]
    lens = np.diff(path_ptr)
    out = np.ones(len(lens))
    for j in range(int(lens.max(initial=0))):
        live = np.flatnonzero(lens > j)
        out[live] *= zero_fraction[start[live] + j]
    return out


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


# The per-tree walk program (the GPU's per-tree linear kernel, linear.cu, runs it): events in depth-first order.
EV_DOWN, EV_LEAF, EV_UP, EV_EDGE_LEAF = 0, 1, 2, 3
PROGRAM_MAX_LEVELS = 64      # levels 0..63: the kernel keeps each level's one fraction in a 64-bit mask
PROGRAM_MAX_Q = 32           # Gauss-Legendre nodes of the kernel's rules (a warp's lanes)
PROGRAM_MIN_REACH = 1e-200   # smallest nonzero product of zero fractions on a path: the products of the factors
#                              at the Gauss nodes then stay far from the subnormal range


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


def tree_program(trees: DenseTrees, n_features: int, fold_leaves: bool = True) -> tuple[np.ndarray, ...]:
    """The depth-first walk program of ``trees`` for the per-tree linear kernels (see ``_tree_program``), one walk
    per tree; with ``fold_leaves`` an edge into a leaf is one event.

    Returns
    -------
    tuple
        ``(ok (T,) bool, q_of (T,) int32 Gauss nodes per tree, levels (T,) int32, ev_ptr (T + 1,) int64,
        evi (E, 4) int32, evd (E, 3) float64)``: trees not ``ok`` have no events (``ev_ptr[t] == ev_ptr[t + 1]``).
    """
    return walk_program(trees, n_features, fold_leaves)[1:]


def walk_program(trees: DenseTrees, n_features: int, fold_leaves: bool = True, split: int = 0) \
        -> tuple[np.ndarray, ...]:
    """``tree_program`` with a tree's leaves walked in two classes where ``split`` > 0: the leaves whose paths have
    at most ``split`` distinct features, and the others, each walk entering only the subtrees that hold a leaf of
    its class. Each leaf's term depends on its own path only, so the two walks' values add up to the tree's; the
    walk of the short paths needs only ceil(split / 2) Gauss nodes where the tree's longest path needs more. A tree
    whose leaves all fall in one class keeps one walk.

    Returns
    -------
    tuple
        ``(src (W,) int64 the tree of each walk, ok (W,) bool, q_of (W,) int32, levels (W,) int32, ev_ptr (W + 1,)
        int64, evi (E, 4) int32, evd (E, 3) float64)``; a tree is taken only where all its walks are ``ok``.
    """
    if trees.zero is None:
        raise ValueError("the dense trees carry no edge zero fractions (built by extract_paths)")
    T = trees.n_trees
    nodes = np.ascontiguousarray(trees.nodes)
    thr = np.ascontiguousarray(trees.thresholds, dtype=np.float64)
    zero = np.ascontiguousarray(trees.zero, dtype=np.float64)
    M = max(int(n_features), 1)
    fold = bool(fold_leaves)
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


def tree_outputs(ps: "PathSet") -> np.ndarray:
    """Per tree, the one output its leaves feed (boosted multiclass: a tree per class and round), or -1 where they
    feed more than one (a forest's classifier trees, whose leaves hold every class's value, even when each leaf is
    pure)."""
    nz = ps.leaf_value != 0
    T = ps.n_trees
    if ps.n_outputs == 1:
        return np.zeros(T, np.int64)
    fed = np.zeros((T, ps.n_outputs), bool)
    np.logical_or.at(fed, ps.tree_index, nz)
    n_fed = fed.sum(axis=1)
    return np.where(n_fed == 1, np.argmax(fed, axis=1), np.where(n_fed == 0, 0, -1)).astype(np.int64)


def program_split(ps: "PathSet", fold_leaves: bool = True, split: int = 0) -> tuple:
    """``walk_program`` of ``ps``'s trees, with the walks of the trees it takes that have a split and the other
    trees' paths.

    Returns
    -------
    tuple
        ``(walks (int64, may be empty), src, q_of, levels, ev_ptr, evi, evd, rest)``: ``src`` to ``evd`` as
        ``walk_program`` gives them (indexed by walk), ``rest`` the PathSet of the paths of every other tree (None
        when there are none).
    """
    src, ok, q_of, levels, ptr, evi, evd = walk_program(ps.trees, ps.n_features, fold_leaves, split)
    walks = np.flatnonzero(ok & (ps.trees.nodes[src, 0, 0] >= 0))
    taken = np.zeros(ps.trees.n_trees, bool)
    taken[src[walks]] = True
    keep = ~taken[ps.tree_index]
    return walks, src, q_of, levels, ptr, evi, evd, ps.select(keep) if keep.any() else None


def tree_events(ev_ptr: np.ndarray, trees: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(offsets (len(trees) + 1,), indices into ``tree_program``'s event arrays) of the events of ``trees``,
    gathered tree after tree."""
    counts = ev_ptr[trees + 1] - ev_ptr[trees]
    return np.concatenate([[0], np.cumsum(counts)]).astype(np.int64), path_elements(ev_ptr, trees)


def tree_arrays(children_left, children_right, children_default, features, thresholds, values,
                node_sample_weight) -> tuple[np.ndarray, ...]:
    """shap's TreeEnsemble node arrays checked and made contiguous: (children_left, children_right,
    children_default, features) as int64, (thresholds, node_sample_weight) as float64, values as float64
    (n_trees, max_nodes, K); ValueError naming an array of the wrong shape."""
    cl = np.ascontiguousarray(children_left, dtype=np.int64)
    cr = np.ascontiguousarray(children_right, dtype=np.int64)
    cd = np.ascontiguousarray(children_default, dtype=np.int64)
    ft = np.ascontiguousarray(features, dtype=np.int64)
    th = np.ascontiguousarray(thresholds, dtype=np.float64)
    cov = np.ascontiguousarray(node_sample_weight, dtype=np.float64)
    vals = np.asarray(values, dtype=np.float64)
    if cl.ndim != 2:
        raise ValueError(f"children_left must be 2-D (n_trees, max_nodes), got shape {cl.shape}")
    for name, arr in (("children_right", cr), ("children_default", cd), ("features", ft), ("thresholds", th),
                      ("node_sample_weight", cov)):
        if arr.shape != cl.shape:
            raise ValueError(f"{name} has shape {arr.shape}, expected {cl.shape} like children_left")
    if vals.ndim == 2:
        vals = vals[:, :, None]
    if vals.ndim != 3 or vals.shape[:2] != cl.shape:
        raise ValueError(f"values must have shape (n_trees, max_nodes, K) = {cl.shape + (-1,)}, got {vals.shape}")
    return cl, cr, cd, ft, th, cov, np.ascontiguousarray(vals)


def extract_paths(children_left, children_right, children_default, features, thresholds, values,
                  node_sample_weight, base_offset, *, n_features: int, input_dtype=np.float64,
                  categories=None) -> PathSet:
    """Turn shap ``TreeEnsemble`` dense arrays ``(T, max_nodes)`` (``values``: ``(T, max_nodes, K)``) into a PathSet.

    Rules: ``x <= threshold`` goes left (left child: ``upper = min(upper, t)``; right: ``lower = max(lower, t)``);
    NaN follows ``children_default``; ``zero_fraction = cover(child) / cover(parent)`` (0 where the parent's cover is
    0); repeated features on a path are merged (intervals intersected, zero fractions multiplied, ``missing_ok`` and
    category sets ANDed). ``categories = (is_categorical, node_cat_ptr, node_cat_nwords, cat_words)`` gives for each
    categorical node the bitset of categories that go LEFT (see :class:`PathSet` for categories outside it).
    Only nodes reachable from node 0 are visited; a tree whose root is a leaf gives one path with no elements.

    Parameters
    ----------
    children_left, children_right, children_default, features : numpy.ndarray of int, shape (T, max_nodes)
        shap ``TreeEnsemble`` node arrays (-1 for a leaf's children).
    thresholds : numpy.ndarray of float, shape (T, max_nodes)
        Split thresholds.
    values : numpy.ndarray of float, shape (T, max_nodes, K)
        Node values (leaves are used).
    node_sample_weight : numpy.ndarray of float, shape (T, max_nodes)
        Node covers.
    base_offset : float or array-like of shape (K,)
        The model's base value (added to the bias column).
    n_features : int
        Number of input features M.
    input_dtype : numpy dtype, default float64
        The dtype rows are compared in (float32 for XGBoost and scikit-learn, as those libraries do).
    categories : tuple, optional
        ``(is_categorical, node_cat_ptr, node_cat_nwords, cat_words)``, as above.

    Returns
    -------
    PathSet

    See Also
    --------
    shap.explainers._tree.TreeEnsemble : the parsed model whose arrays it takes.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import extract_paths, shap_values
    >>> X = np.random.default_rng(0).normal(size=(200, 3))
    >>> model = xgboost.XGBRegressor(n_estimators=4, max_depth=3).fit(X, X[:, 0] - X[:, 2])
    >>> ens = shap.TreeExplainer(model).model                     # shap's TreeEnsemble: dense node arrays
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> phi = shap_values(paths, X[:5])                            # (5, M + 1, K), bias in column M
    >>> bool(np.allclose(phi.sum(1)[:, 0], model.predict(X[:5], output_margin=True), atol=1e-5))
    True
    """
    cl, cr, cd, ft, th, cov, vals = tree_arrays(children_left, children_right, children_default, features, thresholds,
                                                values, node_sample_weight)
    K = vals.shape[2]
    base = np.broadcast_to(np.asarray(base_offset, dtype=np.float64).reshape(-1), (K,)).copy()
    T, N = cl.shape
    if categories is None:
        is_cat = np.zeros((T, N), dtype=np.bool_)
        ncp = np.zeros((T, N), dtype=np.int64)
        ncn = np.zeros((T, N), dtype=np.int64)
        nwords = np.zeros(0, dtype=np.uint32)
    else:
        is_cat_, ncp_, ncn_, nwords_ = categories
        is_cat = np.ascontiguousarray(is_cat_, dtype=np.bool_)
        ncp = np.ascontiguousarray(ncp_, dtype=np.int64)
        ncn = np.ascontiguousarray(ncn_, dtype=np.int64)
        nwords = np.ascontiguousarray(nwords_, dtype=np.uint32)
        for name, arr in (("is_categorical", is_cat), ("node_cat_ptr", ncp), ("node_cat_nwords", ncn)):
            if arr.shape != cl.shape:
                raise ValueError(f"categories: {name} has shape {arr.shape}, expected {cl.shape}")
        sel = is_cat & (cl >= 0)
        if np.any(ncn[sel] < 0) or np.any(ncp[sel] < 0) or np.any(ncp[sel] + ncn[sel] > len(nwords)):
            raise ValueError("categories: node_cat_ptr/node_cat_nwords point outside cat_words")
    internal = cl >= 0
    if np.any(internal & ((ft < 0) | (ft >= n_features))):
        bad = ft[internal & ((ft < 0) | (ft >= n_features))][0]
        raise ValueError(f"split feature index {bad} is outside [0, n_features={n_features})")
    if np.any(internal & ((cr < 0) | (cr >= N) | (cl >= N))):
        raise ValueError("internal node with an invalid child index")

    counts = [np.zeros(1, np.int64) for _ in range(3)]
    e1 = np.zeros(0, np.int64)
    f1 = np.zeros(0, np.float64)
    b1 = np.zeros(0, np.bool_)
    i32 = np.zeros(0, np.int32)
    u32 = np.zeros(0, np.uint32)
    _walk(cl, cr, cd, ft, th, cov, is_cat, ncp, ncn, nwords, False, counts[0], counts[1], counts[2],
          e1, i32, f1, f1, b1, e1, i32, u32, b1, f1, e1, i32)
    P, E, W = (int(c[0]) for c in counts)
    path_ptr = np.zeros(P + 1, np.int64)
    feature = np.empty(E, np.int32)
    lower = np.empty(E, np.float64)
    upper = np.empty(E, np.float64)
    missing_ok = np.empty(E, np.bool_)
    cat_ptr = np.empty(E, np.int64)
    cat_nw = np.empty(E, np.int32)
    cat_words = np.empty(W, np.uint32)
    outside = np.empty(E, np.bool_)
    zero = np.empty(E, np.float64)
    leaf_node = np.empty(P, np.int64)
    tree = np.empty(P, np.int32)
    _walk(cl, cr, cd, ft, th, cov, is_cat, ncp, ncn, nwords, True, counts[0], counts[1], counts[2],
          path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nw, cat_words, outside, zero, leaf_node, tree)
    leaf_value = np.ascontiguousarray(vals[tree.astype(np.int64), leaf_node, :])
    # a default child that is neither child: NaN satisfies no path element there, so NaN reaches no leaf (-1)
    nodes = np.empty((T, N, 4), np.int32)
    nodes[..., 0] = np.where(internal, cl, -1)
    nodes[..., 1] = cr
    nodes[tree, leaf_node, 1] = np.arange(P)
    nodes[..., 2] = np.where(internal & (cd != cl) & (cd != cr), -1, cd)
    nodes[..., 3] = np.where(is_cat & internal, -1 - ft, ft)
    # the edge zero fractions as _walk computes them: cover(child) / cover(parent), 0 where the parent's cover is 0
    edge_zero = np.ones((T, N))
    tt, nn = np.nonzero(internal)
    pc = cov[tt, nn]
    safe = np.where(pc > 0, pc, 1.0)
    for child in (cl[tt, nn], cr[tt, nn]):
        edge_zero[tt, child] = np.where(pc > 0, cov[tt, child] / safe, 0.0)
    trees = DenseTrees(nodes=nodes, thresholds=th, node_cat_ptr=ncp,
                       node_cat_nwords=np.ascontiguousarray(ncn, dtype=np.int32), cat_words=nwords,
                       zero=edge_zero)
    return PathSet(n_features=int(n_features), n_outputs=int(K), path_ptr=path_ptr, feature=feature, lower=lower,
                   upper=upper, missing_ok=missing_ok, cat_ptr=cat_ptr, cat_nwords=cat_nw, cat_words=cat_words,
                   zero_fraction=zero, leaf_value=leaf_value, tree_index=tree, base_offset=base,
                   input_dtype=np.dtype(input_dtype), cat_outside_ok=outside, trees=trees)


# ------------------------------------------------------------------------------------------------------- warm-up
def _tiny_paths() -> PathSet:
    """A two-tree PathSet with a categorical split, built by ``extract_paths`` (so it carries dense trees)."""
    cl = np.array([[1, 3, 5, -1, -1, -1, -1], [1, -1, -1, -1, -1, -1, -1]])
    cr = np.array([[2, 4, 6, -1, -1, -1, -1], [2, -1, -1, -1, -1, -1, -1]])
    ft = np.array([[0, 1, 2, -1, -1, -1, -1], [2, -1, -1, -1, -1, -1, -1]])
    th = np.array([[0.5, 0.5, 0.5, 0, 0, 0, 0], [0.5, 0, 0, 0, 0, 0, 0.0]])
    cov = np.array([[8, 4, 4, 2, 2, 1, 3], [8, 5, 3, 0, 0, 0, 0.0]])
    val = np.array([[0, 0, 0, -1, 1, 2, 0.5], [0, 1, -1, 0, 0, 0, 0.0]])[:, :, None]
    is_cat = np.zeros(cl.shape, bool)
    is_cat[1, 0] = True
    ptr = np.full(cl.shape, -1, np.int64)
    ptr[1, 0] = 0
    nw = np.zeros(cl.shape, np.int32)
    nw[1, 0] = 1
    cats = (is_cat, ptr, nw, np.array([0b101], np.uint32))
    return extract_paths(cl, cr, cl, ft, th, val, cov, np.zeros(1), n_features=3, categories=cats)


def _hand_paths() -> PathSet:
    """A two-path PathSet built by hand (no path extraction to compile first), with a categorical element: the
    quadrature kernels' argument types are those of every real PathSet."""
    return PathSet(n_features=3, n_outputs=1, path_ptr=np.array([0, 2, 3], np.int64),
                   feature=np.array([0, 1, 2], np.int32), lower=np.array([-np.inf, 0.5, -np.inf]),
                   upper=np.array([0.5, np.inf, 1.0]), missing_ok=np.array([True, False, False]),
                   cat_ptr=np.array([-1, -1, 0], np.int64), cat_nwords=np.array([0, 0, 1], np.int32),
                   cat_words=np.array([0b101], np.uint32), zero_fraction=np.array([0.5, 0.25, 0.625]),
                   leaf_value=np.array([[1.0], [-2.0]]), tree_index=np.array([0, 1], np.int32),
                   base_offset=np.zeros(1))


def _warm_paths() -> None:
    """Path extraction (``extract_paths``), which the CPU and the GPU engine both run, and the walk program the
    GPU's per-tree kernel runs."""
    ps = _tiny_paths()
    tree_program(ps.trees, ps.n_features)
    walk_program(ps.trees, ps.n_features, split=1)


_registry.register_warmup("treeshap-paths", _warm_paths)
