"""Backend resolution ("cpu" | "gpu" | "auto"), the array module, and GPU memory budgets.

This is the one place that imports CuPy; every adapter and kernel asks here (``cupy_module()`` for the module,
``array_module(x)`` for the module of an array, ``is_cupy_array(x)`` to test one). An adapter resolves the user's
backend string once with ``resolve_backend``; kernel entry points that take an already resolved name check it with
``check_resolved``. ``tests/test_layout.py`` enforces the rule.
"""
from __future__ import annotations

import functools
import importlib
import threading
import warnings
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

BACKENDS = ("cpu", "gpu", "auto")


class GPUUnavailableError(RuntimeError):
    """backend="gpu" was asked for but CuPy sees no usable CUDA device.

    The message says why (CuPy not installed or not importable, no device, a CUDA runtime error).

    See Also
    --------
    resolve_backend : raises it for ``backend="gpu"``.
    gpu_available : ask first instead.

    Examples
    --------
    >>> from hitml.kernels import GPUUnavailableError, gpu_available, resolve_backend
    >>> try:
    ...     backend = resolve_backend("gpu")
    ... except GPUUnavailableError:
    ...     backend = "cpu"
    >>> backend == ("gpu" if gpu_available() else "cpu")
    True
    """


@functools.lru_cache(maxsize=1)
def _cupy_or_reason() -> tuple[Any, str]:
    try:
        import cupy
    except Exception as exc:  # noqa: BLE001 - ImportError, or a broken CUDA install
        return None, f"CuPy is not importable ({type(exc).__name__}: {exc}); install hitml[cuda12] or hitml[cuda13]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # noqa: BLE001 - any CUDA runtime error means no usable device; the reason is kept
        return None, f"CuPy cannot query CUDA devices ({type(exc).__name__}: {exc})"
    if n < 1:
        return None, "CuPy sees no CUDA device"
    return cupy, ""


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device.

    Returns
    -------
    bool
        Cached for the process.

    See Also
    --------
    resolve_backend : the backend a kernel will use.

    Examples
    --------
    >>> from hitml.kernels import gpu_available
    >>> isinstance(gpu_available(), bool)
    True
    """
    return _cupy_or_reason()[0] is not None


def cupy_module():
    """Return the cupy module, or raise GPUUnavailableError saying why not."""
    cp, why = _cupy_or_reason()
    if cp is None:
        raise GPUUnavailableError(f'backend="gpu" needs a CUDA GPU: {why}')
    return cp


_warned_fallback = False


def check_backend(backend: str | None) -> str:
    """Validate a backend name without resolving it: "cpu", "gpu" or "auto" (None means "auto").

    Parameters
    ----------
    backend : {"auto", "cpu", "gpu"} or None
        What the caller asked for.

    Returns
    -------
    str
        The name, None mapped to "auto".

    Raises
    ------
    ValueError
        For any other value; the one message every backend argument gives.

    See Also
    --------
    resolve_backend : validates, then picks "cpu" or "gpu".

    Examples
    --------
    >>> from hitml.kernels import check_backend
    >>> check_backend(None)
    'auto'
    """
    if backend is None:
        return "auto"
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    return backend


def check_resolved(backend: str) -> str:
    """A backend name that was resolved already: "cpu", or "gpu" with a usable device.

    Kernel entry points that an adapter calls after :func:`resolve_backend` take only these two names, so "auto" is
    resolved once, in the adapter.

    Parameters
    ----------
    backend : {"cpu", "gpu"}
        The resolved name.

    Returns
    -------
    str
        ``backend``.

    Raises
    ------
    ValueError
        For "auto" (resolve it first) or any other value.
    GPUUnavailableError
        For "gpu" without a usable device.

    Examples
    --------
    >>> from hitml.kernels import check_resolved
    >>> check_resolved("cpu")
    'cpu'
    """
    if check_backend(backend) == "auto":
        raise ValueError('backend="auto" must be resolved first (hitml.kernels.resolve_backend); '
                         'this entry point takes "cpu" or "gpu"')
    if backend == "gpu":
        cupy_module()
    return backend


def resolve_backend(backend: str | None = "auto", data: Any = None) -> str:
    """Map "cpu" | "gpu" | "auto" (None means "auto") to "cpu" or "gpu".

    "gpu" raises GPUUnavailableError without a usable device. "auto" picks the GPU when CuPy sees one
    (or when ``data`` already lives on the GPU) and otherwise falls back to the CPU, warning once per process.

    Parameters
    ----------
    backend : {"auto", "cpu", "gpu"} or None, default "auto"
        What the caller asked for.
    data : object, optional
        The input; a CuPy array makes "auto" pick the GPU.

    Returns
    -------
    str
        "cpu" or "gpu".

    Raises
    ------
    ValueError
        For any other ``backend``.
    GPUUnavailableError
        For "gpu" without a usable device.

    Warns
    -----
    RuntimeWarning
        Once per process, when "auto" falls back to the CPU.

    See Also
    --------
    array_module : the array module of the resolved backend.

    Examples
    --------
    >>> from hitml.kernels import resolve_backend
    >>> resolve_backend("cpu")
    'cpu'
    """
    global _warned_fallback
    backend = check_backend(backend)
    if backend == "cpu":
        return "cpu"
    if backend == "gpu":
        cupy_module()
        return "gpu"
    if is_cupy_array(data) or gpu_available():
        return "gpu"
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(
            f'backend="auto": no usable GPU ({_cupy_or_reason()[1]}); using the CPU backend',
            RuntimeWarning,
            stacklevel=2,
        )
    return "cpu"


def engine_module(family: str, backend: str):
    """The engine module (``cpu`` or ``gpu``) of a kernel family for a resolved backend, imported on first use.

    Every kernel family picks its engine here, so the GPU engine (CuPy, CUDA sources) is only imported where a call
    asks for it.

    Parameters
    ----------
    family : str
        The family's package, e.g. ``"hitml.kernels.treeshap"`` (its ``__name__``).
    backend : {"cpu", "gpu"}
        A resolved backend (:func:`check_resolved` checks it).

    Returns
    -------
    module
        ``<family>.cpu`` or ``<family>.gpu``.

    Raises
    ------
    ValueError
        For "auto" or any other name.
    GPUUnavailableError
        For "gpu" without a usable device.
    NotImplementedError
        Where the family has no module for that backend in this installation.

    Examples
    --------
    >>> from hitml.kernels.device import engine_module
    >>> engine_module("hitml.kernels.shuffle", "cpu").__name__
    'hitml.kernels.shuffle.cpu'
    """
    name = f"{family}.{check_resolved(backend)}"
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name == name:
            raise NotImplementedError(f"the {backend.upper()} engine ({name}) is not available in this installation; "
                                      f"use backend={'cpu' if backend == 'gpu' else 'gpu'!r}") from exc
        raise


def is_cupy_array(x: Any) -> bool:
    """True for a cupy.ndarray, without importing CuPy when it is not loaded already.

    Parameters
    ----------
    x : object
        Anything.

    Returns
    -------
    bool

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels import is_cupy_array
    >>> is_cupy_array(np.zeros(3))
    False
    """
    mod = type(x).__module__
    return mod.startswith("cupy") and hasattr(x, "__cuda_array_interface__")


def array_module(backend_or_array: Any):
    """numpy for "cpu" or a host array; cupy for "gpu" or a CuPy array.

    Parameters
    ----------
    backend_or_array : str or array-like
        A backend name (resolved by :func:`resolve_backend`) or an array.

    Returns
    -------
    module
        ``numpy`` or ``cupy``.

    See Also
    --------
    cupy.get_array_module : CuPy's equivalent for arrays.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels import array_module
    >>> array_module("cpu") is np and array_module(np.zeros(2)) is np
    True
    """
    if isinstance(backend_or_array, str):
        return cupy_module() if resolve_backend(backend_or_array) == "gpu" else np
    return cupy_module() if is_cupy_array(backend_or_array) else np


def to_numpy(x: Any) -> np.ndarray:
    """Bring an array to the host (no copy for NumPy input).

    Parameters
    ----------
    x : array-like
        NumPy, CuPy or anything ``numpy.asarray`` takes.

    Returns
    -------
    numpy.ndarray

    See Also
    --------
    cupy.asnumpy : CuPy's equivalent.

    Examples
    --------
    >>> from hitml.kernels import to_numpy
    >>> to_numpy([1, 2]).tolist()
    [1, 2]
    """
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)


_STAGE_BYTES = 64 << 20          # each of the two pinned staging buffers of download()
_DIRECT_BYTES = 8 << 20          # below this, a plain (pageable) copy is as fast


@functools.lru_cache(maxsize=1)
def _host_pool():
    """(thread pool, its size) for splitting host copies."""
    import concurrent.futures
    import os
    k = min(8, os.cpu_count() or 1)
    return concurrent.futures.ThreadPoolExecutor(k, thread_name_prefix="hitml-d2h"), k


@functools.lru_cache(maxsize=1)
def _staging():
    """Two pinned host buffers of _STAGE_BYTES and two non-blocking streams, made on first use."""
    cp = cupy_module()
    return ([cp.cuda.alloc_pinned_memory(_STAGE_BYTES) for _ in range(2)],
            [cp.cuda.Stream(non_blocking=True) for _ in range(2)])


def download(src: Any, out: np.ndarray | None = None, ready: Any = None) -> np.ndarray:
    """Copy a C-contiguous CuPy array to the host through two pinned staging buffers.

    Pageable device-to-host copies of large arrays run at a few GB/s; staging through pinned memory, with the next
    slice's transfer overlapping the host copy of the previous one, runs near PCIe speed (docs/design/treeshap.md,
    section 8). The copy waits for ``ready`` (a CuPy event) where given, else for the work queued
    on the current stream, so later work already queued there overlaps the transfer. Returns ``out``.
    """
    cp = cupy_module()
    if out is None:
        out = np.empty(src.shape, dtype=src.dtype)
    if src.nbytes < _DIRECT_BYTES or not src.flags.c_contiguous or not out.flags.c_contiguous:
        if ready is not None:
            ready.synchronize()
        src.get(out=out)
        return out
    pinned, streams = _staging()
    done = ready if ready is not None else cp.cuda.get_current_stream().record()
    flat_src, flat_out = src.reshape(-1), out.reshape(-1)
    per = _STAGE_BYTES // src.itemsize
    bufs = [np.frombuffer(pinned[i], dtype=src.dtype, count=per) for i in range(2)]
    pending: list = [None, None]

    def drain(i):
        a, b = pending[i]
        streams[i].synchronize()
        host_copy(flat_out[a:b], bufs[i][: b - a])
        pending[i] = None

    for k, a in enumerate(range(0, flat_src.size, per)):
        i = k % 2                    # buffer i is free: the slice before the previous one was drained below
        b = min(flat_src.size, a + per)
        streams[i].wait_event(done)
        flat_src[a:b].get(out=bufs[i][: b - a], stream=streams[i], blocking=False)
        pending[i] = (a, b)
        if pending[1 - i] is not None:
            drain(1 - i)
    for i in range(2):
        if pending[i] is not None:
            drain(i)
    return out


# Page-locked (pinned) host memory lent to NumPy arrays. A device-to-host copy into pinned memory runs at the link's
# speed and queues without blocking the host; into pageable memory the driver copies through its own buffer, and
# memory the process touches for the first time also pays a page fault per page (docs/design/treeshap.md, section 8,
# has the rates). Blocks are recycled: an array's block returns to the
# pool when the array and all its views are gone, so repeated calls write into memory that is resident already.
_PINNED_MIN_BYTES = 1 << 16      # smaller arrays: a plain copy costs no more


class _PinnedBlock:
    """The owner (``base``) of a NumPy array in a pinned block; its finaliser returns the block to the pool."""

    __slots__ = ("__array_interface__", "__weakref__")


class _PinnedPool:
    """Pinned blocks by size class, lent or free; ``held`` counts the bytes of both (the cap bounds it)."""

    def __init__(self) -> None:
        self.lock = threading.RLock()        # a finaliser may run inside take() (garbage collection)
        self.free: dict[int, list] = {}
        self.held = 0
        self.cap = 0

    def take(self, size: int, cap: int):
        with self.lock:
            self.cap = cap
            blocks = self.free.get(size)
            if blocks:
                mem = blocks.pop()
                if not blocks:
                    del self.free[size]
                return mem
            if size > cap:                   # never fits: keep the free blocks for the calls that do
                return None
            self.trim(cap - size)
            if self.held + size > cap:
                return None
            self.held += size
        try:
            cp = cupy_module()
            return cp.cuda.pinned_memory.PinnedMemory(size, cp.cuda.runtime.hostAllocPortable)
        except Exception:  # noqa: BLE001 - any failure to lock host memory (CUDA error, MemoryError): callers use pageable
            with self.lock:
                self.held -= size
            return None

    def give(self, mem, size: int) -> None:
        with self.lock:
            if self.held <= self.cap:
                self.free.setdefault(size, []).append(mem)
            else:
                self.held -= size            # over the cap (lowered since): freed when ``mem`` is dropped

    def trim(self, limit: int) -> None:
        """Free the largest free blocks until at most ``limit`` bytes are held (or none is free)."""
        with self.lock:
            while self.held > max(0, limit) and self.free:
                size = max(self.free)
                self.free[size].pop()
                if not self.free[size]:
                    del self.free[size]
                self.held -= size


_PINNED = _PinnedPool()


def _size_class(nbytes: int) -> int:
    """Block size for ``nbytes``: rounded up to 1/16-1/8 of its power of two, so nearby sizes share blocks."""
    step = max(_PINNED_MIN_BYTES, 1 << max(0, int(nbytes).bit_length() - 4))
    return -(-int(nbytes) // step) * step


def pinned_empty(shape: tuple, dtype: Any, cap: int) -> np.ndarray | None:
    """An uninitialised C-contiguous NumPy array in pinned host memory, or None where it is small (a plain array
    costs no more) or would take the pool's pinned bytes (lent and free) past ``cap``. The block is reused by later
    calls once the array and every view of it are gone."""
    dtype = np.dtype(dtype)
    shape = tuple(int(s) for s in shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if cap < _PINNED.cap:                    # a lowered cap frees free blocks now, lent ones when they come back
        _PINNED.cap = max(0, int(cap))
        _PINNED.trim(_PINNED.cap)
    if nbytes < _PINNED_MIN_BYTES or cap <= 0:
        return None
    size = _size_class(nbytes)
    mem = _PINNED.take(size, int(cap))
    if mem is None:
        return None
    block = _PinnedBlock()
    block.__array_interface__ = {"data": (mem.ptr, False), "shape": shape, "typestr": dtype.str, "version": 3}
    fin = weakref.finalize(block, _PINNED.give, mem, size)
    fin.atexit = False
    return np.asarray(block)


def is_pinned(a: np.ndarray) -> bool:
    """True for an array (or a view of one) that pinned_empty made."""
    while isinstance(a, np.ndarray):
        a = a.base
    return isinstance(a, _PinnedBlock)


def release_pinned() -> None:
    """Free the pinned blocks no array uses (lent blocks are freed when their arrays go)."""
    _PINNED.trim(0)


# bytes per thread of a split host copy at least: each part's hand-off to a pool thread costs tens of microseconds
# (on the H100 host, casting adult-small's 1.1 MB of rows in 8 parts was most of a 1.1 ms SHAP call)
_HOST_COPY_PART = 2 << 20


def host_copy(dst: np.ndarray, src: np.ndarray) -> None:
    """``dst[...] = src`` (any dtype cast, as ``np.copyto(casting="unsafe")``), split by rows over threads for large
    arrays (copies release the GIL)."""
    pool, k = _host_pool()
    k = min(k, dst.nbytes // _HOST_COPY_PART)
    if k < 2 or dst.ndim == 0 or dst.shape[0] < 2:
        np.copyto(dst, src, casting="unsafe")
        return
    step = -(-dst.shape[0] // k)
    list(pool.map(lambda a: np.copyto(dst[a:a + step], src[a:a + step], casting="unsafe"),
                  range(0, dst.shape[0], step)))


@functools.lru_cache(maxsize=None)
def _copy_stream(device_id: int):
    return cupy_module().cuda.Stream(non_blocking=True)


def copy_stream():
    """A non-blocking stream of the current device for transfers that overlap work on the current stream."""
    return _copy_stream(cupy_module().cuda.Device().id)


def upload(x: np.ndarray, dtype: Any, cap: int, keep: list) -> Any:
    """``x`` on the device as a C-contiguous CuPy array of ``dtype``. Cast into a pinned block by host threads and
    copied on the current stream without blocking the host; the block is appended to ``keep``, which the caller
    holds until that stream's work is done. Small arrays, and any past the pinned cap, go as CuPy copies them."""
    cp = cupy_module()
    staged = pinned_empty(x.shape, dtype, cap)
    if staged is None:
        return cp.asarray(np.ascontiguousarray(x, dtype=dtype))
    host_copy(staged, x)
    out = cp.empty(x.shape, dtype=dtype)
    out.data.copy_from_host_async(staged.ctypes.data, out.nbytes, cp.cuda.get_current_stream())
    keep.append(staged)
    return out


