"""Ahead-of-time compiled copies of the CPU TreeSHAP engine's kernels, built when hitml is installed.

Numba compiles a kernel the first time a process on a machine calls it (about 25 CPU s for the TreeSHAP engine's
kernels on the 2-core machine) and caches the machine code for later processes. Installing hitml (``pip install``,
``scripts/env.sh``) also builds the same kernels ahead of time with Numba's ``pycc`` into extension modules under
``hitml/kernels/_compiled/``, for the installing machine's CPU, so that a process that finds no kernel in Numba's
cache runs these copies instead of waiting for the compile; it then compiles the Numba kernels in the background,
on idle CPU time (``_warmup.compile_full_tier``), and later processes load those.

The copies are the kernels' own Python functions compiled by the same Numba and LLVM for the same CPU: the same
bytes as the Numba kernels (tests/test_aot.py checks it, and checks both against XGBoost and shap). They run on one
thread (an exported function holds the GIL). A copy is used only where everything it was built from still holds:
the Numba, llvmlite, NumPy and Python versions, the host CPU's name and features, and the source of the kernel
modules (``manifest.json`` records them); anything else, and ``HITML_AOT=0``, leaves the Numba kernels, which
compile on first use as before. ``python -m hitml.kernels aot`` builds the copies again (``scripts/env.sh`` does
when they no longer match the sources).

Kernels that Python calls are the work-item kernels (``_items.ItemKernel``) and the plain kernels wrapped by
:func:`entry_point`; each call asks :func:`entry` which machine code to run.
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

_ENV = "HITML_AOT"             # "0" switches the compiled copies off
_DIR_ENV = "HITML_AOT_DIR"     # another folder of compiled copies (tests)
_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_compiled")
_MANIFEST = "manifest.json"
_FORMAT = 1
# the warm-up groups whose kernels are built ahead (every kernel a CPU TreeSHAP call runs, path extraction included)
GROUPS = ("treeshap-paths", "treeshap", "treeshap-interactions", "treeshap-interventional",
          "treeshap-interventional-interactions", "treeshap-transforms")
# the warm-up groups that compile a module's kernels with Numba (behind a process that ran their copies)
_GROUPS_OF = {"treeshap.paths": ("treeshap-paths",), "treeshap._cpu_quad": ("treeshap", "treeshap-interactions"),
              "treeshap._cpu_tables": ("treeshap",), "treeshap._cpu_kernels": ("treeshap-transforms",),
              "treeshap._cpu_patterns": ("treeshap-interventional", "treeshap-interventional-interactions"),
              "treeshap._cpu_interventional": ("treeshap-transforms",)}
_MODULE_PREFIX = "hitml.kernels."
_RECHECK_S = 10.0   # how often a process running a copy looks again for the Numba kernel in the cache

_lock = threading.Lock()
_state: dict = {"table": None, "off": False, "why": ""}
_decided: dict = {}
_local = threading.local()   # .allowed: whether the call this thread makes may run copies (see copies_allowed)


def source_files(root: str | None = None) -> list[str]:
    """The files whose content the compiled copies depend on: the TreeSHAP kernel modules and the work-item
    machinery, relative to the ``kernels`` folder."""
    root = root or os.path.dirname(os.path.abspath(__file__))
    tree = os.path.join(root, "treeshap")
    names = sorted(f"treeshap/{n}" for n in os.listdir(tree) if n.endswith(".py"))
    return [*names, "_items.py", "_aot.py"]


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


def _module(py_func) -> str:
    """A kernel's module after ``hitml.kernels.`` (a key of ``_GROUPS_OF``)."""
    return (py_func.__module__ or "").removeprefix(_MODULE_PREFIX)


def export_name(py_func) -> str:
    """The name a kernel's copy is exported under: its module (after ``hitml.kernels.``) and its name."""
    return f"{_module(py_func)}.{py_func.__name__}".replace(".", "__")


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
    return _state["off"] or os.environ.get(_ENV, "1") == "0"


def table() -> dict:
    """The compiled copies this process may run (loaded once; empty where switched off, missing or stale)."""
    if _switched_off():
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
    from . import _warmup

    copy = t.get(export_name(dispatcher.py_func))
    if copy is None or copy[1] != str(sig) or _warmup.loaded(dispatcher, args) is not False:
        fn = dispatcher
    else:
        fn = copy[0]
        _warmup.compile_full_tier(_GROUPS_OF.get(_module(dispatcher.py_func), GROUPS))
    if None not in key:
        _decided[key] = (fn, now)
    return fn


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


# ------------------------------------------------------------------------------------------------------- build
def _kernels() -> list:
    """(export name, Numba dispatcher, argument types, return type) of every kernel Python calls in the TreeSHAP
    modules, for each signature this process has compiled."""
    import importlib

    out = []
    for name in _GROUPS_OF:
        module = importlib.import_module(_MODULE_PREFIX + name)
        for obj in vars(module).values():
            if isinstance(obj, EntryPoint) and obj.__module__ == module.__name__:
                for sig, cres in obj.dispatcher.overloads.items():
                    out.append((export_name(obj.py_func), obj.dispatcher, sig, cres.signature.return_type))
    return sorted(out, key=lambda k: k[0])


