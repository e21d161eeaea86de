"""Ahead-of-time compiled copies of the CPU TreeSHAP engine's kernels, built when hitml is installed.

Numba compiles a kernel the first time a process on a machine calls it (about 25 CPU s for the TreeSHAP engine's
kernels on the 2-core machine) and caches the machine code for later processes. Installing hitml (``pip install``,
``scripts/env.sh``) also builds the same kernels ahead of time with Numba's ``pycc`` into extension modules under
``hitml/kernels/_compiled/``, for the installing machine's CPU, so that a process that finds no kernel in Numba's
cache runs these copies instead of waiting for the compile; it then compiles the Numba kernels in the background,
on idle CPU time (``_background.compile_full_tier``, told through ``_registry.copy_ran``), and later processes load
those.

The copies are the kernels' own Python functions compiled by the same Numba and LLVM for the same CPU: the same
bytes as the Numba kernels (tests/test_aot.py checks it, and checks both against XGBoost and shap). They run on one
thread (an exported function holds the GIL). A copy is used only where everything it was built from still holds:
the Numba, llvmlite, NumPy and Python versions, the host CPU's name and features, and the source of the kernel
modules (``manifest.json`` records them); anything else, and ``HITML_AOT=0``, leaves the Numba kernels, which
compile on first use as before. ``python -m hitml.kernels aot`` builds the copies again (``scripts/env.sh`` does
when they no longer match the sources; ``_aot_build`` builds them).

Kernels that Python calls are the work-item kernels (``_items.ItemKernel``) and the plain kernels wrapped by
:func:`entry_point`; each call asks :func:`entry` which machine code to run. This module is the runtime choice only:
it reads the manifest and knows no kernel family (a family declares its modules with copies through ``_registry``).
"""
from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import sys
import threading
import time

import numpy as np

from . import _registry

_ENV = "HITML_AOT"             # "0" switches the compiled copies off
_DIR_ENV = "HITML_AOT_DIR"     # another folder of compiled copies (tests)
_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compiled")
_MANIFEST = "manifest.json"
_FORMAT = 1
_MODULE_PREFIX = "hitml.kernels."
_RECHECK_S = 10.0   # how often a process running a copy looks again for the Numba kernel in the cache

# Prototype of the replacement of pycc (docs/design/compile.md): "HITML_AOT=cache" runs no copy; it seeds Numba's
# own cache with the entries shipped in _compiled/numba_cache/ (``python -m hitml.kernels aot --numba-cache``)
_CACHE_MODE = "cache"
_CACHE_SUBDIR = "numba_cache"

_lock = threading.Lock()
_state: dict = {"table": None, "off": False, "why": "", "seeded": None}
_decided: dict = {}
_local = threading.local()   # .allowed: whether the call this thread makes may run copies (see copies_allowed)


def source_files(root: str | None = None) -> list[str]:
    """The files whose content the compiled copies depend on: the TreeSHAP kernel modules and the work-item
    machinery, relative to the ``kernels`` folder."""
    root = root or os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(root, "treeshap")
    names = sorted(f"treeshap/{n}" for n in os.listdir(tree) if n.endswith(".py"))
    return [*names, "_items.py", "_aot.py", "_aot_build.py"]


def source_hash(root: str | None = None) -> str:
    """SHA-256 over the files of :func:`source_files` (names and contents)."""
    root = root or os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for name in source_files(root):
        h.update(name.encode() + b"\0")
        with open(os.path.join(root, name), "rb") as f:
            h.update(f.read())
        h.update(b"\0")
    return h.hexdigest()


def host() -> dict:
    """What a compiled copy must match: this machine's CPU as LLVM sees it, and the compiler and ABI versions."""
    import llvmlite
    import llvmlite.binding as ll
    import numba

    return {"format": _FORMAT, "python": "%d.%d" % sys.version_info[:2], "numba": numba.__version__,
            "llvmlite": llvmlite.__version__, "numpy": np.__version__.split(".")[0],
            "cpu": ll.get_host_cpu_name(), "features": ll.get_host_cpu_features().flatten()}


def export_name(py_func) -> str:
    """The name a kernel's copy is exported under: its module (after ``hitml.kernels.``) and its name."""
    return f"{(py_func.__module__ or '').removeprefix(_MODULE_PREFIX)}.{py_func.__name__}".replace(".", "__")


def folder() -> str:
    return os.environ.get(_DIR_ENV) or _DIR


