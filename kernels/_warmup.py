"""``python -m hitml.kernels warmup [GROUP ...] [--jobs N]`` and the ``hitml-warmup`` console script: compile
hitml's CPU (Numba) kernels ahead of use, into Numba's cache, and where CuPy sees a GPU its CUDA kernels, into
CuPy's on-disk kernel cache (the group "gpu", :func:`warm_gpu`).

A tool at the top of the kernels package: it imports every kernel family (:func:`import_families`), whose modules
declare their warm-up groups (``_registry.register_warmup``), and runs them, on all cores. The library's background
compiles (``_background``) start it as a process of its own; nothing in the library imports it.
"""
from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

from . import _background, _registry
from ._background import _PART_SEP, _PARTS, _group, _n_parts, _nice, _runs

# the modules that declare the warm-up groups (importing a family's package does not import its engine modules)
FAMILY_MODULES = ("hitml.kernels.treeshap.cpu", "hitml.kernels.treeshap.pack", "hitml.kernels.sketch.cpu",
                  "hitml.kernels.shuffle.cpu", "hitml.kernels.shapley._api")


def import_families(modules: tuple[str, ...] = FAMILY_MODULES) -> None:
    """Import ``modules`` (default: :data:`FAMILY_MODULES`, so that every warm-up group is declared)."""
    for name in modules:
        importlib.import_module(name)


def warmup_tasks(modules: tuple[str, ...] = FAMILY_MODULES) -> dict[str, Callable[[], None]]:
    """``{group: warm-up}`` of the families of ``modules`` (default: every family), and of those imported before
    (see ``_registry.register_warmup``)."""
    import_families(modules)
    return _registry.warmups()


# order in which the warm-up hands the groups to its processes
_COST = {"gpu": 8.0, "treeshap-interventional": 16.2, "sketch": 15.6, "treeshap-transforms": 12.5, "treeshap": 12.0,
         "treeshap-interactions": 10.1, "shuffle": 5.0, "treeshap-interventional-interactions": 1.6,
         "treeshap-paths": 1.8, "gpu-packing": 0.4, "permutations": 0.1}


def warm_gpu() -> None:
    """Compile hitml's CUDA kernels into CuPy's on-disk kernel cache (or load them from it), where CuPy sees a GPU;
    nothing elsewhere. Each GPU engine runs once on tiny inputs, with float32 and float64 rows, so the kernels
    compile with the options of real calls, and a process's first GPU call (an interventional explainer's build
    among them) loads them instead of waiting for NVRTC (about 1.3 s of a first build on one H200)."""
    from .device import cupy_module, gpu_available

    if not gpu_available():
        return
    import numpy as np

    from . import outputs, shuffle, sketch, treeshap
    from .treeshap import _gpu_linear
    from .treeshap import gpu as tgpu
    from .treeshap.paths import _hand_paths, _tiny_paths

    cp = cupy_module()
    mode = tgpu.options.shap_linear
    for dt in (np.float32, np.float64):
        X = np.random.default_rng(0).normal(size=(300, 3)).astype(dt)
        for ps in (_hand_paths(), _tiny_paths()):
            tgpu.options.shap_linear = "always"   # the per-tree kernel (a tree of _tiny_paths takes it)
            try:
                treeshap.shap_values(ps, X, backend="gpu", progress=False)
            finally:
                tgpu.options.shap_linear = mode
            treeshap.shap_values(ps, X, backend="gpu", progress=False)
            treeshap.interaction_values(ps, X[:40], backend="gpu", progress=False)
            for w in (None, np.arange(1.0, 6.0)):
                treeshap.interventional_shap_values(ps, X[:20], X[:5], weights=w, backend="gpu", progress=False)
            treeshap.interventional_shap_values(ps, X[:20], X[:5], transform="logistic", backend="gpu",
                                                progress=False)
            treeshap.interventional_banzhaf_values(ps, X[:20], X[:5], backend="gpu", progress=False)
            treeshap.interventional_interaction_values(ps, X[:20], X[:5], backend="gpu", progress=False)
            summary = treeshap.background_summary(ps, X[:50], backend="gpu", progress=False)
            treeshap.interventional_shap_values(ps, X[:20], summary, backend="gpu", progress=False)
        sketch.sketch(cp.asarray(X), backend="gpu")
        shuffle.shuffle_rows(cp.asarray(X), 0, backend="gpu")
        outputs.abs_sums(cp.asarray(X, dtype=cp.float64))
        outputs.exact_to_float32(cp.asarray(X, dtype=cp.float64))
    _gpu_linear.compile_kernels()               # the per-tree walk's modules of other lane widths and outputs
    cp.cuda.Device().synchronize()


