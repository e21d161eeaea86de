"""GPU twin of the pattern engine of interventional TreeSHAP (_cpu_patterns.py): the kernels of patterns.cu.

Same plan (_patterns.plan_paths), same integer background histograms, same tables and the same order of every
sum, so the output equals the CPU twin's. Rows and background are read feature-major (transposed on the device);
the output is accumulated feature-major, one thread per row, then transposed into the driver's row-major chunk.
"""
from __future__ import annotations

import atexit
import dataclasses
import math
import threading
import time

import numpy as np

from .._cuda import load_module
from .._progress import progress_bar
from ..device import copy_stream, cupy_module, upload_slabs
from . import _gpu_core as core
from . import _patterns as _pat
from . import _summary as _sum
from .paths import PathSet

_SRC = "treeshap/patterns.cu"
_OPTS = ("--fmad=false",)   # products and sums rounded one at a time, as on the CPU
_THREADS = 256
_SMEM_BINS = 4096           # histogram bins a block sums in shared memory (32 KiB)
_MAXD, _MAXDI, _MAXL, _MAXLI = 16, 10, 64, 32   # patterns.cu's local array bounds


_BUILD_KERNELS = ("bg_hist", "bg_fails", "rows_to_columns")
BG_ROWS_PER_THREAD = 4      # background rows a bg_hist thread counts at once (patterns.cu: BG_RPT)


