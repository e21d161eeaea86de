"""Root-to-leaf path extraction from shap TreeEnsemble dense arrays into a flat, merged PathSet."""
from __future__ import annotations

import sys
from dataclasses import dataclass, replace

import numpy as np

from .. import _registry
from ._walk_codes import (EV_DOWN, EV_EDGE_LEAF, EV_LEAF, EV_UP, PROGRAM_MAX_LEVELS,  # noqa: F401 -- their home
                          PROGRAM_MAX_Q, PROGRAM_MIN_REACH)

__all__ = ["DenseTrees", "PathSet", "extract_paths", "program_split", "tree_events", "tree_program", "walk_program"]

# a process that has not imported Numba (a GPU user's) walks ensembles of at most this many dense nodes (trees x
# nodes per tree) with NumPy (``_walk_numpy``), which takes up to about 0.3 s there, instead of loading Numba (about
# 0.5 s) for ``_path_walk``; both give the same arrays
NUMPY_WALK_NODES = 1 << 18


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
    from . import _path_walk

    return _path_walk.walk_program(np.ascontiguousarray(trees.nodes),
                                   np.ascontiguousarray(trees.thresholds, dtype=np.float64),
                                   np.ascontiguousarray(trees.zero, dtype=np.float64), n_features, fold_leaves, split)


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


