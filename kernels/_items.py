"""Numba kernels over work items, run on a pool of Python threads instead of a ``prange`` loop.

A kernel here is a plain ``@numba.njit(nogil=True, cache=True)`` function whose last two arguments are a range
``[lo, hi)`` of its work items; :func:`items` wraps it so that a call with the other arguments runs every item,
``numba.get_num_threads()`` threads at a time. Each work item writes its own part of the outputs, so the result does
not depend on the threads or on how the items are cut into chunks.

Why not ``prange``: Numba compiles a ``prange`` loop's body through its parfor passes into a gufunc and then
optimises and emits that body again in the gufunc's two wrappers and in the kernel itself; the interventional
pattern kernels compiled about twice as fast as work items (``docs/design/treeshap.md`` section 7). A plain
function called from Python, however, receives arrays that own a reference count, and every view its loops take
(``R[j]``) increments and decrements it atomically; a parfor gufunc's arrays have none, and that traffic made the
plain functions 15-25% slower. :func:`borrow` gives a kernel the same ownerless arrays: the caller keeps the arrays
alive for the call, so the kernel's views need no counts, and LLVM removes them. The kernels are compiled with
``error_model="numpy"``, as a parfor body is. The quadrature kernels of path-dependent SHAP values and
interactions stay ``prange`` loops (as work items they ran slower on the Xeon host, for reasons not found).
"""
from __future__ import annotations

import inspect
import os
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
from numba import types
from numba.core import cgutils
from numba.core.extending import intrinsic

_CHUNKS_PER_THREAD = 4   # chunks per thread and call: threads that finish early take more chunks


@intrinsic
def borrow(typingctx, a):
    """The array ``a`` without an owner (no reference count): views of it cost no atomic increments. Only for
    arrays that the caller keeps alive for the whole call, and that the kernel does not return or store."""
    if not isinstance(a, types.Array):
        return None

    def codegen(context, builder, sig, args):
        ary = cgutils.create_struct_proxy(a)(context, builder, value=args[0])
        ary.meminfo = cgutils.get_null_value(ary.meminfo.type)
        ary.parent = cgutils.get_null_value(ary.parent.type)
        return ary._getvalue()

    return a(a), codegen


_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _executor() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(max(1, numba.config.NUMBA_NUM_THREADS - 1), thread_name_prefix="hitml")
        return _pool


def _after_fork_in_child() -> None:
    """A forked child (multiprocessing, Dask workers) has none of the parent's pool threads: start a new pool."""
    global _pool, _pool_lock
    _pool = None
    _pool_lock = threading.Lock()


os.register_at_fork(after_in_child=_after_fork_in_child)


def run_items(kernel, n_items: int, args: tuple, threads: int | None = None) -> None:
    """Call ``kernel(*args, lo, hi)`` on chunks ``[lo, hi)`` covering ``range(n_items)``: the calling thread and
    up to ``threads - 1`` (default ``numba.get_num_threads()``) pool threads take chunks until none is left."""
    n_items = int(n_items)
    if n_items <= 0:
        return
    threads = numba.get_num_threads() if threads is None else threads
    threads = max(1, min(int(threads), n_items, numba.config.NUMBA_NUM_THREADS))
    if threads == 1:
        kernel(*args, 0, n_items)
        return
    size = -(-n_items // (threads * _CHUNKS_PER_THREAD))
    chunks = iter([(lo, min(n_items, lo + size)) for lo in range(0, n_items, size)])
    failed = []

    def work() -> None:
        for lo, hi in chunks:   # a list iterator hands each chunk to exactly one thread (under the GIL)
            if failed:
                return
            try:
                kernel(*args, lo, hi)
            except BaseException as exc:  # noqa: BLE001 - re-raised in the calling thread
                failed.append(exc)
                return

    futures = [_executor().submit(work) for _ in range(threads - 1)]
    work()
    for f in futures:
        f.result()
    if failed:
        raise failed[0]


class ItemKernel:
    """A Numba kernel over work items ``[lo, hi)`` (its last two arguments), called with the other arguments.
    ``count`` is a Python expression in the kernel's argument names (and its module's globals) for the number of
    work items; :func:`run_items` runs them. ``dispatcher`` is the Numba function; its other attributes
    (``signatures``, ``stats``, ...) pass through."""

    def __init__(self, dispatcher, count: str) -> None:
        self.dispatcher = dispatcher
        self.py_func = dispatcher.py_func
        self.__name__ = self.py_func.__name__
        self.__qualname__ = self.py_func.__qualname__
        self.__doc__ = self.py_func.__doc__
        self.__module__ = self.py_func.__module__
        names = list(inspect.signature(self.py_func).parameters)
        if names[-2:] != ["lo", "hi"]:
            raise TypeError(f"{self.py_func.__qualname__}: a work-item kernel's last arguments are (lo, hi)")
        self._names = names[:-2]
        self._count = compile(count, f"<work items of {self.py_func.__qualname__}>", "eval")

    def count(self, *args) -> int:
        """The number of work items of a call with ``args``."""
        if len(args) != len(self._names):
            raise TypeError(f"{self.__qualname__} takes {len(self._names)} arguments ({len(args)} given)")
        return int(eval(self._count, self.py_func.__globals__, dict(zip(self._names, args))))

    def __call__(self, *args) -> None:
        run_items(self.dispatcher, self.count(*args), args)

    def __getattr__(self, name: str):
        if name == "dispatcher":
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        return f"<hitml work-item kernel {self.__qualname__}>"


def items(count: str) -> Callable[[object], ItemKernel]:
    """Decorator: ``@items("len(pidx)")`` above ``@numba.njit(nogil=True, cache=True)`` makes an
    :class:`ItemKernel` of that many work items."""
    def wrap(dispatcher) -> ItemKernel:
        return ItemKernel(dispatcher, count)
    return wrap
