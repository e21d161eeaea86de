"""GPU TreeSHAP plumbing shared by the engine's modules: options, device packing of paths, fixed-point output
scales, launches and the chunk loop."""
from __future__ import annotations

import contextlib
import functools
import math
import weakref
from dataclasses import dataclass, field
from typing import ClassVar

import numpy as np

from .. import device
from .._cuda import get_kernel
from .._options import Options
from .._progress import progress_bar, progress_enabled
from ..device import cupy_module, download, free_gpu_bytes, is_cupy_array
from ._inputs import check_matrix, check_tree_limit
from .pack import plan_packing
from .paths import PathSet

_SRC = "treeshap/treeshap.cu"
_WARP = 32
_THREADS = 256
_CACHE: dict[tuple[int, int | None], "_Packed"] = {}


@dataclass
class GpuOptions(Options):
    """Options of the GPU engine (``hitml.kernels.treeshap.gpu.options``); docs/gpu_treeshap.md describes them.

    deterministic: outputs summed in 64-bit fixed point, so the same input gives the same bytes on every call (False:
      double atomics, whose last bits depend on the order warps arrive in). memory_budget: bytes per chunk of rows
      (None: half of the free device memory). shap_variant / inter_variant: "auto" or a forced kernel variant.
      shap_row_kernel / inter_row_kernel: the per-row kernel for paths without tables, "dp" or "quadrature".
      shap_sums: how SHAP terms reach the output: "block" sums the terms of a block's paths (neighbouring paths of
      one tree) per output in shared memory and adds each sum once, "direct" adds every term; "auto" picks (the
      same bytes either way); it applies to SHAP values and to the interaction table kernel. pinned_bytes:
      page-locked host memory the engine may hold for NumPy outputs and input staging (blocks are reused once their
      arrays are gone); 0: plain NumPy arrays and staged copies.
      shap_linear: the per-tree linear kernel for SHAP values (linear.cu): "auto" where no tables fit and every path
      would go to the per-row DP (deep forests), or where tables would serve under half of the path elements
      (leaf-wise boosters), except boosted multiclass models; "always" for every tree it can take, "never".
    """

    deterministic: bool = True
    memory_budget: int | None = None
    shap_variant: str = "auto"
    inter_variant: str = "auto"
    shap_row_kernel: str = "dp"
    inter_row_kernel: str = "quadrature"
    shap_sums: str = "auto"
    pinned_bytes: int = 4 << 30
    shap_linear: str = "auto"

    choices: ClassVar[dict[str, tuple]] = {
        "shap_variant": ("auto", "dp", "smem", "table", "split"), "inter_variant": ("auto", "dp", "table", "split"),
        "shap_row_kernel": ("dp", "quadrature"), "inter_row_kernel": ("quadrature", "dp"),
        "shap_sums": ("auto", "block", "direct"), "shap_linear": ("auto", "always", "never")}
    flags: ClassVar[tuple[str, ...]] = ("deterministic",)

    def check(self, name: str, value):
        if name == "memory_budget" and value is not None and int(value) < 1:
            raise ValueError(f"options.memory_budget must be a positive number of bytes or None, got {value!r}")
        if name == "pinned_bytes" and (isinstance(value, bool) or int(value) != value or value < 0):
            raise ValueError(f"options.pinned_bytes must be a number of bytes >= 0, got {value!r}")
        return value


options = GpuOptions()


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
    vval_h: np.ndarray       # host: the leaf values (elems[13]) and their groups, for the fixed-point copies
    vgroup_h: np.ndarray
    bin_ptr_h: np.ndarray    # host: bin_ptr
    feat_h: np.ndarray       # host: feature of each packed element (-1: root)
    group_h: np.ndarray      # host: output group of each packed element's path (its first leaf value's group)
    one_value: bool          # every warp-packed path has one leaf value (block sums apply)
    plans: dict = field(default_factory=dict)    # variant choices, per setting of the options
    tables: dict = field(default_factory=dict)   # "shap" / "inter" -> (etoff, table), built on first use
    split: dict = field(default_factory=dict)    # (dmax, extra) -> packings of the paths of <= dmax elements and the others
    vfix: dict = field(default_factory=dict)     # scale bytes -> leaf values times the fixed-point scale, on the device
    bound: np.ndarray | None = None              # output_bound(ps), computed on first use
    slots: dict = field(default_factory=dict)    # warps per block -> block-sum slots (block_slots)
    scales: dict = field(default_factory=dict)   # "shap" / "inter" -> the fixed-point scale of its outputs


