"""GPU TreeSHAP engine (CUDA through CuPy): path-dependent, interventional and interaction values, same API as cpu.py.

Paths are packed into warp-sized bins (best-fit decreasing, ``pack.py``) and uploaded once per PathSet and
tree_limit; each warp evaluates its bin's paths for a block of rows (``treeshap.cu``): by per-path tables of every
pattern of satisfied elements where they fit, else by the shuffle DP or Gauss-Legendre quadrature in double precision.
Paths longer than a warp run one thread per (row, path). Outputs are summed in 64-bit fixed point, so every call gives
the same bytes (``options.deterministic``). Rows are processed in chunks that fit a device-memory budget. CuPy input
gives CuPy output; NumPy/pandas input gives NumPy output. ``options`` (a ``GpuOptions``) holds the engine's options.
"""
from __future__ import annotations

import functools

import numpy as np

from ..device import cupy_module, free_gpu_bytes
from . import _gpu_core as core
from . import _gpu_linear
from ._gpu_core import _CACHE, GpuOptions, clear_cache, options, packed_paths  # noqa: F401  (the engine's API)
from ._gpu_interventional import (interventional_banzhaf_values, interventional_interaction_values,  # noqa: F401 - the engine's API
                                  interventional_shap_values)
from .paths import PathSet, tree_outputs

__all__ = ["shap_values", "interaction_values", "interventional_shap_values", "summarize_background", "packed_paths",
           "clear_cache",
           "options", "GpuOptions"]

# Tuning constants (measured on an H100; docs/design/treeshap.md has the tables), not options.
# Tables: a path of d elements has 2^d patterns, so its table doubles with every element. Past 12 elements one path's
# interaction table is over 5 MB and rows rarely repay building it; 12 is also the register array size in treeshap.cu
# (its TABLE_DMAX, which this must not exceed).
TABLE_DMAX = 12
TABLE_BYTES = 16 << 30             # an absolute cap on the tables of one model
TABLE_FREE_SHARE = 0.25            # half of the free memory measured faster, but left other GPU work too little
SPLIT_MIN_SHARE = 0.2              # split beat dp on the large models even where short paths hold under half
_QUAD_SIZES = (4, 8, 12, 16)       # {shap,inter}_quad{4,8,12,16}: rules of <= 4 / 8 / 12 / 16 nodes, paths of 2x
#                                    that many elements; the registers grow with the rule (inter_quad16 154, 12 127,
#                                    8 114 on sm_90), and with them the occupancy falls
QUAD_RULE_CLASSES = True           # the per-row quadrature kernel runs each rule size's paths apart, with that rule's
#                                    registers (False: every path at the longest path's rule; kept for A/B timings)
_SMEM_MAX_OUTPUTS = 512            # smem variant only when M * K <= this (8 warps x 512 doubles = 32 KiB per block)
# How "auto" plans (both kinds): dmax is the largest path length <= TABLE_DMAX whose tables fit the cap (TABLE_BYTES,
# and TABLE_FREE_SHARE of the free device memory when the model is first explained); "table" when every path is that
# short, else "split" when those paths hold at least SPLIT_MIN_SHARE of the path elements, else "dp" (the per-row
# kernel alone). A forced "table" or "split" falls back the same way. The per-row kernel: quadrature wins for
# interactions; for SHAP values it wins on paths of <= 8 elements and loses on longer ones, and only long paths reach
# the per-row kernel where tables fit, so SHAP values default to the DP.


