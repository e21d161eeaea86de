"""``python -m hitml.kernels aot``: build the compiled copies of the CPU TreeSHAP kernels (``_aot`` runs them).

A build tool at the top of the kernels package: it imports the warm-up tool and, through it, every kernel family,
compiles the kernels of the modules that declared copies (``_registry.register_copies``) with Numba, and builds
their copies with Numba's ``pycc`` for this CPU. ``setup.py``'s build hook runs it in a process of its own. Nothing
in the library imports it. ``--numba-cache`` builds, instead, the Numba cache entries that the prototype replacement
of pycc ships (:func:`build_numba_cache`, ``docs/design/compile.md``).
"""
from __future__ import annotations

import importlib
import json
import os
import sys
import time

from . import _registry
from ._aot import _CACHE_SUBDIR, _DIR, _DIR_ENV, _MANIFEST, EntryPoint, available, disable, export_name, host, source_hash, status

# the engine whose kernels have compiled copies (it imports all its kernel modules); only it is imported, so that a
# build environment without the other families' dependencies (SciPy) builds the copies
COPY_ENGINES = ("hitml.kernels.treeshap.cpu",)


def groups() -> tuple[str, ...]:
    """The warm-up groups whose kernels are built ahead (every kernel a CPU TreeSHAP call runs, path extraction
    included): those the families' modules with copies declared, in the order of their warm-ups."""
    from . import _warmup

    tasks = _warmup.warmup_tasks(COPY_ENGINES)   # imports the engine, whose modules declare their copies
    declared = {g for gs in _registry.copy_modules().values() for g in gs}
    return tuple(g for g in tasks if g in declared)


def _kernels() -> list:
    """(export name, Numba dispatcher, argument types, return type) of every kernel Python calls in the TreeSHAP
    modules, for each signature this process has compiled."""
    out = []
    for name in _registry.copy_modules():
        module = importlib.import_module(name)
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
    """Compile the TreeSHAP kernels with Numba (running the warm-up groups of :func:`groups` in this process, into
    a temporary Numba cache) and build their copies into ``out_dir`` (default: ``hitml/kernels/_compiled``), in
    ``jobs`` processes (default: the CPU count). Writes ``manifest.json`` last; returns it. Call it in a process of
    its own, before Numba is imported (``python -m hitml.kernels aot``)."""
    import tempfile

    out_dir = os.path.abspath(out_dir or _DIR)
    os.makedirs(out_dir, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="hitml-aot-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache   # compile every kernel here (a cached one has no IR to link)
        os.environ["HITML_KERNEL_TIER"] = "quick"
        os.environ["HITML_BACKGROUND"] = "0"
        os.environ["HITML_PROGRESS"] = "0"
        os.environ["NUMBA_NUM_THREADS"] = "1"   # no thread pool: the modules' processes fork from this one
        disable()
        from . import _warmup

        t0 = time.perf_counter()
        tasks = _warmup.warmup_tasks(COPY_ENGINES)
        for group in groups():
            tasks[group]()
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


def build_numba_cache(out_dir: str | None = None, verbose: bool = True) -> int:
    """The prototype replacement of the pycc copies (docs/design/compile.md): compile the same TreeSHAP groups with
    Numba, in the tier a later process runs (the ``parallel=True`` kernels), into a temporary Numba cache, and
    copy the cache entries of the modules with copies into ``<out_dir>/numba_cache/<folder of the module>/``
    (``HITML_AOT=cache`` seeds a process's Numba cache from there, ``_aot.seed_numba_cache``). Returns the number
    of index files. Call it in a process of its own, before Numba is imported."""
    import shutil
    import tempfile

    out = os.path.join(os.path.abspath(out_dir or _DIR), _CACHE_SUBDIR)
    root = os.path.dirname(os.path.abspath(__file__))
    with tempfile.TemporaryDirectory(prefix="hitml-aot-cache-") as cache:
        os.environ["NUMBA_CACHE_DIR"] = cache   # read when Numba is first imported, just below: compile every kernel
        os.environ.update(HITML_KERNEL_TIER="full", HITML_BACKGROUND="0", HITML_PROGRESS="0")
        from numba.core.dispatcher import Dispatcher

        disable()
        from . import _warmup

        t0 = time.perf_counter()
        tasks = _warmup.warmup_tasks(COPY_ENGINES)
        for group in groups():
            tasks[group]()
        shutil.rmtree(out, ignore_errors=True)
        n = 0
        for name in _registry.copy_modules():
            module = importlib.import_module(name)
            for obj in vars(module).values():
                d = obj.dispatcher if isinstance(obj, EntryPoint) else obj
                if not isinstance(d, Dispatcher) or d.py_func.__module__ != name or not d.overloads:
                    continue
                index = d._cache._cache_file._index_path
                if not os.path.exists(index):
                    continue
                rel = os.path.relpath(os.path.dirname(os.path.abspath(d.py_func.__code__.co_filename)), root)
                dest = os.path.join(out, rel)
                os.makedirs(dest, exist_ok=True)
                base = os.path.basename(index)[:-len(".nbi")]
                for f in os.listdir(os.path.dirname(index)):
                    if f == base + ".nbi" or (f.startswith(base + ".") and f.endswith(".nbc")):
                        shutil.copyfile(os.path.join(os.path.dirname(index), f), os.path.join(dest, f))
                n += 1
    if verbose:
        print(f"hitml: {n} kernels' Numba cache entries in {out} ({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    return n


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
    parser.add_argument("--numba-cache", action="store_true",
                        help="build the shipped Numba cache entries instead (prototype, HITML_AOT=cache runs them)")
    args = parser.parse_args(argv)
    if args.numba_cache:
        return 0 if build_numba_cache(args.out_dir) else 1
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
