"""Where the time of a GPU TreeSHAP call with NumPy output goes, for A/B runs of two checkouts of the engine.

    PYTHONPATH=<namespace with hitml of the checkout> python integration/_diag_treeshap_output.py \
        --label new --models fashion_mnist-medium:5000,synth50-d6:10000 --json out.json

Run once per checkout, in alternating processes, on the same machine and the same saved models (train_model caches
them). Per model it records: NumPy in/out and CuPy in/out seconds (median of --repeats), a SHA-256 of the NumPy
output's bytes (the fixed-point engine's output is deterministic, so two checkouts with the same kernels must agree),
the phases of the NumPy path timed one by one (upload of X, the kernels, the fixed-point conversion, device-to-host
copies into pinned / reused pageable / fresh pageable memory, host copies from pinned memory into fresh and into
reused memory) and the host functions that cost the most in one NumPy call (cProfile, top entries by own time).
"""
from __future__ import annotations

import argparse
import cProfile
import hashlib
import io
import json
import pstats
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "integration"))
from _treeshap_common import MODEL_DIR, load_dataset, train_model  # noqa: E402 - after the sys.path set-up above


def synth50(rows: int = 50_000):
    """The 50-feature regression set of the synth50-d6 model (100 trees, depth 6)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(rows, 50)).astype(np.float32)
    y = X[:, :10] @ rng.normal(size=10) + np.sin(X[:, 10] * X[:, 11]) + 0.1 * rng.normal(size=rows)
    return X, y


def model(name: str, train_rows: int):
    """(booster, X float32) of a benchmark-grid model ("fashion_mnist-medium") or synth50-d6."""
    import xgboost as xgb
    if name == "synth50-d6":
        X, y = synth50()
        path = MODEL_DIR / "synth50-d6.ubj"
        bst = xgb.Booster()
        if path.exists():
            bst.load_model(path)
        else:
            MODEL_DIR.mkdir(parents=True, exist_ok=True)
            bst = xgb.train({"max_depth": 6, "eta": 0.1, "tree_method": "hist", "device": "cuda"},
                            xgb.DMatrix(X, label=y), num_boost_round=100)
            bst.save_model(path)
        return bst, X
    data, size = name.rsplit("-", 1)
    X, y, objective, num_class, _ = load_dataset(data, train_rows)
    bst, _ = train_model(data, size, X, y, objective, num_class, "cuda")
    return bst, X


def paths_of(bst, M: int):
    import shap
    from hitml.kernels.treeshap import extract_paths
    ens = shap.TreeExplainer(bst).model
    return extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                         ens.values, ens.node_sample_weight, ens.base_offset, n_features=M,
                         input_dtype=ens.input_dtype)


def median_s(fn, repeats: int, sync) -> tuple[float, float]:
    times = []
    for _ in range(repeats):
        sync()
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times)), float(np.min(times))


def phases(cp, gpu, ps, Xt, nbytes: int, repeats: int) -> dict:
    """Each phase of the NumPy path alone (seconds, median)."""
    sync = cp.cuda.Device().synchronize
    out = {}
    X32 = np.ascontiguousarray(Xt, dtype=np.float32)
    out["upload_cupy_s"] = median_s(lambda: cp.asarray(X32), repeats, sync)[0]
    Xg = cp.asarray(X32)
    out["cupy_in_out_s"] = median_s(lambda: gpu.shap_values(ps, Xg, progress=False), repeats, sync)[0]
    try:                                             # the fixed-point conversion pass alone (fixed-point engines)
        from hitml.kernels.treeshap import _gpu_core as core
        pk = gpu.packed_paths(ps)
        scale = core.fixed_scale(core.bound_of(pk))
        phi = cp.zeros(nbytes // 8, dtype=cp.float64)
        out["fixed_to_double_s"] = median_s(lambda: core.finish(phi, scale), repeats, sync)[0]
    except Exception as exc:
        out["fixed_to_double_s"] = None
        out["fixed_to_double_error"] = f"{type(exc).__name__}: {exc}"
    src = cp.random.default_rng(0).standard_normal(nbytes // 8)
    mem = cp.cuda.alloc_pinned_memory(src.nbytes)
    pinned = np.frombuffer(mem, np.float64, src.size)
    out["d2h_pinned_s"] = median_s(lambda: src.get(out=pinned), repeats, sync)[0]
    reused = np.empty(src.size)
    reused[:] = 0.0
    out["d2h_pageable_reused_s"] = median_s(lambda: src.get(out=reused), repeats, sync)[0]
    out["d2h_pageable_fresh_s"] = median_s(lambda: src.get(), repeats, sync)[0]
    out["host_copy_fresh_1t_s"] = median_s(lambda: np.copy(pinned), repeats, sync)[0]
    out["host_copy_reused_1t_s"] = median_s(lambda: np.copyto(reused, pinned), repeats, sync)[0]
    try:
        from hitml.kernels import device
        if hasattr(device, "host_copy"):
            out["host_copy_fresh_threads_s"] = median_s(lambda: device.host_copy(np.empty_like(pinned), pinned),
                                                        repeats, sync)[0]
            out["host_copy_reused_threads_s"] = median_s(lambda: device.host_copy(reused, pinned), repeats, sync)[0]
            t = time.perf_counter()
            a = device.pinned_empty((src.size,), np.float64, 1 << 40)
            out["pinned_alloc_first_s"] = time.perf_counter() - t
            del a
    except Exception as exc:
        out["host_copy_error"] = f"{type(exc).__name__}: {exc}"
    out["d2h_pinned_gbs"] = nbytes / out["d2h_pinned_s"] / 1e9
    return out


def profile_call(cp, fn) -> list:
    """Top host functions (own time) of one NumPy call."""
    cp.cuda.Device().synchronize()
    prof = cProfile.Profile()
    prof.enable()
    fn()
    cp.cuda.Device().synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(14)
    return [ln for ln in s.getvalue().splitlines() if ln.strip()][-16:]


def host_overhead(cp, fn, calls: int = 300) -> dict:
    """Per-call host and device time of ``fn`` (cupyx.profiler.benchmark) and its costliest host functions over
    ``calls`` calls (cProfile, own time): for small models, whose calls are bound by launches, not the GPU."""
    from cupyx.profiler import benchmark
    b = benchmark(fn, n_repeat=calls, n_warmup=10)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    cp.cuda.Device().synchronize()
    prof.disable()
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(22)
    return {"cpu_ms": float(np.median(b.cpu_times)) * 1e3, "gpu_ms": float(np.median(b.gpu_times)) * 1e3,
            "profile": [ln for ln in s.getvalue().splitlines() if ln.strip()][-24:]}


def adapter_s(cp, bst, Xt, repeats: int) -> dict:
    """shap_ext.TreeExplainer(backend="gpu").shap_values on float64 rows (the adapter's host work included)."""
    try:
        from hitml import shap_ext
        exp = shap_ext.TreeExplainer(bst, backend="gpu")
        X64 = Xt.astype(np.float64)
        fn = lambda: exp.shap_values(X64, check_additivity=False)   # noqa: E731 - the timed call, named where it is built
        fn()
        return {"adapter_float64_s": median_s(fn, repeats, cp.cuda.Device().synchronize)[0]}
    except Exception as exc:
        return {"adapter_error": f"{type(exc).__name__}: {exc}"}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--label", required=True)
    ap.add_argument("--models", default="fashion_mnist-medium:5000,synth50-d6:10000")
    ap.add_argument("--train-rows", type=int, default=50_000)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--phases", action="store_true")
    ap.add_argument("--adapter", action="store_true")
    ap.add_argument("--overhead", action="store_true", help="per-call host/device time and host profile")
    ap.add_argument("--json", required=True)
    args = ap.parse_args(argv)
    import cupy as cp
    from hitml.kernels.treeshap import gpu
    sync = cp.cuda.Device().synchronize
    res = {"label": args.label, "models": {}}
    for item in args.models.split(","):
        name, rows = item.split(":")
        bst, X = model(name, args.train_rows)
        Xt = X[np.random.RandomState(432).randint(0, len(X), int(rows))]
        ps = paths_of(bst, X.shape[1])
        fn = lambda: gpu.shap_values(ps, Xt, progress=False)   # noqa: E731 - the timed call, named where it is built
        first = fn()
        rec = {"rows": len(Xt), "out_bytes": int(first.nbytes), "sha256": hashlib.sha256(first.tobytes()).hexdigest()}
        del first
        fn()
        rec["numpy_s"], rec["numpy_min_s"] = median_s(fn, args.repeats, sync)
        Xg = cp.asarray(Xt)
        rec["cupy_s"] = median_s(lambda: gpu.shap_values(ps, Xg, progress=False), args.repeats, sync)[0]
        if args.phases:
            rec["phases"] = phases(cp, gpu, ps, Xt, rec["out_bytes"], args.repeats)
            rec["profile"] = profile_call(cp, fn)
        if args.adapter:
            rec.update(adapter_s(cp, bst, Xt, args.repeats))
        if args.overhead:
            rec["overhead_numpy"] = host_overhead(cp, fn)
            rec["overhead_cupy"] = host_overhead(cp, lambda: gpu.shap_values(ps, Xg, progress=False))
        rec["numpy_rows_per_s"] = len(Xt) / rec["numpy_s"]
        rec["cupy_rows_per_s"] = len(Xt) / rec["cupy_s"]
        res["models"][item] = rec
        print(args.label, item, f"numpy {rec['numpy_rows_per_s']:.4g} rows/s, cupy {rec['cupy_rows_per_s']:.4g}",
              flush=True)
        gpu.clear_cache()
    Path(args.json).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
