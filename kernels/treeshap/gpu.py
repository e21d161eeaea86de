"""GPU TreeSHAP engine (CUDA through CuPy): path-dependent, interventional and interaction values, same API as cpu.py.

Paths are packed into warp-sized bins (best-fit decreasing, ``pack.py``) and uploaded once per PathSet and
tree_limit; each warp evaluates its bin's paths for a block of rows with shuffle-based EXTEND/UNWOUNDSUM in double
precision (``treeshap.cu``). Paths longer than a warp run one thread per (row, path). Rows are processed in chunks
that fit a device-memory budget. CuPy input gives CuPy output; NumPy/pandas input gives NumPy output.
"""
from __future__ import annotations

import functools
import math
import weakref
from dataclasses import dataclass, field

import numpy as np

from .._cuda import get_kernel
from .._progress import progress_bar
from ..device import cupy_module, download, free_gpu_bytes, is_cupy_array
from ._inputs import as_model_input, check_transform, check_tree_limit
from .pack import plan_packing
from .paths import PathSet

__all__ = ["shap_values", "interaction_values", "interventional_shap_values", "packed_paths", "clear_cache"]

_SRC = "treeshap/treeshap.cu"
_WARP = 32
_THREADS = 256
MEMORY_BUDGET: int | None = None   # bytes per chunk of rows; None = half of the free device memory
# Kernel variants (issue 4; docs/design/treeshap.md has the measurements). SHAP values (SHAP_VARIANT):
#  "table": per-path tables of phi for every pattern of satisfied elements;
#  "dp": shuffle EXTEND/UNWOUNDSUM per row with one global atomic per element;
#  "smem": the DP with per-warp shared-memory row sums (measured slower; kept selectable and tested);
#  "split": tables for the paths of <= dmax elements, the DP for the longer ones (two packings, one output).
# Interactions (INTER_VARIANT): "table" (per-path tables of the d(d+1)/2 distinct entries of the path's symmetric
#  interaction matrix for every pattern), "dp" (the shuffle DP per row) and "split", as above.
# "auto" (both): dmax is the largest path length <= TABLE_DMAX (INTER_TABLE_DMAX) whose tables fit the cap
#  (TABLE_BYTES, and TABLE_FREE_SHARE of the free device memory when the model is first explained); "table" when every
#  path is that short, else "split" when those paths hold at least SPLIT_MIN_SHARE of the path elements, else "dp".
#  A forced "table" or "split" falls back the same way. The tables are built once per model and stay cached with it.
SHAP_VARIANT = "auto"
INTER_VARIANT = "auto"
TABLE_DMAX = 12                    # must not exceed TABLE_DMAX in treeshap.cu
INTER_TABLE_DMAX = 12              # at most TABLE_DMAX
TABLE_BYTES = 16 << 30
TABLE_FREE_SHARE = 0.25           # half of the free memory measured faster, but left other GPU work too little
SPLIT_MIN_SHARE = 0.2              # split beat dp on adult-large (2.9x) and fashion_mnist-large (1.3x, share < 0.5)
# The per-row kernel for paths without tables (SHAP_ROW_KERNEL, INTER_ROW_KERNEL): "quadrature" (Gauss-Legendre over
#  the path's product polynomial, Q = ceil(d / 2) nodes: a segmented product scan of Q log2(d) shuffles, then for
#  interactions O(d Q) shuffles and FMAs per lane) or "dp" (EXTEND/UNWOUNDSUM: O(d) shuffle steps of 3 shuffles per
#  SHAP value, once more per conditioned element for interactions). The "smem" SHAP variant is the DP. Measured on the
#  H100 (docs/design/treeshap.md): quadrature wins for interactions (3.5x on adult-large); for SHAP values it wins on
#  paths of <= 8 elements and loses 1.3-1.4x on longer ones (its Q double reciprocals per lane and row), and only long
#  paths reach the per-row kernel where tables fit, so SHAP values keep the DP.
SHAP_ROW_KERNEL = "dp"
INTER_ROW_KERNEL = "quadrature"
_QUAD_SIZES = (4, 8, 16)           # {shap,inter}_quad{4,8,16}: rules of <= 4 / 8 / 16 nodes, paths of 2x that many
_SMEM_MAX_OUTPUTS = 512            # smem variant only when M * K <= this (8 warps x 512 doubles = 32 KiB per block)
_CACHE: dict[tuple[int, int | None], "_Packed"] = {}