def _load() -> dict:
    """{export name: (function, argument types as text)} of the valid compiled copies (empty if none or stale)."""
    path = folder()
    try:
        with open(os.path.join(path, _MANIFEST)) as f:
            manifest = json.load(f)
    except (OSError, ValueError):
        _state["why"] = f"no compiled kernels in {path}"
        return {}
    want = dict(host(), source=source_hash())
    stale = sorted(k for k, v in want.items() if manifest.get(k) != v)
    if stale:
        _state["why"] = f"compiled kernels in {path} do not match this machine or source ({', '.join(stale)})"
        return {}
    table = {}
    for module_name, filename in manifest.get("modules", {}).items():
        spec = importlib.util.spec_from_file_location(module_name, os.path.join(path, filename))
        if spec is None or spec.loader is None:
            continue
        try:
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
        except ImportError as exc:
            _state["why"] = f"{filename}: {exc}"
            continue
        for name, args in manifest.get("exports", {}).get(module_name, {}).items():
            fn = getattr(module, name, None)
            if fn is not None:
                table[name] = (fn, args)
    if table:
        _state["why"] = ""
    return table


def _switched_off() -> bool:
    return _state["off"] or os.environ.get(_ENV, "1") in ("0", _CACHE_MODE)


def table() -> dict:
    """The compiled copies this process may run (loaded once; empty where switched off, missing or stale, and
    where ``HITML_AOT=cache`` seeds Numba's cache instead, see :func:`seed_numba_cache`)."""
    if _switched_off():
        if os.environ.get(_ENV) == _CACHE_MODE and not _state["off"]:
            seed_numba_cache()
        return {}
    if _state["table"] is None:
        with _lock:
            if _state["table"] is None:
                _state["table"] = _load()
    return _state["table"]


def available() -> bool:
    """Whether this process has compiled copies to run."""
    return bool(table())


def status() -> str:
    """One line: how many compiled copies are in use, or why none."""
    t = table()
    if t:
        return f"{len(t)} compiled kernels from {folder()}"
    if os.environ.get(_ENV) == _CACHE_MODE and not _state["off"]:
        return f"no compiled copies ({_ENV}=cache): {_state['seeded'] or 0} Numba cache entries seeded from {folder()}"
    if _switched_off():
        return f"compiled kernels switched off ({_ENV}=0)"
    return _state["why"] or "no compiled kernels"


def disable() -> None:
    """This process compiles with Numba and never runs a compiled copy (the warm-up's processes)."""
    _state["off"] = True


@contextlib.contextmanager
def copies_allowed(allowed: bool):
    """Within: whether :func:`entry` may choose a compiled copy in this thread. The engine says no for a call so long
    that running it on one thread would lose more than compiling the Numba kernel and running it on all threads."""
    before = getattr(_local, "allowed", True)
    _local.allowed = allowed
    try:
        yield
    finally:
        _local.allowed = before


def entry(dispatcher, args: tuple):
    """The machine code to run ``dispatcher`` with ``args`` on: ``dispatcher`` itself where its code is in this
    process or in Numba's cache, or where no compiled copy matches the argument types; else the compiled copy (and
    the Numba kernels are then compiled in the background for later processes). A process on a copy looks for the
    Numba kernel again at most every ``_RECHECK_S`` seconds."""
    t = table()
    if not t or not getattr(_local, "allowed", True):
        return dispatcher
    key = (dispatcher, *map(_arg_key, args))
    got = _decided.get(key)
    now = time.monotonic()
    if got is not None and (got[0] is dispatcher or now - got[1] < _RECHECK_S):
        return got[0]
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in args)
    except Exception:  # noqa: BLE001 - a type Numba cannot take: the dispatcher raises its own error for it
        return dispatcher
    copy = t.get(export_name(dispatcher.py_func))
    if copy is None or copy[1] != str(sig) or loaded(dispatcher, args) is not False:
        fn = dispatcher
    else:
        fn = copy[0]
        _registry.copy_ran(_registry.copy_groups(dispatcher.py_func.__module__))
    if None not in key:
        _decided[key] = (fn, now)
    return fn


def loaded(dispatcher, args: tuple) -> bool | None:
    """Whether ``dispatcher`` has machine code for the types of ``args`` in this process, or loads it from Numba's
    cache now; never compiles. This is the cache lookup of Numba's ``Dispatcher.compile`` (whose own switch-off
    refuses before it looks in the cache), under Numba's compiler lock; None where this Numba's internals differ."""
    from numba.core.compiler_lock import global_compiler_lock

    table()   # under HITML_AOT=cache, the shipped cache entries are in place before the first lookup
    try:
        sig = tuple(dispatcher.typeof_pyval(a) for a in args)
        with global_compiler_lock:
            if sig in dispatcher.overloads:
                return True
            cres = dispatcher._cache.load_overload(sig, dispatcher.targetctx)
            if cres is None:
                return False
            dispatcher._cache_hits[sig] += 1
            if not cres.objectmode:
                dispatcher.targetctx.insert_user_function(cres.entry_point, cres.fndesc, [cres.library])
            dispatcher.add_overload(cres)
            return True
    except Exception:  # noqa: BLE001 - another Numba: the caller takes the full tier (the twins' same bytes)
        return None