def _down32(t: np.ndarray) -> np.ndarray:
    """The largest float32 <= t: for float32 x, (x <= t) == (x <= _down32(t)) and (t < x) == (_down32(t) < x)."""
    t32 = t.astype(np.float32)
    bad = t32.astype(np.float64) > t
    t32[bad] = np.nextafter(t32[bad], np.float32(-np.inf))
    return t32


def carries_values(ps: PathSet) -> np.ndarray:
    """Which paths of ``ps`` carry SHAP values (a mask): those with an element and a nonzero leaf value."""
    return (np.diff(ps.path_ptr) > 0) & np.any(ps.leaf_value != 0.0, axis=1)


def _pack(ps: PathSet) -> _Packed:
    cp = cupy_module()
    P = ps.n_paths
    m = np.diff(ps.path_ptr).astype(np.int64)                 # stored elements per path (root excluded)
    nz = ps.leaf_value != 0.0
    nnz = nz.sum(axis=1)
    vptr = np.concatenate([[0], np.cumsum(nnz)]).astype(np.int32)
    pr, pk = np.nonzero(nz)
    vgroup = pk.astype(np.int32) if pk.size else np.zeros(1, np.int32)
    vval = ps.leaf_value[pr, pk].astype(np.float64) if pk.size else np.zeros(1)
    work = np.flatnonzero(carries_values(ps))
    size = m[work] + 1
    short = size <= _WARP
    plan = plan_packing(size[short], _WARP, group=ps.tree_index[work[short]])
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
    if len(ps.feature) == 0:
        src[:] = 0

    def gather(arr, root_value, dtype):
        out = np.empty(total, dtype=dtype)
        if len(ps.feature):
            out[:] = arr[src]
        out[root] = root_value
        return out

    xdtype = np.dtype(np.float32) if np.dtype(ps.input_dtype) == np.float32 else np.dtype(np.float64)
    lo = gather(ps.lower, -np.inf, np.float64)
    hi = gather(ps.upper, np.inf, np.float64)
    if xdtype == np.float32:
        lo, hi = _down32(lo), _down32(hi)
    flags = gather(ps.missing_ok.astype(np.uint8) | (ps.cat_outside_ok.astype(np.uint8) << 1), 1, np.uint8)
    cwords = ps.cat_words if len(ps.cat_words) else np.zeros(1, np.uint32)
    lane_short = np.zeros(ids.size, np.int64)
    lane_short[: s_ids.size] = plan.lane_of
    pred_start = np.zeros(P, np.int64)                        # predictions: first non-root packed element per path
    pred_len = np.zeros(P, np.int32)
    pred_start[ids] = starts + 1
    pred_len[ids] = (sizes - 1).astype(np.int32)
    d = cp.asarray
    feat = gather(ps.feature, -1, np.int32)
    first_group = vgroup[np.minimum(vptr[:-1], vgroup.size - 1)]     # the first leaf value's group of each path
    elems = (d(feat), d(lo), d(hi), d(flags), d(gather(ps.cat_ptr, -1, np.int32)),
             d(gather(ps.cat_nwords, 0, np.int32)), d(cwords.astype(np.uint32)),
             d(gather(ps.zero_fraction, 1.0, np.float64)), d(lane_short[slot_item].astype(np.int32)),
             d(sizes[slot_item].astype(np.int32)), d(ids[slot_item].astype(np.int32)), d(vptr), d(vgroup), d(vval))
    long_sizes = size[~short]
    one = lambda a, dt: d(a.astype(dt) if l_ids.size else np.zeros(1, dt))  # noqa: E731 - a local shorthand for the packed arrays below
    return _Packed(
        ps=ps, xdtype=xdtype, elems=elems, bin_ptr=d(plan.bin_ptr.astype(np.int64)), n_bins=plan.n_bins,
        long_start=one(starts[s_ids.size:], np.int64), long_len=one(long_sizes, np.int32),
        long_item=one(l_ids, np.int32), n_long=int(l_ids.size), long_max=int(long_sizes.max()) if l_ids.size else 0,
        pred_start=d(pred_start), pred_len=d(pred_len), n_paths=P, max_len=int(m.max()) if P else 0,
        utilisation=plan.utilisation if plan.n_bins else 1.0, bias_d=d(ps.bias()),
        short_root=starts[: s_ids.size].copy(), short_size=sizes[: s_ids.size].copy(), path_m=m[work].copy(),
        vval_h=vval, vgroup_h=vgroup, bin_ptr_h=plan.bin_ptr.astype(np.int64), feat_h=feat,
        group_h=first_group[ids][slot_item].astype(np.int32), one_value=bool(np.all(nnz[s_ids] <= 1)))


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
    """Free the cached packings and tables of every model (they are rebuilt on the next call), return CuPy's
    pooled blocks to the device and free the pinned host blocks no output uses."""
    _CACHE.clear()
    cupy_module().get_default_memory_pool().free_all_blocks()
    device.release_pinned()


