"""``python -m hitml.kernels aot``: build the Numba cache entries of the CPU TreeSHAP kernels that hitml ships
(``_aot`` seeds a process's cache with them).

A build tool at the top of the kernels package: it imports the warm-up tool and, through it, the TreeSHAP engine,
whose modules declare that their entries ship (``_registry.register_shipped``); it compiles their warm-up groups
with Numba into a temporary cache and copies those modules' entries out. ``setup.py``'s build hook runs it in a
process of its own. Nothing in the library imports it.
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time

from . import _registry
from ._aot import _BUILT, _CACHE_SUBDIR, _DIR, _DIR_ENV, disable, source_hash, status, usable

# the engine whose kernels ship (it imports all its kernel modules); only it is imported, so that a build
# environment without the other families' dependencies (SciPy) builds the entries
SHIPPED_ENGINES = ("hitml.kernels.treeshap.cpu",)


def groups() -> tuple[str, ...]:
    """The warm-up groups whose kernels ship (every kernel a CPU TreeSHAP call runs, path extraction included):
    those the modules with shipped entries declared, in the order of their warm-ups."""
    from . import _warmup

    tasks = _warmup.warmup_tasks(SHIPPED_ENGINES)   # imports the engine, whose modules declare what ships
    declared = {g for gs in _registry.shipped_modules().values() for g in gs}
    return tuple(g for g in tasks if g in declared)


def build(out_dir: str | None = None, verbose: bool = True) -> int:
    """Compile the TreeSHAP kernels with Numba (running the warm-up groups of :func:`groups` in this process, into
    a temporary Numba cache) and copy the cache entries of the modules that ship them into
    ``<out_dir>/numba_cache/<folder of the module>/`` (default ``out_dir``: ``hitml/kernels/_compiled``), then
    ``built.json`` (the kernel sources' hash). Returns the number of index files. Call it in a process of its own,
    before Numba is imported (``python -m hitml.kernels aot``)."""
    import shutil
    import tempfile

    out = os.path.join(os.path.abspath(out_dir or _DIR), _CACHE_SUBDIR)
    root = os.path.dirname(os.path.abspath(__file__))
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hitml-aot-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache   # read when Numba is first imported, just below: compile every kernel
        os.environ.update(HITML_BACKGROUND="0", HITML_PROGRESS="0")
        from numba.core.dispatcher import Dispatcher

        disable()
        from . import _warmup

        tasks = _warmup.warmup_tasks(SHIPPED_ENGINES)
        for group in groups():
            tasks[group]()
        shutil.rmtree(out, ignore_errors=True)
        n = 0
        for name in _registry.shipped_modules():
            module = importlib.import_module(name)
            for obj in vars(module).values():
                d = getattr(obj, "dispatcher", obj)   # a work-item kernel wraps its Numba dispatcher
                if not isinstance(d, Dispatcher) or d.py_func.__module__ != name or not d.overloads:
                    continue
                index = d._cache._cache_file._index_path
                if not os.path.exists(index):
                    continue
                source = os.path.dirname(os.path.abspath(d.py_func.__code__.co_filename))
                dest = os.path.join(out, os.path.relpath(source, root))
                os.makedirs(dest, exist_ok=True)
                base = os.path.basename(index)[:-len(".nbi")]
                for f in os.listdir(os.path.dirname(index)):
                    if f == base + ".nbi" or (f.startswith(base + ".") and f.endswith(".nbc")):
                        shutil.copyfile(os.path.join(os.path.dirname(index), f), os.path.join(dest, f))
                n += 1
    if n:
        with open(os.path.join(out, _BUILT), "w") as f:
            json.dump({"source": source_hash()}, f)
    if verbose:
        print(f"hitml: {n} kernels' Numba cache entries in {out} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return n


def main(argv=None) -> int:
    """``python -m hitml.kernels aot [OUT_DIR] [--check]``: build the shipped cache entries of the TreeSHAP kernels."""
    import argparse

    parser = argparse.ArgumentParser(prog="python -m hitml.kernels aot", description=main.__doc__)
    parser.add_argument("out_dir", nargs="?", default=None, help=f"folder (default: {_DIR})")
    parser.add_argument("--check", action="store_true",
                        help="only say whether the entries there serve this machine (exit 1 if not)")
    args = parser.parse_args(argv)
    if args.check:
        if args.out_dir:
            os.environ[_DIR_ENV] = args.out_dir
        ok = usable()
        print(status())
        return 0 if ok else 1
    try:
        return 0 if build(args.out_dir) else 1
    except Exception as exc:  # noqa: BLE001 - reported; the Numba kernels still compile on first use
        print(f"hitml: the shipped kernels were not built ({type(exc).__name__}: {exc}); the CPU kernels compile "
              "on first use", file=sys.stderr)
        return 1
