"""CPU TreeSHAP engine (Numba, parallel over row blocks, float64): path-dependent, interventional, interactions."""
from __future__ import annotations

import mmap
import weakref
from dataclasses import dataclass
from typing import ClassVar

import numba
import numpy as np

from .. import _background, _registry
from .._options import Options
from .._progress import check_progress, progress_bar
from . import _cpu_interventional as _kw
from . import _path_walk  # noqa: F401 -- the engine takes Numba's path walk: its shipped entries are declared with it
from . import _cpu_linear as _lin
from . import _cpu_kernels as _k
from . import _cpu_patterns as _kp
from . import _patterns as _pat
from . import _summary as _sum
from . import _cpu_quad as _q
from . import _cpu_tables as _t
from ._inputs import as_model_input, check_matrix, check_transform, check_tree_limit
from .paths import PathSet, _hand_paths, _tiny_paths, program_split, tree_events, tree_outputs

expect_cpu_engine = _background.expect_cpu_engine

__all__ = ["shap_values", "interaction_values", "interventional_shap_values", "interventional_interaction_values",
           "interventional_banzhaf_values", "options", "CpuOptions"]

_CHUNK_WORK = 2e8          # element-operations per chunk of rows (about a second or less)
# progress=None shows a bar when a call's work, in the units of `work` below plus _OUT_WORK per output value (the
# output's allocation, zeroing and the caller's copies), exceeds _QUIET_WORK per thread (x 0.6 from two threads on,
# for imperfect scaling): about 2 s on one thread (the rates behind both constants: docs/design/treeshap.md, section 8).
_QUIET_WORK = 3e9
_OUT_WORK = 12


@dataclass
class CpuOptions(Options):
    """Options of the CPU engine (``hitml.kernels.treeshap.cpu.options``), the twin of the GPU engine's ``GpuOptions``;
    a value outside the allowed ones raises. docs/cpu_treeshap.md describes them.

    row_kernel: the per-row kernel of path-dependent SHAP and interactions, "quadrature" (Gauss-Legendre, rows in SIMD
      blocks) or "dp" (the EXTEND/UNWIND dynamic programme, one row at a time; kept as an independent check).
    pattern_tables: SHAP values of short paths from pattern tables that fit in cache (quadrature kernel only); off
      because the per-lane table gathers are slower than the vectorised quadrature on the CPU (docs/design/treeshap.md,
      measurements); kept selectable and tested.
    sibling_pairs: interventional values look both leaves of a sibling pair split at one threshold up at once (the GPU
      twin looks each leaf up alone, so the two differ by rounding, about 1e-16 relative).
    shap_linear: the per-tree kernel for path-dependent SHAP values (``_cpu_linear.program_values``, the twin of the
      GPU's linear.cu): "auto" where the model has paths of more than LINEAR_MIN_PATH merged features (deep forests,
      leafy boosters), "always" for every tree it takes, "never"; trees it does not take keep the per-path kernels
      (quadrature kernel only).
    """

    row_kernel: str = "quadrature"
    pattern_tables: bool = False
    sibling_pairs: bool = True
    shap_linear: str = "auto"

    choices: ClassVar[dict[str, tuple]] = {"row_kernel": ("quadrature", "dp"), "shap_linear": ("auto", "always", "never")}
    flags: ClassVar[tuple[str, ...]] = ("pattern_tables", "sibling_pairs")


options = CpuOptions()


_PATH_DTYPES = (np.int64, np.int32, np.float64, np.float64, np.bool_, np.int64, np.int32, np.uint32, np.bool_)


def _path_args(ps: PathSet):
    """The PathSet's element arrays, contiguous and of fixed dtypes: every call then matches the one compiled (and
    cached) signature of each kernel, whatever built the PathSet (no copies for extract_paths' arrays)."""
    arrays = (ps.path_ptr, ps.feature, ps.lower, ps.upper, ps.missing_ok, ps.cat_ptr, ps.cat_nwords, ps.cat_words,
              ps.cat_outside_ok)
    return tuple(np.ascontiguousarray(a, dtype=t) for a, t in zip(arrays, _PATH_DTYPES, strict=True))


def _values(ps: PathSet) -> tuple[np.ndarray, np.ndarray]:
    """(zero_fraction, leaf_value) as contiguous float64."""
    return (np.ascontiguousarray(ps.zero_fraction, dtype=np.float64),
            np.ascontiguousarray(ps.leaf_value, dtype=np.float64))