_SLAB_BYTES = 1 << 26


def upload_slabs(x: np.ndarray, dtype: Any, slab_bytes: int | None = None,
                 on_slab: Callable[[Any, int, Any], None] | None = None) -> Any:
    """A large host array on the device as a C-contiguous CuPy array of ``dtype``, through two pinned slabs of
    ``slab_bytes``: host threads fill one (casting as NumPy casts) while the other is copied. Neither a pinned nor
    a pageable copy of the whole array is made (CuPy's own copy of a large array stages all of it in pinned
    memory first, which costs host memory the size of the array and the time to pin it). ``slab_bytes``: None for
    the module's ``_SLAB_BYTES``.

    ``on_slab(out, rows, event)``, where given, is called after each slab's copy is queued: the first ``rows`` rows
    of ``out`` (the array returned at the end) are on the device once ``event`` (on the current stream) is reached,
    so that another stream can start on them while the rest uploads. Arrays small enough for one copy call it
    never: they are whole when this returns."""
    cp = cupy_module()
    slab_bytes = _SLAB_BYTES if slab_bytes is None else slab_bytes
    x = np.ascontiguousarray(x)
    dtype = np.dtype(dtype)
    n = x.shape[0] if x.ndim else 1
    row = int(np.prod(x.shape[1:], dtype=np.int64)) * dtype.itemsize if x.ndim else dtype.itemsize
    if x.ndim == 0 or n * row <= 2 * slab_bytes or row == 0:
        return cp.asarray(np.ascontiguousarray(x, dtype=dtype))
    rows = max(1, slab_bytes // row)
    out = cp.empty(x.shape, dtype=dtype)
    stream = cp.cuda.get_current_stream()
    mems = [cp.cuda.alloc_pinned_memory(rows * row) for _ in range(2)]
    bufs = [np.frombuffer(m, dtype=dtype, count=rows * row // dtype.itemsize).reshape((rows,) + x.shape[1:])
            for m in mems]
    done = [None, None]
    for k, a in enumerate(range(0, n, rows)):
        b = min(n, a + rows)
        i = k % 2
        if done[i] is not None:
            done[i].synchronize()           # the slab's previous copy has left it
        buf = bufs[i][:b - a]
        host_copy(buf, x[a:b])
        out[a:b].data.copy_from_host_async(buf.ctypes.data, buf.nbytes, stream)
        done[i] = stream.record()
        if on_slab is not None:
            on_slab(out, b, done[i])
    stream.synchronize()                     # the pinned slabs are released after this
    return out


def free_gpu_bytes(fraction: float = 0.5) -> int:
    """A memory budget: ``fraction`` of the currently free device memory plus what CuPy's pool holds free."""
    cp = cupy_module()
    free, _total = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    return int(fraction * (free + pool.free_bytes()))


def device_name() -> str:
    """Human-readable name of the current CUDA device, or "cpu"."""
    if not gpu_available():
        return "cpu"
    cp = cupy_module()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