@dataclass
class _Packed:
    """Device-side packed paths of one PathSet (restricted to a tree_limit)."""

    ps: PathSet
    xdtype: np.dtype
    elems: tuple           # feat, lo, hi, flags, cptr, cnw, cwords, z, gstart, glen, item, vptr, vgroup, vval
    bin_ptr: object
    n_bins: int
    long_start: object
    long_len: object
    long_item: object
    n_long: int
    long_max: int
    pred_start: object
    pred_len: object
    n_paths: int
    max_len: int
    utilisation: float
    bias_d: object           # the bias (K,) on the device
    short_root: np.ndarray   # host: packed position of each warp-packed path's root, in packed order
    short_size: np.ndarray   # host: its length in lanes (root included)
    path_m: np.ndarray       # host: stored elements of each path that carries values (all packings' paths)
    plans: dict = field(default_factory=dict)    # variant choices, per setting of the module's knobs
    tables: dict = field(default_factory=dict)   # "shap" / "inter" -> (etoff, table), built on first use
    split: dict = field(default_factory=dict)    # (dmax, extra) -> packings of the paths of <= dmax elements and the others


def _down32(t: np.ndarray) -> np.ndarray:
    """The largest float32 <= t: for float32 x, (x <= t) == (x <= _down32(t)) and (t < x) == (_down32(t) < x)."""
    t32 = t.astype(np.float32)
    bad = t32.astype(np.float64) > t
    t32[bad] = np.nextafter(t32[bad], np.float32(-np.inf))
    return t32


def _pack(ps: PathSet) -> _Packed:
    cp = cupy_module()
    P = ps.n_paths
    m = np.diff(ps.path_ptr).astype(np.int64)                 # stored elements per path (root excluded)
    nz = ps.leaf_value != 0.0
    nnz = nz.sum(axis=1)
    vptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int32)
    pr, pk = np.nonzero(nz)
    vgroup = pk.astype(np.int32)
    vval = ps.leaf_value[pr, pk].astype(np.float64)
    work = np.flatnonzero((nnz > 0) & (m > 0))               # paths that carry SHAP values
    size = m[work] + 1
    short = size <= _WARP
    plan = plan_packing(size[short], _WARP)
    s_ids = work[short][plan.order]
    l_ids = work[~short]
    ids = np.concatenate([s_ids, l_ids])
    sizes = np.concatenate([size[short][plan.order], size[~short]])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64) if sizes.size else np.zeros(0, np.int64)
    total = int(sizes.sum())
    slot_item = np.repeat(np.arange(ids.size), sizes)
    local = np.arange(total, dtype=np.int64) - starts[slot_item]
    root = local == 0
    src = ps.path_ptr[ids][slot_item] + local - 1
    src[root] = 0
    E = len(ps.feature)
    if E == 0:
        src[:] = 0

    def gather(arr, root_value, dtype):
        out = np.empty(total, dtype=dtype)
        if E:
            out[:] = arr[src]
        out[root] = root_value
        return out

    xdtype = np.dtype(np.float32) if np.dtype(ps.input_dtype) == np.float32 else np.dtype(np.float64)
    lo = gather(ps.lower, -np.inf, np.float64)
    hi = gather(ps.upper, np.inf, np.float64)
    if xdtype == np.float32:
        lo, hi = _down32(lo), _down32(hi)
    flags = gather(ps.missing_ok.astype(np.uint8) | (ps.cat_outside_ok.astype(np.uint8) << 1), 1, np.uint8)
    feat = gather(ps.feature, -1, np.int32)
    cptr = gather(ps.cat_ptr, -1, np.int32)
    cnw = gather(ps.cat_nwords, 0, np.int32)
    z = gather(ps.zero_fraction, 1.0, np.float64)
    lane_short = np.zeros(ids.size, np.int64)
    lane_short[: s_ids.size] = plan.lane_of
    gstart = lane_short[slot_item].astype(np.int32)
    glen = sizes[slot_item].astype(np.int32)
    item = ids[slot_item].astype(np.int32)
    cwords = ps.cat_words if len(ps.cat_words) else np.zeros(1, np.uint32)
    n_short_elems = int(plan.bin_ptr[-1]) if plan.n_bins else 0
    # per-path element offsets for predictions (first non-root packed element)
    pred_start = np.zeros(P, np.int64)
    pred_len = np.zeros(P, np.int32)
    pred_start[ids] = starts + 1
    pred_len[ids] = (sizes - 1).astype(np.int32)
    zero_len = np.flatnonzero((nnz > 0) & (m == 0))
    pred_len[zero_len] = 0
    d = cp.asarray
    elems = (d(feat), d(lo), d(hi), d(flags), d(cptr), d(cnw), d(cwords.astype(np.uint32)), d(z), d(gstart),
             d(glen), d(item), d(vptr), d(vgroup if vgroup.size else np.zeros(1, np.int32)),
             d(vval if vval.size else np.zeros(1)))
    long_sizes = size[~short]
    return _Packed(
        ps=ps, xdtype=xdtype, elems=elems, bin_ptr=d(plan.bin_ptr.astype(np.int64)), n_bins=plan.n_bins,
        long_start=d(starts[s_ids.size:].astype(np.int64) if l_ids.size else np.zeros(1, np.int64)),
        long_len=d(long_sizes.astype(np.int32) if l_ids.size else np.zeros(1, np.int32)),
        long_item=d(l_ids.astype(np.int32) if l_ids.size else np.zeros(1, np.int32)),
        n_long=int(l_ids.size), long_max=int(long_sizes.max()) if l_ids.size else 0,
        pred_start=d(pred_start), pred_len=d(pred_len), n_paths=P, max_len=int(m.max()) if P else 0,
        utilisation=plan.utilisation if n_short_elems else 1.0, bias_d=d(ps.bias()),
        short_root=starts[: s_ids.size].copy(), short_size=sizes[: s_ids.size].copy(),
        path_m=m[work].copy())


