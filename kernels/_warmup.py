"""Compile notice and ahead-of-use compilation of hitml's CPU (Numba) kernels.

Every Numba kernel of hitml is a module-level function with ``cache=True``, called with one fixed set of argument
types, so its machine code is compiled once per machine (and Numba version) and loaded from Numba's cache by every
later process. ``python -m hitml.kernels warmup`` (or the ``hitml-warmup`` console script) compiles them all ahead,
on all cores; without it, the first call that needs a kernel compiles it, and a one-line notice on stderr says so.
A cold cache also starts the other TreeSHAP groups' compiles in processes alongside (:func:`compile_ahead`), and the
quadrature kernels run their quick-to-compile twins until their full tier is compiled behind (:func:`pick`).
"""
from __future__ import annotations

import argparse
import atexit
import contextlib
import importlib
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from . import _aot, _numba_compile

_NOTICE = ("hitml: compiling Numba kernels for this machine on first use (about 10-20 s on 2 cores, once; later "
           "processes load them from Numba's cache; `hitml-warmup` compiles all ahead)")
_lock = threading.Lock()
_state = {"registered": False, "shown": False}

# The CPU TreeSHAP engine's kernel groups that a first cache miss compiles side by side (see compile_ahead), the
# module of their kernels, and the setting that turns it off
_AFTER = {"treeshap-interventional-interactions": "treeshap-interventional"}   # reuses the other group's kernels
# their nice values: the order in which a script usually needs them (this process runs at its own, lower, value)
# (interventional interactions, the least used, on idle CPU time only: a process that waits for them leaves some)
_AHEAD_NICE = {"treeshap": 5, "treeshap-interactions": 10, "treeshap-interventional": 15,
               "treeshap-interventional-interactions": "idle"}


# Groups whose kernels compile in parts, one process each: a part compiles the kernels it names (of the module given)
# and runs the other parts' kernels as no-ops (a compile needs the argument types only; the values are thrown away).
# The interventional group is the largest (about 10 CPU s); in one process its compile ran alone on one core at the
# end of a first-ever script. The parts are balanced by their compile times.
_PART_SEP = "@"
_PARTS = {"treeshap-interventional": ("hitml.kernels.treeshap._cpu_patterns", (
    ("rows_kernel", "transpose_block", "condition_masks"),
    ("fail_counts", "value_tables", "sibling_pairs", "combine_pairs", "mirror_histograms")))}


def _runs(names) -> list[tuple[str, ...]]:
    """``names`` as runs for one process each: a group that reuses another's kernels (``_AFTER``) right after it;
    a group of ``_PARTS`` as one run per part (``group@i``), the groups after it in the first."""
    runs = [(n, *(c for c, after in _AFTER.items() if after == n and c in names)) for n in names
            if not (n in _AFTER and _AFTER[n] in names)]
    out = []
    for run in runs:
        if _n_parts(run[0]) == 1:
            out.append(run)
            continue
        out.append((f"{run[0]}{_PART_SEP}0", *run[1:]))
        out.extend((f"{run[0]}{_PART_SEP}{i}",) for i in range(1, _n_parts(run[0])))
    return out


def _n_parts(group: str) -> int:
    """The number of parts ``group`` compiles in (``_PARTS``; 1 for the others)."""
    return len(_PARTS[group][1]) if group in _PARTS else 1


def _group(name: str) -> str:
    """The group of a run's entry (``group`` or ``group@i``)."""
    return name.split(_PART_SEP, 1)[0]


_AHEAD_GROUPS = tuple(_runs(("treeshap", "treeshap-interactions", "treeshap-interventional",
                             "treeshap-interventional-interactions")))   # one process per run
_ENGINE_MODULES = ("hitml.kernels.treeshap._cpu_",)
_PATH_MODULES = ("hitml.kernels.treeshap.",)   # path extraction: a miss there starts them once expect_cpu_engine ran
_AHEAD_ENV = "HITML_COMPILE_AHEAD"
_ahead: dict = {"entered": set(), "children": {}, "all": [], "launched": False, "eager": False}