def _drop(pid: int) -> None:
    for k in [k for k in _CACHE if k[0] == pid]:
        del _CACHE[k]


# Fixed-point sums (treeshap.cu, "Reproducible sums"). Every output of a tree lies within the range of its leaf
# values (path-dependent and interventional SHAP values are Shapley-weighted means of differences of expectations of
# the tree), so B_g = sum over trees of 2 max |leaf| bounds every output of group g and every single term; an
# interaction diagonal phi_ii = phi_i - sum_j phi_ij is bounded by (1 + path length) B_g. The scale is the power of
# two that maps B_g times the headroom to 2^62: integer sums wrap harmlessly on the way, only the final value must fit.
_HEADROOM = 16.0      # margin for zero fractions above 1 (inconsistent covers) and the terms' own rounding


def output_bound(ps: PathSet) -> np.ndarray:
    """B_g (K,) above: a bound on |output - bias| of every SHAP value and margin of group g."""
    v = np.abs(ps.leaf_value)
    if not np.isfinite(v).all():
        raise ValueError("the model has non-finite leaf values (inf or NaN); its SHAP values are not defined")
    if ps.n_paths == 0:
        return np.zeros(ps.n_outputs)
    starts = np.flatnonzero(np.r_[True, np.diff(ps.tree_index) != 0])
    return 2.0 * np.maximum.reduceat(v, starts, axis=0).sum(axis=0)


def bound_of(pk: _Packed) -> np.ndarray:
    """output_bound of pk's paths (cached on pk)."""
    if pk.bound is None:
        pk.bound = output_bound(pk.ps)
    return pk.bound


def fixed_scale(bound: np.ndarray, factor: float = 1.0) -> np.ndarray:
    """Per-group powers of two S_g with S_g * bound_g * factor * headroom <= 2^62."""
    b = np.maximum(np.asarray(bound, np.float64) * factor * _HEADROOM, np.finfo(np.float64).tiny)
    return np.ldexp(1.0, np.clip(62 - np.ceil(np.log2(b)).astype(np.int64), -1000, 1000))


def call_elems(pk: _Packed, scale: np.ndarray | None) -> tuple:
    """Element arguments of a kernel call: the leaf values times ``scale`` and det = 1 (fixed point), or the leaf
    values as they are and det = 0 (scale None: double atomics)."""
    if scale is None:
        return (*pk.elems, np.int32(0))
    key = scale.tobytes()
    if key not in pk.vfix:
        pk.vfix[key] = cupy_module().asarray(pk.vval_h * scale[pk.vgroup_h])
    return (*pk.elems[:13], pk.vfix[key], np.int32(1))


_INV: dict[tuple[int, bytes], object] = {}      # (device, scale bytes) -> 1 / scale on the device


def inverse_scale(scale: np.ndarray):
    """1 / scale on the current device (cached: a host-to-device copy per call costs more than the pass itself on
    small outputs)."""
    cp = cupy_module()
    key = (cp.cuda.Device().id, scale.tobytes())
    if key not in _INV:
        _INV[key] = cp.asarray(1.0 / scale)
    return _INV[key]


def finish(phi, scale: np.ndarray | None, bias=None) -> None:
    """Turn phi's fixed-point sums (int64 bits in place, group fastest) into doubles; nothing for scale None. With
    ``bias`` (K,) on the device, phi is (n, M+1, K) and its column M also gets the bias (the bytes of a separate
    ``phi[:, M, :] += bias``, in the same launch)."""
    if scale is None or not phi.size:
        if bias is not None:
            phi[:, -1, :] += bias[None, :]
        return
    inv = inverse_scale(scale)
    if bias is None:
        get_kernel(_SRC, "fixed_to_double")((_grid_for(phi.size),), (_THREADS,),
                                            (phi, np.int64(phi.size), np.int32(scale.size), inv))
        return
    get_kernel(_SRC, "fixed_to_double_bias")((_grid_for(phi.size),), (_THREADS,),
                                             (phi, np.int64(phi.size), np.int32(scale.size), inv, bias,
                                              np.int32(phi.shape[1] * phi.shape[2])))