def packed_paths(paths: PathSet, tree_limit: int | None = None) -> _Packed:
    """The device-side packing of ``paths`` (cached per PathSet object and tree_limit)."""
    key = (id(paths), tree_limit)
    hit = _CACHE.get(key)
    if hit is not None:
        return hit
    packed = _pack(paths.restrict(tree_limit))
    if not any(k[0] == id(paths) for k in _CACHE):
        weakref.finalize(paths, _drop, id(paths))
    _CACHE[key] = packed
    return packed


def clear_cache() -> None:
    """Free the cached packings and tables of every model (they are rebuilt on the next call), and return CuPy's
    pooled blocks to the device."""
    _CACHE.clear()
    cupy_module().get_default_memory_pool().free_all_blocks()


def _drop(pid: int) -> None:
    for k in [k for k in _CACHE if k[0] == pid]:
        del _CACHE[k]


def _kernel(name: str, xdtype: np.dtype):
    return get_kernel(_SRC, f"{name}_{'f32' if xdtype == np.float32 else 'f64'}")


def _check_x(X, ps: PathSet, name: str = "X"):
    """Validate X as the CPU twin does (numeric, 2-D, n_features wide, non-empty); returns NumPy or CuPy X as is."""
    on_gpu = is_cupy_array(X)
    if not on_gpu:
        X = np.asarray(X)
    head = X[:1] if X.ndim == 2 and X.shape[0] else X        # checking one row checks dtype and shape
    as_model_input(head, ps, name=name, xp=cupy_module() if on_gpu else np)
    return X


def _to_device(X, xdtype):
    """Rows of X on the device in the kernel's precision: the model's input dtype (float32) or float64."""
    cp = cupy_module()
    if not is_cupy_array(X):
        X = np.ascontiguousarray(X, dtype=xdtype)             # cast on the host: fewer bytes to copy
    return cp.ascontiguousarray(cp.asarray(X).astype(xdtype, copy=False))


def _budget() -> int:
    return int(MEMORY_BUDGET) if MEMORY_BUDGET is not None else free_gpu_bytes(0.5)


def _sm_count() -> int:
    cp = cupy_module()
    return int(cp.cuda.Device().attributes["MultiProcessorCount"])


