"""GPU moment sketch, the public entry: moments.cu's moments and distinct sets plus the row sample (sample.cu)."""
from __future__ import annotations

import functools
import threading

import numpy as np

from hitml.kernels._cuda import get_kernel
from hitml.kernels.device import cupy_module

from . import sample as rs
from ._gpu_moments import sketch_moments
from .state import MomentSketch, _prepare_input

THREADS = 256  # sample.cu's sample_salt reduces in a 256-entry shared array
SORT_THREADS = 1024  # sample.cu's sample_sort: one block
SORT_MAX = 8192  # selected rows sample_sort takes (2 words each of shared memory: 128 KiB); more: the host sorts
DEVICE_SORT = True  # sort the selected rows by key on the device where they fit (False: on the host, for A/B timings)
_local = threading.local()


def sketch(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256, n_sample: int = rs.N_SAMPLE,
           **tuning) -> MomentSketch:
    """Sketch the columns of X (NumPy or CuPy, (n, d)) on the GPU; NaN is missing, inf raises ValueError.

    Moments and distinct sets equal the CPU twin's within 1e-12 of each moment's scale, and the row sample (n_sample
    rows, 0: none) is the CPU twin's bit for bit. ``tuning`` (vals, stages, minb, fastpath, blocks_per_sm, bulk) tunes
    the read kernel, checked as a ``_gpu_moments.GpuSketchOptions``; all settings give the same sketch.
    """
    n_sample = rs.check_n_sample(n_sample)
    cp = cupy_module()
    pending = None
    if n_sample:
        Xp, w, has_w = _prepare_input(X, sample_weight, cp)
        if Xp.shape[0]:
            pending = _queue_sample(cp, Xp, w, has_w, n_sample)
        # the caller's array where it is used as given: sketch_moments's repeated-call path (no checks, one graph
        # launch) keys on that very object, and _prepare_input may hand back a new view of it
        if not (type(X) is cp.ndarray and X.dtype == Xp.dtype and X.flags.c_contiguous):
            X = Xp
    sk = sketch_moments(X, sample_weight, n_moments=n_moments, max_distinct=max_distinct, **tuning)
    if n_sample:  # result() waits for the side stream: then the sample sits in pinned host memory
        sk.sample = pending() if pending is not None else rs.RowSample.empty(X.shape[1], n_sample)
    return sk


def _buffers(cp, cap: int, d: int, itemsize: int) -> dict:
    """Device work arrays, the pinned result, the side stream and its events (kept per thread for the last shape)."""
    dev = cp.cuda.Device().id
    key = (dev, cap, d, itemsize)
    cached = getattr(_local, "bufs", None)
    if cached is not None and cached[0] == key:
        return cached[1]
    nbytes = 8 * (1 + 2 * cap) + cap * d * itemsize
    mem = cp.cuda.alloc_pinned_memory(nbytes)
    b = {"salt": cp.empty(1, cp.uint64), "count": cp.empty(1, cp.uint64), "idx": cp.empty(cap, cp.int64),
         "keys": cp.empty(cap, cp.uint64), "mem": mem, "ptr": np.uint64(mem.ptr),
         "side": cp.cuda.Stream(non_blocking=True), "ready": cp.cuda.Event(disable_timing=True),
         "done": cp.cuda.Event(disable_timing=True),
         "sms": cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrMultiProcessorCount, dev)}
    _local.bufs = (key, b)
    return b


@functools.lru_cache(maxsize=None)
def _kernels(tn: str, has_w: bool) -> tuple:
    gather = f"sample_gather<{tn},{'true' if has_w else 'false'}>"
    names = (f"sample_salt<{tn}>", "sample_select", "sample_sort", gather)
    return tuple(get_kernel("sketch/sample.cu", nm, name_expressions=names) for nm in names)


def _queue_sample(cp, X, w, has_w: bool, k: int):
    """Queue sample.cu's three launches on a side stream (they overlap the sketch's read kernel, after the current
    stream's work on X); returns the function that waits for them and reads the result."""
    n, d = X.shape
    T = rs.threshold(n, k)
    cap = rs.buffer_rows(n, k)
    salt_k, select_k, sort_k, gather_k = _kernels("float" if X.dtype == np.float32 else "double", has_w)
    b = _buffers(cp, cap, d, X.dtype.itemsize)
    sort = DEVICE_SORT and cap <= SORT_MAX
    keep = min(cap, k) if sort else cap  # sorted on the device: only the k smallest keys are copied to the host
    b["ready"].record(cp.cuda.get_current_stream())
    side = b["side"]
    side.wait_event(b["ready"])
    with side:
        salt_k((1,), (THREADS,), (X, np.int64(n), np.int32(d), b["salt"], b["count"]))
        select_k((int(min(-(-n // THREADS), 8 * b["sms"])),), (THREADS,),
                 (np.int64(n), b["salt"], np.uint64(T), b["idx"], b["keys"], b["count"], np.int32(cap)))
        if sort:
            L = 1 << max(cap - 1, 1).bit_length()
            if 16 * L > 48 << 10:
                sort_k.max_dynamic_shared_size_bytes = 16 * L
            sort_k((1,), (SORT_THREADS,), (b["keys"], b["idx"], b["count"], np.int32(cap), np.int32(L)),
                   shared_mem=16 * L)
        gather_k((-(-keep * d // THREADS),), (THREADS,),
                 (X, w, np.int32(d), b["idx"], b["keys"], b["count"], np.int32(cap), np.int32(keep), b["ptr"]))
        b["done"].record(side)

    def result() -> rs.RowSample:
        b["done"].synchronize()
        words = np.frombuffer(b["mem"], np.uint64, 1 + 2 * cap)
        c = int(words[0])
        if c > cap:  # more rows under T than the buffer holds (~1e-15 per call): select them on the host
            idx, keys, tau = rs.select_rows(n, int(b["salt"].get()[0]), k)
            x = X[cp.asarray(idx)].get().astype(np.float32)
            ww = w[cp.asarray(idx)].get() if has_w else np.ones(idx.size)
            return rs.RowSample(keys, x, ww, tau, k)
        if sort:  # in key order already: the first min(c, k) rows, tau as finish_selection sets it
            m = min(c, k)
            vals = np.frombuffer(b["mem"], X.dtype, m * d, offset=8 * (1 + 2 * cap)).reshape(m, d)
            keys = words[1 : 1 + m].copy()
            tau = int(keys[-1]) if c > k else T
            ww = words[1 + cap : 1 + cap + m].view(np.float64).copy()
            return rs.RowSample(keys, np.array(vals, np.float32), ww, tau, k)  # one copy out of the reused buffer
        vals = np.frombuffer(b["mem"], X.dtype, c * d, offset=8 * (1 + 2 * cap)).reshape(c, d)
        pos, keys, tau = rs.finish_selection(np.arange(c), words[1 : 1 + c].copy(), T, k)
        ww = words[1 + cap : 1 + cap + c].view(np.float64)[pos]
        return rs.RowSample(keys, np.take(vals, pos, axis=0).astype(np.float32, copy=False), ww, tau, k)

    return result