def kernel(name: str, xdtype: np.dtype):
    return get_kernel(_SRC, f"{name}_{'f32' if xdtype == np.float32 else 'f64'}")


def check_x(X, ps: PathSet, name: str = "X"):
    """Validate X as the CPU twin does (numeric, 2-D, n_features wide, non-empty); returns NumPy or CuPy X as is."""
    if not is_cupy_array(X):
        X = np.asarray(X)
    check_matrix(X, ps, name)            # dtype and shape only: no pass over (or kernel on) the values
    return X


_CONVERT_SRC = "treeshap/convert.cu"
_EXACT = {(np.dtype(np.float32), np.dtype(np.float64)): "f32_to_f64",
          (np.dtype(np.float64), np.dtype(np.float32)): "f64_to_f32"}


def exact_astype(x, dtype):
    """CuPy array ``x`` as a C-contiguous array of ``dtype``, converted as NumPy converts on the host.

    CuPy's own ``astype`` runs kernels compiled with ``-ftz=true``, which flush float32 subnormals to zero when
    widened to float64 and subnormal float32 results to zero when narrowed from float64 (a split between
    subnormals would then see zeros). float32 <-> float64 goes through convert.cu's exact conversions instead;
    every other cast (integers, bool, float16, same dtype) has no float32 subnormal to lose and stays CuPy's.
    """
    cp = cupy_module()
    dtype = np.dtype(dtype)
    x = cp.asarray(x)
    name = _EXACT.get((np.dtype(x.dtype), dtype))
    if name is None:
        return cp.ascontiguousarray(x.astype(dtype, copy=False))
    src = cp.ascontiguousarray(x)          # a same-dtype copy moves bits: no float instruction, nothing flushed
    out = cp.empty(x.shape, dtype=dtype)
    if out.size:
        get_kernel(_CONVERT_SRC, name)((_grid_for(out.size),), (_THREADS,), (src, out, np.int64(out.size)))
    return out


def to_device(X, xdtype, keep: list | None = None):
    """Rows of X on the device in the kernel's precision: the model's input dtype (float32) or float64. Host rows
    are cast on the host (fewer bytes to copy); with ``keep`` through a pinned block held there (device.upload).
    Device-side casts are exact (:func:`exact_astype`)."""
    cp = cupy_module()
    if not is_cupy_array(X):
        X = np.asarray(X)
        # float32 rows of a float64 kernel (XGBoost's rows, as shap declares its models): copied as they are (half
        # the bytes, no host cast, whose thread hand-offs cost more than the copy on small calls) and widened
        # exactly on the device
        src = X.dtype if X.dtype == np.float32 and xdtype == np.float64 else xdtype
        if keep is not None:
            Xd = device.upload(X, src, options.pinned_bytes, keep)
        else:
            Xd = cp.asarray(np.ascontiguousarray(X, dtype=src))
        return Xd if Xd.dtype == xdtype else exact_astype(Xd, xdtype)
    return exact_astype(X, xdtype)


def budget() -> int:
    return int(options.memory_budget) if options.memory_budget is not None else free_gpu_bytes(0.5)


@functools.lru_cache(maxsize=None)
def _sm_count() -> int:
    return int(cupy_module().cuda.Device().attributes["MultiProcessorCount"])


def rows_per_warp(n_rows: int, n_bins: int, cap: int) -> int:
    target = _sm_count() * 64 * 2                            # warps for about two full waves
    return int(min(cap, max(1, math.ceil(n_rows * n_bins / target))))


def launch_warp(kern, pk: _Packed, n_rows: int, rpw: int, args: tuple, shared_mem: int = 0):
    if pk.n_bins == 0 or n_rows == 0:
        return
    warps = pk.n_bins * math.ceil(n_rows / rpw)
    kern((math.ceil(warps * _WARP / _THREADS),), (_THREADS,), args, shared_mem=shared_mem)


# Block sums (treeshap.cu, "Block sums"): warps per block, and the shared memory of a block's accumulator.
BLOCK_WARPS = 8
_BLOCK_SMEM = 48 << 10
_BLOCK_ROWS = 32                 # rows per flush at most