def _table_bytes(m: np.ndarray, kind: str) -> np.ndarray:
    """Bytes of the table of a path of m elements: 2^m patterns x m lanes ("shap"), x (m/2 + 1) steps ("inter")."""
    m = np.asarray(m, np.int64)
    return (np.int64(1) << m) * m * 8 * (m // 2 + 1 if kind == "inter" else 1)


def _table_cap() -> int:
    return int(min(TABLE_BYTES, free_gpu_bytes(TABLE_FREE_SHARE)))


def _served_share(m: np.ndarray, dmax: int, extra: int) -> float:
    """The share of the path elements (paths of m elements) that tables for the paths of <= dmax elements and the
    first ``extra`` paths of dmax + 1 elements serve."""
    return (float(m[m <= dmax].sum()) + extra * (dmax + 1)) / float(max(m.sum(), 1))


def _plan_tables(m: np.ndarray, kind: str, variant: str, top: int) -> tuple[str, int, int]:
    """(variant, dmax, extra) for paths of m elements (see "How auto plans" above): tables for the paths of
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
    share = _served_share(m, dmax, extra)
    if share == 0.0 or (variant == "auto" and share < SPLIT_MIN_SHARE):
        return "dp", 0, 0
    return "split", dmax, extra


def _shap_variant(pk, M: int, K: int) -> tuple[str, int, int]:
    """(SHAP variant, dmax, extra) of its tables for options.shap_variant; see _plan_tables."""
    if options.shap_variant == "smem":
        return ("smem", 0, 0) if M * K <= _SMEM_MAX_OUTPUTS else ("dp", 0, 0)
    return _plan_tables(pk.path_m, "shap", options.shap_variant, TABLE_DMAX)


def _inter_plan(pk) -> tuple[str, int, int]:
    """(interaction variant, dmax, extra) of its tables for options.inter_variant; see _plan_tables."""
    return _plan_tables(pk.path_m, "inter", options.inter_variant, TABLE_DMAX)


def _split_packs(pk, dmax: int, extra: int = 0):
    """Packings of pk's paths of <= dmax elements (and the first ``extra`` of dmax + 1 elements) and of the others
    (cached on pk)."""
    if (dmax, extra) not in pk.split:
        m = np.diff(pk.ps.path_ptr)
        short = m <= dmax
        short[np.flatnonzero(m == dmax + 1)[:extra]] = True
        pk.split[(dmax, extra)] = (core._pack(pk.ps.select(short)), core._pack(pk.ps.select(~short)))
    return pk.split[(dmax, extra)]


def _tables(pk, kind: str = "shap"):
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
    core.get_kernel(core._SRC, build)((core._grid_for(total),), (core._THREADS,),
                                      (cp.asarray(pk.short_root.astype(np.int64)), cp.asarray(d.astype(np.int32)),
                                       cp.asarray(t_off), cp.asarray(t_pat), np.int64(d.size), pk.elems[7], table))
    pk.tables[kind] = (cp.asarray(etoff), table)
    return pk.tables[kind]


@functools.lru_cache(maxsize=None)
def _gauss_legendre():
    """Gauss-Legendre rules on [0, 1] for 1..16 nodes on the device: for Q nodes, the nodes then the weights at
    offset Q (Q - 1) (inter_quad_body's s_gl)."""
    parts = []
    for q in range(1, _QUAD_SIZES[-1] + 1):
        x, w = np.polynomial.legendre.leggauss(q)
        parts += [(x + 1.0) / 2.0, w / 2.0]
    return cupy_module().asarray(np.concatenate(parts))


def _row_kernel(dp, kind: str, variant: str) -> str:
    """Name of the per-row kernel for packing dp (options.shap_row_kernel / inter_row_kernel; a quadrature kernel's
    rule size fits the longest warp-packed path)."""
    choice = options.inter_row_kernel if kind == "inter" else options.shap_row_kernel
    if variant == "smem":
        return "shap_smem"
    if choice == "dp":
        return "interactions" if kind == "inter" else "shap"
    d = int(dp.short_size.max()) - 1 if dp.short_size.size else 1
    return f"{'inter' if kind == 'inter' else 'shap'}_quad{_quad_size(d)}"


def _quad_size(d):
    """The smallest of _QUAD_SIZES whose rule is exact on paths of ``d`` elements (an array: per path; paths past
    the largest rule, which the long-path kernel takes, get the largest)."""
    sizes = np.asarray(_QUAD_SIZES)
    i = np.searchsorted(2 * sizes, np.minimum(d, 2 * sizes[-1]))
    return int(sizes[i]) if np.ndim(i) == 0 else sizes[i]


def _rule_packs(dp) -> list:
    """dp's paths in packings by the quadrature rule they need (QUAD_RULE_CLASSES; cached on dp): a launch per
    rule then holds that rule's registers, not the longest path's. dp itself where one rule serves every path."""
    if "rule_packs" not in dp.split:
        size = _quad_size(np.diff(dp.ps.path_ptr))
        used = np.unique(size[core.carries_values(dp.ps)])
        dp.split["rule_packs"] = ([core._pack(dp.ps.select(size == q)) for q in used] if used.size > 1
                                  else [dp])
    return dp.split["rule_packs"]


def _planned(pk, kind: str):
    """_shap_variant / _inter_plan for pk, decided once per packing and setting of the options and constants (free
    memory is read when first decided, as the tables built then stay cached)."""
    knobs = (kind, options.shap_variant, options.inter_variant, TABLE_DMAX, TABLE_BYTES, TABLE_FREE_SHARE,
             SPLIT_MIN_SHARE)
    if knobs not in pk.plans:
        pk.plans[knobs] = _inter_plan(pk) if kind == "inter" else _shap_variant(pk, pk.ps.n_features,
                                                                                pk.ps.n_outputs)
    return pk.plans[knobs]


def _setup(pk, kind: str):
    """Plan the variant and build its tables (before the chunk budget is taken): (variant, packing with tables or
    None, packing for the per-row kernel or None)."""
    variant, dmax, extra = _planned(pk, kind)
    tp, dp = None, pk
    if variant == "table":
        tp, dp = pk, None
    elif variant == "split":
        tp, dp = _split_packs(pk, dmax, extra)
    if tp is not None:
        _tables(tp, kind)
    return variant, tp, dp


def _prepare(pk, kind: str) -> None:
    """Before the chunk budget is taken: the linear part's walk programs and the other paths' tables."""
    lp = _linear_part(pk, kind)
    if lp is None:
        _setup(pk, kind)
    elif lp.rest is not None:
        _setup(lp.rest, kind)


def _block_sums(pk, kind: str) -> bool:
    """Whether SHAP terms of packing pk are summed per block in shared memory (options.shap_sums; "auto" does
    wherever it applies: fewer atomics, faster kernels, docs/gpu_treeshap.md). The block kernels take paths with one leaf
    value each (boosting); forests' leaves with a value per class keep the direct kernels."""
    return kind == "shap" and pk.one_value and options.shap_sums != "direct"


def _fixed(pk, kind: str) -> np.ndarray | None:
    """The fixed-point scale of pk's outputs (None: double atomics); every packing of one call shares it."""
    if not options.deterministic:
        return None
    if kind not in pk.scales:
        factor = 1.0 + pk.max_len if kind == "inter" else 1.0        # interaction diagonals: see _gpu_core
        pk.scales[kind] = core.fixed_scale(core.bound_of(pk), factor)
    return pk.scales[kind]


def _table_share(pk, dmax: int, extra: int) -> float:
    """_served_share of packing pk's paths for a split plan (dmax, extra); cached on the packing."""
    key = ("table_share", dmax, extra)
    if key not in pk.split:
        pk.split[key] = _served_share(pk.path_m, dmax, extra)
    return pk.split[key]


def _one_output_trees(pk) -> bool:
    """Whether every tree of packing pk feeds one output (boosted multiclass); cached on the packing."""
    if "one_output_trees" not in pk.split:
        pk.split["one_output_trees"] = bool(np.all(tree_outputs(pk.ps) >= 0)) if pk.ps.n_paths else True
    return pk.split["one_output_trees"]


def _linear_part(pk, kind: str):
    """The per-tree linear kernel's part of packing pk for SHAP values (options.shap_linear), or None. "auto" leaves
    boosted multiclass models (each tree feeds one output) to the per-path kernels: the linear kernel walks every
    output of a tree. A forest's classifier trees feed every class, even where each leaf is pure (one nonzero value
    a path), and stay with the linear kernel."""
    if kind != "shap":
        return None
    variant, dmax, extra = _planned(pk, kind)
    share = _table_share(pk, dmax, extra) if variant == "split" else 0.0
    if not _gpu_linear.wanted(variant, options.shap_variant, options.shap_linear, share):
        return None
    if options.shap_linear == "auto" and pk.ps.n_outputs > 1 and _one_output_trees(pk):
        return None
    return _gpu_linear.part(pk)


def _launch_variant(pk, Xd, phi, M: int, K: int, kind: str) -> np.ndarray | None:
    """The table kernel on the packing that has tables and the per-row (then the long-path) kernel on the rest, as
    _setup plans them for ``kind`` ("shap" or "inter"); returns the fixed-point scale of phi's sums (None: doubles)."""
    n = Xd.shape[0]
    inter = kind == "inter"
    scale = _fixed(pk, kind)
    lp = _linear_part(pk, kind)
    if lp is not None:
        _gpu_linear.launch(lp, pk.xdtype, Xd, M, K, scale, phi)
        if lp.rest is None:
            return scale
        pk = lp.rest                    # the other trees' paths, summed at the same scale
    variant, tp, dp = _setup(pk, kind)
    rb = (M + 1) * (M + 1 if inter else 1) * K * 8          # output bytes per row
    if tp is not None and inter and options.shap_sums != "direct" and core.inter_block_fits(tp, M, K):
        core.launch_inter_block(tp, Xd, M, K, scale, _tables(tp, kind), phi)     # interaction block sums
    elif tp is not None and _block_sums(tp, kind):
        core.launch_block("shap_table_block", tp, Xd, M, K, scale, _tables(tp, kind), phi)
    elif tp is not None:
        r = core.rows_per_warp(n, tp.n_bins, 1024)
        core.launch_warp(core.kernel("inter_table" if inter else "shap_table", pk.xdtype), tp, n, r,
                         core.warp_args(tp, Xd, M, K, r, rb, scale) + (*_tables(tp, kind), phi))
    if dp is not None and _row_kernel(dp, kind, variant) == "shap" and _block_sums(dp, kind):
        core.launch_block("shap_block", dp, Xd, M, K, scale, (), phi)
        core.run_long(dp, Xd, M, K, phi, inter, scale)
    elif dp is not None:
        quad = "_quad" in _row_kernel(dp, kind, variant)
        smem = 8 * M * K * (core._THREADS // core._WARP) if variant == "smem" else 0
        rules = (_gauss_legendre(),) if quad else ()
        for part in _rule_packs(dp) if quad and QUAD_RULE_CLASSES else [dp]:
            r = core.rows_per_warp(n, part.n_bins, 64 if inter else 1024)
            name = _row_kernel(part, kind, variant)
            core.launch_warp(core.kernel(name, pk.xdtype), part, n, r,
                             core.warp_args(part, Xd, M, K, r, rb, scale) + rules + (phi,), smem)
            core.run_long(part, Xd, M, K, phi, inter, scale)
    return scale


def _shap_chunk(pk, Xd, phi, M: int, K: int) -> None:
    """Path-dependent SHAP values of device rows Xd into phi (n, M+1, K), with the variant _shap_variant picks."""
    core.finish(phi, _launch_variant(pk, Xd, phi, M, K, "shap"), pk.bias_d)


def _interactions_chunk(pk, Xd, phi, M: int, K: int) -> None:
    """Interaction values of device rows Xd into phi (n, M+1, M+1, K), with the variant _inter_plan picks. Every
    kernel writes the diagonal and the upper triangle; mirror_upper then turns fixed-point sums into doubles and
    fills the lower triangle in one pass."""
    scale = _launch_variant(pk, Xd, phi, M, K, "inter")
    n = Xd.shape[0]
    inv = core.inverse_scale(scale) if scale is not None else np.uint64(0)              # 0: a null pointer
    core.get_kernel(core._SRC, "mirror_upper")((core._grid_for(n * (M + 1) * (M + 1) * K),), (core._THREADS,),
                                               (phi, np.int64(n), np.int32(M + 1), np.int32(K), pk.bias_d, inv))


def _path_dependent(paths: PathSet, X, tree_limit, progress, interactions: bool):
    M, K = paths.n_features, paths.n_outputs
    chunk = _interactions_chunk if interactions else _shap_chunk

    def compute(pk, Xd, phi, a, b):
        chunk(pk, Xd, phi, M, K)

    cols = (M + 1, M + 1, K) if interactions else (M + 1, K)
    desc = "GPU TreeSHAP interactions" if interactions else "GPU TreeSHAP"
    kind = "inter" if interactions else "shap"
    return core.driver(paths, X, tree_limit, progress, desc, cols, 0, compute, lambda pk: _prepare(pk, kind))


def shap_values(paths: PathSet, X, *, tree_limit=None, progress=None):
    """Path-dependent SHAP values, (n, M+1, K) float64, bias in column M (CuPy in -> CuPy out)."""
    return _path_dependent(paths, X, tree_limit, progress, False)


def interaction_values(paths: PathSet, X, *, tree_limit=None, progress=None):
    """SHAP interaction values, (n, M+1, M+1, K) float64, bias at [M, M] (CuPy in -> CuPy out)."""
    return _path_dependent(paths, X, tree_limit, progress, True)


def summarize_background(paths: PathSet, background, *, weights=None, weight_scale=None, progress=None):
    """The background's fail-set histograms against ``paths`` (all trees), on the GPU (see
    ``kernels.treeshap.background_summary``); the histograms stay on the device."""
    from . import _gpu_patterns

    R = core.check_x(background, paths, name="background")
    return _gpu_patterns.summarize(paths, R, weights, weight_scale, progress)
