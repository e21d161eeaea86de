"""The background's part of interventional TreeSHAP, computed once: integer fail-set histograms per path.

The pattern decomposition (``_patterns.py``) reads the background only through, for each path, the weight of the
background rows that fail exactly the set ``s`` of the path's conditions. Those weights are integers (counts, or
weights in fixed point), so the histograms of parts of a background add up exactly, in any order, to the whole
one's: a background can be summarised in pieces (row blocks, Dask partitions, GPUs) and the pieces summed. Paths
whose value table fits (``2^d * d <= TABLE_ENTRIES``) keep a dense histogram of 2^d bins; longer paths keep their
distinct fail sets with their summed weights (the sparse form). Everything an explained row needs then comes from
the summary (its tables), so a later call costs only its rows.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, replace

import numpy as np

from . import _patterns as _pat
from .paths import PathSet

__all__ = ["BackgroundSummary", "counted_weights", "dense_paths", "fixed_point_scale", "path_key", "integer_weights",
           "summary_bytes"]


def dense_paths(path_ptr: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """(hist_off (P,) int64, -1 where the path keeps no dense histogram; sparse path indices (Q,) int64; the dense
    histograms' bins in all): a dense histogram for every path whose value table fits (the value plan's short
    paths), the sparse form for longer ones. Paths without conditions (a tree of one leaf) need neither: every row
    reaches their leaf."""
    lens = np.diff(path_ptr).astype(np.int64)
    entries = (np.int64(1) << np.minimum(lens, 62)) * np.maximum(lens, 1)
    dense = (entries <= _pat.TABLE_ENTRIES) & (lens > 0)
    sizes = np.where(dense, np.int64(1) << np.minimum(lens, 62), 0)
    off = np.where(dense, np.cumsum(sizes) - sizes, -1).astype(np.int64)
    return off, np.nonzero(~dense & (lens > 0))[0].astype(np.int64), int(sizes.sum())


def summary_bytes(paths: PathSet) -> int:
    """Bytes of the dense histograms of ``paths`` (the sparse ones add at most 16 bytes per background row and long
    path)."""
    return dense_paths(paths.path_ptr)[2] * 8


def path_key(paths: PathSet) -> str:
    """A fingerprint of the paths' conditions (a summary is valid only for the paths it was counted on)."""
    h = hashlib.blake2b(digest_size=16)
    for a in (paths.path_ptr, paths.feature, paths.lower, paths.upper, paths.missing_ok, paths.cat_ptr,
              paths.cat_nwords, paths.cat_words, paths.cat_outside_ok):
        h.update(np.ascontiguousarray(a).view(np.uint8).tobytes())
    return h.hexdigest()


def fixed_point_scale(total: float) -> int:
    """The exponent k of the fixed point 2^k w in which weights summing to ``total`` add up below 2^62."""
    if not math.isfinite(total):
        raise ValueError("background weights must be finite and non-negative")
    if total <= 0:
        raise ValueError("background weights sum to zero")
    return 61 - math.ceil(math.log2(total))


def integer_weights(weights, n_rows: int, scale: int | None = None) -> np.ndarray | None:
    """Weights as int64 in fixed point 2^scale w (``scale``: of the whole background, where these rows are a part
    of it; None: from these weights' own total); None for unit weights."""
    if weights is None:
        return None
    w = np.asarray(weights, dtype=np.float64).reshape(-1)
    if w.shape[0] != n_rows:
        raise ValueError(f"background weights have {w.shape[0]} values, but the background has {n_rows} rows")
    if not np.all(np.isfinite(w)) or np.any(w < 0):
        raise ValueError("background weights must be finite and non-negative")
    if scale is None:
        scale = fixed_point_scale(float(w.sum()))
    wi = np.rint(np.ldexp(w, scale)).astype(np.int64)
    if wi.sum() <= 0 and w.sum() > 0:
        raise ValueError("background weights sum to zero after scaling")
    return wi


def counted_weights(weights, n_rows: int, scale: int | None = None) -> tuple[np.ndarray | None, int]:
    """(the integer weights, None for unit weights; their exact total): what a summary counts rows with."""
    wint = integer_weights(weights, n_rows, scale)
    return wint, (n_rows if wint is None else int(wint.sum()))