def _module(part: str, t: str | None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(NVRTC options, name expressions) of one module of patterns.cu: the build's kernels for one row type
    (``part="build"``, t "float" or "double"), or the call's kernels (``"call"``). A build compiles only what it
    runs: in a first-ever process the NVRTC compile is part of the build's time."""
    if part == "build":
        names = (f"bg_hist<{t}, unsigned int>", f"bg_hist<{t}, unsigned long long>", f"bg_fails<{t}>",
                 f"rows_to_columns<{t}>")
        return _OPTS + ("-DHITML_PATTERNS_BUILD", f"-DBG_RPT={int(BG_ROWS_PER_THREAD)}"), names
    names = ["value_tables", "interaction_tables"]
    for u in ("float", "double"):
        names += [f"rows_kernel<{u}>", f"sparse_rows<{u}, 0>", f"sparse_rows<{u}, 1>"]
    return _OPTS + ("-DHITML_PATTERNS_CALL",), tuple(names)


def _fn(name: str, xdtype=None):
    t = None
    if xdtype is not None:
        t = "float" if np.dtype(xdtype) == np.float32 else "double"
        name = name.replace("<", f"<{t}, ") if "<" in name else f"{name}<{t}>"
    part = "build" if name.startswith(_BUILD_KERNELS) else "call"
    if part == "call" and _AHEAD:
        _await_call()
    opts, names = _module(part, t)
    return load_module(_SRC, opts, names).get_function(name)


def _grid(n: int) -> tuple[int]:
    return (max(1, math.ceil(n / _THREADS)),)


def _groups(chunk: np.ndarray, lens: np.ndarray) -> np.ndarray:
    """grp_ptr over the chunk: runs of consecutive paths whose histograms fit _SMEM_BINS together (a larger one
    alone, summed in global memory)."""
    ptr, acc = [0], 0
    for q, p in enumerate(chunk):
        b = 1 << int(lens[p])
        if q > ptr[-1] and acc + b > _SMEM_BINS:
            ptr.append(q)
            acc = 0
        acc += b
    ptr.append(len(chunk))
    return np.asarray(ptr, np.int64)


COMPILE_AHEAD = True     # the build's kernels compile in a thread, started before the background is read
COMPILE_CALL_AHEAD = True    # and the call's module in another (with COMPILE_AHEAD)


class _Ahead(threading.Thread):
    """Compiles (or loads from CuPy's disk cache) the kernels of a background pass over rows of one dtype
    (``kdtype``), or the module of the call's kernels (``kdtype`` None), in a thread: NVRTC releases the GIL, so in a
    process that finds nothing in CuPy's cache the compile runs while the explainer's build parses the model and
    reads and uploads the background, and the call's while the build counts, instead of after them. The kernels are
    the ones the pass and the call would compile on first use (the same sources and options): only when they
    compile changes. The pass runs no CuPy elementwise kernel whose variant depends on the background's size (those
    could not be compiled ahead): its transpose is patterns.cu's, and its unit weights are no array."""

    def __init__(self, kdtype):
        super().__init__(name="hitml-compile-ahead", daemon=True)
        self.kdtype = None if kdtype is None else np.dtype(kdtype)
        self.device = cupy_module().cuda.Device().id
        self.error: BaseException | None = None
        _join_at_exit()
        self.start()

    def run(self) -> None:
        cp = cupy_module()
        try:
            with cp.cuda.Device(self.device):
                if self.kdtype is None:
                    # the call's module, loaded as _fn loads it; not through _fn, which waits for this thread
                    load_module(_SRC, *_module("call", None)).get_function("value_tables")
                    return
                for name in ("bg_hist<unsigned int>", "bg_hist<unsigned long long>", "bg_fails", "rows_to_columns"):
                    _fn(name, self.kdtype)
                # the expected value's gather of one bin per path (BackgroundSummary.reach): a small array, so the
                # same CuPy kernel variant as any summary's
                cp.zeros(2, dtype=cp.uint64).view(cp.int64)[cp.zeros(1, dtype=cp.int64)]
                cp.cuda.get_current_stream().synchronize()
        except BaseException as exc:  # noqa: BLE001 - every error is re-raised in the caller's thread by wait()
            self.error = exc

    def wait(self) -> None:
        self.join()
        if self.error is not None:
            raise self.error


_AHEAD: dict = {}             # (device, row dtype or "call") -> its compile thread, until a pass (a call) waited
_READY: set = set()           # (device, row dtype or "call") whose kernels are compiled and loaded: no thread again
_AHEAD_LOCK = threading.Lock()
_EXIT_JOIN: list = []
_EXIT_LOCK = threading.Lock()   # not _AHEAD_LOCK: compile_ahead holds that while it starts a thread


def _join_at_exit() -> None:
    """Once per process: at exit, wait for the compile threads still running. A script that builds an explainer
    and ends before its first call would otherwise end while the call's module is still compiling or loading in a
    daemon thread, and the interpreter's shutdown under a thread inside CUDA aborts the process. Registered when the
    first thread starts, after CuPy's import, rather than when this module is imported: exit handlers run last
    registered first, so the threads are joined before any that CuPy registered."""
    with _EXIT_LOCK:
        if _EXIT_JOIN:
            return
        _EXIT_JOIN.append(True)

    def join() -> None:
        with _AHEAD_LOCK:
            threads = list(_AHEAD.values())
        for th in threads:
            th.join()

    atexit.register(join)


PREFETCH = True              # the explainer's build uploads a host background while it parses the model
_PREFETCH_MIN_BYTES = 64 << 20   # smaller backgrounds upload in milliseconds: no thread
PIPELINE_BLOCK_BYTES = 1 << 28   # rows counted at once while the rest of a host background uploads (0: all at once)


class _Upload(threading.Thread):
    """Uploads host rows ``R`` to the device (``upload_slabs``, in the dtype the pass counts them in, on the device's
    copy stream) in a thread: the copies release the GIL, so the upload runs while the build parses the model (Numba's
    first use in a process, the path extraction), and the pass counts the rows already up while the rest uploads,
    instead of after it. The pass takes the thread (:func:`_take_upload`) and reads the rows as they arrive
    (:meth:`ready`); where no pass takes it, :func:`drop_upload` frees it."""

    def __init__(self, R: np.ndarray, kdtype):
        super().__init__(name="hitml-background-upload", daemon=True)
        self.R, self.kdtype = R, np.dtype(kdtype)
        self.device = cupy_module().cuda.Device().id
        self.out = None
        self.error: BaseException | None = None
        self.cond = threading.Condition()
        self.events: list = []        # (rows whose copies are queued, the copy stream's event after them)
        self.finished = False         # every copy done (the copy stream synchronised) or failed
        self.start()

    def run(self) -> None:
        cp = cupy_module()
        out = None
        try:
            with cp.cuda.Device(self.device):
                stream = copy_stream()
                with stream:
                    out = upload_slabs(self.R, self.kdtype, on_slab=self._slab)
                stream.synchronize()
        except BaseException as exc:  # noqa: BLE001 - the pass sees it in ready() and uploads again itself
            self.error, out = exc, None
        with self.cond:
            self.out, self.finished = out, True
            self.cond.notify_all()

    def _slab(self, out, rows: int, event) -> None:
        with self.cond:
            self.out = out
            self.events.append((rows, event))
            self.cond.notify_all()

    def ready(self, rows: int):
        """Wait until the first ``rows`` rows are queued: (the device rows, the copy stream's event to wait for
        before reading them, or None where every copy is done), or None where the upload failed."""
        with self.cond:
            while not self.finished and (not self.events or self.events[-1][0] < rows):
                self.cond.wait()
            if self.error is not None:
                return None
            if self.finished:
                return self.out, None
            return self.out, next(e for r, e in self.events if r >= rows)


class _OnDevice:
    """Rows already whole on the device, read as an upload in flight is (:meth:`_Upload.ready`)."""

    def __init__(self, Rd):
        self.out = Rd

    def ready(self, rows: int):
        return self.out, None


_UPLOADS: dict = {}           # id(host rows) -> its upload thread (which holds the rows: the id stays theirs)


def prefetch_rows(R, input_dtype) -> None:
    """Start uploading host background rows ``R`` (a NumPy array, as :func:`summarize` will receive it) to the
    current device, where they are large (``PREFETCH``). Values do not depend on it: :func:`summarize` counts the
    same rows, uploaded the same way."""
    if not PREFETCH or not isinstance(R, np.ndarray) or R.ndim != 2 or R.nbytes < _PREFETCH_MIN_BYTES:
        return
    with _AHEAD_LOCK:
        if id(R) not in _UPLOADS:
            _UPLOADS[id(R)] = _Upload(R, _row_type(R.dtype, input_dtype))


def _take_upload(R, kdtype):
    """The upload of host rows ``R`` in ``kdtype`` that :func:`prefetch_rows` started (an :class:`_Upload`, maybe
    still running), or None (none started, or another dtype or device: the caller uploads)."""
    with _AHEAD_LOCK:
        th = _UPLOADS.pop(id(R), None)
    if th is None:
        return None
    if th.kdtype != np.dtype(kdtype) or th.device != cupy_module().cuda.Device().id:
        th.join()
        return None
    return th


def drop_upload(R) -> None:
    """Free the device copy of ``R`` that :func:`prefetch_rows` started, where no pass took it."""
    with _AHEAD_LOCK:
        th = _UPLOADS.pop(id(R), None)
    if th is not None:
        th.join()


def _row_type(dtype, input_dtype) -> np.dtype:
    """The dtype the pass counts rows of ``dtype`` in: float32 as it is (the kernels widen each value exactly),
    others in the paths' input dtype."""
    return np.dtype(np.float32) if np.dtype(dtype) == np.float32 else np.dtype(input_dtype)


def compile_ahead(dtype, input_dtype) -> None:
    """Start compiling the background pass's kernels for rows of ``dtype`` (paths comparing in ``input_dtype``), once
    per device and row type; :func:`summarize` waits for it before its first launch."""
    if not COMPILE_AHEAD:
        return
    kd = _row_type(dtype, input_dtype)
    dev = cupy_module().cuda.Device().id
    with _AHEAD_LOCK:
        for key, what in (((dev, kd), kd), ((dev, "call"), None)):     # the build's kernels first
            if what is None and not COMPILE_CALL_AHEAD:
                continue
            if key not in _AHEAD and key not in _READY:
                _AHEAD[key] = _Ahead(what)


def _await_call() -> None:
    """Wait for the call module's compile thread on this device, if one is running (see :func:`_await_ahead`)."""
    _await_key((cupy_module().cuda.Device().id, "call"))


def _await_ahead(kdtype) -> None:
    """Wait for the compile thread of ``kdtype`` rows on this device, if one was started, and re-raise its error; the
    entry goes, so a later pass after a failed compile compiles again (inline) rather than meet the old error."""
    _await_key((cupy_module().cuda.Device().id, np.dtype(kdtype)))


def _await_key(key) -> None:
    with _AHEAD_LOCK:
        th = _AHEAD.pop(key, None)
    if th is not None:
        th.wait()
        with _AHEAD_LOCK:
            _READY.add(key)


class _Clock:
    """Adds the seconds since the last call (after a device sync) to timings[phase]; nothing when timings is None."""

    def __init__(self, timings: dict | None):
        self.timings = timings
        self.last = time.perf_counter()

    def __call__(self, phase: str) -> None:
        if self.timings is None:
            return
        cupy_module().cuda.Device().synchronize()
        now = time.perf_counter()
        self.timings[phase] = self.timings.get(phase, 0.0) + now - self.last
        self.last = now


def summarize(ps: PathSet, R, weights, scale, progress=None, timings: dict | None = None) -> _sum.BackgroundSummary:
    """The background's fail-set histograms against ``ps`` on the device (the CPU twin's ``_summarize``: equal
    integers). ``R``: host or device rows in the paths' input dtype."""
    cp = cupy_module()
    clock = _Clock(timings)
    nR = R.shape[0]
    wint, total = _sum.counted_weights(weights, nR, scale)
    weighted = wint is not None
    hist_off, sparse, h_size = _sum.dense_paths(ps.path_ptr)
    lens = np.diff(ps.path_ptr).astype(np.int64)
    if len(sparse) and lens[sparse].max() > _pat.MAX_SPARSE_LENGTH:
        raise NotImplementedError(f"interventional values for a path with more than {_pat.MAX_SPARSE_LENGTH} "
                                  "distinct features")
    hist = cp.zeros(max(h_size, 1), dtype=cp.uint64)
    pa = _path_arrays(ps)
    # float32 rows are counted as they are (the kernels widen each value exactly); others in the paths' dtype
    kdtype = _row_type(R.dtype, ps.input_dtype)
    counter = "bg_hist<unsigned long long>" if weighted else "bg_hist<unsigned int>"
    compile_ahead(R.dtype, ps.input_dtype)        # where the explainer did not start it already
    wd = cp.asarray(wint) if weighted else None   # None: the kernels count one per row
    hist_off_d = cp.asarray(hist_off)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    plan = _pat.plan_paths(ps.path_ptr, False)        # its chunks are the dense paths, in order
    if isinstance(R, np.ndarray):
        src = _take_upload(R, kdtype)                   # the explainer's build may have started it already
        if src is None:
            src = _Upload(R, kdtype) if R.nbytes >= _PREFETCH_MIN_BYTES else _OnDevice(upload_slabs(R, kdtype))
    else:
        src = _OnDevice(core.to_device(R, kdtype))
    # Blocks of rows are counted as their copies land (integer counts: the sum is the same in any order). Long
    # paths collect the distinct fail sets of all rows at once, so with them the rows are one block; rows already
    # whole on the device are one block too (nothing to overlap, and each block's launches flush their bins again).
    whole = len(sparse) or PIPELINE_BLOCK_BYTES <= 0 or isinstance(src, _OnDevice)
    step = max(1, nR) if whole else max(1, PIPELINE_BLOCK_BYTES // max(1, R.shape[1] * kdtype.itemsize))
    blocks = [(a, min(nR, a + step)) for a in range(0, nR, step)] or [(0, 0)]
    launches = []       # each chunk's path groups on the device once, whatever the number of blocks
    for chunk in plan.chunks:
        grp = _groups(chunk, lens)
        launches.append((len(grp) - 1, cp.asarray(chunk), cp.asarray(grp)))
    ptrs, sets, ws = [cp.zeros(1, dtype=cp.int64)], [cp.zeros(0, dtype=cp.int64)], [cp.zeros(0, dtype=cp.int64)]
    with progress_bar(len(blocks) * len(plan.chunks) + (1 if len(sparse) else 0), "GPU interventional background",
                      progress if progress is not None else (False if nR * len(ps.feature) < 1e10 else None)) as bar:
        RT = _count_blocks(src, blocks, kdtype, counter, wd, launches, pa, hist_off_d, hist, sms, bar)
        if RT is None:          # the upload failed part-way: count again from a copy made here
            hist.fill(0)
            RT = _count_blocks(_OnDevice(upload_slabs(R, kdtype)), blocks, kdtype, counter, wd, launches, pa,
                               hist_off_d, hist, sms, bar)
        if isinstance(src, _Upload):
            # its rows were allocated on the copy stream, where CuPy's pool may hand their memory to the next copy
            # as soon as they are freed: that stream waits for the count queued here before anything after it runs
            copy_stream().wait_event(cp.cuda.get_current_stream().record())
        del src
        clock("upload and histograms")
        base = 0
        if len(sparse):
            step = max(1, (1 << 26) // max(nR, 1))
            for c0 in range(0, len(sparse), step):
                ptr, st, w = _sparse_sets(sparse[c0:c0 + step], RT, nR, wd, pa, kdtype)
                ptrs.append(ptr[1:] + base)
                base += int(ptr[-1])
                sets.append(st)
                ws.append(w)
            bar.update(1)
            clock("long paths")
    del RT

    def joined(parts):          # one part (no long paths): as it is, without a copy kernel
        return parts[0] if len(parts) == 1 else cp.concatenate(parts)
    return _sum.BackgroundSummary(
        key=_sum.path_key(ps), n_paths=ps.n_paths, lens=lens, hist_off=hist_off, hist=hist[:h_size].view(cp.int64),
        sparse_paths=sparse, sparse_ptr=joined(ptrs), sparse_sets=joined(sets), sparse_w=joined(ws), total=total,
        scale=scale if weighted else None, n_rows=nR)


def _count_blocks(src, blocks, kdtype, counter, wd, launches, pa, hist_off_d, hist, sms, bar):
    """Counts each block of rows into ``hist`` once ``src`` has it on the device (the current stream waits for its
    copy); returns the last block's columns (the whole background's where there is one block), or None where the
    upload failed (``hist`` then holds a part of the counts). ``launches``: per chunk of paths, (its number of path
    groups, the chunk and its group offsets on the device)."""
    cp = cupy_module()
    stream = cp.cuda.get_current_stream()
    RT = None
    for k, (a, b) in enumerate(blocks):
        got = src.ready(b)
        if got is None:
            return None
        Rd, event = got
        if event is not None:
            stream.wait_event(event)
        if k == 0:
            _await_ahead(kdtype)
        RT = _columns(Rd[a:b], kdtype)
        n = b - a
        for n_grp, chunk_d, grp_d in launches:
            gy = int(max(1, min(math.ceil(n / _THREADS), math.ceil(8 * sms / n_grp))))
            _fn(counter, kdtype)(
                (n_grp, gy), (_THREADS,), (RT, np.int64(n), _ptr(None if wd is None else wd[a:b]), chunk_d, grp_d,
                                           *pa, hist_off_d, hist, np.int64(_SMEM_BINS)),
                shared_mem=_SMEM_BINS * 8)
            bar.update(1)
    return RT


def _ptr(a):
    """A device array as a kernel's pointer argument; None as a null pointer."""
    return np.uint64(0) if a is None else a


def _columns(Rd, kdtype):
    """(M, n) C-contiguous device copy of the (n, M) device rows ``Rd`` (patterns.cu's transpose)."""
    cp = cupy_module()
    Rd = cp.ascontiguousarray(Rd)
    n, M = Rd.shape
    RT = cp.empty((M, n), dtype=Rd.dtype)
    if n and M:
        _fn("rows_to_columns", kdtype)((-(-n // 32), -(-M // 32)), (32, 8), (Rd, np.int64(n), np.int64(M), RT))
    return RT


def _path_arrays(ps: PathSet) -> tuple:
    cp = cupy_module()
    return (cp.asarray(ps.path_ptr, dtype=cp.int64), cp.asarray(ps.feature, dtype=cp.int32),
            cp.asarray(ps.lower, dtype=cp.float64), cp.asarray(ps.upper, dtype=cp.float64),
            cp.asarray(ps.missing_ok.astype(np.uint8)), cp.asarray(ps.cat_ptr, dtype=cp.int64),
            cp.asarray(ps.cat_nwords, dtype=cp.int32),
            cp.asarray(ps.cat_words if len(ps.cat_words) else np.zeros(1, np.uint32), dtype=cp.uint32),
            cp.asarray(ps.cat_outside_ok.astype(np.uint8)))


def _sparse_sets(sel: np.ndarray, RT, nR: int, wd, pa, xdtype):
    """(ptr, sets, weights int64) of long paths ``sel``: their distinct background fail sets, ascending, with
    summed weights (``wd`` None: unit weights; integer sums, as the CPU twin)."""
    cp = cupy_module()
    Q = len(sel)
    sel_d = cp.asarray(sel)
    fails = cp.empty(Q * nR, dtype=cp.int64)
    _fn("bg_fails", xdtype)(_grid(Q * nR), (_THREADS,), (RT, np.int64(nR), sel_d, np.int64(Q), *pa, fails))
    fails = fails.reshape(Q, nR)
    order = cp.argsort(fails, axis=1)
    srt = cp.take_along_axis(fails, order, axis=1)
    cs = cp.cumsum(wd[order], axis=1) if wd is not None else cp.broadcast_to(cp.arange(1, nR + 1), (Q, nR))
    last = cp.ones((Q, nR), dtype=bool)
    last[:, :-1] = srt[:, 1:] != srt[:, :-1]
    ptr = cp.concatenate([cp.zeros(1, cp.int64), cp.cumsum(last.sum(axis=1))])
    ends = cs[last]
    prev = cp.concatenate([cp.zeros(1, cp.int64), ends[:-1]])
    prev[ptr[:-1]] = 0
    return ptr, srt[last], (ends - prev).astype(cp.int64)


class Prepared:
    """The tables of one (model, summarised background, metric) on the device, and the bias (host, (K,))."""

    def __init__(self, ps: PathSet, summary: _sum.BackgroundSummary, metric: int, interactions: bool, xdtype,
                 timings: dict | None = None):
        cp = cupy_module()
        clock = _Clock(timings)
        self.interactions = interactions
        self.xdtype = np.dtype(xdtype)
        total = summary.total_float
        self.total = total
        plan = _pat.plan_paths(ps.path_ptr, interactions)
        lens = np.diff(ps.path_ptr)
        short = lens[np.concatenate(plan.chunks)] if plan.chunks else np.zeros(0, np.int64)
        if short.size and short.max() > (_MAXDI if interactions else _MAXD):
            raise ValueError("_patterns.TABLE_ENTRIES allows tables longer than the GPU kernels hold")
        if len(plan.long) and lens[plan.long].max() > (_MAXLI if interactions else _pat.MAX_SPARSE_LENGTH):
            raise NotImplementedError(
                f"GPU interventional {'interactions' if interactions else 'values'} for a path of more than "
                f"{_MAXLI if interactions else _pat.MAX_SPARSE_LENGTH} distinct features; use backend='cpu'")
        D = max(plan.max_len, 1)
        self.wld = np.int32(D + 1)
        WP, WQ = _pat.value_weights(_pat.SHAPLEY if interactions else metric, D)
        WI = _pat.interaction_weights(D) if interactions else (np.zeros((1, 1)),) * 3
        self.W = tuple(cp.asarray(w) for w in (WP, WQ) + WI)
        self.pa = _path_arrays(ps)
        self.leaf_value = cp.asarray(ps.leaf_value, dtype=cp.float64)
        self.K = ps.n_outputs
        self.tab_off = cp.asarray(plan.tab_off)
        hist = cp.asarray(summary.hist).view(cp.uint64)
        hist_off = cp.asarray(summary.hist_off)
        self.tables = []
        self.nbytes = 0
        for chunk, t_size, h_size in zip(plan.chunks, plan.tab_size, plan.hist_size):
            chunk_d = cp.asarray(chunk)
            tab = cp.empty(max(t_size, 1), dtype=cp.float64)
            start = cp.asarray(plan.hist_off[chunk])
            head = (chunk_d, np.int64(len(chunk)), start, np.int64(h_size), self.pa[0], hist, hist_off,
                    np.float64(total))
            if interactions:
                _fn("interaction_tables")(_grid(h_size), (_THREADS,), head + self.W + (self.wld, self.tab_off, tab))
            else:
                _fn("value_tables")(_grid(h_size), (_THREADS,), head + self.W[:2] + (self.wld, self.tab_off, tab))
            self.tables.append((chunk_d, np.int64(len(chunk)), tab))
            self.nbytes += tab.nbytes
        clock("tables")
        self.long = []
        step = max(1, (1 << 26) // max(summary.n_rows, 1))
        for c0 in range(0, len(plan.long), step):
            sel = plan.long[c0:c0 + step]
            ptr, sets, w = summary.sparse_of(sel, cp)
            self.long.append((cp.asarray(sel), np.int64(len(sel)), ptr, sets, w.astype(cp.float64)))
            self.nbytes += sets.nbytes * 2
        clock("long paths")
        self.bias = summary.bias(ps)

    def compute(self, Xd, out) -> None:
        """out[...] = the values of the rows Xd (device, the model's input dtype): (n, M+1, K) or (n, M+1, M+1, K)."""
        cp = cupy_module()
        nc, M = Xd.shape
        K = self.K
        width = (M + 1) ** 2 if self.interactions else M + 1
        XT = cp.ascontiguousarray(Xd.T)
        acc = cp.zeros((width, K, nc), dtype=cp.float64)
        inter = np.int32(1 if self.interactions else 0)
        M1 = np.int32(M + 1)
        for chunk_d, Q, tab in self.tables:
            _fn("rows_kernel", XT.dtype)(_grid(nc), (_THREADS,),
                                         (XT, np.int64(nc), chunk_d, Q, *self.pa, self.leaf_value, np.int32(K),
                                          self.tab_off, tab, inter, M1, acc))
        name = "sparse_rows<1>" if self.interactions else "sparse_rows<0>"
        for sel_d, Q, ptr, sets, wsum in self.long:
            _fn(name, XT.dtype)(_grid(nc), (_THREADS,),
                                (XT, np.int64(nc), sel_d, Q, *self.pa, self.leaf_value, np.int32(K), ptr, sets, wsum,
                                 np.float64(self.total), *self.W, self.wld, M1, acc))
        out[...] = acc.transpose(2, 0, 1).reshape(out.shape)
        bias = cp.asarray(self.bias)
        if self.interactions:
            out[:, M, M, :] += bias
        else:
            out[:, M, :] += bias


def prepared(ps: PathSet, summary: _sum.BackgroundSummary, metric: int, interactions: bool, xdtype) -> Prepared:
    """The summary's tables for this call, kept in its cache while they fit ``_sum.TABLE_CACHE_BYTES``."""
    key = ("gpu", metric, interactions, ps.n_paths, np.dtype(xdtype).str)
    if key in summary.cache:
        return summary.cache[key][1]
    prep = Prepared(ps, summary, metric, interactions, xdtype)
    if summary.table_bytes + prep.nbytes <= _sum.TABLE_CACHE_BYTES:
        summary.cache[key] = (prep.nbytes, prep)
    return prep


def pattern_values(paths: PathSet, X, background, *, weights, metric: int, interactions: bool, tree_limit,
                   progress, desc: str):
    """The GPU pattern engine behind the interventional entry points (identity output); ``background``: rows, or
    a BackgroundSummary of the model's paths."""
    M, K = paths.n_features, paths.n_outputs
    state = {}
    if isinstance(background, _sum.BackgroundSummary):
        if weights is not None:
            raise ValueError("weights belong to the background summary (background_summary(..., weights=...)); "
                             "pass none with a summary")
        background.check(paths)

    def prepare(pk):
        summary = background
        if not isinstance(summary, _sum.BackgroundSummary):
            R = core.check_x(background, pk.ps, name="background")
            summary = summarize(pk.ps, R, weights, None)
        else:
            summary = _on_device(summary)
        state["prep"] = prepared(pk.ps, summary, metric, interactions, pk.xdtype)

    def compute(pk, Xd, out, a, b):
        state["prep"].compute(Xd, out)

    cols = (M + 1, M + 1, K) if interactions else (M + 1, K)
    extra = int(np.prod(cols)) * 8 + M * 8
    return core.driver(paths, X, tree_limit, progress, desc, cols, extra, compute, prepare=prepare)


def _on_device(summary: _sum.BackgroundSummary) -> _sum.BackgroundSummary:
    """The summary with device arrays (the same object where they are already there; a host summary keeps its
    device copy in its cache, so that repeated calls upload it once)."""
    cp = cupy_module()
    if not isinstance(summary.hist, np.ndarray):
        return summary
    dev = summary.cache.get("device")
    if dev is None:
        dev = dataclasses.replace(summary, hist=cp.asarray(summary.hist), sparse_ptr=cp.asarray(summary.sparse_ptr),
                           sparse_sets=cp.asarray(summary.sparse_sets), sparse_w=cp.asarray(summary.sparse_w),
                           cache=summary.cache)
        summary.cache["device"] = dev
    return dev
