"""Numba cache entries of the CPU TreeSHAP kernels, built when hitml is installed and shipped with it.

Numba compiles a kernel the first time a process on a machine calls it and caches the machine code on disk for later
processes. Installing hitml (``setup.py``'s build hook, ``python -m hitml.kernels aot``) compiles the TreeSHAP
kernels once on the installing machine and ships their cache entries under ``hitml/kernels/_compiled/numba_cache/``;
:func:`seed_numba_cache` copies them, once per process and before any of these kernels runs, into the folder where
this process's Numba looks for its cache. A first-ever process then loads the kernels as a later one does.

Numba itself decides whether an entry serves: its index carries the Numba version and the source file's stamp (a
hash of its content), and each entry's key the signature, the CPU name and features, and the bytecode's hash. An
entry of another CPU or Python matches nothing, and Numba compiles on first use as without it. The seeding adds two
checks: the shipped set was built from the current sources of every kernel module (``source_hash``: a kernel inlines
functions of other modules, which Numba's per-file stamp does not see), and it never replaces entries that Numba
wrote for the current source. ``HITML_AOT=0`` switches the shipped entries off.

This module knows no kernel family; the modules whose entries ship declare themselves through ``_registry``.
"""
from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import sys
import threading

_ENV = "HITML_AOT"             # "0" switches the shipped cache entries off
_DIR_ENV = "HITML_AOT_DIR"     # another folder of shipped entries (tests)
_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compiled")
_CACHE_SUBDIR = "numba_cache"
_BUILT = "built.json"          # what the shipped set was built from (written last by the build)

_lock = threading.Lock()
_state: dict = {"off": False, "seeded": None, "why": "", "usable": None}


def source_files(root: str | None = None) -> list[str]:
    """The files whose content the shipped entries depend on: the TreeSHAP modules that define Numba functions (a
    kernel inlines functions of the others) and the work-item machinery, relative to the ``kernels`` folder."""
    root = root or os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(root, "treeshap")
    names = []
    for n in sorted(os.listdir(tree)):
        if n.endswith(".py"):
            with open(os.path.join(tree, n), encoding="utf-8") as f:
                if "njit" in f.read():
                    names.append(f"treeshap/{n}")
    return [*names, "_items.py"]


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


def folder() -> str:
    """The folder holding ``numba_cache/``: the installed ``_compiled`` one, or ``HITML_AOT_DIR``."""
    return os.environ.get(_DIR_ENV) or _DIR


def switched_off() -> bool:
    """Whether this process leaves the shipped entries alone (``HITML_AOT=0``, or :func:`disable`)."""
    return _state["off"] or os.environ.get(_ENV, "1") == "0"


def disable() -> None:
    """This process never seeds shipped entries (the build: it compiles every kernel itself)."""
    _state["off"] = True


def _python_tag() -> str:
    """The end of the names of this Python's Numba index files (``CacheImpl.get_filename_base``)."""
    return ".py%d%d%s.nbi" % (sys.version_info[0], sys.version_info[1], getattr(sys, "abiflags", ""))


def _read_index(path: str):
    """(Numba version, source stamp, overloads) of a Numba cache index file
    (``numba.core.caching.IndexDataCacheFile``: the version pickled first, then the pickled ``(stamp, overloads)``);
    None where unreadable."""
    try:
        with open(path, "rb") as f:
            version = pickle.load(f)
            stamp, overloads = pickle.loads(f.read())
    except (OSError, EOFError, ValueError, TypeError, pickle.UnpicklingError):
        return None
    return version, stamp, overloads


def _index_head(path: str):
    """(Numba version, source stamp) of a Numba cache index file; None where unreadable."""
    got = _read_index(path)
    return None if got is None else got[:2]


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


def _built(shipped: str) -> dict:
    try:
        with open(os.path.join(shipped, _BUILT)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def seed_numba_cache() -> int:
    """Copy the shipped entries (``<folder()>/numba_cache/<dir>/*.nbi|*.nbc``, ``<dir>`` a folder of the kernels
    package) into the folders where this process's Numba looks for them, once per process, unless switched off;
    returns the number of index files copied. An index goes in only where the target has none, or one that Numba
    would discard anyway (another Numba version or source stamp); the shipped one must carry this Numba's version
    and the current source's stamp. Numba then checks each entry's key (signature, CPU, bytecode) itself."""
    with _lock:   # a second thread's first call waits until the entries are in place
        if _state["seeded"] is None:
            _state["seeded"] = 0 if switched_off() else _seed(os.path.join(folder(), _CACHE_SUBDIR))
        return _state["seeded"]


def _seed(shipped: str) -> int:
    """:func:`seed_numba_cache`'s copying, from the folder ``shipped``; records why nothing was copied."""
    import numba

    if not os.path.isdir(shipped):
        _state["why"] = f"no shipped kernels in {shipped}"
        return 0
    if _built(shipped).get("source") != source_hash():
        _state["why"] = f"the shipped kernels in {shipped} were built from other kernel sources"
        return 0
    root = os.path.dirname(os.path.abspath(__file__))
    copied = current = 0
    for sub, _dirs, files in os.walk(shipped):
        rel = os.path.relpath(sub, shipped)
        for index in sorted(n for n in files if n.endswith(_python_tag())):
            py_file = os.path.join(root, rel, index.split(".", 1)[0] + ".py")
            head = _index_head(os.path.join(sub, index))
            if head is None or head[0] != numba.__version__:   # before asking this Numba's cache internals
                continue
            found = _cache_of(py_file) if os.path.exists(py_file) else None
            if found is None:
                continue
            target, want = found[0], (numba.__version__, found[1])
            if head != want:
                continue
            current += 1
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
    if not current:
        _state["why"] = (f"the shipped kernels in {shipped} are for another Numba or Python "
                         f"(this one: Numba {numba.__version__}, Python {sys.version_info[0]}.{sys.version_info[1]})")
    return copied


def usable() -> bool:
    """Whether shipped entries serve this process: seeded (or there before) for this Numba, Python and kernel
    source, and built for this CPU (the CPU name and features of Numba's keys, ``codegen.magic_tuple()``)."""
    if _state["usable"] is None:
        _state["usable"] = _usable()
    return _state["usable"]


def _usable() -> bool:
    seed_numba_cache()
    if switched_off() or _state["why"]:
        return False
    from numba.core.registry import cpu_target

    magic = cpu_target.target_context.codegen().magic_tuple()
    shipped = os.path.join(folder(), _CACHE_SUBDIR)
    for sub, _dirs, files in os.walk(shipped):
        for index in (n for n in files if n.endswith(_python_tag())):
            got = _read_index(os.path.join(sub, index))
            if got is not None and any(key[1] == magic for key in got[2]):
                return True
    _state["why"] = (f"the shipped kernels in {shipped} do not match this machine (built for another CPU: "
                     f"this one is {magic[1]})")
    return False


def status() -> str:
    """One line: whether the shipped entries serve this process, or why not."""
    if switched_off():
        return f"shipped kernels switched off ({_ENV}=0)"
    if usable():
        seeded = _state["seeded"]
        return f"shipped kernels from {folder()} " + (f"({seeded} cache entries seeded in this process)" if seeded
                                                       else "(in Numba's cache already)")
    return _state["why"]
