"""Compiles in the background, and the compile notice, of hitml's CPU (Numba) kernels: what the library starts on
its own.

Every Numba kernel of hitml is a module-level function with ``cache=True``, called with one fixed set of argument
types, so its machine code is compiled once per machine (and Numba version) and loaded from Numba's cache by every
later process. Where the cache entries that hitml ships (``_aot``) serve the machine, nothing is compiled. Elsewhere
the first call that needs a kernel compiles it, and a one-line notice on stderr says so (and why the shipped entries
did not serve); the first such miss of a CPU TreeSHAP kernel also starts the other TreeSHAP groups' compiles in
processes alongside (:func:`compile_ahead`), each ``python -m hitml.kernels warmup ...`` (the warm-up tool,
``_warmup``, imported in the child only). ``HITML_BACKGROUND=0`` starts none of them: the kernels then compile in the
calling process on first use.

This layer sits below the kernel families (they import it) and above the shipped entries (``_aot``) and the
registry; it imports no family.
"""
from __future__ import annotations

import atexit
import os
import subprocess
import sys
import threading

from . import _aot, _numba_compile

_NOTICE = ("hitml: compiling Numba kernels for this machine on first use (about 10-20 s on 2 cores, once; later "
           "processes load them from Numba's cache; `hitml-warmup` compiles all ahead)")
_lock = threading.Lock()
_state = {"registered": False, "shown": False}

# The CPU TreeSHAP engine's kernel groups that a first cache miss compiles side by side (see compile_ahead), the
# module of their kernels, and the setting that turns it off
# a group that reuses another group's kernels runs right after it, in its process (``_runs``)
_AFTER = {"treeshap-interventional-interactions": "treeshap-interventional", "gpu": "gpu-packing"}
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
_ENV = "HITML_BACKGROUND"          # "0": the library starts no process of its own (see background_allowed)
_AHEAD_ENV = "HITML_COMPILE_AHEAD"  # "0": the same (its earlier name, which covered the same processes)
_ahead: dict = {"entered": set(), "children": {}, "all": [], "launched": False, "eager": False}


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
                print(_NOTICE + _why_compiled(), file=sys.stderr, flush=True)
            if module.startswith(_ENGINE_MODULES) or (_ahead["eager"] and module.startswith(_PATH_MODULES)):
                compile_ahead()

        def on_end(self, ev):
            pass

    event.register("numba:compile", _Notice())
    _numba_compile.install()  # a faster copy propagation while Numba compiles hitml's kernels (same code)


def prepare_numba_module() -> None:
    """Called at the top of every module with Numba kernels, before its kernels are defined: the compile notice
    (:func:`register_compile_notice`), and the shipped cache entries in the folders where Numba will look for them
    (``_aot.seed_numba_cache``), both once per process."""
    register_compile_notice()
    _aot.seed_numba_cache()


def _why_compiled() -> str:
    """What the notice adds where the shipped entries do not serve this process: why (``_aot.status``: none
    built, built for another CPU, Numba, Python or kernel source, switched off), so a user whose install built none
    sees it once."""
    return "" if _aot.usable() else f" [{_aot.status()}]"


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
    for those it started before it exits. Once per process; off where :func:`background_allowed` says no (its
    children get ``HITML_BACKGROUND=0``)."""
    with _lock:
        if _ahead["launched"] or not background_allowed():
            return
        _ahead["launched"] = True
    with _lock:
        todo = [t for t in ([g for g in run if _group(g) not in _ahead["entered"]] for run in _AHEAD_GROUPS) if t]
    if not todo:
        return
    # the children run at a lower priority, so that the call waiting in this process finishes first, and print each
    # group when done. Where processes can fork (Linux), one process imports and sets up Numba once and forks one
    # process per run (each skips that set-up); elsewhere each run is a process of its own.
    if _can_fork():
        env = _child_env(HITML_WARMUP_NICE=str(_AHEAD_NICE["treeshap"]))
        launches = [(["--fork", *(",".join(run) for run in todo)], env, todo)]
    else:
        launches = [([*run, "--jobs", "1"], _child_env(HITML_WARMUP_NICE=str(_nice(run[0])), HITML_WARMUP_REPORT="1"),
                     [run]) for run in todo]
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


def background_allowed() -> bool:
    """Whether this process may start compiles in processes of their own (:func:`compile_ahead`): not where
    ``HITML_BACKGROUND=0`` (or ``HITML_COMPILE_AHEAD=0``), which every such process gets, nor in an application
    embedding Python (``sys.executable`` is then no interpreter to start). Read at each decision, so that setting
    ``os.environ["HITML_BACKGROUND"] = "0"`` before the first call also holds."""
    return (os.environ.get(_ENV, "1") != "0" and os.environ.get(_AHEAD_ENV, "1") != "0"
            and _is_python(sys.executable))


def as_compile_child() -> None:
    """This process is a warm-up's (the ``hitml-warmup`` tool's): no first-use notice (it says what it does), no
    compiles ahead of its own."""
    _state["shown"] = True
    _ahead["launched"] = True


def _child_env(**extra: str) -> dict:
    """The environment of a compiling child: this process's, its import path and Numba cache folder, no notice, no
    compiles ahead of its own."""
    from numba.core.config import CACHE_DIR

    env = dict(os.environ, HITML_PROGRESS="0", PYTHONPATH=os.pathsep.join(p for p in sys.path if p),
               **{_ENV: "0", _AHEAD_ENV: "0"}, **extra)
    if CACHE_DIR:
        env["NUMBA_CACHE_DIR"] = CACHE_DIR
    return env


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