def _chunks(n: int, work_per_row: float, block: int = _q.BLOCKS[-1]):
    """Row chunks (one progress-bar step each) of about _CHUNK_WORK per thread, in whole rounds of row blocks
    (``block`` rows each) over the threads and at least 8 rounds, so that the barrier at each chunk's end idles few
    threads."""
    threads = numba.get_num_threads()
    unit = threads * block
    size = max(8 * unit, min(n, threads * _CHUNK_WORK / max(work_per_row, 1.0)))
    size = int(-(-size // unit) * unit)
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def _bar_setting(progress, total_work):
    progress = check_progress(progress)
    if progress is None and total_work < _QUIET_WORK * max(1.0, 0.6 * numba.get_num_threads()):
        return False
    return progress


def _run(call, n, work_per_row, desc, progress, out_per_row=0):
    """Call ``call(a, b)`` on row chunks [a, b), advancing a progress bar (by rows) when the call is long."""
    total = (work_per_row + _OUT_WORK * out_per_row) * n
    with progress_bar(n, desc, _bar_setting(progress, total)) as bar:
        for a, b in _chunks(n, work_per_row):
            call(a, b)
            bar.update(b - a)


def _path_order(ps: PathSet) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(order, group_ptr, group_out): the paths in visiting order, cut into groups ``order[group_ptr[g]:group_ptr[g
    + 1]]`` that feed output ``group_out[g]`` only (boosted multiclass: each path feeds at most one output; a path
    with no nonzero value joins output 0), else one group of every path, as stored, with ``group_out = [-1]``."""
    nonzero = ps.leaf_value != 0
    if ps.n_outputs > 1 and bool((nonzero.sum(axis=1) <= 1).all()):
        cls = np.argmax(nonzero, axis=1)
        order = np.argsort(cls, kind="stable").astype(np.int64)
        ptr = np.concatenate([[0], np.cumsum(np.bincount(cls, minlength=ps.n_outputs))]).astype(np.int64)
        return order, ptr, np.arange(ps.n_outputs, dtype=np.int64)
    return (np.arange(ps.n_paths, dtype=np.int64), np.array([0, ps.n_paths], np.int64),
            np.array([-1], np.int64))


_GROUPS: dict = {}   # id(PathSet) -> (weak reference, _path_groups result): built once per PathSet


def _path_groups(ps: PathSet) -> tuple[np.ndarray, ...]:
    """(order, group_ptr, group_out, feat_ptr, feats): _path_order's groups and each group's distinct features
    ``feats[feat_ptr[g]:feat_ptr[g + 1]]`` (the SHAP kernel sums and writes only those), cached per PathSet."""
    hit = _GROUPS.get(id(ps))
    if hit is not None and hit[0]() is ps:
        return hit[1]
    order, gptr, gout = _path_order(ps)
    G = len(gout)
    group = np.empty(ps.n_paths, np.int64)
    group[order] = np.repeat(np.arange(G), np.diff(gptr))
    used = np.zeros((G, ps.n_features), bool)
    used[np.repeat(group, np.diff(ps.path_ptr)), ps.feature] = True
    g_idx, feats = np.nonzero(used)
    fptr = np.searchsorted(g_idx, np.arange(G + 1)).astype(np.int64)
    val = (order, gptr, gout, fptr, feats.astype(np.int64))
    key = id(ps)
    _GROUPS[key] = (weakref.ref(ps, lambda _, k=key: _GROUPS.pop(k, None)), val)
    return val


def _tables(ps: PathSet, tq: np.ndarray, wq: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(tab_off, tab) of the pattern tables of ``ps`` (none when options.pattern_tables is off)."""
    if not options.pattern_tables:
        return np.full(ps.n_paths, -1, np.int64), np.zeros(1)
    off = _t.plan_tables(ps.path_ptr)
    lens = np.diff(ps.path_ptr)
    tab = np.empty(max(1, int(((1 << np.minimum(lens, 62)) * lens)[off >= 0].sum())))
    _t.build_tables(ps.path_ptr, ps.zero_fraction, off, tq, wq, tab)
    return off, tab


LINEAR_MIN_PATH = 12   # "auto" takes models with longer merged paths (the GPU's TABLE_DMAX: where tables end)
LEAF_SPLIT = 0         # > 0: a tree's leaves with paths of at most this many features walked apart from the
#                        others, each walk with its own Gauss nodes (paths.walk_program); 0: one walk per tree
_LINEAR: dict = {}     # (id(PathSet), tree_limit) -> (weak reference to the PathSet, _linear_part result)


def _linear_part(ps: PathSet, owner: PathSet | None = None, tree_limit: int | None = None):
    """(program arrays of the trees the per-tree kernel takes, PathSet of the other trees' paths or None) for
    options.shap_linear, or None where it takes none. ``ps`` is ``owner.restrict(tree_limit)`` (``owner`` None:
    ``ps`` itself); cached per owner and tree_limit."""
    mode = options.shap_linear
    if mode == "never" or options.row_kernel != "quadrature" or ps.trees is None or not ps.n_paths:
        return None
    if mode == "auto" and ps.max_length <= LINEAR_MIN_PATH:
        return None
    owner = ps if owner is None else owner
    key = (id(owner), tree_limit)
    hit = _LINEAR.get(key)
    if hit is not None and hit[0]() is owner:
        return hit[1]
    lin, src, q_of, levels, ptr, evi, evd, rest = program_split(ps, split=LEAF_SPLIT)
    val = None
    if lin.size:
        tree_ev, idx = tree_events(ptr, lin)
        work = float((np.diff(tree_ev) * q_of[lin]).sum()) * 6
        val = ((evi[idx], evd[idx], tree_ev, q_of[lin].astype(np.int64), tree_outputs(ps)[src[lin]],
                int(levels[lin].max())), rest, work)
    _LINEAR[key] = (weakref.ref(owner, lambda _, k=key: _LINEAR.pop(k, None)), val)
    return val


def shap_values(paths: PathSet, X, *, tree_limit=None, progress=None) -> np.ndarray:
    """Path-dependent ("tree_path_dependent") SHAP values, (n, M+1, K) float64, bias in column M."""
    _background.enter("treeshap")
    tree_limit = check_tree_limit(tree_limit)
    ps = paths.restrict(tree_limit)
    X = as_model_input(X, ps)
    n, M = X.shape
    out = np.zeros((n, M + 1, ps.n_outputs))
    lin = _linear_part(ps, paths, tree_limit)
    if lin is not None:
        prog, rest, lin_work = lin
        tq, wq = _lin.program_rules()
        lval = np.ascontiguousarray(ps.leaf_value, dtype=np.float64)

        def per_tree(a, b):
            bw = _q.block_for(b - a, numba.get_num_threads())[0]
            _lin.program_values(X[a:b], bw, *prog, tq, wq, lval, out[a:b])

        if rest is None:
            _run(per_tree, n, lin_work, "TreeSHAP", progress, (M + 1) * ps.n_outputs)
            out[:, M, :] += ps.bias()
            return out
        _run(per_tree, n, lin_work, "TreeSHAP (per tree)", progress, (M + 1) * ps.n_outputs)
        full, ps = ps, rest             # the other trees' paths below; the bias is the whole model's
    else:
        full = ps
    L = ps.max_length
    args = _path_args(ps) + _values(ps) + (L,)
    if options.row_kernel == "quadrature":
        work = len(ps.feature) * (2 * L + 4) // 2 + ps.n_paths
        tq, wq = _q.gauss_legendre((L + 1) // 2)
        groups = _path_groups(ps)
        gout = groups[2]
        args = args + (tq, wq) + _tables(ps, tq, wq) + groups
        acc_values = M * (1 if gout[0] >= 0 else ps.n_outputs)        # one work item's sums per row

        def kernel(Xc, *a):
            block, gpi = _q.block_for(len(Xc), numba.get_num_threads(), acc_values, len(gout))
            _q.shap_quad_kernel(Xc, *a[:-1], gpi, block, a[-1], 0, _q.work_items(len(Xc), block, len(gout), gpi))
    else:
        work = len(ps.feature) * (2 * L + 2) + ps.n_paths
        kernel = _k.shap_kernel
    _run(lambda a, b: kernel(X[a:b], *args, out[a:b]), n, work, "TreeSHAP", progress, (M + 1) * ps.n_outputs)
    out[:, M, :] += full.bias()
    return out


_SPARSE_BYTES = 1 << 26   # outputs from 64 MiB on whose writes touch few of their pages: no transparent huge pages


def _zeros(shape: tuple, sparse: bool) -> np.ndarray:
    """np.zeros(shape), or, for a large output whose writes touch few of its pages (interactions of wide models with
    short paths), anonymous memory with transparent huge pages off: an untouched 4 KiB page then stays unallocated,
    where NumPy's huge-page advice makes the first write to a 2 MiB page zero all of it (docs/design/treeshap.md,
    section 8). Same values; reads of untouched pages return zeros."""
    nbytes = int(np.prod(shape)) * 8
    if not sparse or nbytes < _SPARSE_BYTES or not hasattr(mmap, "MADV_NOHUGEPAGE"):
        return np.zeros(shape)
    buf = mmap.mmap(-1, nbytes)
    buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, np.float64).reshape(shape)


def interaction_values(paths: PathSet, X, *, tree_limit=None, progress=None) -> np.ndarray:
    """SHAP interaction values (shap's conditioning method), (n, M+1, M+1, K) float64, bias at [M, M].

    With several outputs and one output per path (boosted multiclass) the result is a transposed view of a
    class-major (n, K, M+1, M+1) array: each output's matrix is then compact in memory, and the writes of the paths
    of one output stay in it (fashion_mnist-shaped models: 785 x 785 x 10 doubles per row).
    """
    _background.enter("treeshap-interactions")
    ps = paths.restrict(check_tree_limit(tree_limit))
    X = as_model_input(X, ps)
    n, M = X.shape
    K = ps.n_outputs
    L = ps.max_length
    args = _path_args(ps) + _values(ps) + (L,)
    desc = "TreeSHAP interactions"
    if options.row_kernel != "quadrature":
        out = np.zeros((n, M + 1, M + 1, K))
        work = len(ps.feature) * (2 * L * L + 2 * L + 2) + ps.n_paths + (M + 1) ** 2 * K
        _run(lambda a, b: _k.interaction_kernel(X[a:b], *args, out[a:b]), n, work, desc, progress)
        out[:, M, M, :] += ps.bias()
        return out
    order, gptr, gout = _path_order(ps)
    lens = np.diff(ps.path_ptr)
    mirror = bool((lens * (lens - 1) // 2).sum() * 2 > (M + 1) ** 2 * K)   # pair writes vs copying the matrix
    if gout[0] >= 0:
        store = _zeros((n, K, M + 1, M + 1), sparse=not mirror)
        out = store.transpose(0, 2, 3, 1)
    else:
        store = out = _zeros((n, M + 1, M + 1, K), sparse=not mirror)
    flat = store.reshape(-1)
    strides = np.array(out.strides, np.int64) // out.itemsize
    sr = int(strides[0])
    args = args + _q.gauss_legendre((L + 1) // 2) + (order, gptr, gout)
    work = len(ps.feature) * (L * L + 2 * L) // 2 + ps.n_paths + (M + 1) ** 2 * K

    def call(a, b):
        block, gpi = _q.block_for(b - a, numba.get_num_threads(), groups=len(gout))
        _q.interaction_quad_kernel(X[a:b], *args, gpi, block, mirror, flat[a * sr:b * sr], strides, 0,
                                   _q.work_items(b - a, block, len(gout), gpi))

    _run(call, n, work, desc, progress, (M + 1) ** 2 * K)
    out[:, M, M, :] += ps.bias()
    return out


def _chunk_conditions(pidx, pa, mode):
    """The distinct conditions of the paths ``pidx`` counted from the background (right siblings are mirrored)."""
    path_ptr, feature, lower, upper, missing_ok, cat_ptr = pa[:6]
    return _pat.distinct_conditions(path_ptr, feature, lower, upper, missing_ok, cat_ptr, pidx[mode[pidx] != 2])


def _background_histograms(R, wint, weighted, pidx, pa, hist_off, mode, hist, cond=None):
    """hist[hist_off[p] + s] += the weight of the background rows whose fail set on path p (of ``pidx``) is s.
    Each distinct condition of the paths is tested once per background row, into 64-row bit masks; each path then
    counts its fail sets from its conditions' masks (``_kp.fail_counts``). Row blocks keep a block's transposed
    rows and masks in cache: at most 2^17 values and 2^16 mask words."""
    path_ptr = pa[0]
    if cond is None:
        cond = _chunk_conditions(pidx, pa, mode)
    U = len(cond.feature)
    nR, M = R.shape
    words = max(1, min(64, (1 << 17) // (64 * M), (1 << 16) // max(U, 1)))
    block = 64 * words
    RT = np.empty((M, block))
    masks = np.empty((U, words), np.uint64)
    for b0 in range(0, nR, block):
        b1 = min(nR, b0 + block)
        _kp.transpose_block(R, b0, b1, RT)
        _kp.condition_masks(RT, b1 - b0, cond.element, cond.feature, cond.lower, cond.upper, cond.nan_ok, *pa[2:],
                            masks)
        _kp.fail_counts(b1 - b0, b0, wint, weighted, pidx, path_ptr, cond.uid, cond.neg, masks, hist_off, mode,
                        hist)


def _sibling_modes(ps: PathSet, plan) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(mode, pair_k, pair_bit) of the value plan's sibling pairs (``_kp.sibling_pairs``; all zero where the option
    is off): pairs within one chunk of tables."""
    mode = np.zeros(ps.n_paths, np.int8)          # sibling pairs (values only): 1 left, 2 right
    pair_k = np.zeros(ps.n_paths, np.int64)
    pair_bit = np.zeros(ps.n_paths, np.int64)
    if options.sibling_pairs:
        chunk_id = np.full(ps.n_paths + 1, -1, np.int64)
        for c, chunk in enumerate(plan.chunks):
            chunk_id[chunk] = c
        same = (chunk_id[:-1] >= 0) & (chunk_id[:-1] == chunk_id[1:])    # p and p + 1 in one chunk
        _kp.sibling_pairs(ps.path_ptr, ps.tree_index, ps.feature, ps.lower, ps.upper, ps.missing_ok, ps.cat_ptr,
                          ps.leaf_value, same, mode, pair_k, pair_bit)
    return mode, pair_k, pair_bit


def summarize_background(paths: PathSet, background, *, weights=None, weight_scale=None,
                         progress=None) -> _sum.BackgroundSummary:
    """The background's fail-set histograms against ``paths`` (all trees), on the CPU (see
    ``kernels.treeshap.background_summary``)."""
    _background.enter("treeshap-interventional")
    return _summarize(paths, _background_rows(background, paths), weights, weight_scale, progress)


_SLAB_BYTES = 1 << 22   # float32 background rows are widened to float64 this many bytes at a time, not whole


def _background_rows(background, paths: PathSet) -> np.ndarray:
    """The background as the engine reads it, without a float64 copy of float32 rows: those stay float32 (the
    summary widens them a slab at a time, exactly); other rows go through ``as_model_input``."""
    R = np.asarray(background) if not hasattr(background, "dtype") else background
    if getattr(R, "dtype", None) == np.float32 and isinstance(R, np.ndarray):
        check_matrix(R, paths, "background")
        return np.ascontiguousarray(R)
    return as_model_input(R, paths, name="background")


def _slab_starts(R: np.ndarray) -> tuple[range, int]:
    """(starts, rows) of the slabs R is read in: one for float64 R, else slabs of about _SLAB_BYTES as float64."""
    if R.dtype == np.float64:
        return range(0, 1), max(R.shape[0], 1)
    rows = max(4096, _SLAB_BYTES // (8 * max(R.shape[1], 1)))
    return range(0, R.shape[0], rows), rows


def _slab(R: np.ndarray, a: int, rows: int) -> np.ndarray:
    return R if R.dtype == np.float64 else np.ascontiguousarray(R[a:a + rows], dtype=np.float64)


def _summarize(ps: PathSet, R: np.ndarray, weights, scale, progress) -> _sum.BackgroundSummary:
    nR = R.shape[0]
    wint, total = _sum.counted_weights(weights, nR, scale)
    weighted = wint is not None
    w_arg = wint if weighted else np.zeros(1, np.int64)
    hist_off, sparse, h_size = _sum.dense_paths(ps.path_ptr)
    lens = np.diff(ps.path_ptr).astype(np.int64)
    hist = np.zeros(h_size, np.int64)
    plan = _pat.plan_paths(ps.path_ptr, False)       # its chunks are the dense paths, in order
    pa = _path_args(ps)
    work = float(nR) * (len(ps.feature) + ps.n_paths) * 4
    steps = len(plan.chunks) + (1 if len(sparse) else 0)
    with progress_bar(steps, "Interventional background", _bar_setting(progress, work)) as bar:
        mode, _, pair_bit = _sibling_modes(ps, plan)
        starts, rows = _slab_starts(R)
        conds = [_chunk_conditions(chunk, pa, mode) for chunk in plan.chunks]
        for a in starts:
            Rs = _slab(R, a, rows)
            wa = w_arg[a:a + Rs.shape[0]] if weighted else w_arg
            for chunk, cond in zip(plan.chunks, conds):
                _background_histograms(Rs, wa, weighted, chunk, pa, hist_off, mode, hist, cond)
            del Rs                        # freed before the next slab is made
        for chunk in plan.chunks:
            _kp.mirror_histograms(chunk, ps.path_ptr, mode, pair_bit, hist_off, hist)
            bar.update(1)
        ptr, sets, wsum = [0], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)]
        if len(sparse):
            if int(lens[sparse].max()) > _pat.MAX_SPARSE_LENGTH:
                raise NotImplementedError(f"interventional values for a path with more than "
                                          f"{_pat.MAX_SPARSE_LENGTH} distinct features")
            step = max(1, (1 << 26) // max(nR, 1))
            for c0 in range(0, len(sparse), step):
                sel = sparse[c0:c0 + step]
                fails = np.empty((len(sel), nR), np.int64)
                for a in starts:
                    Rs = _slab(R, a, rows)
                    part = np.empty((len(sel), Rs.shape[0]), np.int64)
                    _kp.background_patterns(Rs, sel, *pa, part)
                    fails[:, a:a + Rs.shape[0]] = part
                    del Rs, part
                for q in range(len(sel)):
                    order = np.argsort(fails[q], kind="stable")
                    fs = fails[q][order]
                    starts = np.concatenate([[0], np.nonzero(np.diff(fs))[0] + 1]) if nR else np.zeros(0, np.int64)
                    sets.append(fs[starts])
                    wsum.append(np.add.reduceat(wint[order], starts) if weighted else np.diff(np.append(starts, nR)))
                    ptr.append(ptr[-1] + len(starts))
            bar.update(1)
    return _sum.BackgroundSummary(
        key=_sum.path_key(ps), n_paths=ps.n_paths, lens=lens, hist_off=hist_off, hist=hist, sparse_paths=sparse,
        sparse_ptr=np.asarray(ptr, np.int64), sparse_sets=np.concatenate(sets).astype(np.int64),
        sparse_w=np.concatenate(wsum).astype(np.int64), total=total, scale=scale if weighted else None, n_rows=nR)


def _call_tables(ps: PathSet, summary: _sum.BackgroundSummary, metric: int, interactions: bool, plan, W):
    """The call's tables from the summary's histograms, one per chunk of the plan: kept in the summary's cache
    while they fit ``_sum.TABLE_CACHE_BYTES`` (a later call then reads them), otherwise built per call."""
    key = ("cpu", metric, interactions, ps.n_paths)
    if key in summary.cache:
        return summary.cache[key][1]
    WP, WQ, *WI = W
    total = summary.total_float
    if interactions:
        mode, pair_k, pair_bit = np.zeros(ps.n_paths, np.int8), np.zeros(ps.n_paths, np.int64), \
            np.zeros(ps.n_paths, np.int64)
    else:
        mode, pair_k, pair_bit = _sibling_modes(ps, plan)
    tabs = []
    for chunk, t_size in zip(plan.chunks, plan.tab_size):
        tab = np.empty(t_size)
        if interactions:
            _kp.interaction_tables(chunk, ps.path_ptr, summary.hist, summary.hist_off, total, WP, WQ, *WI,
                                   plan.tab_off, tab)
        else:
            _kp.value_tables(chunk, ps.path_ptr, summary.hist, summary.hist_off, total, WP, WQ, plan.tab_off, tab)
            _kp.combine_pairs(chunk, ps.path_ptr, mode, pair_bit, pair_k, ps.leaf_value, plan.tab_off, tab)
        tabs.append(tab)
    step = max(1, (1 << 26) // max(summary.n_rows, 1))
    longs = []
    for c0 in range(0, len(plan.long), step):
        sel = plan.long[c0:c0 + step]
        ptr, sets, w = summary.sparse_of(sel, np)
        longs.append((sel, ptr, sets, w.astype(np.float64)))
    made = (tabs, longs, mode, pair_k)
    nbytes = sum(t.nbytes for t in tabs) + sum(x[2].nbytes * 2 for x in longs)
    if summary.table_bytes + nbytes <= _sum.TABLE_CACHE_BYTES:
        summary.cache[key] = (nbytes, made)
    return made


def _pattern_engine(ps: PathSet, X: np.ndarray, summary: _sum.BackgroundSummary, metric: int, interactions: bool,
                    progress, desc: str) -> np.ndarray:
    """Interventional values by the pattern decomposition (identity output) against a summarised background: (n,
    M+1, K), or (n, M+1, M+1, K) with ``interactions``; the bias entry holds the weighted background mean of the
    model's margin."""
    n, M = X.shape
    K = ps.n_outputs
    plan = _pat.plan_paths(ps.path_ptr, interactions)
    D = max(plan.max_len, 1)
    WP, WQ = _pat.value_weights(_pat.SHAPLEY if interactions else metric, D)
    WI = _pat.interaction_weights(D) if interactions else (np.zeros((1, 1)),) * 3
    pa = _path_args(ps)
    lens = np.diff(ps.path_ptr)
    shape = (n, M + 1, M + 1, K) if interactions else (n, M + 1, K)
    out = np.zeros(shape)
    flat = out.reshape(n, -1, K)
    call_work = float(n) * len(ps.feature) * 4
    steps = len(plan.chunks) + (1 if len(plan.long) else 0)
    rblock = _kp.row_block(M, flat.shape[1] * K, n, numba.get_num_threads(), interactions)
    copy = _kp.copies_output(M, flat.shape[1] * K, rblock, interactions)
    total = summary.total_float
    with progress_bar(n * steps, desc, _bar_setting(progress, call_work)) as bar:
        tabs, longs, mode, pair_k = _call_tables(ps, summary, metric, interactions, plan, (WP, WQ) + WI)
        for chunk, tab in zip(plan.chunks, tabs):
            lc = lens[chunk]
            work = float((lc * lc).sum() if interactions else lc.sum()) + len(chunk)
            for a, b in _chunks(n, work, rblock):
                _kp.rows_kernel(X[a:b], chunk, *pa, ps.leaf_value, plan.tab_off, tab, mode, pair_k, interactions,
                                copy, M + 1, rblock, flat[a:b])
                bar.update(b - a)
        for sel, ptr, sets, wsum in longs:
            work = float(ptr[-1]) * 8
            for a, b in _chunks(n, work):
                _kp.sparse_rows(X[a:b], sel, *pa, ps.leaf_value, ptr, sets, wsum, total, WP, WQ, *WI,
                                interactions, flat[a:b])
        if longs:
            bar.update(n)
    bias = summary.bias(ps)
    if interactions:
        out[:, M, M, :] += bias
    else:
        out[:, M, :] += bias
    return out


def _background_input(paths: PathSet, X, background, tree_limit, weights, progress, interactions=False):
    """(restricted paths, rows, summary): a summary passed as ``background`` is checked against ``paths``; an array
    is summarised for this call."""
    _background.enter("treeshap-interventional")
    if interactions:
        _background.enter("treeshap-interventional-interactions")
    ps = paths.restrict(check_tree_limit(tree_limit))
    X = as_model_input(X, ps)
    if isinstance(background, _sum.BackgroundSummary):
        if weights is not None:
            raise ValueError("weights belong to the background summary (background_summary(..., weights=...)); "
                             "pass none with a summary")
        background.check(paths)
        return ps, X, _sum.on_host(background)
    return ps, X, _summarize(ps, _background_rows(background, ps), weights, None, progress)


def interventional_interaction_values(paths: PathSet, X, background, *, weights=None, tree_limit=None,
                                      progress=None) -> np.ndarray:
    """Interventional SHAP interaction values against ``background``, (n, M+1, M+1, K), bias at [M, M].

    shap's definition (as for its path-dependent interactions), applied to the interventional game
    ``v(S) = E_z f(x_S, z_rest)``: off-diagonal entries are half the Shapley interaction index, the diagonal is the
    SHAP value minus the row's off-diagonal sum; every row sums to the SHAP value. ``weights``: one non-negative
    weight per background row (None: equal weights).
    """
    ps, X, summary = _background_input(paths, X, background, tree_limit, weights, progress, interactions=True)
    return _pattern_engine(ps, X, summary, _pat.SHAPLEY, True, progress, "Interventional interactions")


def interventional_banzhaf_values(paths: PathSet, X, background, *, weights=None, tree_limit=None,
                                  progress=None) -> np.ndarray:
    """Interventional Banzhaf values against ``background``, (n, M+1, K); column M holds the background mean of the
    margin (Banzhaf values do not sum to the prediction minus it)."""
    ps, X, summary = _background_input(paths, X, background, tree_limit, weights, progress)
    return _pattern_engine(ps, X, summary, _pat.BANZHAF, False, progress, "Interventional Banzhaf")


def interventional_shap_values(paths: PathSet, X, background, *, transform="identity", y=None, tree_limit=None,
                               progress=None, weights=None, method="auto") -> np.ndarray:
    """Interventional SHAP values averaged over ``background`` rows, (n, M+1, K), bias in column M.

    Follows shap's C++ ``dense_independent``. The identity transform (``model_output="raw"``, and probability
    outputs of models whose trees hold probabilities) runs in time linear in rows plus background (``method`` "auto"
    or "patterns"); other transforms do not decompose over the background: each (x, r) pair's raw values are
    rescaled by ``(T(f(x), y) - T(f(r), y)) / (f(x) - f(r))`` (1 when the margins are equal) and the bias column is
    the mean of ``T(f(r), 0)`` (shap passes y = 0 there), at a cost of rows times background (``method="pairs"``
    forces that walk for the identity too). ``weights``: one non-negative weight per background row.
    """
    if method not in ("auto", "patterns", "pairs"):
        raise ValueError(f"method must be 'auto', 'patterns' or 'pairs', got {method!r}")
    if transform == "identity" and method != "pairs":
        ps, X, summary = _background_input(paths, X, background, tree_limit, weights, progress)
        check_transform(transform, y, X.shape[0])
        return _pattern_engine(ps, X, summary, _pat.SHAPLEY, False, progress, "Interventional TreeSHAP")
    if method == "patterns":
        raise ValueError(f"method='patterns' needs transform='identity' (got {transform!r}): other output "
                         "transforms do not decompose over the background")
    if isinstance(background, _sum.BackgroundSummary):
        raise ValueError(f"transform={transform!r} (or method='pairs') walks every (row, background row) pair and "
                         "needs the background rows, not a summary of them")
    _background.enter("treeshap-interventional")
    ps = paths.restrict(check_tree_limit(tree_limit))
    X = as_model_input(X, ps)
    R = as_model_input(background, ps, name="background")
    n, M = X.shape
    nR = R.shape[0]
    yv = check_transform(transform, y, n)
    wv = np.ones(nR)
    if weights is not None:
        _sum.integer_weights(weights, nR)   # validates
        wv = np.asarray(weights, dtype=np.float64).reshape(-1)
    code = _k.TRANSFORMS[transform]
    out = np.zeros((n, M + 1, ps.n_outputs))
    L = ps.max_length
    W = _k.interventional_weights(L)
    desc = "Interventional TreeSHAP"
    if ps.trees is None:  # a hand-built PathSet: scan every path for each (x, r) pair
        if weights is not None:
            raise NotImplementedError("background weights with a PathSet that holds no trees")
        work = (len(ps.feature) + ps.n_paths) * nR * 2
        args = _path_args(ps) + (ps.leaf_value, ps.base_offset, W, L)
        _run(lambda a, b: _k.interventional_kernel(X[a:b], R, yv[a:b], code, *args, out[a:b]), n, work, desc,
             progress)
        return out
    tr = ps.trees
    targs = (tr.nodes, tr.thresholds, ps.leaf_value, tr.node_cat_ptr, tr.node_cat_nwords, tr.cat_words,
             ps.base_offset, W)
    threads = numba.get_num_threads()

    def call(a, b):
        # few rows: split the background into blocks too, so that every thread has work
        blocks = int(min(nR, max(1, -(-2 * threads // (b - a)))))
        part = np.zeros(((b - a) * blocks, M + 1, ps.n_outputs))
        _kw.tree_walk_kernel(X[a:b], R, yv[a:b], code, blocks, *targs, wv, part)
        out[a:b] = part.reshape(b - a, blocks, M + 1, ps.n_outputs).sum(axis=1) / wv.sum()

    work = nR * max(tr.n_trees, 1) * (4 * L + 4)
    _run(call, n, work, desc, progress)
    return out


# ------------------------------------------------------------------------------------------------------- warm-up
# Each group's calls compile (or load) its kernels with the argument types of every real call: tiny inputs, values
# thrown away (python -m hitml.kernels warmup GROUP, and the build of the shipped cache entries, run them).
def _warm_values() -> None:
    X = np.random.default_rng(0).normal(size=(300, 3))
    shap_values(_hand_paths(), X, progress=False)
    mode = options.shap_linear
    options.shap_linear = "always"          # the per-tree kernel (a tree of _tiny_paths takes it)
    try:
        shap_values(_tiny_paths(), X, progress=False)
    finally:
        options.shap_linear = mode


def _warm_interactions() -> None:
    X = np.random.default_rng(0).normal(size=(40, 3))
    interaction_values(_hand_paths(), X, progress=False)


def _warm_interventional() -> None:
    ps = _hand_paths()   # the pattern engine reads the paths only
    X = np.random.default_rng(0).normal(size=(20, 3))
    interventional_shap_values(ps, X, X[:5], progress=False)
    interventional_shap_values(ps, X, X[:5], weights=np.arange(1.0, 6.0), progress=False)
    interventional_banzhaf_values(ps, X, X[:5], progress=False)


def _warm_interventional_interactions() -> None:
    """Interventional interactions: the interventional group's kernels and the interaction tables (a group of its
    own, so that a first interventional SHAP call does not wait for the tables' compile)."""
    X = np.random.default_rng(0).normal(size=(20, 3))
    interventional_interaction_values(_hand_paths(), X, X[:5], progress=False)


def _warm_transforms() -> None:
    """Interventional values through an output transform: the tree-walking kernel (one kernel, its own group so
    that the warm-up's processes share the work evenly)."""
    X = np.random.default_rng(0).normal(size=(20, 3))
    interventional_shap_values(_tiny_paths(), X, X[:5], transform="logistic", progress=False)


_registry.register_warmup("treeshap", _warm_values)
_registry.register_warmup("treeshap-interactions", _warm_interactions)
_registry.register_warmup("treeshap-interventional", _warm_interventional)
_registry.register_warmup("treeshap-interventional-interactions", _warm_interventional_interactions)
_registry.register_warmup("treeshap-transforms", _warm_transforms)