# Kernel tiers (see pick): the setting that forces one, the groups whose kernels have a quick twin (compiled in the
# background in the full tier), and this process's background compile of the full tier (None: not tried yet)
_TIER_ENV = "HITML_KERNEL_TIER"
_TIERS = ("full", "quick")
_FULL_GROUPS = ("treeshap", "treeshap-interactions")
_FULL_DELAY_S = 30.0   # after the compiles ahead have ended: a script that ends sooner starts it at exit
_full: dict = {"started": None, "spawned": False, "groups": set()}


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
            if module.startswith(_ENGINE_MODULES) or (_ahead["eager"] and module.startswith(_PATH_MODULES)):
                compile_ahead()

        def on_end(self, ev):
            pass

    event.register("numba:compile", _Notice())
    _numba_compile.install()  # a faster copy propagation while Numba compiles hitml's kernels (same code)


def expect_cpu_engine() -> None:
    """Called by an adapter that will run the CPU TreeSHAP engine (shap_ext's ``backend="cpu"``) before it
    extracts the paths: a cache miss there, which means a cold cache, then already starts :func:`compile_ahead`,
    so that the engine's kernels compile while the paths are extracted (a GPU user extracts paths too, and starts
    nothing)."""
    register_compile_notice()
    _ahead["eager"] = True


def enter(group: str) -> None:
    """Called by the CPU TreeSHAP engine before it runs the kernels of ``group``: records that this process
    compiles (or loads) them itself, and waits until a process that :func:`compile_ahead` started has compiled
    them; the kernels then load its cache entries instead of compiling them a second time."""
    with _lock:
        _ahead["entered"].add(group)
        waits = _ahead["children"].pop(group, [])
    for child, name in waits:
        child.wait_for(name)