def block_slots(pk: _Packed, M: int, K: int, warps: int = BLOCK_WARPS):
    """(eslot, gslot, soff, most slots of a group) on the device for block sums with ``warps`` bins per block: the
    distinct outputs (feature, group) of each group of bins, and each element's slot among them (cached on pk)."""
    if warps not in pk.slots:
        n_elems = int(pk.bin_ptr_h[-1])
        n_groups = -(-pk.n_bins // warps)
        g = np.repeat(np.arange(pk.n_bins, dtype=np.int64) // warps, np.diff(pk.bin_ptr_h))
        f = pk.feat_h[:n_elems].astype(np.int64)
        width = (M + 1) * K
        real = f >= 0
        key = g[real] * width + f[real] * K + pk.group_h[:n_elems][real]
        uniq, inv = np.unique(key, return_inverse=True)
        gslot = np.searchsorted(uniq // width, np.arange(n_groups + 1), side="left").astype(np.int64)
        eslot = np.zeros(max(1, n_elems), np.int32)
        eslot[np.flatnonzero(real)] = (inv - gslot[g[real]]).astype(np.int32)
        cp = cupy_module()
        most = int(np.diff(gslot).max()) if n_groups else 1
        pk.slots[warps] = (cp.asarray(eslot), cp.asarray(gslot), cp.asarray((uniq % width).astype(np.int32)
                                                                              if uniq.size else np.zeros(1, np.int32)),
                           max(1, most))
    return pk.slots[warps]


def _block_grid(pk: _Packed, n: int, most: int, warps: int) -> tuple[int, int, int]:
    """(rows per flush, rows per block, blocks) of a block-sum launch over pk's bins for n rows, with ``most``
    slots in the largest group."""
    rows = int(max(1, min(_BLOCK_ROWS, _BLOCK_SMEM // (8 * most))))
    n_groups = -(-pk.n_bins // warps)
    target = _sm_count() * 16                                # blocks for about two full waves
    rpw = int(min(1024, max(rows, math.ceil(n * n_groups / target))))
    rpw = -(-rpw // rows) * rows
    return rows, rpw, n_groups * math.ceil(n / rpw)


def launch_block(name: str, pk: _Packed, Xd, M: int, K: int, scale: np.ndarray | None, extra: tuple, phi,
                 warps: int = BLOCK_WARPS) -> None:
    """A block-sum kernel (shap_block, shap_table_block) over pk's bins for device rows Xd into phi."""
    n = Xd.shape[0]
    if pk.n_bins == 0 or n == 0:
        return
    eslot, gslot, soff, most = block_slots(pk, M, K, warps)
    rows, rpw, blocks = _block_grid(pk, n, most, warps)
    kernel(name, pk.xdtype)((blocks,), (warps * _WARP,),
                            (Xd, np.int64(n), np.int32(M), np.int32(K), pk.bin_ptr, np.int64(pk.n_bins),
                             np.int32(rpw), np.int32(rows), *call_elems(pk, scale), eslot, gslot, soff, *extra, phi),
                            shared_mem=rows * most * 8)


ITABLE_TMAX = 7                  # treeshap.cu's ITABLE_TMAX (TABLE_DMAX / 2 + 1): table steps per lane at most


def inter_block_slots(pk: _Packed, M: int, K: int, warps: int = BLOCK_WARPS):
    """(eslot, gslot, soff, most slots of a group) on the device for interaction block sums (inter_table_block) with
    ``warps`` bins per block: the distinct outputs (min(f, pf), max(f, pf), group) of the table cells of each group of
    bins, and for every packed element its ITABLE_TMAX cells' slots among them (-1: no cell). The cells are those of
    inter_table_body: lane r of a path of d elements takes step 0 (its diagonal) and the steps t <= d / 2 that
    pair_slot gives it, pairing it with element (r + t) mod d (cached on pk)."""
    key = ("inter", warps)
    if key not in pk.slots:
        n_elems = int(pk.bin_ptr_h[-1])
        n_groups = -(-pk.n_bins // warps)
        M1 = M + 1
        width = M1 * M1 * K
        item = np.repeat(np.arange(pk.short_root.size), pk.short_size)
        root = pk.short_root[item]
        d = (pk.short_size - 1)[item].astype(np.int64)
        r = np.arange(n_elems, dtype=np.int64) - root - 1              # -1: the root lane
        g = np.repeat(np.arange(pk.n_bins, dtype=np.int64) // warps, np.diff(pk.bin_ptr_h))
        f = pk.feat_h[:n_elems].astype(np.int64)
        keys = np.full((n_elems, ITABLE_TMAX), -1, np.int64)
        for t in range(ITABLE_TMAX):
            ok = (r >= 0) & (t <= d // 2) & ((t == 0) | (2 * t < d) | ((2 * t == d) & (r < t)))
            e = np.flatnonzero(ok)
            pf = f[root[e] + 1 + (r[e] + t) % d[e]]
            cell = np.minimum(f[e], pf) * M1 + np.maximum(f[e], pf)
            keys[e, t] = g[e] * width + cell * K + pk.group_h[:n_elems][e]
        real = keys >= 0
        uniq, inv = np.unique(keys[real], return_inverse=True)
        gslot = np.searchsorted(uniq // width, np.arange(n_groups + 1), side="left").astype(np.int64)
        eslot = np.full((max(1, n_elems), ITABLE_TMAX), -1, np.int32)
        rows, cols = np.nonzero(real)
        eslot[rows, cols] = (inv - gslot[g[rows]]).astype(np.int32)
        cp = cupy_module()
        most = int(np.diff(gslot).max()) if n_groups else 1
        pk.slots[key] = (cp.asarray(eslot.reshape(-1)), cp.asarray(gslot),
                         cp.asarray((uniq % width).astype(np.int32) if uniq.size else np.zeros(1, np.int32)),
                         max(1, most))
    return pk.slots[key]


def inter_block_fits(pk: _Packed, M: int, K: int, warps: int = BLOCK_WARPS) -> bool:
    """Whether inter_table_block takes pk: one leaf value per path, output offsets within a row that fit the
    kernel's int, and at least one row of a group's slots in the shared-memory accumulator."""
    if not pk.one_value or (M + 1) * (M + 1) * K >= 2 ** 31:
        return False
    return pk.n_bins == 0 or 8 * inter_block_slots(pk, M, K, warps)[3] <= _BLOCK_SMEM


def launch_inter_block(pk: _Packed, Xd, M: int, K: int, scale: np.ndarray | None, tables: tuple, phi,
                       warps: int = BLOCK_WARPS) -> None:
    """inter_table_block over pk's bins (every path with a table) for device rows Xd into phi (n, M+1, M+1, K):
    the diagonal and upper triangle, as inter_table writes them. At most 8 warps a block (the kernel is compiled
    for blocks of up to 256 threads, 4 blocks an SM)."""
    if not 1 <= warps <= 8:
        raise ValueError(f"inter_table_block takes 1 to 8 warps per block, got {warps}")
    n = Xd.shape[0]
    if pk.n_bins == 0 or n == 0:
        return
    eslot, gslot, soff, most = inter_block_slots(pk, M, K, warps)
    rows, rpw, blocks = _block_grid(pk, n, most, warps)
    kernel("inter_table_block", pk.xdtype)(
        (blocks,), (warps * _WARP,),
        (Xd, np.int64(n), np.int32(M), np.int32(K), pk.bin_ptr, np.int64(pk.n_bins), np.int32(rpw), np.int32(rows),
         *call_elems(pk, scale), eslot, gslot, soff, *tables, phi), shared_mem=rows * most * 8)


def _grid_for(n_work: int) -> int:
    return int(max(1, min(math.ceil(n_work / _THREADS), _sm_count() * 16)))


def predict(pk: _Packed, Xd, M: int, K: int, scale: np.ndarray | None):
    """Margins (n, K) of the paths' model for device rows Xd (base_offset included)."""
    cp = cupy_module()
    n = Xd.shape[0]
    out = cp.zeros((n, K), dtype=cp.float64)
    if pk.n_paths:
        kernel("predict", pk.xdtype)((_grid_for(n * pk.n_paths),), (_THREADS,),
                                     (Xd, np.int64(n), np.int32(M), np.int32(K), pk.pred_start, pk.pred_len,
                                      np.int64(pk.n_paths), *call_elems(pk, scale), out))
        finish(out, scale)
    out += cp.asarray(pk.ps.base_offset)[None, :]
    return out


def run_long(pk: _Packed, Xd, M: int, K: int, phi, interactions: bool, scale: np.ndarray | None):
    """The long-path kernel (one thread per (row, path) of more than 31 elements) into phi."""
    if pk.n_long == 0:
        return
    cp = cupy_module()
    n = Xd.shape[0]
    per_thread = 3 * pk.long_max * 8
    threads = int(min(n * pk.n_long, max(_THREADS, min(1 << 16, budget() // 4 // per_thread))))
    blocks = math.ceil(threads / _THREADS)
    scratch = cp.empty(blocks * _THREADS * 3 * pk.long_max, dtype=cp.float64)
    kernel("long", pk.xdtype)((blocks,), (_THREADS,),
                              (Xd, np.int64(n), np.int32(M), np.int32(K), pk.long_start, pk.long_len, pk.long_item,
                               np.int64(pk.n_long), *call_elems(pk, scale), phi, scratch, np.int32(pk.long_max),
                               np.int32(1 if interactions else 0)))


# a call needing at most this many bytes is one chunk without asking the driver for free memory (cudaMemGetInfo is a
# visible share of a sub-millisecond call); an explicit options.memory_budget is always honoured
_SMALL_CALL_BYTES = 16 << 20


def _chunks(n: int, bytes_per_row: int):
    if options.memory_budget is None and n * bytes_per_row <= _SMALL_CALL_BYTES:
        return [(0, n)]
    size = max(1, min(n, budget() // max(1, bytes_per_row)))
    return [(a, min(n, a + size)) for a in range(0, n, size)]


def _bar(progress, n: int, n_chunks: int):
    if progress is None and n_chunks <= 1 and n < 1_000_000:
        return False
    return progress


class _NoBar:
    def update(self, n: int) -> None:
        pass


def _progress(n: int, desc: str, progress, n_chunks: int):
    """The chunk loop's progress bar; no tqdm object at all where it is off (its set-up is a visible share of a
    sub-millisecond call)."""
    setting = _bar(progress, n, n_chunks)
    if not progress_enabled(setting):
        return contextlib.nullcontext(_NoBar())
    return progress_bar(n, desc, setting)


def driver(paths: PathSet, X, tree_limit, progress, desc: str, out_cols: tuple, bytes_per_row_extra: int,
           compute, prepare=None):
    """Shared chunk loop: validates X, packs paths, calls prepare(pk) (tables, before the chunk budget is taken),
    allocates the output, calls compute(pk, Xd, out_chunk, a, b) per chunk of rows. The chunk's output starts as
    zeros (0.0 and a zero fixed-point sum have the same bits)."""
    pk = packed_paths(paths, check_tree_limit(tree_limit))
    X = check_x(X, pk.ps)
    if prepare is not None:
        prepare(pk)
    cp = cupy_module()
    on_gpu = is_cupy_array(X)
    n, M = X.shape
    shape = (n,) + out_cols
    row_bytes = int(np.prod(out_cols)) * 8
    chunks = _chunks(n, row_bytes + M * pk.xdtype.itemsize + bytes_per_row_extra)
    if on_gpu:
        need = int(np.prod(shape)) * 8
        if need > _SMALL_CALL_BYTES and need > free_gpu_bytes(1.0):
            free = free_gpu_bytes(1.0)
            raise MemoryError(f"{desc} for {n} CuPy rows need {need / 1e9:.3g} GB of GPU memory for the output "
                              f"{shape} float64, more than is free ({free / 1e9:.3g} GB); pass NumPy "
                              "input (the output then streams to host memory in chunks) or fewer rows")
        out = cp.zeros(shape, dtype=cp.float64)
        with _progress(n, desc, progress, len(chunks)) as bar:
            for a, b in chunks:
                compute(pk, to_device(X[a:b], pk.xdtype), out[a:b], a, b)
                bar.update(b - a)
        return out
    out = device.pinned_empty(shape, np.float64, options.pinned_bytes)
    if out is None:
        out = np.empty(shape, dtype=np.float64)
    keep: list = []                           # the chunk's pinned input block, in use until its upload is done
    uploaded = None
    main = cp.cuda.get_current_stream()
    copier = device.copy_stream() if device.is_pinned(out) else None
    try:
        with _progress(n, desc, progress, len(chunks)) as bar:
            for a, b in chunks:
                if keep:                          # the last chunk's upload is done long before: its block is free
                    uploaded.synchronize()
                    keep.clear()
                Xd = to_device(X[a:b], pk.xdtype, keep)
                uploaded = main.record()
                if copier is not None:           # zeroed piece by piece there (behind the previous piece's copy)
                    dst = cp.empty((b - a,) + out_cols, dtype=cp.float64)
                    _pieces_to_pinned(pk, Xd, dst, out, a, compute, main, copier, row_bytes, bar)
                    continue
                dst = cp.zeros((b - a,) + out_cols, dtype=cp.float64)
                queued = None                     # (rows, event) computed on the device, not yet downloaded
                for c, d in _pieces(b - a, row_bytes):
                    compute(pk, Xd[c:d], dst[c:d], a + c, a + d)
                    done = main.record()
                    if queued is not None:        # the previous piece downloads while this one computes
                        _download_piece(dst, out, a, queued, bar)
                    queued = (c, d, done)
                _download_piece(dst, out, a, queued, bar)
    finally:                                  # also on an error: no copy may still write into ``out``
        if copier is not None:
            copier.synchronize()
        if keep:
            main.synchronize()
    return out


# NumPy output: a chunk is computed in pieces, each downloaded while the next computes (the transfer of a large
# result costs a sizeable share of the kernel time: docs/design/treeshap.md, section 8).
_PIECES = 8
_PIECE_MIN_BYTES = 32 << 20
# into pinned output: copies queue without a host wait, so smaller pieces pay: the last piece's copy is the part of
# the download that overlaps no compute (covtype-small, 31 MB: 8 MB pieces left 0.2 ms of 0.6 ms of copy exposed)
_PINNED_PIECE_MIN_BYTES = 4 << 20
# and of enough rows to keep the device busy: interactions of a few hundred rows have megabytes of output per row,
# and pieces of a few dozen rows each re-walk every path for little work (covtype-medium, 200 rows: docs/design/
# treeshap.md, section 2e)
_PINNED_PIECE_MIN_ROWS = 48


def _pieces(n: int, row_bytes: int, least: int | None = None, min_rows: int = 1) -> list[tuple[int, int]]:
    """Row ranges of the pieces of a chunk of n rows: up to _PIECES, each of at least ``least`` bytes of output
    (_PIECE_MIN_BYTES by default) and at least ``min_rows`` rows."""
    k = int(max(1, min(_PIECES, n * row_bytes // (least or _PIECE_MIN_BYTES), n // max(1, min_rows))))
    edges = [n * i // k for i in range(k + 1)]           # integers (np.linspace costs tens of microseconds)
    return list(zip(edges[:-1], edges[1:]))


def _pieces_to_pinned(pk, Xd, dst, out: np.ndarray, a: int, compute, main, copier, row_bytes: int, bar) -> None:
    """One chunk into pinned ``out`` (``dst``: the chunk's uninitialised device output): each piece is zeroed, computed,
    and its copy queued on ``copier`` behind an event of its compute, so it runs while the next piece is zeroed and
    computed and the host never waits here; the main stream then waits for the copies, so ``dst``'s memory is
    reused only after they read it."""
    for c, d in _pieces(Xd.shape[0], row_bytes, _PINNED_PIECE_MIN_BYTES, _PINNED_PIECE_MIN_ROWS):
        part = dst[c:d]
        part.data.memset_async(0, part.nbytes)    # the piece's zeros (0.0 = a zero fixed-point sum), not the chunk's
        compute(pk, Xd[c:d], part, a + c, a + d)
        copier.wait_event(main.record())
        piece = out[a + c:a + d]
        dst[c:d].data.copy_to_host_async(piece.ctypes.data, piece.nbytes, copier)
        bar.update(d - c)
    main.wait_event(copier.record())


def _download_piece(dst, out: np.ndarray, a: int, queued: tuple, bar) -> None:
    c, d, done = queued
    download(dst[c:d], out[a + c:a + d], ready=done)
    bar.update(d - c)


@functools.lru_cache(maxsize=None)
def _l2_bytes() -> int:
    return int(cupy_module().cuda.Device().attributes["L2CacheSize"])


def bank_group(rows_per_warp: int, row_out_bytes: int) -> int:
    """Row blocks per group in warp_task: as many as keep the group's outputs within a quarter of the L2 cache."""
    return int(min(1 << 30, max(1, (_l2_bytes() // 4) // max(1, rows_per_warp * row_out_bytes))))


def warp_args(pk: _Packed, Xd, M: int, K: int, rows_per_warp: int, row_out_bytes: int,
              scale: np.ndarray | None) -> tuple:
    return (Xd, np.int64(Xd.shape[0]), np.int32(M), np.int32(K), pk.bin_ptr, np.int64(pk.n_bins),
            np.int32(rows_per_warp), np.int32(bank_group(rows_per_warp, row_out_bytes)), *call_elems(pk, scale))