def _walk_numpy(cl, cr, cd, feat, thr, cover, is_cat, node_cat_ptr, node_cat_nwords, node_words):
    """``_walk``'s paths with NumPy only (nothing to compile or load): the same arrays, element for element, or
    None where the node arrays are not a forest (more walks than nodes: a node with two parents or a cycle), which
    ``_walk`` then takes (it walks the former, and names the latter).

    The trees are expanded level by level from their roots; a leaf's depth-first (left first) rank within its
    tree is the order of its sides read as bits from the root; each path's splits are then merged by feature in a
    stable sort, and every merge runs over a group's splits in root-to-leaf order, as ``_walk``'s loop does."""
    T, N = cl.shape
    tree = np.arange(T, dtype=np.int64)
    node = np.zeros(T, np.int64)
    anc = np.zeros((T, 0), np.int64)           # the ancestors of each walk, root first
    went_left = np.zeros((T, 0), np.bool_)
    found = []
    depth = 0
    while tree.size:
        leaf = cl[tree, node] < 0
        if leaf.any():
            found.append((tree[leaf], node[leaf], anc[leaf], went_left[leaf]))
        inner = ~leaf
        if not inner.any():
            break
        t2, n2 = tree[inner], node[inner]
        if depth >= N or 2 * t2.size > T * N:
            return None
        a2 = np.concatenate([anc[inner], n2[:, None]], axis=1)
        s2 = went_left[inner]
        tree = np.concatenate([t2, t2])
        node = np.concatenate([cl[t2, n2], cr[t2, n2]])
        anc = np.concatenate([a2, a2])
        went_left = np.concatenate([np.c_[s2, np.ones(len(s2), np.bool_)], np.c_[s2, np.zeros(len(s2), np.bool_)]])
        depth += 1
    D = max((a.shape[1] for _t, _n, a, _s in found), default=0)
    P = sum(len(t) for t, _n, _a, _s in found)
    leaf_tree = np.concatenate([t for t, _n, _a, _s in found]) if found else np.zeros(0, np.int64)
    leaf_node = np.concatenate([n for _t, n, _a, _s in found]) if found else np.zeros(0, np.int64)
    depth_of = np.concatenate([np.full(len(t), a.shape[1], np.int64) for t, _n, a, _s in found]) if found \
        else np.zeros(0, np.int64)
    A = np.zeros((P, D), np.int64)
    L = np.zeros((P, D), np.bool_)
    at = 0
    for t, _n, a, s in found:
        A[at:at + len(t), :a.shape[1]] = a
        L[at:at + len(t), :a.shape[1]] = s
        at += len(t)
    # depth-first rank: the sides as bits, root first, 64 levels to a word (right = 1, so left comes first); no
    # path's sides are a prefix of another's, so two paths differ at a level both reach, and the padding past a
    # path's end never decides
    n_words = max(1, -(-D // 64))
    keys = []
    right = (~L).astype(np.uint64)
    for w in range(n_words):
        word = np.zeros(P, np.uint64)
        for j in range(64 * w, min(D, 64 * w + 64)):
            word |= right[:, j] << np.uint64(63 - (j - 64 * w))
        keys.append(word)
    order = np.lexsort(tuple(reversed(keys)) + (leaf_tree,))
    leaf_tree, leaf_node, depth_of, A, L = leaf_tree[order], leaf_node[order], depth_of[order], A[order], L[order]
    # every (path, split) pair, path after path, root first; then merged by feature (stable: root first in a group)
    live = np.arange(D)[None, :] < depth_of[:, None]
    p_of = np.repeat(np.arange(P, dtype=np.int64), depth_of)
    t_of = leaf_tree[p_of]
    pn = A[live]
    left = L[live]
    f = feat[t_of, pn]
    srt = np.argsort(p_of * (int(f.max(initial=0)) + 1) + f, kind="stable")
    p_of, t_of, pn, left, f = p_of[srt], t_of[srt], pn[srt], left[srt], f[srt]
    n_pairs = len(p_of)
    head = np.ones(n_pairs, np.bool_)
    head[1:] = (p_of[1:] != p_of[:-1]) | (f[1:] != f[:-1])
    start = np.flatnonzero(head)
    E = len(start)
    elem = np.cumsum(head) - 1                     # the element of each pair
    child = np.where(left, cl[t_of, pn], cr[t_of, pn])
    pc = cover[t_of, pn]
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(pc > 0, cover[t_of, child] / np.where(pc > 0, pc, 1.0), 0.0)
    cat = is_cat[t_of, pn]
    th = thr[t_of, pn]
    zero = np.ones(E)
    lower = np.full(E, -np.inf)
    upper = np.full(E, np.inf)
    missing = np.ones(E, np.bool_)
    size = np.diff(np.append(start, n_pairs))
    by_size = np.argsort(-size, kind="stable")     # the elements with more than j splits lead
    n_longer = np.searchsorted(-size[by_size], -np.arange(int(size.max(initial=0))), side="left")
    for j in range(len(n_longer)):                # the j-th split of every element, in root-to-leaf order as _walk
        e = by_size[:n_longer[j]] if j else by_size
        k = start[e] + j
        zero[e] = zero[e] * factor[k]
        missing[e] &= cd[t_of[k], pn[k]] == child[k]
        num = ~cat[k]
        go_hi = num & left[k] & (th[k] < upper[e])        # min(hi, th): th where th < hi
        upper[e[go_hi]] = th[k][go_hi]
        go_lo = num & ~left[k] & (th[k] > lower[e])       # max(lo, th): th where th > lo
        lower[e[go_lo]] = th[k][go_lo]
    has_cat = np.zeros(E, np.bool_)
    has_cat[elem[cat]] = True
    nw = np.zeros(E, np.int64)
    np.maximum.at(nw, elem[cat], node_cat_nwords[t_of[cat], pn[cat]])
    goes_left = np.zeros(E, np.bool_)
    goes_left[elem[cat & left]] = True
    outside = has_cat & ~goes_left
    nw = np.where(has_cat, nw, 0)
    cat_ptr = np.where(has_cat, np.cumsum(nw) - nw, -1).astype(np.int64)
    words = np.full(int(nw.sum()), np.uint32(0xFFFFFFFF), np.uint32)
    kc = np.flatnonzero(cat)
    if kc.size:
        ec = elem[kc]
        own_ptr = node_cat_ptr[t_of[kc], pn[kc]]
        own_nw = node_cat_nwords[t_of[kc], pn[kc]]
        for w in range(int(nw.max())):
            sel = w < nw[ec]
            word = np.where(w < own_nw, node_words[np.where(w < own_nw, own_ptr + w, 0)] if node_words.size
                            else np.uint32(0), np.uint32(0)).astype(np.uint32)
            word = np.where(left[kc], word, ~word)
            np.bitwise_and.at(words, cat_ptr[ec[sel]] + w, word[sel])
    path_ptr = np.zeros(P + 1, np.int64)
    path_ptr[1:] = np.cumsum(np.bincount(p_of[start], minlength=P))
    return (path_ptr, f[start].astype(np.int32), lower, upper, missing, cat_ptr, nw.astype(np.int32), words, outside,
            zero, leaf_node, leaf_tree.astype(np.int32))


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

    walked = None
    if T * N <= NUMPY_WALK_NODES and "numba" not in sys.modules:
        walked = _walk_numpy(cl, cr, cd, ft, th, cov, is_cat, ncp, ncn, nwords)
    if walked is None:
        from . import _path_walk

        walked = _path_walk.walk(cl, cr, cd, ft, th, cov, is_cat, ncp, ncn, nwords)
    (path_ptr, feature, lower, upper, missing_ok, cat_ptr, cat_nw, cat_words, outside, zero, leaf_node,
     tree) = walked
    P = len(leaf_node)
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
def _tiny_arrays() -> tuple:
    """Two trees' node arrays with a categorical split: ``extract_paths``'s arguments ``(children_left,
    children_right, features, thresholds, values, node_sample_weight, categories)``, the defaults left."""
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
    return cl, cr, ft, th, val, cov, (is_cat, ptr, nw, np.array([0b101], np.uint32))


def _tiny_paths() -> PathSet:
    """A two-tree PathSet with a categorical split, built by ``extract_paths`` (so it carries dense trees)."""
    cl, cr, ft, th, val, cov, cats = _tiny_arrays()
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
    """Path extraction (``extract_paths``, and the Numba walk it takes for large ensembles), which the CPU and the
    GPU engine both run, and the walk program the GPU's per-tree kernel runs."""
    from . import _path_walk

    ps = _tiny_paths()
    cl, cr, ft, th, _val, cov, (is_cat, ptr, nw, words) = _tiny_arrays()
    cl, cr, ft, ptr, nw = (np.ascontiguousarray(a, dtype=np.int64) for a in (cl, cr, ft, ptr, nw))
    _path_walk.walk(cl, cr, cl, ft, th.astype(np.float64), cov.astype(np.float64), is_cat, ptr, nw, words)
    tree_program(ps.trees, ps.n_features)
    walk_program(ps.trees, ps.n_features, split=1)


_registry.register_warmup("treeshap-paths", _warm_paths)