class _Child:
    """A ``hitml-warmup`` process compiling groups in order, which prints each group's name when it is done."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.done = proc, set()
        self._lock = threading.Lock()

    def wait_for(self, group: str) -> None:
        """Return once ``group`` is compiled (or the process has ended)."""
        with self._lock:
            while group not in self.done:
                line = self.proc.stdout.readline() if self.proc.stdout else ""
                if not line:
                    self.proc.wait()
                    return
                self.done.add(line.strip())

    def finish(self, timeout: float) -> None:
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.proc.stdout:
            self.proc.stdout.close()


def compile_ahead() -> None:
    """At the first cache miss of a CPU TreeSHAP kernel in this process, compile the engine's other kernel groups
    (those of ``_AHEAD_GROUPS`` this process has not started on) side by side, one ``hitml-warmup`` process per
    group into the same Numba cache, while this process compiles the group it needs. A later call of another group
    waits for its process and loads what it compiled, so a first-ever script that computes SHAP values,
    interactions and interventional values compiles all three at once on the machine's cores; the process waits
    for those it started before it exits. Once per process; off where ``HITML_COMPILE_AHEAD=0`` (which its
    children get)."""
    with _lock:
        if _ahead["launched"] or not _ahead_allowed():
            return
        _ahead["launched"] = True
    if _aot.available():   # the compiled copies serve this process; compile_full_tier compiles behind them
        return
    with _lock:
        todo = [t for t in ([g for g in run if _group(g) not in _ahead["entered"]] for run in _AHEAD_GROUPS) if t]
    if not todo:
        return
    # the children run at a lower priority, so that the call waiting in this process finishes first; they compile
    # the tier this process will run (the quick twins, unless a tier is forced), and print each group when done.
    # Where processes can fork (Linux), one process imports and sets up Numba once and forks one process per run
    # (about 1.6 CPU s saved per run on the 2-core machine); elsewhere each run is a process of its own.
    tier = {_TIER_ENV: kernel_tier() or "quick"}
    if _can_fork():
        env = _child_env(HITML_WARMUP_NICE=str(_AHEAD_NICE["treeshap"]), **tier)
        launches = [(["--fork", *(",".join(run) for run in todo)], env, todo)]
    else:
        launches = [([*run, "--jobs", "1"], _child_env(HITML_WARMUP_NICE=str(_nice(run[0])), HITML_WARMUP_REPORT="1",
                                                       **tier), [run]) for run in todo]
    for args, env, runs in launches:
        try:
            proc = _start_warmup(args, env, stdout=subprocess.PIPE, text=True)
        except OSError:   # no process to spare: this process compiles the groups when it needs them
            continue
        child = _Child(proc)
        with _lock:
            _ahead["all"].append(child)
            for name in (n for run in runs for n in run):   # a group in parts waits for each part's process
                _ahead["children"].setdefault(_group(name), []).append((child, name))
    atexit.register(_wait_ahead)


def _nice(name: str) -> int | str:
    """The priority compile_ahead's processes compile a run's entry ``name`` at (``group`` or ``group@i``): a nice
    value, or "idle"."""
    return _AHEAD_NICE.get(_group(name), 19)


def _can_fork() -> bool:
    """Whether compile_ahead forks its processes from one (Linux; elsewhere a fork without exec is not safe)."""
    return sys.platform.startswith("linux") and hasattr(os, "fork")


def _start_warmup(args, env: dict, **popen) -> subprocess.Popen:
    """A ``hitml-warmup`` process of this interpreter with command-line ``args`` (no input, no stderr)."""
    return subprocess.Popen([sys.executable, "-m", "hitml.kernels", "warmup", *args], env=env,
                            stdin=subprocess.DEVNULL, stderr=subprocess.DEVNULL, **popen)


def _ahead_allowed() -> bool:
    return os.environ.get(_AHEAD_ENV, "1") != "0" and _is_python(sys.executable)


def _child_env(**extra: str) -> dict:
    """The environment of a compiling child: this process's, its import path and Numba cache folder, no notice, no
    compiles ahead of its own."""
    from numba.core.config import CACHE_DIR

    env = dict(os.environ, HITML_PROGRESS="0", PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               **{_AHEAD_ENV: "0", _aot._ENV: "0"}, **extra)
    if CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = CACHE_DIR
    return env


def kernel_tier() -> str | None:
    """The tier that ``HITML_KERNEL_TIER`` forces ("full" or "quick"), or None (unset: :func:`pick` chooses)."""
    value = os.environ.get(_TIER_ENV, "").strip().lower()
    if not value:
        return None
    if value not in _TIERS:
        raise ValueError(f"{_TIER_ENV} must be one of {_TIERS} or unset, got {value!r}")
    return value


def loaded(dispatcher, args: tuple) -> bool | None:
    """Whether ``dispatcher`` has machine code for the types of ``args`` in this process, or loads it from Numba's
    cache now; never compiles. This is the cache lookup of Numba's ``Dispatcher.compile`` (whose own switch-off
    refuses before it looks in the cache), under Numba's compiler lock; None where this Numba's internals differ."""
    from numba.core.compiler_lock import global_compiler_lock

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


def pick(full, quick, args: tuple):
    """The kernel of a pair of twins that a call with ``args`` runs: ``full``, a ``parallel=True`` kernel over work
    items ``[lo, hi)`` (its last two arguments, here all of them), where its machine code is in this process or in
    Numba's cache; else ``quick``, its work-item twin (``_items.serial_twin``: the same bytes, compiled in about
    half the time, run 1.0-1.3x as long), while a process in the background compiles ``full`` into the cache
    (started here, once per process; later calls of this process, and later processes, then load it). Where no
    such process can start (``HITML_COMPILE_AHEAD=0``, an embedded interpreter), ``full`` compiles here, as before.
    ``HITML_KERNEL_TIER=full`` or ``quick`` forces a tier (``hitml-warmup`` compiles the full one). Returns a
    callable taking ``args``."""
    tier = kernel_tier()
    if tier == "quick" or (tier is None and loaded(full, (*args, 0, 0)) is False
                           and (compile_full_tier() or _aot.available())):
        return quick   # (its compiled copy, where _aot has one and its Numba code is not cached either)
    return lambda *a: full(*a, 0, quick.count(*a))


def compile_full_tier(groups: tuple[str, ...] = _FULL_GROUPS) -> bool:
    """Arrange (once per process) for a background process to compile the full tier of ``groups`` (by default
    ``_FULL_GROUPS``; ``_aot.entry`` names the groups of the kernels whose compiled copies ran; all calls' groups
    are compiled together) into Numba's cache, and return whether one will run. It starts once this process's
    compiles ahead have ended and ``_FULL_DELAY_S`` more seconds have passed, or at exit, whichever comes first (on
    a 2-core machine a compile beside the first calls' cost them about 5 s, even at idle priority): detached (it
    outlives this process, which does not wait for it), on idle CPU time only (Linux ``SCHED_IDLE``, else nice
    19), and skipped while another such process holds the lock next to the cache."""
    with _lock:
        _full["groups"].update(groups)
        if _full["started"] is not None:
            return _full["started"]
        _full["started"] = _ahead_allowed()
        if not _full["started"]:
            return False
    atexit.register(_spawn_full_tier, True)
    threading.Thread(target=_spawn_full_tier, args=(False,), name="hitml-full-tier", daemon=True).start()
    return True


def _spawn_full_tier(at_exit: bool) -> None:
    """Start the full-tier compile (see compile_full_tier): at exit after the compiles ahead, else from a thread
    once they have ended and ``_FULL_DELAY_S`` have passed."""
    if at_exit:
        _wait_ahead()
    else:
        for child in _children():
            child.proc.wait()
        time.sleep(_FULL_DELAY_S)
    with _lock:
        if _full["spawned"]:
            return
        _full["spawned"] = True
    env = _child_env(HITML_WARMUP_NICE="idle", HITML_WARMUP_LOCK="1", **{_TIER_ENV: "full"})
    try:
        _start_warmup([*sorted(_full["groups"]), "--jobs", "1"], env, stdout=subprocess.DEVNULL,
                      start_new_session=True)
    except OSError:
        pass   # the next process tries again


def _is_python(executable: str | None) -> bool:
    """Whether ``executable`` is a Python interpreter (not an application embedding one, such as a WSGI server,
    which ``-m hitml.kernels`` would start instead)."""
    return bool(executable) and os.path.basename(executable).lower().startswith("python")


def _children() -> list:
    """The processes compile_ahead started (each once)."""
    with _lock:
        return list(_ahead["all"])


def _wait_ahead(timeout: float = 300.0) -> None:
    """At exit: let the compiles started ahead finish (so that the next process finds them in the cache)."""
    with _lock:
        _ahead["children"].clear()
    for child in _children():
        child.finish(timeout)


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


def _hand_paths():
    """A two-path PathSet built by hand (no path extraction to compile first), with a categorical element: the
    quadrature kernels' argument types are those of every real PathSet."""
    from .treeshap import PathSet

    return PathSet(n_features=3, n_outputs=1, path_ptr=np.array([0, 2, 3], np.int64),
                   feature=np.array([0, 1, 2], np.int32), lower=np.array([-np.inf, 0.5, -np.inf]),
                   upper=np.array([0.5, np.inf, 1.0]), missing_ok=np.array([True, False, False]),
                   cat_ptr=np.array([-1, -1, 0], np.int64), cat_nwords=np.array([0, 0, 1], np.int32),
                   cat_words=np.array([0b101], np.uint32), zero_fraction=np.array([0.5, 0.25, 0.625]),
                   leaf_value=np.array([[1.0], [-2.0]]), tree_index=np.array([0, 1], np.int32),
                   base_offset=np.zeros(1))


