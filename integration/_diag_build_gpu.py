"""Where a GPU interventional explainer's build goes, in one process: its seconds, each NVRTC compile it runs (CuPy's
``_NVRTCProgram.compile``, which runs only on a miss of CuPy's disk cache) and a cProfile of the build.

    CUPY_CACHE_DIR=$(mktemp -d) python integration/_diag_build_gpu.py --ahead 1    (a first-ever process)
    python integration/_diag_build_gpu.py --cold 1 --profile 0 --timeline 1      (each step's span, per thread)

WOODELF's README shape by default (127 features, XGBoost 100 trees of depth 6, a 5,000,000-row background of
synthetic standard-normal float32, said so): the rows and the model are made once and kept in --cache, so that
alternating processes (``--ahead 0`` / ``1``: ``_gpu_patterns.COMPILE_AHEAD``) time the build alone.
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import pstats
import sys
import time
from pathlib import Path

import numpy as np


def _inputs(cache: Path, bg: int, M: int):
    import xgboost as xgb

    cache.mkdir(parents=True, exist_ok=True)
    f, m = cache / f"bg_{bg}x{M}.npy", cache / f"model_{M}.ubj"
    if not f.exists():
        rng = np.random.default_rng(1)
        np.save(f, rng.standard_normal((bg, M), dtype=np.float32))
    if not m.exists():
        rng = np.random.default_rng(0)
        X = rng.standard_normal((200_000, M), dtype=np.float32)
        y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + (X[:, 3] > 0.5) + 0.1 * rng.standard_normal(len(X))
        xgb.train({"max_depth": 6, "tree_method": "hist", "nthread": os.cpu_count()}, xgb.DMatrix(X, y), 100
                  ).save_model(m)
    return np.load(f), xgb.Booster(model_file=str(m))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bg", type=int, default=5_000_000)
    ap.add_argument("--features", type=int, default=127)
    ap.add_argument("--ahead", type=int, default=1)
    ap.add_argument("--cache", default="/tmp/hitml_build_diag")
    ap.add_argument("--profile", type=int, default=1)
    ap.add_argument("--prefetch", type=int, default=1, help="_gpu_patterns.PREFETCH: the upload during the parse")
    ap.add_argument("--rpt", type=int, default=None, help="_gpu_patterns.BG_ROWS_PER_THREAD")
    ap.add_argument("--pipeline-bytes", type=int, default=None,
                    help="_gpu_patterns.PIPELINE_BLOCK_BYTES: rows counted at once as they upload (0: after the whole "
                         "upload)")
    ap.add_argument("--repeat", type=int, default=0,
                    help="builds timed after the first in the same process (a session's later explainers)")
    ap.add_argument("--cold", type=int, default=0,
                    help="1: the build is the process's first use of CuPy and the GPU (no compile log, no warm-up)")
    ap.add_argument("--numpy-walk", type=int, default=1,
                    help="0: the model's paths are walked with Numba even where paths.NUMPY_WALK_NODES lets NumPy walk "
                         "them (Numba's first use in the build, as before the NumPy walk; same paths)")
    ap.add_argument("--timeline", type=int, default=0,
                    help="1: each step's start and end, per thread, in seconds from the build's start")
    a = ap.parse_args()
    _watch_numba_import()
    bg, bst = _inputs(Path(a.cache), a.bg, a.features)
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from hitml.kernels.treeshap import _gpu_patterns

    _gpu_patterns.COMPILE_AHEAD = bool(a.ahead)
    _gpu_patterns.PREFETCH = bool(a.prefetch)
    if a.rpt:
        _gpu_patterns.BG_ROWS_PER_THREAD = a.rpt
    if a.pipeline_bytes is not None:
        _gpu_patterns.PIPELINE_BLOCK_BYTES = a.pipeline_bytes
    if not a.numpy_walk:
        from hitml.kernels.treeshap import paths

        paths.NUMPY_WALK_NODES = 0
    compiles: list = []
    if not a.cold:
        _log_compiles(compiles)
    spans: list = []
    if a.timeline:
        _trace_steps(spans)
    _report(a, *_timed_build(shap, bst, bg, a.profile), compiles)
    if a.repeat:
        print(json.dumps({"pipeline_bytes": _gpu_patterns.PIPELINE_BLOCK_BYTES,
                          "repeat_build_s": [_timed_build(shap, bst, bg, 0)[0] for _ in range(a.repeat)]}))
    if a.timeline:
        t0 = min(s["t0"] for s in spans)
        for s in sorted(spans, key=lambda s: s["t0"]):
            print(f"{s['thread']:<28} {s['t0'] - t0:7.3f} {s['t1'] - t0:7.3f}  {s['t1'] - s['t0']:6.3f}  {s['step']}")


_NUMBA_IMPORTED_BY: list = []


def _watch_numba_import() -> None:
    """Record where Numba is first imported in this process (the innermost frames of the package's code), for the
    report's ``numba_imported_by``: the GPU build itself imports none."""
    import importlib.abc
    import traceback

    class Watch(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "numba" and not _NUMBA_IMPORTED_BY:
                frames = [f"{f.filename.rsplit('/', 2)[-1]}:{f.lineno} {f.name}" for f in traceback.extract_stack()
                          if "/hitml" in f.filename or "/kernels/" in f.filename or "/shap_ext/" in f.filename]
                _NUMBA_IMPORTED_BY.append(frames[-6:] or ["outside the package"])
            return None

    sys.meta_path.insert(0, Watch())


def _trace_steps(spans: list) -> None:
    """Record the start and end (perf_counter, thread) of the build's steps into ``spans``: the model's parse, the
    background's read, shap's own set-up, the engine's set-up (the paths: Numba's first use), the pass, and the
    threads of the compile ahead and the upload; and the first ``cupy_module()`` (importing CuPy). The steps are
    wrapped where the build looks them up (module attributes), so the build runs the same code."""
    import threading

    import shap

    from hitml.kernels import device
    from hitml.kernels.treeshap import _gpu_patterns
    from hitml.shap_ext import _explainer

    def wrap(owner, name: str, step: str) -> None:
        inner = getattr(owner, name)

        def traced(*args, **kw):
            t = time.perf_counter()
            try:
                return inner(*args, **kw)
            finally:
                spans.append({"step": step, "thread": threading.current_thread().name, "t0": t,
                              "t1": time.perf_counter()})
        setattr(owner, name, traced)

    wrap(_explainer, "build_ensemble", "shap's parse of the model (build_ensemble)")
    wrap(_explainer, "read_background", "the background read (read_background)")
    wrap(_explainer._ShapTreeExplainer, "__init__", "shap's own set-up on the one-row stand-in")
    wrap(_explainer.TreeExplainer, "_setup_engine", "the engine's set-up (the paths)")
    wrap(_explainer.TreeExplainer, "_summarize_background", "the background pass and the expected value")
    wrap(_gpu_patterns._Ahead, "run", "compile ahead (module loads; CUDA context if first)")
    wrap(_gpu_patterns._Upload, "run", "the background's upload")
    wrap(_gpu_patterns, "summarize", "summarize (count the blocks as they upload)")
    first = device._cupy_or_reason         # every cupy_module() call, from any module, goes through it
    done: list = []

    def cupy_or_reason():
        if done:
            return first()
        t = time.perf_counter()
        try:
            return first()
        finally:
            done.append(1)
            spans.append({"step": "the first cupy_module() (imports CuPy)", "thread": threading.current_thread().name,
                          "t0": t, "t1": time.perf_counter()})
    device._cupy_or_reason = cupy_or_reason
    del shap


def _log_compiles(compiles: list) -> None:
    """Record every NVRTC compile into ``compiles``, then make the CUDA context and CuPy's first kernels before the
    build, as a user's session that already used the GPU."""
    import cupy as cp
    import cupy.cuda.compiler as cc

    inner = cc._NVRTCProgram.compile          # the NVRTC call of every CuPy compile (RawModule and CuPy's own)

    def logged(self, *args, **kw):
        t = time.perf_counter()
        try:
            return inner(self, *args, **kw)
        finally:
            head = next((ln for ln in self.src.splitlines() if "__global__" in ln), self.src[:80])
            compiles.append({"s": time.perf_counter() - t, "program": head.strip()[:100]})
    cc._NVRTCProgram.compile = logged
    cp.zeros(1).sum()
    cp.cuda.Device().synchronize()
    compiles.clear()


def _timed_build(shap, bst, bg, profile: int):
    """(seconds, explainer, profile or None) of the explainer's build, to the end of its device work."""
    masker = shap.maskers.Independent(bg, max_samples=len(bg))
    prof = cProfile.Profile() if profile else None
    t = time.perf_counter()
    if prof:
        prof.enable()
    ex = shap.TreeExplainer(bst, data=masker, feature_perturbation="interventional", backend="gpu")
    import cupy as cp                    # a cold build imported it: only the name here
    cp.cuda.Device().synchronize()
    if prof:
        prof.disable()
    return time.perf_counter() - t, ex, prof


def _report(a, build: float, ex, prof, compiles: list) -> None:
    import cupy as cp

    rec = {"build_s": build, "ahead": a.ahead, "cold": a.cold, "prefetch": a.prefetch, "rpt": a.rpt,
           "numpy_walk": a.numpy_walk, "numba_imported": "numba" in sys.modules,
           "numba_imported_by": _NUMBA_IMPORTED_BY[:1],
           "compiles": compiles, "compile_s": sum(c["s"] for c in compiles),
           "cache_dir": os.environ.get("CUPY_CACHE_DIR"), "device": cp.cuda.runtime.getDeviceProperties(0)["name"]
           .decode(), "expected_value": float(np.ravel(ex.expected_value)[0])}
    print(json.dumps(rec), flush=True)
    if prof:
        s = io.StringIO()
        st = pstats.Stats(prof, stream=s)
        st.sort_stats("cumulative").print_stats(45)
        st.sort_stats("tottime").print_stats(25)
        print("\n".join(ln[:160] for ln in s.getvalue().splitlines()), file=sys.stderr)


if __name__ == "__main__":
    main()
