"""Per-tree linear TreeSHAP on the GPU (``linear.cu``): SHAP values of deep trees in O(nodes x Q) per row and tree.

The per-path kernels cost O(d) shuffle steps per path element (O(L d^2) per tree and row); a forest of depth 30 has
paths of 14-27 merged elements and half a million leaves, where no table fits (docs/design/treeshap.md, section 9).
This module runs those trees' walk programs (``paths.tree_program``) instead; the CPU twin is ``_cpu_linear.py``.
Trees the program cannot take (categorical splits, NaN or -inf thresholds, more than 64 levels or 64 merged
features, vanishing path products) keep the per-path kernels: ``LinearPart.rest`` packs their paths.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._cuda import get_kernel
from ..device import cupy_module
from . import _gpu_core as core
from .paths import PROGRAM_MAX_Q, program_split, tree_events

_SRC = "treeshap/linear.cu"
_THREADS = 128                 # threads per block: 128 / QL rows
GROUP_EVENTS = 4096            # events per tree group (a block walks one group's trees for its rows): more, smaller
#                                blocks fill the device's last wave; fixed per model, so the sums are too
SPECIALIZED = frozenset((ql, ks) for ql in (4, 8, 16, 32) for ks in (1, 2))   # (lanes per row, outputs per walk)
#                                with a module of their own (linear.cu's LIN_QL, LIN_KS); others read them at run time
CONCURRENT = True              # with fixed-point sums, each lane-width class's launch on a stream of its own, so
#                                one class's blocks fill the other's last wave
_KS_MAX = 4                    # outputs per walk (the S stack holds one double per output and level)
_ACC_BYTES = 48 << 10          # the block's (row, feature, output) sums in shared memory up to this, else direct adds
_SMEM_BYTES = 227 << 10        # shared memory a block may take (sm_80 and later)
_EV_CHUNK = 128                # events staged per step (linear.cu: EV_CHUNK)
FOLD_LEAVES = True             # an edge into a leaf as one event (False: DOWN, LEAF, UP; kept for A/B timings)
DIVIDE_FIRST = False           # divide by a feature's first factor too (exactly 1; kept for A/B timings)
BRANCH_BITS = True             # test the row's branches of a chunk of events before walking it (linear.cu)
LOCAL_STACK = True             # the walk's stack in local memory, cached in L1 (False: in shared memory)
TABLES = False                 # each staged chunk's ratios and coefficients per lane and case, filled once per block
#                                (linear.cu chunk_tables; the same values) instead of each row's divisions
TABLES_EV_CHUNK = 32           # events staged per step with TABLES (their tables take 5 x QL doubles per event)
LEAF_SPLIT = 16                # > 0: a tree's leaves with paths of at most this many features walked apart from
#                                the others (paths.walk_program), each walk with its own Gauss nodes (16: 8 nodes,
#                                a lane width of 8 where the tree's own walk needs 16); 0: one walk per tree


@dataclass
class _Class:
    """The trees of one lane width (QL, a power of two >= their Gauss nodes) on the device."""

    evi: object                                 # (E, 4) int32 events
    evd: object                                 # (E, 3) float64 (thresholds as the row dtype compares them)
    tree_ev: object                             # (n_trees + 1,) int64 event offsets
    tree_q: object                              # (n_trees,) int32 Gauss nodes
    group_tree: object                          # (G + 1,) int32 tree offsets of the groups
    n_groups: int
    ql: int                                     # lanes per row
    levels: int                                 # stack levels (deepest leaf + 1)


@dataclass
class LinearPart:
    """The trees of a packing that the linear kernel takes, on the device, and a packing of the others' paths."""

    rest: object | None                         # core._Packed of the other trees' paths (None: there are none)
    classes: list                               # _Class per lane width
    leaf_value: np.ndarray                      # (P, K) host leaf values of the packing's PathSet
    lval: dict = field(default_factory=dict)    # scale bytes (or b"") -> leaf values on the device


