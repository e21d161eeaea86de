"""Compile notice and ahead-of-use compilation of hitml's CPU (Numba) kernels.

Every Numba kernel of hitml is a module-level function with ``cache=True``, called with one fixed set of argument
types, so its machine code is compiled once per machine (and Numba version) and loaded from Numba's cache by every
later process. ``python -m hitml.kernels warmup`` (or the ``hitml-warmup`` console script) compiles them all ahead,
on all cores; without it, the first call that needs a kernel compiles it, and a one-line notice on stderr says so.
"""
from __future__ import annotations

import argparse
import atexit
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from . import _numba_compile

_NOTICE = ("hitml: compiling Numba kernels for this machine on first use (about 10-20 s on 2 cores, once; later "
           "processes load them from Numba's cache; `hitml-warmup` compiles all ahead)")
_lock = threading.Lock()
_state = {"registered": False, "shown": False}

# The CPU TreeSHAP engine's kernel groups that a first cache miss compiles side by side (see compile_ahead), the
# module of their kernels, and the setting that turns it off
_AHEAD_GROUPS = ("treeshap", "treeshap-interactions", "treeshap-interventional")
_ENGINE_MODULES = ("hitml.kernels.treeshap._cpu_",)
_AHEAD_ENV = "HITML_COMPILE_AHEAD"
_ahead: dict = {"entered": set(), "children": {}, "launched": False}


def _show_notice() -> bool:
    """Whether the notice should still be shown (HITML_PROGRESS=0 silences it, as it does the progress bars)."""
    return not _state["shown"] and os.environ.get("HITML_PROGRESS", "1") != "0"


def register_compile_notice() -> None:
    """Print ``_NOTICE`` to stderr (once per process) when Numba starts compiling a hitml kernel, that is when a
    kernel is neither compiled in this process nor found in Numba's cache; and install ``_numba_compile``'s
    faster copy propagation for those compiles. Cheap; idempotent."""
    with _lock:
        if _state["registered"]:
            return
        _state["registered"] = True
    from numba.core import event

    class _Notice(event.Listener):
        def on_start(self, ev):
            disp = ev.data.get("dispatcher") if isinstance(ev.data, dict) else None
            module = getattr(getattr(disp, "py_func", None), "__module__", "") or ""
            if module.startswith("hitml.") and _show_notice():
                _state["shown"] = True
                print(_NOTICE, file=sys.stderr, flush=True)
            if module.startswith(_ENGINE_MODULES):
                compile_ahead()

        def on_end(self, ev):
            pass

    event.register("numba:compile", _Notice())
    _numba_compile.install()  # a faster copy propagation while Numba compiles hitml's kernels (same code)


def enter(group: str) -> None:
    """Called by the CPU TreeSHAP engine before it runs the kernels of ``group``: records that this process
    compiles (or loads) them itself, and waits for a process that :func:`compile_ahead` started on them, whose cache
    entries the kernels then load instead of compiling them a second time."""
    with _lock:
        _ahead["entered"].add(group)
        child = _ahead["children"].pop(group, None)
    if child is not None:
        child.wait()