_registry.register_warmup("gpu", warm_gpu)


def _task(group: str) -> Callable[[], None]:
    """The warm-up of ``group``, importing every family only where the modules imported so far do not declare it."""
    found = _registry.warmups().get(group)
    return found if found is not None else warmup_tasks()[group]


def _run_tasks(names: tuple[str, ...]) -> list[tuple[str, float, str]]:
    return [_run_task(n) for n in names]


def _run_reporting(names) -> list[tuple[str, float, str]]:
    """A compile_ahead process's run: each group at its own priority (``_AHEAD_NICE``), its name on stdout when
    done (what ``_Child.wait_for`` reads)."""
    results = []
    for n in names:
        _set_priority(_nice(n))
        results.append(_run_task(n))
        print(n, flush=True)
    return results


def _run_task(name: str) -> tuple[str, float, str]:
    _background.as_compile_child()
    t = time.perf_counter()
    try:
        with _part(name):
            _task(_group(name))()
        err = ""
    except Exception as exc:  # noqa: BLE001 - reported, and the other kernels still compile
        err = f"{type(exc).__name__}: {exc}"
    return name, time.perf_counter() - t, err


@contextlib.contextmanager
def _part(name: str):
    """For ``group@i`` (see ``_PARTS``): the kernels of the group's other parts are no-ops meanwhile."""
    if _PART_SEP not in name:
        yield
        return
    group, i = name.split(_PART_SEP, 1)
    module_name, parts = _PARTS[group]
    module = importlib.import_module(module_name)
    others = [k for j, names in enumerate(parts) if j != int(i) for k in names]
    saved = {k: getattr(module, k) for k in others}
    for k in others:
        setattr(module, k, _no_op)
    try:
        yield
    finally:
        for k, v in saved.items():
            setattr(module, k, v)


def _no_op(*args, **kwargs) -> None:
    return None


def _task_names() -> set[str]:
    """The names ``hitml-warmup`` accepts: the groups, and the parts of those in parts."""
    return set(warmup_tasks()) | {f"{g}{_PART_SEP}{i}" for g in _PARTS for i in range(_n_parts(g))}


def warmup(tasks=None, jobs: int | None = None, verbose: bool = True) -> dict[str, float]:
    """Compile (or load from Numba's cache) every CPU kernel hitml has, and where CuPy sees a GPU every CUDA kernel
    (group "gpu", into CuPy's cache), ``jobs`` processes at a time (default: the CPU count), so that no later
    process waits for a compile. Returns the seconds each group took; raises
    RuntimeError naming the groups that failed."""
    names = list(warmup_tasks()) if tasks is None else list(tasks)
    unknown = sorted(set(names) - _task_names())
    if unknown:
        raise ValueError(f"unknown warm-up groups {unknown}; choose from {sorted(warmup_tasks())}")
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(names)))
    t0 = time.perf_counter()
    if jobs == 1:   # in the order given; each group's name on stdout when done (for compile_ahead's waits)
        report = os.environ.get("HITML_WARMUP_REPORT") == "1"
        results = _run_reporting(names) if report else _run_tasks(names)
    else:
        # a group that reuses another's kernels runs after it in the same process (no second compile of them);
        # longest first, so that the processes finish together (CPU seconds of each group's first compile)
        runs = _runs(names)
        runs.sort(key=lambda r: -sum(_COST.get(_group(n), 0.0) / _n_parts(_group(n)) for n in r))
        jobs = min(jobs, len(runs))
        with ProcessPoolExecutor(jobs) as pool:
            results = [r for rs in pool.map(_run_tasks, runs, chunksize=1) for r in rs]
    failed = []
    for name, secs, err in results:
        if verbose:
            print(f"  {name:<38} {secs:6.1f} s" + (f"  FAILED: {err}" if err else ""), file=sys.stderr)
        if err:
            failed.append(f"{name} ({err})")
    if verbose:
        print(f"hitml: kernels ready in {time.perf_counter() - t0:.1f} s (Numba cache: "
              f"{_cache_dir()})", file=sys.stderr)
    if failed:
        raise RuntimeError("warm-up failed for: " + "; ".join(failed))
    return {name: secs for name, secs, _ in results}