def _rules():
    """The CPU twin's Gauss-Legendre rules (``_cpu_linear.program_rules``) on the current device: Q's nodes then
    weights at offset Q (Q - 1), for Q = 1..PROGRAM_MAX_Q."""
    cp = cupy_module()
    key = cp.cuda.Device().id
    if key not in _RULES:
        from ._cpu_linear import program_rules   # the twin's module (Numba's): imported where the kernel runs

        t, w = program_rules()
        _RULES[key] = cp.asarray(np.concatenate([np.concatenate([t[q, :q], w[q, :q]])
                                                 for q in range(1, PROGRAM_MAX_Q + 1)]))
    return _RULES[key]


_RULES: dict[int, object] = {}


LINEAR_SPLIT_SHARE = 0.5      # "auto" takes a split plan's trees when its tables cover less of the elements


def wanted(plan_variant: str, shap_variant: str, mode: str, table_share: float = 0.0) -> bool:
    """Whether the linear kernel takes a packing's trees: ``mode`` "always", or "auto" where the planner leaves
    every path to the per-row DP (no tables fit: forests, deep trees), or splits them with tables for under
    LINEAR_SPLIT_SHARE of the path elements (``table_share``): there the DP's share of long paths costs more than
    walking every tree (leafy boosters grown leaf-wise: XGBoost's lossguide), docs/design/treeshap.md."""
    if mode == "never":
        return False
    if mode == "always":
        return True
    return shap_variant == "auto" and (plan_variant == "dp"
                                       or (plan_variant == "split" and table_share < LINEAR_SPLIT_SHARE))


def part(pk) -> LinearPart | None:
    """The linear part of packing ``pk`` (cached on it); None where its PathSet has no dense trees or no tree
    qualifies."""
    if "linear" in pk.split:
        return pk.split["linear"]
    ps = pk.ps
    res = None
    if ps.trees is not None and ps.n_paths:
        lin, _, q_of, levels, ptr, evi, evd, rest = program_split(ps, FOLD_LEAVES, LEAF_SPLIT)
        if lin.size:
            res = _build(pk, lin, q_of, levels, ptr, evi, evd, rest)
    pk.split["linear"] = res
    return res


def _build(pk, lin: np.ndarray, q_of, levels, ptr, evi, evd, rest) -> LinearPart:
    cp = cupy_module()
    if pk.xdtype == np.float32:
        down = (evi[:, 0] & 3) == 0
        evd = evd.copy()
        evd[down, 0] = core._down32(evd[down, 0]).astype(np.float64)
    ql_of = np.left_shift(1, np.ceil(np.log2(np.maximum(q_of, 1))).astype(np.int64))
    classes = []
    for ql in np.unique(ql_of[lin]):
        trees = lin[ql_of[lin] == ql]
        tree_ev, idx = tree_events(ptr, trees)
        gid = tree_ev[1:] // GROUP_EVENTS               # groups of consecutive trees, ~GROUP_EVENTS events each
        starts = np.flatnonzero(np.r_[True, np.diff(gid) != 0])
        group_tree = np.concatenate([starts, [trees.size]]).astype(np.int32)
        classes.append(_Class(evi=cp.asarray(evi[idx]), evd=cp.asarray(evd[idx]), tree_ev=cp.asarray(tree_ev),
                              tree_q=cp.asarray(q_of[trees].astype(np.int32)), group_tree=cp.asarray(group_tree),
                              n_groups=int(group_tree.size - 1), ql=int(ql), levels=int(levels[trees].max())))
    return LinearPart(rest=None if rest is None else core._pack(rest), classes=classes, leaf_value=pk.ps.leaf_value)


def _chunk() -> int:
    """Events staged per step (linear.cu: EV_CHUNK)."""
    return TABLES_EV_CHUNK if TABLES else _EV_CHUNK


def _smem(levels: int, ks: int, acc: int, ql: int) -> int:
    """Bytes of shared memory: the stack, the accumulator, the staged events and, with TABLES, their tables."""
    ch = _chunk()
    return 8 * ((0 if LOCAL_STACK else levels * ks * _THREADS) + acc + 3 * ch + 2 * ch + (5 * ch * ql if TABLES else 0))