def _rows_per_warp(n_rows: int, n_bins: int, cap: int) -> int:
    target = _sm_count() * 64 * 2                            # warps for about two full waves
    return int(min(cap, max(1, math.ceil(n_rows * n_bins / target))))


def _launch_warp(kern, pk: _Packed, n_rows: int, rpw: int, args: tuple, shared_mem: int = 0):
    if pk.n_bins == 0 or n_rows == 0:
        return
    warps = pk.n_bins * math.ceil(n_rows / rpw)
    blocks = math.ceil(warps * _WARP / _THREADS)
    kern((blocks,), (_THREADS,), args, shared_mem=shared_mem)


def _table_bytes(m: np.ndarray, kind: str) -> np.ndarray:
    """Bytes of the table of a path of m elements: 2^m patterns x m lanes ("shap"), x (m/2 + 1) steps ("inter")."""
    m = np.asarray(m, np.int64)
    return (np.int64(1) << m) * m * 8 * (m // 2 + 1 if kind == "inter" else 1)


def _table_cap() -> int:
    return int(min(TABLE_BYTES, free_gpu_bytes(TABLE_FREE_SHARE)))


def _plan_tables(m: np.ndarray, kind: str, variant: str, top: int) -> tuple[str, int, int]:
    """(variant, dmax, extra) for paths of m elements (see the comment at SHAP_VARIANT): tables for the paths of
    <= dmax elements and, filling what is left of the cap, for the first ``extra`` paths of dmax + 1 elements."""
    if variant == "dp" or m.size == 0:
        return "dp", 0, 0
    per_len = np.bincount(np.minimum(m, top + 1), weights=_table_bytes(np.minimum(m, top), kind),
                          minlength=top + 2)
    cum = np.cumsum(per_len)
    cap = _table_cap()
    fits = np.flatnonzero(cum[1 : top + 1] <= cap)
    dmax = int(fits[-1]) + 1 if fits.size else 0
    if m.max() <= dmax:
        return "table", dmax, 0
    extra = 0
    if dmax < top:
        extra = int(min(np.count_nonzero(m == dmax + 1), (cap - cum[dmax]) // _table_bytes(dmax + 1, kind)))
    share = (float(m[m <= dmax].sum()) + extra * (dmax + 1)) / float(m.sum())
    if share == 0.0 or (variant == "auto" and share < SPLIT_MIN_SHARE):
        return "dp", 0, 0
    return "split", dmax, extra


def _shap_variant(pk: _Packed, M: int, K: int) -> tuple[str, int, int]:
    """(SHAP variant, dmax, extra) of its tables; see SHAP_VARIANT and _plan_tables."""
    if SHAP_VARIANT not in ("auto", "dp", "smem", "table", "split"):
        raise ValueError(f"SHAP_VARIANT must be 'auto', 'dp', 'smem', 'table' or 'split', got {SHAP_VARIANT!r}")
    if SHAP_VARIANT == "smem":
        return ("smem", 0, 0) if M * K <= _SMEM_MAX_OUTPUTS else ("dp", 0, 0)
    return _plan_tables(pk.path_m, "shap", SHAP_VARIANT, TABLE_DMAX)


def _inter_plan(pk: _Packed) -> tuple[str, int, int]:
    """(interaction variant, dmax, extra) of its tables; see INTER_VARIANT and _plan_tables."""
    if INTER_VARIANT not in ("auto", "dp", "table", "split"):
        raise ValueError(f"INTER_VARIANT must be 'auto', 'dp', 'table' or 'split', got {INTER_VARIANT!r}")
    return _plan_tables(pk.path_m, "inter", INTER_VARIANT, min(INTER_TABLE_DMAX, TABLE_DMAX))


def _split_packs(pk: _Packed, dmax: int, extra: int = 0) -> tuple[_Packed, _Packed]:
    """Packings of pk's paths of <= dmax elements (and the first ``extra`` of dmax + 1 elements) and of the others
    (cached on pk)."""
    if (dmax, extra) not in pk.split:
        m = np.diff(pk.ps.path_ptr)
        short = m <= dmax
        short[np.flatnonzero(m == dmax + 1)[:extra]] = True
        pk.split[(dmax, extra)] = (_pack(pk.ps.select(short)), _pack(pk.ps.select(~short)))
    return pk.split[(dmax, extra)]


def _tables(pk: _Packed, kind: str = "shap"):
    """(etoff per packed element, table) for the SHAP ("shap") or interaction ("inter") table variant, built on the
    device once per packing."""
    if kind in pk.tables:
        return pk.tables[kind]
    cp = cupy_module()
    d = (pk.short_size - 1).astype(np.int64)
    sizes = _table_bytes(d, kind) // 8
    t_off = np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int64)
    t_pat = np.concatenate([[0], np.cumsum(1 << d)]).astype(np.int64)
    n_elems = int(pk.short_root[-1] + pk.short_size[-1])
    item = np.repeat(np.arange(d.size), pk.short_size)
    local = np.arange(n_elems, dtype=np.int64) - pk.short_root[item]
    etoff = np.where(local > 0, t_off[item] + local - 1, 0).astype(np.int64)
    table = cp.empty(max(1, int(sizes.sum())), dtype=cp.float64)
    total = int(t_pat[-1])
    build = "build_inter_tables" if kind == "inter" else "build_tables"
    get_kernel(_SRC, build)((_grid_for(total),), (_THREADS,),
                            (cp.asarray(pk.short_root.astype(np.int64)), cp.asarray(d.astype(np.int32)),
                             cp.asarray(t_off), cp.asarray(t_pat), np.int64(d.size), pk.elems[7], table))
    pk.tables[kind] = (cp.asarray(etoff), table)
    return pk.tables[kind]


def _grid_for(n_work: int) -> int:
    return int(max(1, min(math.ceil(n_work / _THREADS), _sm_count() * 16)))


def _predict(pk: _Packed, Xd, M: int, K: int):
    """Margins (n, K) of the paths' model for device rows Xd (base_offset included)."""
    cp = cupy_module()
    n = Xd.shape[0]
    out = cp.zeros((n, K), dtype=cp.float64)
    if pk.n_paths:
        kern = _kernel("predict", pk.xdtype)
        kern((_grid_for(n * pk.n_paths),), (_THREADS,),
             (Xd, np.int64(n), np.int32(M), np.int32(K), pk.pred_start, pk.pred_len, np.int64(pk.n_paths),
              *pk.elems, out))
    out += cp.asarray(pk.ps.base_offset)[None, :]
    return out


def _run_long(pk: _Packed, Xd, M: int, K: int, phi, interactions: bool):
    if pk.n_long == 0:
        return
    cp = cupy_module()
    n = Xd.shape[0]
    per_thread = 3 * pk.long_max * 8
    threads = int(min(n * pk.n_long, max(_THREADS, min(1 << 16, _budget() // 4 // per_thread))))
    blocks = math.ceil(threads / _THREADS)
    scratch = cp.empty(blocks * _THREADS * 3 * pk.long_max, dtype=cp.float64)
    _kernel("long", pk.xdtype)((blocks,), (_THREADS,),
                               (Xd, np.int64(n), np.int32(M), np.int32(K), pk.long_start, pk.long_len,
                                pk.long_item, np.int64(pk.n_long), *pk.elems, phi, scratch,
                                np.int32(pk.long_max), np.int32(1 if interactions else 0)))


def _chunks(n: int, bytes_per_row: int):
    size = max(1, min(n, _budget() // max(1, bytes_per_row)))
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def _bar(progress, n: int, n_chunks: int):
    if progress is None and n_chunks <= 1 and n < 1_000_000:
        return False
    return progress


def _driver(paths: PathSet, X, tree_limit, progress, desc: str, out_cols: tuple, bytes_per_row_extra: int,
            compute, prepare=None):
    """Shared chunk loop: validates X, packs paths, calls prepare(pk) (tables, before the chunk budget is taken),
    allocates the output, calls compute(pk, Xd, out_chunk, a, b) per chunk of rows."""
    tl = check_tree_limit(tree_limit)
    pk = packed_paths(paths, tl)
    ps = pk.ps
    X = _check_x(X, ps)
    if prepare is not None:
        prepare(pk)
    cp = cupy_module()
    on_gpu = is_cupy_array(X)
    n, M = X.shape
    shape = (n,) + out_cols
    row_bytes = int(np.prod(out_cols)) * 8 + M * pk.xdtype.itemsize + bytes_per_row_extra
    chunks = _chunks(n, row_bytes)
    if on_gpu:
        need, free = int(np.prod(shape)) * 8, free_gpu_bytes(1.0)
        if need > free:
            raise MemoryError(f"{desc} for {n} CuPy rows need {need / 1e9:.3g} GB of GPU memory for the output "
                              f"{shape} float64, more than is free ({free / 1e9:.3g} GB); pass NumPy "
                              "input (the output then streams to host memory in chunks) or fewer rows")
        out = cp.zeros(shape, dtype=cp.float64)
    else:
        out = np.empty(shape, dtype=np.float64)
    with progress_bar(n, desc, _bar(progress, n, len(chunks))) as bar:
        for a, b in chunks:
            Xd = _to_device(X[a:b], pk.xdtype)
            dst = out[a:b] if on_gpu else cp.zeros((b - a,) + out_cols, dtype=cp.float64)
            compute(pk, Xd, dst, a, b)
            if not on_gpu:
                download(dst, out[a:b])
            bar.update(b - a)
    return out


@functools.lru_cache(maxsize=None)
def _l2_bytes() -> int:
    return int(cupy_module().cuda.Device().attributes["L2CacheSize"])


def _bank_group(rows_per_warp: int, row_out_bytes: int) -> int:
    """Row blocks per group in warp_task: as many as keep the group's outputs within a quarter of the L2 cache."""
    return int(min(1 << 30, max(1, (_l2_bytes() // 4) // max(1, rows_per_warp * row_out_bytes))))


def _warp_args(pk: _Packed, Xd, M: int, K: int, rows_per_warp: int, row_out_bytes: int) -> tuple:
    return (Xd, np.int64(Xd.shape[0]), np.int32(M), np.int32(K), pk.bin_ptr, np.int64(pk.n_bins),
            np.int32(rows_per_warp), np.int32(_bank_group(rows_per_warp, row_out_bytes)), *pk.elems)


@functools.lru_cache(maxsize=None)
def _gauss_legendre():
    """Gauss-Legendre rules on [0, 1] for 1..16 nodes on the device: for Q nodes, the nodes then the weights at
    offset Q (Q - 1) (inter_quad_body's s_gl)."""
    parts = []
    for q in range(1, _QUAD_SIZES[-1] + 1):
        x, w = np.polynomial.legendre.leggauss(q)
        parts += [(x + 1.0) / 2.0, w / 2.0]
    return cupy_module().asarray(np.concatenate(parts))


def _row_kernel(dp: _Packed, kind: str, variant: str) -> str:
    """Name of the per-row kernel for packing dp (SHAP_ROW_KERNEL / INTER_ROW_KERNEL; a quadrature kernel's rule
    size fits the longest warp-packed path)."""
    knob, choice = ("INTER_ROW_KERNEL", INTER_ROW_KERNEL) if kind == "inter" else ("SHAP_ROW_KERNEL", SHAP_ROW_KERNEL)
    if choice not in ("quadrature", "dp"):
        raise ValueError(f"{knob} must be 'quadrature' or 'dp', got {choice!r}")
    if variant == "smem":
        return "shap_smem"
    if choice == "dp":
        return "interactions" if kind == "inter" else "shap"
    d = int(dp.short_size.max()) - 1 if dp.short_size.size else 1
    size = next(q for q in _QUAD_SIZES if 2 * q >= d)
    return f"{'inter' if kind == 'inter' else 'shap'}_quad{size}"


def _planned(pk: _Packed, kind: str):
    """_shap_variant / _inter_plan for pk, decided once per packing and setting of the knobs (free memory is read
    when first decided, as the tables built then stay cached)."""
    knobs = (kind, SHAP_VARIANT, INTER_VARIANT, TABLE_DMAX, INTER_TABLE_DMAX, TABLE_BYTES, TABLE_FREE_SHARE,
             SPLIT_MIN_SHARE)
    if knobs not in pk.plans:
        pk.plans[knobs] = _inter_plan(pk) if kind == "inter" else _shap_variant(pk, pk.ps.n_features,
                                                                                pk.ps.n_outputs)
    return pk.plans[knobs]


def _setup(pk: _Packed, kind: str) -> tuple[str, _Packed | None, _Packed | None]:
    """Plan the variant and build its tables (before the chunk budget is taken): (variant, packing with tables or
    None, packing for the DP or None)."""
    variant, dmax, extra = _planned(pk, kind)
    tp, dp = None, pk
    if variant == "table":
        tp, dp = pk, None
    elif variant == "split":
        tp, dp = _split_packs(pk, dmax, extra)
    if tp is not None:
        _tables(tp, kind)
    return variant, tp, dp


def _launch_variant(pk: _Packed, Xd, phi, M: int, K: int, kind: str) -> None:
    """The table kernel on the packing that has tables and the DP (then the long-path) kernel on the rest, as
    _setup plans them for ``kind`` ("shap" or "inter")."""
    n = Xd.shape[0]
    inter = kind == "inter"
    variant, tp, dp = _setup(pk, kind)
    rb = (M + 1) * (M + 1 if inter else 1) * K * 8          # output bytes per row
    if tp is not None:
        r = _rows_per_warp(n, tp.n_bins, 1024)
        _launch_warp(_kernel("inter_table" if inter else "shap_table", pk.xdtype), tp, n, r,
                     _warp_args(tp, Xd, M, K, r, rb) + (*_tables(tp, kind), phi))
    if dp is not None:
        r = _rows_per_warp(n, dp.n_bins, 64 if inter else 1024)
        name = _row_kernel(dp, kind, variant)
        smem = 8 * M * K * (_THREADS // _WARP) if variant == "smem" else 0
        rules = (_gauss_legendre(),) if "_quad" in name else ()
        _launch_warp(_kernel(name, pk.xdtype), dp, n, r, _warp_args(dp, Xd, M, K, r, rb) + rules + (phi,), smem)
        _run_long(dp, Xd, M, K, phi, inter)


def _shap_chunk(pk: _Packed, Xd, phi, M: int, K: int) -> None:
    """Path-dependent SHAP values of device rows Xd into phi (n, M+1, K), with the variant _shap_variant picks."""
    _launch_variant(pk, Xd, phi, M, K, "shap")
    phi[:, M, :] += pk.bias_d[None, :]


def _interactions_chunk(pk: _Packed, Xd, phi, M: int, K: int) -> None:
    """Interaction values of device rows Xd into phi (n, M+1, M+1, K), with the variant _inter_plan picks. Every
    kernel writes the diagonal and the upper triangle; mirror_upper then fills the lower triangle."""
    _launch_variant(pk, Xd, phi, M, K, "inter")
    n = Xd.shape[0]
    get_kernel(_SRC, "mirror_upper")((_grid_for(n * (M + 1) * (M + 1) * K),), (_THREADS,),
                                     (phi, np.int64(n), np.int32(M + 1), np.int32(K), pk.bias_d))


def _path_dependent(paths: PathSet, X, tree_limit, progress, interactions: bool):
    M, K = paths.n_features, paths.n_outputs
    chunk = _interactions_chunk if interactions else _shap_chunk

    def compute(pk, Xd, phi, a, b):
        chunk(pk, Xd, phi, M, K)

    cols = (M + 1, M + 1, K) if interactions else (M + 1, K)
    desc = "GPU TreeSHAP interactions" if interactions else "GPU TreeSHAP"
    kind = "inter" if interactions else "shap"
    return _driver(paths, X, tree_limit, progress, desc, cols, 0, compute, lambda pk: _setup(pk, kind))


def shap_values(paths: PathSet, X, *, tree_limit=None, progress=None):
    """Path-dependent SHAP values, (n, M+1, K) float64, bias in column M (CuPy in -> CuPy out)."""
    return _path_dependent(paths, X, tree_limit, progress, False)


def interaction_values(paths: PathSet, X, *, tree_limit=None, progress=None):
    """SHAP interaction values, (n, M+1, M+1, K) float64, bias at [M, M] (CuPy in -> CuPy out)."""
    return _path_dependent(paths, X, tree_limit, progress, True)


def _transform(xp, code: str, margin, y):
    if code == "logistic":
        return 1.0 / (1.0 + xp.exp(-margin))
    if code == "logistic_nlogloss":
        return xp.log1p(xp.exp(margin)) - y * margin
    if code == "squared_loss":
        return (margin - y) ** 2
    return margin


def _weights(max_len: int) -> np.ndarray:
    """W[s, n] = s! (n - s - 1)! / n! for 0 <= s < n <= max_len, (max_len + 2, max_len + 2)."""
    W = np.zeros((max_len + 2, max_len + 2))
    for nn in range(1, max_len + 1):
        for s in range(nn):
            W[s, nn] = math.exp(math.lgamma(s + 1) + math.lgamma(nn - s) - math.lgamma(nn + 1))
    return W


def interventional_shap_values(paths: PathSet, X, background, *, transform="identity", y=None, tree_limit=None,
                               progress=None):
    """Interventional SHAP values averaged over ``background`` rows, (n, M+1, K), bias in column M.

    Same semantics as the CPU twin (shap's ``dense_independent``): with a non-identity transform each (x, r) pair is
    rescaled by (T(f(x), y) - T(f(r), y)) / (f(x) - f(r)) (1 where the margins are equal); the bias is the mean of
    T(f(r), 0).
    """
    cp = cupy_module()
    M, K = paths.n_features, paths.n_outputs
    tl = check_tree_limit(tree_limit)
    pk = packed_paths(paths, tl)
    Xc = _check_x(X, pk.ps)
    R = _check_x(background, pk.ps, name="background")
    n = Xc.shape[0]
    y_host = check_transform(transform, None if y is None else (y.get() if is_cupy_array(y) else y), n)
    Rd = _to_device(R, pk.xdtype)
    nR = Rd.shape[0]
    fr = _predict(pk, Rd, M, K)                                               # (nR, K)
    base_col = _transform(cp, transform, fr, 0.0).mean(axis=0)                # (K,)
    lmax = max(pk.max_len, 1)
    Wt = cp.asarray(_weights(max(lmax, _WARP)))
    wstride = np.int32(Wt.shape[1])
    yd = cp.asarray(y_host)
    identity = transform == "identity"
    null = np.uint64(0)

    def compute(pk, Xd, phi, a, b):
        nc = Xd.shape[0]
        scale = null
        if not identity:
            fx = _predict(pk, Xd, M, K)                                       # (nc, K)
            yc = yd[a:b, None, None]
            num = _transform(cp, transform, fx[:, None, :], yc) - _transform(cp, transform, fr[None, :, :], yc)
            den = fx[:, None, :] - fr[None, :, :]
            same = den == 0
            scale = cp.ascontiguousarray(cp.where(same, 1.0, num / cp.where(same, 1.0, den)))
        rpw = _rows_per_warp(nc, pk.n_bins, 64)
        _launch_warp(_kernel("interventional", pk.xdtype), pk, nc, rpw,
                     (Xd, np.int64(nc), Rd, np.int64(nR), np.int32(M), np.int32(K), pk.bin_ptr,
                      np.int64(pk.n_bins), np.int32(rpw), np.int32(_bank_group(rpw, (M + 1) * K * 8)), *pk.elems,
                      scale, Wt, wstride, phi))
        if pk.n_long:
            threads = int(min(nc * pk.n_long, 1 << 16))
            blocks = math.ceil(threads / _THREADS)
            scratch = cp.empty(blocks * _THREADS * pk.long_max, dtype=cp.float64)
            _kernel("long_interventional", pk.xdtype)(
                (blocks,), (_THREADS,),
                (Xd, np.int64(nc), Rd, np.int64(nR), np.int32(M), np.int32(K), pk.long_start, pk.long_len,
                 pk.long_item, np.int64(pk.n_long), *pk.elems, scale, Wt, wstride, phi, scratch,
                 np.int32(pk.long_max)))
        phi[:, M, :] += base_col[None, :]

    extra = 0 if identity else nR * K * 8 * 3
    return _driver(paths, Xc, tl, progress, "GPU interventional TreeSHAP", (M + 1, K), extra, compute)