def _compile_module(module_name: str, kernels: list, out_dir: str) -> str:
    """One extension module of the copies of ``kernels``, built with pycc for this CPU; returns its file name."""
    from numba.pycc import CC

    cc = CC(module_name)
    cc.output_dir = out_dir
    cc.target_cpu = "host"
    cc.verbose = False
    for name, dispatcher, sig, ret in kernels:
        args = [f"a{i}" for i in range(len(sig))]
        scope = {"_kernel": dispatcher}
        exec(f"def {name}({', '.join(args)}):\n    return _kernel({', '.join(args)})\n", scope)
        cc.export(name, ret(*sig))(scope[name])
    cc.compile()
    return os.path.basename(cc.output_file)


def build(out_dir: str | None = None, jobs: int | None = None, verbose: bool = True) -> dict:
    """Compile the TreeSHAP kernels with Numba (running the warm-up groups of :data:`GROUPS` in this process, into
    a temporary Numba cache) and build their copies into ``out_dir`` (default: ``hitml/kernels/_compiled``), in
    ``jobs`` processes (default: the CPU count). Writes ``manifest.json`` last; returns it. Call it in a process of
    its own, before Numba is imported (``python -m hitml.kernels aot``)."""
    import tempfile

    out_dir = os.path.abspath(out_dir or _DIR)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hitml-aot-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache   # compile every kernel here (a cached one has no IR to link)
        os.environ["HITML_KERNEL_TIER"] = "quick"
        os.environ["HITML_COMPILE_AHEAD"] = "0"
        os.environ["HITML_PROGRESS"] = "0"
        os.environ["NUMBA_NUM_THREADS"] = "1"   # no thread pool: the modules' processes fork from this one
        disable()
        from . import _warmup

        t0 = time.perf_counter()
        for group in GROUPS:
            _warmup.TASKS[group]()
        kernels = _kernels()
        if verbose:
            print(f"hitml: {len(kernels)} kernels compiled with Numba in {time.perf_counter() - t0:.1f} s; "
                  "building their ahead-of-time copies", file=sys.stderr, flush=True)
        from .treeshap import _cpu_quad as q   # the quadrature twins compile longest: a module each

        big = {export_name(k.py_func) for k in (q.shap_quad_items, q.interaction_quad_items)}
        heavy = [[k] for k in kernels if k[0] in big]
        rest = [k for k in kernels if k[0] not in big]
        parts = [*heavy, rest[0::2], rest[1::2]]
        names = [f"_hitml_aot_{i}" for i in range(len(parts))]
        for stale in os.listdir(out_dir):
            if stale == _MANIFEST or stale.startswith("_hitml_aot_"):
                os.remove(os.path.join(out_dir, stale))
        files = _compile_parts(names, parts, out_dir, jobs or os.cpu_count() or 1)
    manifest = dict(host(), source=source_hash(), modules=dict(zip(names, files)),
                    exports={n: {k[0]: str(k[2]) for k in part} for n, part in zip(names, parts)})
    tmp = os.path.join(out_dir, _MANIFEST + ".tmp")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
    os.replace(tmp, os.path.join(out_dir, _MANIFEST))
    if verbose:
        print(f"hitml: compiled kernels ready in {time.perf_counter() - t0:.1f} s ({out_dir})", file=sys.stderr)
    return manifest


def _compile_parts(names: list, parts: list, out_dir: str, jobs: int) -> list[str]:
    """Build each part's module; where processes can fork, ``jobs`` at a time (they share this process's
    compiled Numba kernels)."""
    if jobs == 1 or not (sys.platform.startswith("linux") and hasattr(os, "fork")):
        return [_compile_module(n, p, out_dir) for n, p in zip(names, parts)]
    import multiprocessing

    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(min(jobs, len(parts))) as pool:
        results = [pool.apply_async(_compile_module, (n, p, out_dir)) for n, p in zip(names, parts)]
        return [r.get() for r in results]


def main(argv=None) -> int:
    """``python -m hitml.kernels aot [OUT_DIR] [--jobs N]``: build the compiled copies of the TreeSHAP kernels."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hitml.kernels aot", description=main.__doc__)
    parser.add_argument("out_dir", nargs="?", default=None, help=f"folder (default: {_DIR})")
    parser.add_argument("--jobs", type=int, default=None, help="processes at once (default: CPU count)")
    parser.add_argument("--check", action="store_true", help="only say whether valid copies are there (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.check:
        if args.out_dir:
            os.environ[_DIR_ENV] = args.out_dir
        ok = available()
        print(status())
        return 0 if ok else 1
    try:
        build(args.out_dir, jobs=args.jobs)
    except Exception as exc:  # noqa: BLE001 - reported; the Numba kernels still compile on first use
        print(f"hitml: building the compiled kernels failed ({type(exc).__name__}: {exc}); the kernels compile "
              "on first use instead", file=sys.stderr)
        return 1
    return 0