def _leaf_values(lp: LinearPart, scale: np.ndarray | None):
    key = b"" if scale is None else scale.tobytes()
    if key not in lp.lval:
        v = lp.leaf_value if scale is None else lp.leaf_value * scale[None, :]
        lp.lval[key] = cupy_module().asarray(np.ascontiguousarray(v, dtype=np.float64))
    return lp.lval[key]


def launch(lp: LinearPart, xdtype: np.dtype, Xd, M: int, K: int, scale: np.ndarray | None, phi) -> None:
    """Add the linear part's SHAP values (feature columns; the bias is the caller's) of device rows Xd into phi
    (fixed point where ``scale`` is given, as core.call_elems)."""
    n = Xd.shape[0]
    if n == 0:
        return
    lval = _leaf_values(lp, scale)
    det = np.int32(0 if scale is None else 1)
    cp = cupy_module()
    streams = _class_streams(len(lp.classes)) if CONCURRENT and det and len(lp.classes) > 1 else None
    main = cp.cuda.get_current_stream()
    if streams is not None:
        ready = main.record()
        for s in streams:
            s.wait_event(ready)
    for ci, c in enumerate(lp.classes):
        rpb = _THREADS // c.ql
        n_rb = -(-n // rpb)
        ks = min(K, _KS_MAX)
        while ks > 1 and _smem(c.levels, ks, 0, c.ql) > _SMEM_BYTES:
            ks -= 1
        for kg0 in range(0, K, ks):
            kn = min(ks, K - kg0)
            acc = rpb * M * kn
            use_acc = 8 * acc <= _ACC_BYTES and _smem(c.levels, kn, acc, c.ql) <= _SMEM_BYTES
            smem = _smem(c.levels, kn, acc if use_acc else 0, c.ql)
            kern = _kernel(xdtype, c.ql, kn)
            if smem > 48 << 10:
                kern.max_dynamic_shared_size_bytes = smem
            kern((c.n_groups * n_rb,), (_THREADS,),
                 (Xd, np.int64(n), np.int32(M), np.int32(K), c.evi, c.evd, c.tree_ev, c.tree_q, c.group_tree,
                  _rules(), lval, np.int32(kg0), np.int32(kn), np.int32(c.ql), np.int32(c.levels),
                  np.int32(1 if use_acc else 0), phi, det), shared_mem=smem,
                 stream=main if streams is None else streams[ci])
    if streams is not None:
        for s in streams:
            main.wait_event(s.record())


def _options(ql: int, ks: int) -> tuple[str, ...]:
    """linear.cu's compile options for a walk of ``ql`` lanes per row and ``ks`` outputs: a module of its own where
    (ql, ks) is in SPECIALIZED (the lane and output loops then unroll), else the module that reads them at run time."""
    flags = (("HITML_LINEAR_DIVIDE_FIRST", DIVIDE_FIRST), ("HITML_LINEAR_BITS", BRANCH_BITS),
             ("HITML_LINEAR_LOCAL", LOCAL_STACK), ("HITML_LINEAR_TABLES", TABLES))
    opts = tuple(f"-D{f}" for f, on in flags if on) + (f"-DEV_CHUNK={_chunk()}",)
    if (ql, ks) in SPECIALIZED:
        opts += (f"-DLIN_QL={ql}", f"-DLIN_KS={ks}")
    return opts


def _kernel(xdtype, ql: int, ks: int):
    return get_kernel(_SRC, f"linear_shap_{'f32' if xdtype == np.float32 else 'f64'}", _options(ql, ks))


def compile_kernels() -> None:
    """Compile (or load from CuPy's cache) every module the walk can use: the warm-up's part for this kernel."""
    for ql, ks in sorted(SPECIALIZED) + [(0, 0)]:
        for dt in (np.float32, np.float64):
            _kernel(dt, ql, ks)


_STREAMS: dict[int, list] = {}


def _class_streams(k: int) -> list:
    """k non-blocking streams of the current device, kept for the process."""
    cp = cupy_module()
    key = cp.cuda.Device().id
    have = _STREAMS.setdefault(key, [])
    while len(have) < k:
        have.append(cp.cuda.Stream(non_blocking=True))
    return have[:k]