def _index_head(path: str):
    """(Numba version, source stamp) of a Numba cache index file (``numba.core.caching.IndexDataCacheFile``:
    the version pickled first, then the pickled ``(stamp, overloads)``); None where unreadable."""
    import pickle

    try:
        with open(path, "rb") as f:
            version = pickle.load(f)
            stamp, _overloads = pickle.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
        return None
    return version, stamp


def _cache_of(py_file: str):
    """(folder, source stamp) under which this process's Numba caches the functions of the source file ``py_file``:
    Numba's own choice of locator (``NUMBA_CACHE_DIR``, ``__pycache__`` beside the file, the user-wide folder) and
    stamp, asked through a one-line function that claims to come from that file; None where Numba finds no
    writable folder."""
    from numba.core.caching import FunctionCache

    scope: dict = {}
    exec(compile("def f():\n    pass\n", py_file, "exec"), scope)
    try:
        cache = FunctionCache(scope["f"])
    except RuntimeError:   # "cannot cache function ...: no locator available"
        return None
    return cache.cache_path, cache._cache_file._source_stamp


def seed_numba_cache(source: str | None = None) -> int:
    """Copy the shipped Numba cache entries (``<folder()>/numba_cache/<dir>/*.nbi|*.nbc``, ``<dir>`` a folder of
    the kernels package) into the folders where this process's Numba looks for them, once per process; returns the
    number of index files copied. An entry goes in only where the target has no index, or one that Numba would
    discard anyway (another Numba version or source stamp); the shipped index must carry this Numba's version and
    the current source's stamp. Numba then checks each entry's key (signature, CPU name and features, bytecode
    hash) itself: on another CPU it finds no match and compiles, as without the entries."""
    with _lock:   # a second thread's first call waits until the entries are in place
        if _state["seeded"] is None:
            _state["seeded"] = _seed(os.path.join(source or folder(), _CACHE_SUBDIR))
        return _state["seeded"]


def _seed(shipped: str) -> int:
    """:func:`seed_numba_cache`'s copying, from the folder ``shipped``."""
    import shutil

    import numba

    root = os.path.dirname(os.path.abspath(__file__))
    copied = 0
    for sub, _dirs, files in os.walk(shipped):
        rel = os.path.relpath(sub, shipped)
        for index in sorted(n for n in files if n.endswith(".nbi")):
            py_file = os.path.join(root, rel, index.split(".", 1)[0] + ".py")
            if not os.path.exists(py_file):
                continue
            found = _cache_of(py_file)
            if found is None:
                continue
            target, want = found[0], (numba.__version__, found[1])
            if _index_head(os.path.join(sub, index)) != want:
                continue
            there = os.path.join(target, index)
            if os.path.exists(there) and _index_head(there) == want:
                continue   # Numba's own entries for this source (compiled here, or seeded before)
            base = index[:-len(".nbi")]
            try:
                for name in [n for n in files if n.startswith(base + ".") and n.endswith(".nbc")] + [index]:
                    tmp = os.path.join(target, f"{name}.tmp.{os.getpid()}")
                    shutil.copyfile(os.path.join(sub, name), tmp)
                    os.replace(tmp, os.path.join(target, name))   # the index last: never one naming a missing file
            except OSError:   # a full or read-only disk: Numba compiles this kernel, as without the entries
                continue
            copied += 1
    return copied


def _arg_key(a):
    """What Numba's type of ``a`` depends on, quick to compute (``typeof`` takes about 25 us per array): for an
    array its dtype, dimensions, layout flags, writeability and alignment; for a scalar its type (and for a Python
    int whether it fits int64). None for any other argument (its type is then looked up on every call)."""
    if isinstance(a, np.ndarray):
        f = a.flags
        return (a.dtype, a.ndim, f.c_contiguous, f.f_contiguous, f.writeable, f.aligned)
    if isinstance(a, bool | float | np.generic):
        return type(a)
    if isinstance(a, int):
        return (int, -(1 << 63) <= a < (1 << 63))
    return None


class EntryPoint:
    """A plain Numba kernel that Python calls (not a work-item kernel): runs :func:`entry`'s choice. Numba's
    dispatcher is ``dispatcher``; its other attributes pass through."""

    def __init__(self, dispatcher) -> None:
        self.dispatcher = dispatcher
        self.py_func = dispatcher.py_func
        self.__name__ = self.py_func.__name__
        self.__qualname__ = self.py_func.__qualname__
        self.__doc__ = self.py_func.__doc__
        self.__module__ = self.py_func.__module__

    def __call__(self, *args):
        return entry(self.dispatcher, args)(*args)

    def __getattr__(self, name: str):
        if name == "dispatcher":
            raise AttributeError(name)
        return getattr(self.dispatcher, name)

    def __repr__(self) -> str:
        return f"<hitml kernel {self.__qualname__}>"


def entry_point(dispatcher) -> EntryPoint:
    """Decorator above ``@numba.njit(cache=True)`` for a kernel that Python calls: see :class:`EntryPoint`."""
    return EntryPoint(dispatcher)