def _treeshap_values() -> None:
    from .treeshap import cpu

    ps = _hand_paths()
    X = np.random.default_rng(0).normal(size=(300, 3))
    cpu.shap_values(ps, X, progress=False)


def _treeshap_interactions() -> None:
    from .treeshap import cpu

    ps = _hand_paths()
    X = np.random.default_rng(0).normal(size=(40, 3))
    cpu.interaction_values(ps, X, progress=False)


def _treeshap_interventional() -> None:
    from .treeshap import cpu

    ps = _hand_paths()   # the pattern engine reads the paths only
    X = np.random.default_rng(0).normal(size=(20, 3))
    cpu.interventional_shap_values(ps, X, X[:5], progress=False)
    cpu.interventional_shap_values(ps, X, X[:5], weights=np.arange(1.0, 6.0), progress=False)
    cpu.interventional_banzhaf_values(ps, X, X[:5], progress=False)


def _treeshap_interventional_interactions() -> None:
    """Interventional interactions: the interventional group's kernels and the interaction tables (a group of its
    own, so that a first interventional SHAP call does not wait for the tables' compile)."""
    from .treeshap import cpu

    ps = _hand_paths()
    X = np.random.default_rng(0).normal(size=(20, 3))
    cpu.interventional_interaction_values(ps, X, X[:5], progress=False)


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


def _treeshap_paths() -> None:
    """Path extraction (``extract_paths``), which the CPU and the GPU engine both run."""
    _tiny_paths()


def _gpu_packing() -> None:
    from .treeshap import pack

    pack.plan_packing(np.array([3, 5, 2, 7, 1, 4], np.int64), group=np.array([0, 0, 1, 1, 2, 2], np.int64))