@dataclass
class BackgroundSummary:
    """The fail-set histograms of a background against one PathSet (see the module's docstring).

    ``lens`` (P,): the paths' lengths; ``hist_off`` (P,): each path's first bin in ``hist`` (-1: none); ``hist`` int64 (NumPy, or CuPy where built on
    the GPU); ``sparse_paths`` (Q,) with, per path q, its distinct fail sets ``sparse_sets[sparse_ptr[q]:
    sparse_ptr[q + 1]]`` (ascending) and their weights ``sparse_w``; ``total``: the exact integer sum of the
    weights; ``scale``: the fixed-point exponent of the weights (None: unit weights); ``n_rows``: background rows
    summarised; ``key``: :func:`path_key` of the paths.

    Examples
    --------
    >>> import numpy as np, shap, xgboost
    >>> from hitml.kernels.treeshap import BackgroundSummary, background_summary, extract_paths
    >>> X = np.random.default_rng(0).normal(size=(300, 3)).astype(np.float32)
    >>> model = xgboost.XGBRegressor(n_estimators=3, max_depth=2).fit(X, X[:, 0])
    >>> ens = shap.TreeExplainer(model).model
    >>> paths = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features,
    ...                       ens.thresholds, ens.values, ens.node_sample_weight, ens.base_offset, n_features=3)
    >>> whole = background_summary(paths, X)
    >>> merged = BackgroundSummary.merge([background_summary(paths, X[:100]), background_summary(paths, X[100:])])
    >>> bool((merged.hist == whole.hist).all()), merged.total
    (True, 300)
    """

    key: str
    n_paths: int
    lens: np.ndarray
    hist_off: np.ndarray
    hist: object
    sparse_paths: np.ndarray
    sparse_ptr: object
    sparse_sets: object
    sparse_w: object
    total: int
    scale: int | None
    n_rows: int
    cache: dict = field(default_factory=dict, repr=False, compare=False)

    # -- what a call reads -----------------------------------------------------------------------------------------
    @property
    def total_float(self) -> float:
        return float(self.total)

    def check(self, paths: PathSet) -> None:
        """ValueError unless the summary was counted on ``paths`` (all of the model's trees: a ``tree_limit`` keeps
        a prefix of the paths, whose histograms are a prefix of these)."""
        if paths.n_paths == self.n_paths and self.cache.get("checked") is paths:
            return
        if paths.n_paths == self.n_paths and path_key(paths) == self.key:
            self.cache["checked"] = paths
            return
        raise ValueError("this background summary was computed for other paths (another model, tree_limit or "
                         "feature count); compute it again for these paths")

    def reach(self, paths: PathSet) -> np.ndarray:
        """(P,) float64: the fraction of the background weight that reaches each leaf (fail set empty)."""
        P = paths.n_paths
        lens = np.diff(paths.path_ptr)
        reach = np.where(lens == 0, 1.0, 0.0)
        off = self.hist_off[:P]
        idx = np.nonzero(off >= 0)[0]
        if len(idx):
            h = self.hist[_index(self.hist, off[idx])]
            reach[idx] = _host(h) / self.total_float
        sp = self.sparse_paths[self.sparse_paths < P]
        if len(sp):
            ptr = _host(self.sparse_ptr)
            first = ptr[:len(self.sparse_paths)][self.sparse_paths < P]
            sets = _host(self.sparse_sets[_index(self.sparse_sets, first)])
            w = _host(self.sparse_w[_index(self.sparse_w, first)])
            reach[sp] = np.where(sets == 0, w, 0) / self.total_float
        return reach

    def bias(self, paths: PathSet) -> np.ndarray:
        """(K,): the background's weighted mean of the model's raw output, ``base + sum_leaf reach * value``."""
        return paths.base_offset + self.reach(paths) @ paths.leaf_value

    def sparse_of(self, sel: np.ndarray, xp):
        """(ptr, sets, weights int64) of paths ``sel``, in that order: the stored sparse form, or the nonzero bins of
        a dense histogram (ascending fail sets, as the sparse form keeps them)."""
        sel = np.asarray(sel, np.int64)
        pos = np.full(self.n_paths, -1, np.int64)
        pos[self.sparse_paths] = np.arange(len(self.sparse_paths))
        q = pos[sel]
        dense = q < 0
        sptr = _host(self.sparse_ptr)
        # a gather index per output entry: dense bins first (nonzero ones kept), then the stored sparse entries
        d_off = self.hist_off[sel[dense]]
        d_len = np.int64(1) << self.lens[sel[dense]]
        d_idx = np.repeat(d_off - np.cumsum(d_len) + d_len, d_len) + np.arange(int(d_len.sum()))
        h = self.hist[xp.asarray(d_idx)]
        nz = _host(h != 0)
        d_seg = np.repeat(np.nonzero(dense)[0], d_len)[nz]
        d_set = (d_idx - np.repeat(d_off, d_len))[nz]
        s_a, s_b = sptr[q[~dense]], sptr[q[~dense] + 1]
        s_len = s_b - s_a
        s_idx = np.repeat(s_a - np.cumsum(s_len) + s_len, s_len) + np.arange(int(s_len.sum()))
        s_seg = np.repeat(np.nonzero(~dense)[0], s_len)
        seg = np.concatenate([d_seg, s_seg])
        order = np.argsort(seg, kind="stable")            # by position in sel; within a path, ascending sets
        counts = np.bincount(seg, minlength=len(sel))
        ptr = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        sets = xp.concatenate([xp.asarray(d_set), self.sparse_sets[xp.asarray(s_idx)]])
        ws = xp.concatenate([h[xp.asarray(nz)].astype(xp.int64), self.sparse_w[xp.asarray(s_idx)].astype(xp.int64)])
        order_d = xp.asarray(order)
        return xp.asarray(ptr), sets[order_d].astype(xp.int64), ws[order_d]

    @property
    def nbytes(self) -> int:
        """Bytes held: histograms and sparse fail sets (tables kept for calls are in ``table_bytes``)."""
        return int(_nbytes(self.hist) + _nbytes(self.sparse_sets) + _nbytes(self.sparse_w) + _nbytes(self.sparse_ptr)
                   + self.hist_off.nbytes)

    @property
    def table_bytes(self) -> int:
        return int(sum(v[0] for k, v in self.cache.items() if isinstance(k, tuple)))

    # -- moving and combining --------------------------------------------------------------------------------------
    def to_host(self) -> "BackgroundSummary":
        """The same summary with NumPy arrays (to send, store or sum with others); no table cache."""
        return replace(self, hist=_host(self.hist), sparse_ptr=_host(self.sparse_ptr),
                       sparse_sets=_host(self.sparse_sets), sparse_w=_host(self.sparse_w), cache={})

    def __getstate__(self) -> dict:
        return vars(self.to_host()).copy()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)

    @classmethod
    def merge(cls, parts: list["BackgroundSummary"]) -> "BackgroundSummary":
        """The summary of the union of the parts' background rows (exact integer sums; the result does not depend
        on the order of the parts). All parts must have been counted on the same paths, with the same weight
        scale."""
        parts = [p.to_host() for p in parts]
        if not parts:
            raise ValueError("no background summaries to merge")
        first = parts[0]
        for p in parts[1:]:
            if p.key != first.key or p.n_paths != first.n_paths:
                raise ValueError("background summaries of different paths cannot be merged")
            if p.scale != first.scale:
                raise ValueError("background summaries with different weight scales cannot be merged; pass the "
                                 "whole background's weight total to each part")
        hist = np.zeros_like(first.hist)
        for p in parts:
            hist += p.hist
        Q = len(first.sparse_paths)
        ptr, sets, ws = [0], [], []
        for q in range(Q):
            s = np.concatenate([p.sparse_sets[p.sparse_ptr[q]:p.sparse_ptr[q + 1]] for p in parts])
            w = np.concatenate([p.sparse_w[p.sparse_ptr[q]:p.sparse_ptr[q + 1]] for p in parts])
            u, inv = np.unique(s, return_inverse=True)
            acc = np.zeros(len(u), np.int64)
            np.add.at(acc, inv, w)
            keep = acc != 0
            sets.append(u[keep])
            ws.append(acc[keep])
            ptr.append(ptr[-1] + int(keep.sum()))
        total = sum(int(p.total) for p in parts)
        if total >= 1 << 63:
            raise OverflowError("the merged background's weights overflow 64-bit integers")
        return replace(first, hist=hist, sparse_ptr=np.asarray(ptr, np.int64),
                       sparse_sets=np.concatenate(sets) if sets else np.zeros(0, np.int64),
                       sparse_w=np.concatenate(ws) if ws else np.zeros(0, np.int64), total=total,
                       n_rows=sum(p.n_rows for p in parts), cache={})


def on_host(summary: BackgroundSummary) -> BackgroundSummary:
    """The summary with NumPy arrays: itself, or its host copy (made once, sharing its table cache)."""
    if isinstance(summary.hist, np.ndarray):
        return summary
    host = summary.cache.get("host")
    if host is None:
        host = summary.to_host()
        host.cache = summary.cache
        summary.cache["host"] = host
    return host


def _index(a, idx: np.ndarray):
    """``idx`` as an index of ``a`` (a device array for a CuPy ``a``)."""
    if isinstance(a, np.ndarray):
        return idx
    from ..device import cupy_module

    return cupy_module().asarray(idx)


def _host(a):
    return a.get() if hasattr(a, "get") and not isinstance(a, np.ndarray) else np.asarray(a)


def _nbytes(a) -> int:
    return int(getattr(a, "nbytes", 0))


# tables a summary keeps for later calls, in all (per engine, metric and output form); beyond it a call builds its
# tables from the histograms again (a pass over the histograms, not over the background)
TABLE_CACHE_BYTES = 1 << 30