def compile_ahead() -> None:
    """At the first cache miss of a CPU TreeSHAP kernel in this process, compile the engine's other kernel groups
    (those of ``_AHEAD_GROUPS`` this process has not started on) side by side, one ``hitml-warmup`` process per
    group into the same Numba cache, while this process compiles the group it needs. A later call of another group
    waits for its process and loads what it compiled, so a first-ever script that computes SHAP values,
    interactions and interventional values compiles all three at once on the machine's cores; the process waits
    for those it started before it exits. Once per process; off where ``HITML_COMPILE_AHEAD=0`` (which its
    children get)."""
    with _lock:
        if _ahead["launched"] or os.environ.get(_AHEAD_ENV, "1") == "0" or not _is_python(sys.executable):
            return
        _ahead["launched"] = True
        todo = [g for g in _AHEAD_GROUPS if g not in _ahead["entered"]]
    if not todo:
        return
    from numba.core.config import CACHE_DIR

    # the children run at a lower priority, so that the call waiting in this process finishes first
    env = dict(os.environ, HITML_PROGRESS="0", HITML_WARMUP_NICE="19", **{_AHEAD_ENV: "0"},
               PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    if CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = CACHE_DIR
    for group in todo:
        try:
            child = subprocess.Popen([sys.executable, "-m", "hitml.kernels", "warmup", group, "--jobs", "1"],
                                     env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        except OSError:   # no process to spare: this process compiles the group when it needs it
            continue
        with _lock:
            _ahead["children"][group] = child
    atexit.register(_wait_ahead)


def _is_python(executable: str | None) -> bool:
    """Whether ``executable`` is a Python interpreter (not an application embedding one, such as a WSGI server,
    which ``-m hitml.kernels`` would start instead)."""
    return bool(executable) and os.path.basename(executable).lower().startswith("python")


def _wait_ahead(timeout: float = 300.0) -> None:
    """At exit: let the compiles started ahead finish (so that the next process finds them in the cache)."""
    with _lock:
        children = list(_ahead["children"].values())
        _ahead["children"].clear()
    for child in children:
        try:
            child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()


# --------------------------------------------------------------------------------------------------- warm-up
def _tiny_paths():
    """A two-tree PathSet with a categorical split, built by ``extract_paths`` (so it carries dense trees)."""
    from .treeshap import extract_paths

    cl = np.array([[1, 3, 5, -1, -1, -1, -1], [1, -1, -1, -1, -1, -1, -1]])
    cr = np.array([[2, 4, 6, -1, -1, -1, -1], [2, -1, -1, -1, -1, -1, -1]])
    ft = np.array([[0, 1, 2, -1, -1, -1, -1], [2, -1, -1, -1, -1, -1, -1]])
    th = np.array([[0.5, 0.5, 0.5, 0, 0, 0, 0], [0.5, 0, 0, 0, 0, 0, 0.0]])
    cov = np.array([[8, 4, 4, 2, 2, 1, 3], [8, 5, 3, 0, 0, 0, 0.0]])
    val = np.array([[0, 0, 0, -1, 1, 2, 0.5], [0, 1, -1, 0, 0, 0, 0.0]])[:, :, None]
    is_cat = np.zeros(cl.shape, bool)
    is_cat[1, 0] = True
    ptr = np.full(cl.shape, -1, np.int64)
    ptr[1, 0] = 0
    nw = np.zeros(cl.shape, np.int32)
    nw[1, 0] = 1
    cats = (is_cat, ptr, nw, np.array([0b101], np.uint32))
    return extract_paths(cl, cr, cl, ft, th, val, cov, np.zeros(1), n_features=3, categories=cats)


def _treeshap_values() -> None:
    from .treeshap import cpu

    ps = _tiny_paths()
    X = np.random.default_rng(0).normal(size=(300, 3))
    cpu.shap_values(ps, X, progress=False)


def _treeshap_interactions() -> None:
    from .treeshap import cpu

    ps = _tiny_paths()
    X = np.random.default_rng(0).normal(size=(40, 3))
    cpu.interaction_values(ps, X, progress=False)


def _treeshap_interventional() -> None:
    from .treeshap import cpu

    ps = _tiny_paths()
    X = np.random.default_rng(0).normal(size=(20, 3))
    cpu.interventional_shap_values(ps, X, X[:5], progress=False)
    cpu.interventional_shap_values(ps, X, X[:5], weights=np.arange(1.0, 6.0), progress=False)
    cpu.interventional_interaction_values(ps, X, X[:5], progress=False)
    cpu.interventional_banzhaf_values(ps, X, X[:5], progress=False)


def _treeshap_transforms() -> None:
    """Interventional values through an output transform: the tree-walking kernel (one kernel, its own group so
    that the warm-up's processes share the work evenly)."""
    from .treeshap import cpu

    ps = _tiny_paths()
    X = np.random.default_rng(0).normal(size=(20, 3))
    cpu.interventional_shap_values(ps, X, X[:5], transform="logistic", progress=False)


def _sketch() -> None:
    from . import sketch

    X = np.random.default_rng(0).normal(size=(2000, 3))
    sketch.cut_points(sketch.sketch(X), max_bin=16)


def _shuffle() -> None:
    from .shuffle import cpu

    cpu.permutation(1000, 0)
    cpu.batched_permutations(4, 10, 0)
    cpu.shuffle_rows(np.arange(20.0).reshape(10, 2), 0)


def _permutations() -> None:
    from . import shapley

    perms, w = shapley.sample("herding", 8, 6, 0)
    shapley.discrepancy(perms, w)


def _gpu_packing() -> None:
    from .treeshap import pack

    pack.plan_packing(np.array([3, 5, 2, 7, 1, 4], np.int64), group=np.array([0, 0, 1, 1, 2, 2], np.int64))


TASKS = {
    "treeshap": _treeshap_values,
    "treeshap-interactions": _treeshap_interactions,
    "treeshap-interventional": _treeshap_interventional,
    "treeshap-transforms": _treeshap_transforms,
    "sketch": _sketch,
    "shuffle": _shuffle,
    "permutations": _permutations,
    "gpu-packing": _gpu_packing,
}


# CPU seconds of each group's first compile on one core of the 2-core machine (docs/benchmarks/first_call.md): the
# order in which the warm-up hands the groups to its processes
_COST = {"treeshap-interventional": 16.2, "sketch": 15.6, "treeshap-transforms": 12.5, "treeshap": 12.0,
         "treeshap-interactions": 10.1, "shuffle": 5.0, "gpu-packing": 0.4, "permutations": 0.1}


def _run_task(name: str) -> tuple[str, float, str]:
    _state["shown"] = True  # the warm-up says what it does; no first-use notice from its workers
    _ahead["launched"] = True  # and it compiles its groups itself
    t = time.perf_counter()
    try:
        TASKS[name]()
        err = ""
    except Exception as exc:  # noqa: BLE001 - reported, and the other kernels still compile
        err = f"{type(exc).__name__}: {exc}"
    return name, time.perf_counter() - t, err


def warmup(tasks=None, jobs: int | None = None, verbose: bool = True) -> dict[str, float]:
    """Compile (or load from Numba's cache) every CPU kernel hitml has, ``jobs`` processes at a time (default: the
    CPU count), so that no later process waits for a compile. Returns the seconds each group took; raises
    RuntimeError naming the groups that failed."""
    names = list(TASKS) if tasks is None else list(tasks)
    unknown = sorted(set(names) - set(TASKS))
    if unknown:
        raise ValueError(f"unknown warm-up groups {unknown}; choose from {sorted(TASKS)}")
    jobs = max(1, min(jobs or os.cpu_count() or 1, len(names)))
    t0 = time.perf_counter()
    # longest first, so that the processes finish together (CPU seconds of each group's first compile)
    names.sort(key=lambda n: -_COST.get(n, 0.0))
    if jobs == 1:
        results = [_run_task(n) for n in names]
    else:
        with ProcessPoolExecutor(jobs) as pool:
            results = list(pool.map(_run_task, names, chunksize=1))
    failed = []
    for name, secs, err in results:
        if verbose:
            print(f"  {name:<26} {secs:6.1f} s" + (f"  FAILED: {err}" if err else ""), file=sys.stderr)
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


def main(argv=None) -> int:
    """``hitml-warmup [--jobs N] [GROUP ...]``: compile hitml's CPU kernels ahead of use."""
    parser = argparse.ArgumentParser(prog="hitml-warmup", description=main.__doc__)
    parser.add_argument("groups", nargs="*", help=f"kernel groups (default: all of {', '.join(TASKS)})")
    parser.add_argument("--jobs", type=int, default=None, help="processes at once (default: CPU count)")
    args = parser.parse_args(argv)
    nice = os.environ.get("HITML_WARMUP_NICE")
    if nice and hasattr(os, "nice"):
        os.nice(int(nice))
    if os.environ.get("HITML_PROGRESS", "1") != "0":
        print("hitml: compiling the CPU kernels for this machine (loaded from Numba's cache where already compiled)",
              file=sys.stderr, flush=True)
    try:
        warmup(args.groups or None, jobs=args.jobs)
    except (RuntimeError, ValueError) as exc:
        print(f"hitml-warmup: {exc}", file=sys.stderr)
        return 1
    return 0