TASKS = {
    "treeshap": _treeshap_values,
    "treeshap-interactions": _treeshap_interactions,
    "treeshap-interventional": _treeshap_interventional,
    "treeshap-interventional-interactions": _treeshap_interventional_interactions,
    "treeshap-transforms": _treeshap_transforms,
    "treeshap-paths": _treeshap_paths,
    "sketch": _sketch,
    "shuffle": _shuffle,
    "permutations": _permutations,
    "gpu-packing": _gpu_packing,
}


# CPU seconds of each group's first compile on one core of the 2-core machine (docs/benchmarks/first_call.md): the
# order in which the warm-up hands the groups to its processes
_COST = {"treeshap-interventional": 16.2, "sketch": 15.6, "treeshap-transforms": 12.5, "treeshap": 12.0,
         "treeshap-interactions": 10.1, "shuffle": 5.0, "treeshap-interventional-interactions": 1.6,
         "treeshap-paths": 1.8, "gpu-packing": 0.4, "permutations": 0.1}


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
    _state["shown"] = True  # the warm-up says what it does; no first-use notice from its workers
    _aot.disable()  # and it compiles the Numba kernels, which later processes load
    _ahead["launched"] = True  # and it compiles its groups itself
    t = time.perf_counter()
    try:
        with _part(name):
            TASKS[_group(name)]()
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
    return set(TASKS) | {f"{g}{_PART_SEP}{i}" for g in _PARTS for i in range(_n_parts(g))}


def warmup(tasks=None, jobs: int | None = None, verbose: bool = True) -> dict[str, float]:
    """Compile (or load from Numba's cache) every CPU kernel hitml has, ``jobs`` processes at a time (default: the
    CPU count), so that no later process waits for a compile. Returns the seconds each group took; raises
    RuntimeError naming the groups that failed."""
    names = list(TASKS) if tasks is None else list(tasks)
    unknown = sorted(set(names) - _task_names())
    if unknown:
        raise ValueError(f"unknown warm-up groups {unknown}; choose from {sorted(TASKS)}")
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


_held: list = []   # the open lock file of this process (held until it exits)


def full_tier_lock(cache_dir: str | None = None) -> str:
    """The lock file that a background full-tier compile holds while it runs: in ``cache_dir``, by default Numba's
    cache folder where one is set, else the temporary folder."""
    import tempfile
    from numba.core.config import CACHE_DIR

    uid = os.getuid() if hasattr(os, "getuid") else 0
    return os.path.join(cache_dir or CACHE_DIR or tempfile.gettempdir(), f"hitml-full-tier-{uid}.lock")


def _take_lock() -> bool:
    """Whether this process now holds the lock of the background full-tier compile (a file next to Numba's cache);
    False while another process holds it. Without ``fcntl`` (Windows), always True."""
    try:
        import fcntl
    except ImportError:
        return True
    path = full_tier_lock()
    f = None
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        f = open(path, "a")   # kept open, and locked, for the life of the process
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        if f is not None:
            f.close()
        return False
    _held.append(f)
    return True


def main(argv=None) -> int:
    """``hitml-warmup [--jobs N] [GROUP ...]``: compile hitml's CPU kernels ahead of use."""
    parser = argparse.ArgumentParser(prog="hitml-warmup", description=main.__doc__)
    parser.add_argument("groups", nargs="*", help=f"kernel groups (default: all of {', '.join(TASKS)})")
    parser.add_argument("--jobs", type=int, default=None, help="processes at once (default: CPU count)")
    parser.add_argument("--fork", action="store_true", help=argparse.SUPPRESS)   # compile_ahead's (see _fork_runs)
    args = parser.parse_args(argv)
    os.environ.setdefault(_TIER_ENV, "full")   # the kernels later processes run (the quick twins only on demand)
    _lower_priority(os.environ.get("HITML_WARMUP_NICE"))
    if os.environ.get("HITML_WARMUP_LOCK") and not _take_lock():
        return 0   # another process compiles them now
    if args.fork:
        return _fork_runs([tuple(run.split(",")) for run in args.groups])
    if os.environ.get("HITML_PROGRESS", "1") != "0":
        print("hitml: compiling the CPU kernels for this machine (loaded from Numba's cache where already compiled)",
              file=sys.stderr, flush=True)
    try:
        warmup(args.groups or None, jobs=args.jobs)
    except (RuntimeError, ValueError) as exc:
        print(f"hitml-warmup: {exc}", file=sys.stderr)
        return 1
    return 0
