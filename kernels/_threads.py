"""Run a ``nogil`` Numba kernel over work items on a pool of Python threads, as many as Numba's thread count.

Why not ``parallel=True`` and ``prange``: Numba compiles a ``prange`` loop into a separate gufunc whose library links
the loop body in, and the caller links the gufunc in again; LLVM re-optimises and re-emits linked code in every
library, so a kernel's body went through LLVM about three times on its first compile. A plain ``nogil`` kernel over a
range of work items compiles once, caches like any function, and its threads release the GIL while they run.
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import numba

_POOL: ThreadPoolExecutor | None = None
_POOL_LOCK = threading.Lock()


def _pool(workers: int) -> ThreadPoolExecutor:
    global _POOL
    with _POOL_LOCK:
        if _POOL is None or _POOL._max_workers < workers:
            old, _POOL = _POOL, ThreadPoolExecutor(workers, thread_name_prefix="hitml")
            if old is not None:
                old.shutdown(wait=False)
        return _POOL


def run_items(kernel, n_items: int, *args) -> None:
    """``kernel(i0, i1, *args)`` over work items [0, n_items) in equal contiguous shares, one per thread
    (``numba.get_num_threads()`` of the calling thread, so ``NUMBA_NUM_THREADS`` and ``numba.set_num_threads`` apply);
    the calling thread takes the first share. Items must write disjoint outputs."""
    threads = max(1, min(numba.get_num_threads(), n_items))
    bounds = [n_items * t // threads for t in range(threads + 1)]
    if threads == 1:
        kernel(0, n_items, *args)
        return
    pool = _pool(threads - 1)
    futures = [pool.submit(kernel, bounds[t], bounds[t + 1], *args) for t in range(1, threads)]
    try:
        kernel(bounds[0], bounds[1], *args)
    finally:
        errors = [f.exception() for f in futures]
    for e in errors:
        if e is not None:
            raise e