def _cache_dir() -> str:
    from numba.core.config import CACHE_DIR

    return CACHE_DIR or "next to each module (__pycache__)"


def _lower_priority(nice: str | None) -> None:
    """``HITML_WARMUP_NICE``: a nice value, or "idle" (Linux ``SCHED_IDLE``: only CPU time no other process wants;
    else nice 19)."""
    if not nice:
        return
    if nice == "idle" and hasattr(os, "sched_setscheduler") and hasattr(os, "SCHED_IDLE"):
        try:
            os.sched_setscheduler(0, os.SCHED_IDLE, os.sched_param(0))
            return
        except OSError:
            pass
    if hasattr(os, "nice"):
        os.nice(19 if nice == "idle" else int(nice))


def _fork_runs(runs: list[tuple[str, ...]]) -> int:
    """compile_ahead's process where processes can fork: import the kernels' modules and set up Numba's typing and
    target contexts once, then fork one process per run of groups, which compiles the groups in order, each at its
    priority (``_AHEAD_NICE``), and prints each one's name on stdout (the pipe all share) when done. Waits for them
    all; returns 1 if any failed."""
    from numba.core.registry import cpu_target

    from .treeshap import cpu  # noqa: F401 - every TreeSHAP kernel module, imported once for all runs

    cpu_target.typing_context.refresh()
    cpu_target.target_context.refresh()
    sys.stdout.flush()
    pids = []
    for run in runs:
        try:
            pid = os.fork()
        except OSError:   # no process to spare: the process that waits for these groups compiles them itself
            continue
        if pid == 0:   # the child: compile, report, and leave without the parent's exit handlers
            try:
                code = int(any(err for _, _, err in _run_reporting(run)))
            except BaseException:  # noqa: BLE001 - a closed pipe, an interrupt: this process only ends
                code = 1
            finally:
                os._exit(code)
        pids.append(pid)
    return int(any(os.waitpid(pid, 0)[1] != 0 for pid in pids))


def _set_priority(target: int | str) -> None:
    """Lower this process's priority to nice ``target``, or to idle (see ``_lower_priority``); never raise it."""
    if target == "idle":
        _lower_priority("idle")
    elif hasattr(os, "nice"):
        current = os.nice(0)
        if target > current:
            os.nice(target - current)


def main(argv=None) -> int:
    """``hitml-warmup [--jobs N] [GROUP ...]``: compile hitml's kernels ahead of use (CPU; CUDA where a GPU is seen)."""
    parser = argparse.ArgumentParser(prog="hitml-warmup", description=main.__doc__)
    parser.add_argument("groups", nargs="*", help="kernel groups (default: all)")
    parser.add_argument("--jobs", type=int, default=None, help="processes at once (default: CPU count)")
    parser.add_argument("--fork", action="store_true", help=argparse.SUPPRESS)   # compile_ahead's (see _fork_runs)
    args = parser.parse_args(argv)
    _lower_priority(os.environ.get("HITML_WARMUP_NICE"))
    if args.fork:
        return _fork_runs([tuple(run.split(",")) for run in args.groups])
    if os.environ.get("HITML_PROGRESS", "1") != "0":
        print("hitml: compiling the kernels for this machine (CPU kernels into Numba's cache, and the CUDA kernels "
              "into CuPy's where a GPU is seen; loaded where already compiled)",
              file=sys.stderr, flush=True)
    try:
        warmup(args.groups or None, jobs=args.jobs)
    except (RuntimeError, ValueError) as exc:
        print(f"hitml-warmup: {exc}", file=sys.stderr)
        return 1
    return 0
