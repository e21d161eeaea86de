"""TreeSHAP benchmark on the GPUTreeShap paper's 12-model grid: our engines against shap, shap-cuda and XGBoost.

    python integration/bench_treeshap.py --device gpu --size small,medium --out docs/benchmarks
    python integration/bench_treeshap.py --device cpu --threads 1,16   (runs integration/bench_treeshap_cpu.py)

Models: XGBoost, 10 / 100 / 1000 rounds at depth 3 / 8 / 16, eta 0.01, on cal_housing and adult (real data from
data/) and covtype- and fashion_mnist-shaped synthetic data (those datasets are not available offline; training uses
at most --train-rows rows). SHAP values on --rows rows, interactions on --inter-rows rows. Slow anchors are timed
on fewer rows (the row count is recorded) and reported as rows/s. Writes JSON, markdown and a plot.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

sys.path.insert(0, str(ROOT / "integration"))
from _treeshap_common import (  # noqa: E402 - after the sys.path set-up above
    load_dataset,
    shap_cext,
    train_model,
    timed,
    xgb_contribs,
    timed_rows,
    versions,
    SIZES,
    DATASETS,
)
from _treeshap_report import write_outputs  # noqa: E402 - after the sys.path set-up above


# ----------------------------------------------------------------------------------------------------- engines
def our_paths(bst, M):
    """PathSet of an XGBoost booster, through shap's TreeEnsemble (the adapter's route)."""
    import shap
    from hitml.kernels.treeshap import extract_paths
    ens = shap.TreeExplainer(bst).model
    return extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                         ens.values, ens.node_sample_weight, ens.base_offset, n_features=M,
                         input_dtype=ens.input_dtype), ens


def shap_cuda_explainer(bst):
    try:
        from shap_cuda import GPUTreeExplainer
    except Exception as exc:  # not installed, or its CUDA extension did not load
        return None, f"{type(exc).__name__}: {exc}"
    try:
        return GPUTreeExplainer(bst), ""
    except Exception as exc:
        return None, f"{type(exc).__name__}: {exc}"


# --------------------------------------------------------------------------------------------------------- run
def train_rows_for(name: str, size: str, args) -> int:
    """Training rows of one grid model: --train-rows, or a --large-train-rows override for the large models."""
    if size == "large":
        for item in filter(None, args.large_train_rows.split(",")):
            key, rows = item.split("=")
            if key == name:
                return int(rows)
    return args.train_rows


def run_ours(fn, repeats: int, sync, light: bool):
    """(first-call seconds, median warm seconds) of our engine; light (large models): one warm call only."""
    t = time.perf_counter()
    fn()
    sync()
    first = time.perf_counter() - t
    times = []
    for _ in range(1 if light else repeats):
        t = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t)
    return first, float(np.median(times))


def _same(a, b) -> bool:
    """Identical shape and bytes (on the device for CuPy arrays)."""
    if hasattr(a, "get"):
        import cupy as cp
        return a.shape == b.shape and bool(cp.all(a.view(cp.uint64) == b.view(cp.uint64)))
    return a.shape == b.shape and a.tobytes() == b.tobytes()


def pinned_d2h_gbs(nbytes: int, repeats: int = 5) -> float:
    """Device-to-host bandwidth into pinned memory (GB/s, median), on an array of ``nbytes`` (up to 1 GB): with the
    output's bytes per row, the host-copy bound of a call with NumPy output."""
    import cupy as cp
    src = cp.ones(max(1, min(nbytes, 1 << 30) // 8))
    dst = np.frombuffer(cp.cuda.alloc_pinned_memory(src.nbytes), np.float64, src.size)
    times = []
    for _ in range(repeats + 1):
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        src.get(out=dst)
        times.append(time.perf_counter() - t)
    return src.nbytes / float(np.median(times[1:])) / 1e9


def determinism_ab(gpu, ps, Xt, Xi, sync, repeats: int) -> dict:
    """The cost of reproducible output: fixed-point sums (options.deterministic, the default) against double atomics,
    on the same rows in one process, alternating calls (median of ``repeats`` each); SHAP values and interactions,
    each with NumPy and with CuPy in/out. Also whether two calls gave the same bytes in each mode."""
    import cupy as cp
    out = {}
    for key, fn, X in (("shap", gpu.shap_values, Xt), ("shap_cupy", gpu.shap_values, cp.asarray(Xt)),
                       ("inter", gpu.interaction_values, Xi), ("inter_cupy", gpu.interaction_values, cp.asarray(Xi))):
        times, first, same = {True: [], False: []}, {}, {}
        for det in (True, False):          # warm-up; both modes share the packing, plan and tables
            gpu.options.deterministic = det
            first[det] = fn(ps, X, progress=False)
            same[det] = _same(first[det], fn(ps, X, progress=False))
        a, b = first[True], first[False]
        diff = max(float(abs(a[i:i + 50] - b[i:i + 50]).max()) for i in range(0, len(a), 50))  # bounded temporaries
        top = float(abs(a).max())
        del first, a, b
        for _ in range(repeats):
            for det in (True, False):
                gpu.options.deterministic = det
                sync()
                t = time.perf_counter()
                fn(ps, X, progress=False)
                sync()
                times[det].append(time.perf_counter() - t)
        gpu.options.deterministic = True
        out[key] = {"fixed_s": float(np.median(times[True])), "atomics_s": float(np.median(times[False])),
                    "same_bytes_fixed": same[True], "same_bytes_atomics": same[False], "max_abs_diff": diff,
                    "max_abs": top, "repeats": repeats}
    return out


def bench_model(name, size, args, data_cache):
    key = (name, train_rows_for(name, size, args))
    if key not in data_cache:
        data_cache[key] = load_dataset(name, key[1])
    X, y, objective, num_class, source = data_cache[key]
    light = size == "large"        # large models: one warm timing, variants on fewer rows
    t_model = time.perf_counter()
    deadline = t_model + args.model_budget if args.model_budget else None

    def stage(msg):
        print(f"  [{name}-{size} {time.perf_counter() - t_model:7.1f} s] {msg}", flush=True)
    M = X.shape[1]
    dev = "cuda" if args.device == "gpu" else "cpu"
    bst, train_s = train_model(name, size, X, y, objective, num_class, dev)
    stage(f"trained in {train_s:.1f} s ({len(X)} rows)")
    rng = np.random.RandomState(432)
    Xt = X[rng.randint(0, len(X), args.rows)]
    Xi = Xt[: args.inter_rows]
    rec = {"model": f"{name}-{size}", "dataset": source, "train_rows": len(X), "train_s": train_s,
           "trees": int(bst.num_boosted_rounds() * max(num_class, 1)), "features": M, "rows": len(Xt),
           "inter_rows": len(Xi)}
    t = time.perf_counter()
    ps, ens = our_paths(bst, M)
    rec["extract_s"] = time.perf_counter() - t
    rec["paths"] = int(ps.n_paths)
    rec["elements"] = int(len(ps.feature))
    stage(f"parsed + extracted {rec['paths']} paths in {rec['extract_s']:.1f} s")
    res = {}
    budget = args.anchor_budget
    if args.device == "gpu":
        import cupy as cp
        from hitml.kernels.treeshap import gpu
        sync = cp.cuda.Device().synchronize
        t = time.perf_counter()
        pk = gpu.packed_paths(ps)
        sync()
        rec["pack_s"] = time.perf_counter() - t
        rec["bins"], rec["utilisation"], rec["long_paths"] = pk.n_bins, pk.utilisation, pk.n_long
        gpu._CACHE.clear()
        # first call: packing + upload + compile-cached kernel
        rec["ours_first_s"], t_ours = run_ours(lambda: gpu.shap_values(ps, Xt, progress=False), args.repeats, sync,
                                               light)
        res["ours"] = (len(Xt), t_ours)
        stage(f"ours SHAP: {len(Xt) / t_ours:.3g} rows/s (first call {rec['ours_first_s']:.2f} s)")
        # the host-copy bound: the output's bytes per row over the pinned device-to-host bandwidth of this run
        rec["out_bytes_per_row"] = (M + 1) * max(num_class, 1) * 8
        rec["d2h_pinned_gbs"] = pinned_d2h_gbs(len(Xt) * rec["out_bytes_per_row"])
        rec["copy_bound_rows_per_s"] = rec["d2h_pinned_gbs"] * 1e9 / rec["out_bytes_per_row"]
        Xg = cp.asarray(Xt)
        rec["ours_cupy_in_out_s"] = run_ours(lambda: gpu.shap_values(ps, Xg, progress=False), args.repeats, sync,
                                             light)[1]
        rec["cupy_rows"] = len(Xt)
        del Xg
        stage(f"copy bound {rec['copy_bound_rows_per_s']:.3g} rows/s ({rec['d2h_pinned_gbs']:.3g} GB/s pinned), "
              f"CuPy in/out {len(Xt) / rec['ours_cupy_in_out_s']:.3g} rows/s")
        if args.shap_only:
            return shap_only_record(rec, res, bst, ps, Xt, run_anchor=lambda: gpu_anchors(bst, Xt, args, res, stage),
                                    accuracy=lambda run: accuracy_vs_xgb(gpu, ps, Xt, run, M, rec))
        res_i = {"ours": (len(Xi), run_ours(lambda: gpu.interaction_values(ps, Xi, progress=False), args.repeats,
                                            sync, False)[1])}      # --inter-rows rows: repeats even when large
        if args.ab_atomics:
            rec["determinism"] = determinism_ab(gpu, ps, Xt, Xi, sync, args.ab_repeats)
            stage(f"fixed point vs double atomics: {rec['determinism']}")
        # the plans those calls used: (variant, tables for paths of <= dmax elements, + extra of dmax + 1)
        rec["variant"] = list(gpu._planned(gpu.packed_paths(ps), "shap"))
        rec["inter_variant"] = list(gpu._planned(gpu.packed_paths(ps), "inter"))

        fresh = gpu.clear_cache                   # each variant plans and builds its tables from a clean cache
        # the SHAP kernel variants, timed on the same rows (large models: on --variant-rows rows, once)
        Xv = Xt[: args.variant_rows] if light else Xt
        rec["variant_rows"] = len(Xv)
        defaults = (gpu.options.shap_row_kernel, gpu.options.inter_row_kernel)
        rec["variants"] = {}              # keys as for interactions below, and "smem"
        shap_variants = () if args.skip_variants else (
            ("dp", "dp", "dp"), ("quad", "dp", "quadrature"), ("smem", "smem", "dp"), ("table", "table", "quadrature"),
            ("split_dp", "split", "dp"), ("split", "split", "quadrature"))
        for key, v, row in shap_variants:
            gpu.options.shap_variant, gpu.options.shap_row_kernel = v, row
            fresh()
            if gpu._shap_variant(pk, M, num_class)[0] == v:       # not one that falls back to another
                rec["variants"][key] = run_ours(lambda: gpu.shap_values(ps, Xv, progress=False), args.repeats, sync,
                                                light)[1]
        gpu.options.shap_variant, gpu.options.shap_row_kernel = "auto", defaults[0]
        # the interaction variants on the interaction rows (auto's choice and what it falls back from)
        # keys: (options.inter_variant, options.inter_row_kernel) -> "dp" / "quad" (per row only), "table", "split_dp" / "split"
        rec["inter_variants"] = {}
        inter_variants = () if args.skip_variants else (
            ("dp", "dp", "dp"), ("quad", "dp", "quadrature"), ("table", "table", "quadrature"),
            ("split_dp", "split", "dp"), ("split", "split", "quadrature"))
        for key, v, row in inter_variants:
            gpu.options.inter_variant, gpu.options.inter_row_kernel = v, row
            fresh()
            if gpu._inter_plan(pk)[0] == v:
                rec["inter_variants"][key] = run_ours(lambda: gpu.interaction_values(ps, Xi, progress=False),
                                                      args.repeats, sync, False)[1]
        gpu.options.inter_variant, gpu.options.inter_row_kernel = "auto", defaults[1]
        gpu.options.shap_sums = "direct"          # every term added to the output, against auto's block sums
        fresh()
        rec["direct_sums_s"] = run_ours(lambda: gpu.shap_values(ps, Xv, progress=False), args.repeats, sync, light)[1]
        gpu.options.shap_sums = "auto"
        stage(f"ours interactions + variants done: {rec['variants']}")
        fresh()                                   # free our cached packings and tables for the anchors
        # GPU anchors
        run = gpu_anchors(bst, Xt, args, res, stage)
        run_i = xgb_contribs(bst, "cuda", args.threads, interactions=True)
        res_i["xgb_gpu"] = timed_rows(run_i, Xi, len(Xi), budget, args.repeats, start=1 if light else None)
        stage(f"xgb_gpu: {res['xgb_gpu'][0] / res['xgb_gpu'][1]:.3g} rows/s, interactions "
              f"{res_i['xgb_gpu'][0] / res_i['xgb_gpu'][1]:.3g} rows/s")
        exp = res.pop("_shap_cuda_explainer", None)
        if exp is not None:
            r = res["shap_cuda"][0] / res["shap_cuda"][1]
            if light and (M + 1) / r > budget:
                rec.setdefault("skipped", []).append(f"shap_cuda interactions: predicted {(M + 1) / r:.0f} s/row")
            else:
                res_i["shap_cuda"] = timed_rows(exp.shap_interaction_values, Xi, len(Xi), budget, args.repeats,
                                                start=1 if light else None)
            stage("shap_cuda done")
        else:
            rec["shap_cuda_error"] = res.pop("_shap_cuda_error")
        accuracy_vs_xgb(gpu, ps, Xt, run, M, rec)
    else:
        from hitml.kernels.treeshap import cpu
        cpu.shap_values(ps, Xt[:10], progress=False)   # JIT warm-up
        res["ours"] = timed_rows(lambda A: cpu.shap_values(ps, A, progress=False), Xt, len(Xt), budget,
                                 args.repeats)
        res_i = {"ours": timed_rows(lambda A: cpu.interaction_values(ps, A, progress=False), Xi, len(Xi), budget,
                                    args.repeats)}
    # CPU anchors (both modes). Large models: start at one row (a covtype-large row takes seconds there), skip an
    # interaction anchor whose predicted one-row time (its SHAP row time x (M + 1)) exceeds the anchor budget, and
    # skip what is left once the model's --model-budget is spent; skipped anchors are listed in the record.
    first = 1 if light else None
    rec.setdefault("skipped", [])

    def anchor(table, key, fn, X_, repeats, shap_rate=None):
        if deadline is not None and time.perf_counter() > deadline:
            rec["skipped"].append(f"{key}: model budget spent")
            return
        if light and shap_rate is not None and (M + 1) / shap_rate > budget:
            rec["skipped"].append(f"{key} interactions: predicted {(M + 1) / shap_rate:.0f} s for one row")
            return
        table[key] = timed_rows(fn, X_, len(X_), budget, repeats, start=first)
        stage(f"{key} {'interactions' if table is res_i else 'SHAP'}: {table[key][0] / table[key][1]:.3g} rows/s")

    anchor(res, "xgb_cpu", xgb_contribs(bst, "cpu", args.threads), Xt, args.repeats)
    anchor(res, "shap_cpu", lambda A: shap_cext(ens, A), Xt, 1)
    rate = {k: n / t for k, (n, t) in res.items()}
    anchor(res_i, "xgb_cpu", xgb_contribs(bst, "cpu", args.threads, True), Xi, args.repeats, rate.get("xgb_cpu", 0))
    anchor(res_i, "shap_cpu", lambda A: shap_cext(ens, A, True), Xi, 1, rate.get("shap_cpu", 0))
    for key, table in (("shap", res), ("inter", res_i)):
        rec[key] = {k: {"rows": n, "seconds": s, "rows_per_s": n / s} for k, (n, s) in table.items()}
        anchors = {k: v for k, v in rec[key].items() if k != "ours"}
        best = max(anchors, key=lambda k: anchors[k]["rows_per_s"])
        rec[key + "_fastest_anchor"] = best
        rec[key + "_ratio"] = anchors[best]["rows_per_s"] / rec[key]["ours"]["rows_per_s"]   # our time / theirs
    return rec


def gpu_anchors(bst, Xt, args, res, stage):
    """Time XGBoost's GPU pred_contribs and shap-cuda's SHAP values into ``res``; returns XGBoost's GPU runner (the
    shap-cuda explainer, or why there is none, is left in ``res`` under private keys for the interaction anchor)."""
    run = xgb_contribs(bst, "cuda", args.threads)
    res["xgb_gpu"] = timed_rows(run, Xt, len(Xt), args.anchor_budget, args.repeats)
    exp, why = shap_cuda_explainer(bst)
    if exp is not None:
        stage("shap_cuda explainer built")
        res["shap_cuda"] = timed_rows(lambda A: exp.shap_values(A, check_additivity=False), Xt, len(Xt),
                                      args.anchor_budget, args.repeats)
        res["_shap_cuda_explainer"] = exp
    else:
        res["_shap_cuda_error"] = why
    stage(f"xgb_gpu: {res['xgb_gpu'][0] / res['xgb_gpu'][1]:.3g} rows/s")
    return run


def accuracy_vs_xgb(gpu, ps, Xt, run, M: int, rec: dict) -> None:
    """Our values against XGBoost's GPU pred_contribs on 200 rows (float32 output there)."""
    ours = gpu.shap_values(ps, Xt[:200], progress=False)
    ref = run(Xt[:200]).reshape(ours.shape[0], -1, M + 1)
    rec["max_abs_diff_vs_xgb"] = float(np.abs(ours.transpose(0, 2, 1) - ref).max())


def shap_only_record(rec, res, bst, ps, Xt, run_anchor, accuracy) -> dict:
    """--shap-only: ours (NumPy and CuPy in/out, the copy bound) and the GPU anchors for SHAP values; main() merges
    it into the model's earlier record, whose other fields (interactions, variants, CPU anchors) stay."""
    run = run_anchor()
    res.pop("_shap_cuda_explainer", None)
    if "_shap_cuda_error" in res:
        rec["shap_cuda_error"] = res.pop("_shap_cuda_error")
    accuracy(run)
    rec["shap"] = {k: {"rows": n, "seconds": s, "rows_per_s": n / s} for k, (n, s) in res.items()}
    rec["shap_only"] = True
    return rec


def merge_shap_only(old: dict | None, new: dict) -> dict:
    """The earlier record of a model with the SHAP fields of a --shap-only run (GPU anchors rerun; CPU anchors kept
    from the earlier run, where it had them); the fastest anchor and ratio recomputed."""
    if old is None:
        old = {}
    rec = {**old, **{k: v for k, v in new.items() if k != "shap"}}
    rec["shap"] = {**{k: v for k, v in old.get("shap", {}).items() if k in ("xgb_cpu", "shap_cpu")}, **new["shap"]}
    anchors = {k: v for k, v in rec["shap"].items() if k != "ours"}
    best = max(anchors, key=lambda k: anchors[k]["rows_per_s"])
    rec["shap_fastest_anchor"] = best
    rec["shap_ratio"] = anchors[best]["rows_per_s"] / rec["shap"]["ours"]["rows_per_s"]
    return rec


def crossover(args, data_cache):
    """Row counts where our GPU engine starts to beat the fastest CPU anchor (cal_housing-medium, as in the paper)."""
    import cupy as cp
    from hitml.kernels.treeshap import gpu
    key = ("cal_housing", args.train_rows)
    if key not in data_cache:
        data_cache[key] = load_dataset(*key)
    X, y, objective, num_class, _ = data_cache[key]
    bst, _ = train_model("cal_housing", "medium", X, y, objective, num_class, "cuda")
    ps, ens = our_paths(bst, X.shape[1])
    sync = cp.cuda.Device().synchronize
    xcpu = xgb_contribs(bst, "cpu", args.threads)
    rows = [1, 3, 10, 30, 100, 300, 1000, 3000, 10000]
    out = []
    for n in rows:
        A = X[:n]
        g = timed(lambda: gpu.shap_values(ps, A, progress=False), 5, sync)
        c = timed(lambda: xcpu(A), 5)
        out.append({"rows": n, "gpu_s": g, "xgb_cpu_s": c})
    first = next((r["rows"] for r in out if r["gpu_s"] < r["xgb_cpu_s"]), None)
    return {"model": "cal_housing-medium", "series": out, "crossover_rows": first}


def profile(model: str, args):
    """Two SHAP (or, with --profile-what inter, interaction) calls on --rows rows of a model, for Nsight Compute
    (ncu --kernel-name regex:shap ...)."""
    from hitml.kernels.treeshap import gpu
    name, size = model.rsplit("-", 1)
    X, y, objective, num_class, _ = load_dataset(name, args.train_rows)
    bst, _ = train_model(name, size, X, y, objective, num_class, "cuda")
    ps, _ = our_paths(bst, X.shape[1])
    Xt = X[np.random.RandomState(432).randint(0, len(X), args.rows)]
    fn = gpu.interaction_values if args.profile_what == "inter" else gpu.shap_values
    for _ in range(2):
        fn(ps, Xt, progress=False)


# ------------------------------------------------------------------------------------------- output control
def _oc_float32(args, rng) -> dict:
    """float32 against float64 NumPy output of explainer.shap_values on the wide multiclass model (fashion_mnist
    shape, 784 features x 10 classes), alternating calls on the same rows; float32 must be float64 rounded."""
    import cupy as cp

    from hitml.shap_ext import TreeExplainer
    X, y, objective, num_class, source = load_dataset("fashion_mnist", args.train_rows)
    bst, _ = train_model("fashion_mnist", args.oc_size, X, y, objective, num_class, "cuda")
    ex = TreeExplainer(bst, backend="gpu", progress=False)
    Xt = X[rng.randint(0, len(X), args.oc_rows)]
    f64 = ex.shap_values(Xt, check_additivity=False)
    f32 = ex.shap_values(Xt, check_additivity=False, dtype=np.float32)
    exact = f32.tobytes() == f64.astype(np.float32).tobytes()
    out_bytes = f64.nbytes // len(Xt)
    del f64, f32
    sync = cp.cuda.Device().synchronize
    times = {np.float64: [], np.float32: []}
    for _ in range(args.repeats + 2):
        for dt in (np.float64, np.float32):
            sync()
            t = time.perf_counter()
            ex.shap_values(Xt, check_additivity=False, dtype=dt)
            sync()
            times[dt].append(time.perf_counter() - t)
    t64, t32 = (float(np.median(times[dt][1:])) for dt in (np.float64, np.float32))
    from hitml.shap_ext import _outputs
    default = _outputs.CHUNK_BYTES
    by_chunk = {}
    for mib in (64, 1024):                 # the float32 pipeline's step against the default chunk
        _outputs.CHUNK_BYTES = mib << 20
        ex.shap_values(Xt, check_additivity=False, dtype=np.float32)
        by_chunk[mib] = []
        for _ in range(args.repeats):
            sync()
            t = time.perf_counter()
            ex.shap_values(Xt, check_additivity=False, dtype=np.float32)
            sync()
            by_chunk[mib].append(time.perf_counter() - t)
        by_chunk[mib] = float(np.median(by_chunk[mib]))
    _outputs.CHUNK_BYTES = default
    d2h = pinned_d2h_gbs(len(Xt) * out_bytes)
    return {"model": f"fashion_mnist-{args.oc_size}", "dataset": source, "rows": len(Xt), "features": X.shape[1],
            "classes": num_class, "float64_bytes_per_row": out_bytes, "float32_bytes_per_row": out_bytes // 2,
            "float64_s": t64, "float32_s": t32, "float64_rows_per_s": len(Xt) / t64,
            "float32_rows_per_s": len(Xt) / t32, "speedup": t64 / t32, "float32_is_float64_rounded": exact,
            "d2h_pinned_gbs": d2h, "float64_copy_bound_rows_per_s": d2h * 1e9 / out_bytes,
            "float32_copy_bound_rows_per_s": d2h * 2e9 / out_bytes, "repeats": args.repeats + 1,
            "chunk_mib": default >> 20, "float32_s_by_chunk_mib": by_chunk,
            "pinned_cap_bytes": int(_pinned_cap()), "target_speedup": 1.8}


def _pinned_cap() -> int:
    from hitml.kernels.treeshap._gpu_core import options
    return options.pinned_bytes


def _oc_stream(args) -> dict:
    """The mean |interaction| matrix over args.oc_stream_rows synthetic rows x 50 features of an XGBoost model of
    100 trees of depth 6, the rows generated on the GPU block by block (cupy.random, one seed per block) and passed
    as an iterator: the GPU holds one block and one chunk of values at a time. Exactness: the same call on the first
    100,000 rows against np.abs(full interaction values).mean(0) on the device."""
    import cupy as cp
    import xgboost as xgb

    from hitml.shap_ext import TreeExplainer
    M, block = 50, args.oc_block_rows
    rng = np.random.default_rng(50)
    Xtr = rng.normal(size=(200_000, M)).astype(np.float32)
    ytr = (Xtr[:, 0] * Xtr[:, 1] + np.sin(Xtr[:, 2]) * Xtr[:, 3] + Xtr[:, 4:10].sum(1)
           + 0.5 * Xtr[:, 10] * Xtr[:, 11] * Xtr[:, 12] + rng.normal(scale=0.1, size=len(Xtr)))
    t = time.perf_counter()
    bst = xgb.train({"max_depth": 6, "eta": 0.1, "tree_method": "hist", "device": "cuda"},
                    xgb.DMatrix(Xtr, label=ytr), num_boost_round=100)
    train_s = time.perf_counter() - t
    ex = TreeExplainer(bst, backend="gpu", progress=False)
    chunk_bytes = args.oc_chunk_mib << 20
    chunk_rows = chunk_bytes // ((M + 1) ** 2 * 8)

    def blocks(n):
        for b, a in enumerate(range(0, n, block)):
            yield cp.random.RandomState(1000 + b).standard_normal((min(block, n - a), M), dtype=cp.float32)

    sync = cp.cuda.Device().synchronize
    check_rows = 100_000
    got = ex.global_interaction_values(blocks(check_rows), chunk_bytes=chunk_bytes).values    # warm-up as well
    full = ex.shap_interaction_values(cp.concatenate(list(blocks(check_rows))))
    ref = cp.abs(full).mean(0).get()
    del full
    rel_diff = float(np.max(np.abs(got - ref) / np.maximum(np.abs(ref), np.finfo(float).tiny)))
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    held0 = pool.total_bytes()
    sync()
    t = time.perf_counter()
    ex.global_interaction_values(blocks(args.oc_probe_rows), chunk_bytes=chunk_bytes)
    sync()
    probe_s = time.perf_counter() - t
    predicted = probe_s * args.oc_stream_rows / args.oc_probe_rows
    sync()
    t = time.perf_counter()                # the same probe in chunks four times as large
    ex.global_interaction_values(blocks(args.oc_probe_rows), chunk_bytes=4 * chunk_bytes)
    sync()
    probe4_s = time.perf_counter() - t
    from hitml.kernels.treeshap import _gpu_core, gpu
    pk = gpu.packed_paths(ex.paths)
    block_sums = gpu.options.shap_sums != "direct" and _gpu_core.inter_block_fits(pk, M, 1)
    rec = {"model": "synthetic 50 features, XGBoost 100 trees depth 6", "train_rows": len(Xtr), "train_s": train_s,
           "kernel": "inter_table_block (block sums)" if block_sums else "inter_table (direct sums)",
           "tables_bytes": int(sum(t[1].nbytes for t in pk.tables.values())), "block_bytes": block * M * 4,
           "features": M, "rows": args.oc_stream_rows, "block_rows": block, "chunk_rows": int(chunk_rows),
           "chunk_bytes": chunk_bytes, "probe_rows": args.oc_probe_rows, "probe_s": probe_s,
           "probe_s_chunks_x4": probe4_s,
           "predicted_s": predicted, "check_rows": check_rows, "max_rel_diff_vs_full": rel_diff,
           "exact_rtol_1e-12": rel_diff <= 1e-12, "target_s": 60.0,
           "paths": int(ex.paths.n_paths)}
    rows = args.oc_stream_rows
    if predicted > args.oc_max_s:          # within the device time at hand: fewer rows, the rate extrapolated
        rows = args.oc_fallback_rows
        rec["reduced"] = (f"predicted {predicted:.0f} s > --oc-max-s {args.oc_max_s:.0f}: {rows:,} rows timed, "
                          f"{args.oc_stream_rows:,} extrapolated")
    pool.free_all_blocks()
    sync()
    t = time.perf_counter()
    g = ex.global_interaction_values(blocks(rows), chunk_bytes=chunk_bytes, top_k=5)
    sync()
    rec["timed_rows"] = rows
    rec["seconds"] = time.perf_counter() - t
    rec["rows_per_s"] = rows / rec["seconds"]
    rec["seconds_for_rows"] = args.oc_stream_rows / rec["rows_per_s"]
    rec["gpu_pool_held_bytes"] = int(pool.total_bytes() - held0)      # blocks CuPy's pool kept: the peak in use
    rec["n_rows"] = int(g.n_rows)
    rec["top_pairs"] = [[a, b, float(v)] for a, b, v in g.top_interactions.itertuples(index=False)]
    return rec


def output_control(args) -> dict:
    """--output-control: the two output-control rows on one GPU, JSON and markdown in --out."""
    from hitml.kernels.device import device_name
    rep = {"device": device_name(), "versions": versions(), "args": vars(args)}
    rep["float32_output"] = _oc_float32(args, np.random.RandomState(432))
    print(json.dumps(rep["float32_output"]), flush=True)
    rep["mean_abs_interaction_stream"] = _oc_stream(args)
    print(json.dumps(rep["mean_abs_interaction_stream"]), flush=True)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "treeshap_gpu_output_control.json").write_text(json.dumps(rep, indent=1))
    return write_output_control(rep, out)


def write_output_control(rep: dict, out: Path) -> dict:
    """treeshap_gpu_output_control.md in ``out`` from the report ``rep``."""
    f, s = rep["float32_output"], rep["mean_abs_interaction_stream"]
    lines = ["# TreeSHAP output control (GPU)", "", f"Device: {rep['device']}; versions: "
             + ", ".join(f"{k} {v}" for k, v in rep["versions"].items() if v), "",
             "## float32 against float64 NumPy output (explainer.shap_values(X, dtype=...), check_additivity=False)",
             "", f"{f['model']} ({f['dataset']}): {f['features']} features x {f['classes']} classes, {f['rows']} rows, "
             f"median of {f['repeats']} alternating calls.", "",
             "| output | bytes/row | seconds | rows/s | host-copy bound rows/s |", "| --- | --- | --- | --- | --- |",
             f"| float64 | {f['float64_bytes_per_row']} | {f['float64_s']:.4f} | {f['float64_rows_per_s']:.3g} | "
             f"{f['float64_copy_bound_rows_per_s']:.3g} |",
             f"| float32 | {f['float32_bytes_per_row']} | {f['float32_s']:.4f} | {f['float32_rows_per_s']:.3g} | "
             f"{f['float32_copy_bound_rows_per_s']:.3g} |", "",
             f"float32 / float64 rate: **{f['speedup']:.2f}x** (target >= {f['target_speedup']}x); float32 output equals "
             f"the float64 output rounded to float32: {f['float32_is_float64_rounded']}. Chunks of "
             f"{f['chunk_mib']} MiB of float64 values (the default); float32 seconds with other chunk sizes: "
             + ", ".join(f"{k} MiB {v:.4f}" for k, v in f["float32_s_by_chunk_mib"].items()) + ".", "",
             _pinned_note(f), "",
             "## Mean |interaction| matrix, streamed", "",
             f"{s['model']} ({s['paths']} paths), trained on {s['train_rows']} synthetic rows. The rows explained are "
             f"synthetic, standard normal float32, generated on the GPU in blocks of {s['block_rows']} rows and passed "
             f"to explainer.global_interaction_values as an iterator; chunks of {s['chunk_rows']} rows "
             f"({s['chunk_bytes'] >> 20} MiB of float64 interaction values each).", ""]
    lines += [f"- {s['timed_rows']:,} rows in **{s['seconds']:.1f} s** ({s['rows_per_s']:.3g} rows/s); "
              f"{s['rows']:,} rows: **{s['seconds_for_rows']:.1f} s** "
              f"{'measured' if s['timed_rows'] == s['rows'] else 'at that rate (' + s['reduced'] + ')'}; target <= "
              f"{s['target_s']:.0f} s. GPU memory CuPy's pool held for the run: "
              f"{s['gpu_pool_held_bytes'] / 2**20:.0f} MiB; the bound, whatever the row count: one chunk of values "
              f"({s['chunk_bytes'] >> 20} MiB) and its |values| sums, one block of rows "
              f"({s['block_bytes'] / 2**20:.0f} MiB) and the model's interaction tables "
              f"({s['tables_bytes'] / 2**20:.0f} MiB).",
              f"- kernel: {s['kernel']} (`gpu.options.shap_sums` auto)."]
    lines += [f"- probe: {s['probe_rows']:,} rows in {s['probe_s']:.2f} s (predicts {s['predicted_s']:.1f} s for "
              f"{s['rows']:,}); in chunks four times as large: {s['probe_s_chunks_x4']:.2f} s.",
              f"- exactness on the first {s['check_rows']:,} rows against np.abs(full interaction values).mean(0): "
              f"largest relative difference {s['max_rel_diff_vs_full']:.2e} (within 1e-12: {s['exact_rtol_1e-12']}).",
              ""]
    (out / "treeshap_gpu_output_control.md").write_text("\n".join(lines))
    print("\n".join(lines))
    return rep


FAMILY_MODELS = ("lgbm-500x255", "lgbm-1000x31", "lgbm-multiclass10", "rf-depth30", "et-unlimited",
                 "xgb-lossguide-1024")      # the --families rows, in the report's order


def families(args) -> dict:
    """--families: LightGBM, scikit-learn forests and leafy XGBoost against shap-cuda and XGBoost's GPU
    pred_contribs (``_treeshap_families.py``); JSON and markdown in --out, rows of other models kept with --merge."""
    import _treeshap_families as fam

    from hitml.kernels.device import device_name
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "treeshap_gpu_families.json"
    recs = fam.run(args.family_models.split(","), args.rows, args.inter_rows, args.family_features,
                   args.family_train, args.threads, log=lambda *x: print(*x, file=sys.stderr, flush=True),
                   xgb_contribs=xgb_contribs)
    import xgboost
    ver = versions(("numpy", "xgboost", "lightgbm", "sklearn", "shap", "shap_cuda", "cupy", "numba"))
    ver["xgboost"] += " (CUDA build)" if xgboost.build_info().get("USE_CUDA") else " (CPU build)"
    for r in recs:                                        # merged rows may come from runs with other packages
        r["versions"] = ver
    rep = {"device": device_name(), "threads": args.threads, "versions": ver, "rows": args.rows,
           "inter_rows": args.inter_rows, "features": args.family_features, "train": args.family_train,
           "models": recs}
    if args.merge and path.exists():
        old = json.loads(path.read_text())
        if old.get("device") == rep["device"] and "models" in old:     # only rows measured on the same device kind
            new = {r["model"] for r in recs}
            merged = [r for r in old["models"] if r["model"] not in new] + recs
            rep["models"] = sorted(merged, key=lambda r: FAMILY_MODELS.index(r["model"])
                                   if r["model"] in FAMILY_MODELS else len(FAMILY_MODELS))
    path.write_text(json.dumps(rep, indent=1))
    md = fam.report(rep["models"], rep["device"], rep["versions"], args.rows, args.inter_rows, args.family_features,
                    args.family_train)
    (out / "treeshap_gpu_families.md").write_text(md)
    print(md)
    return rep


def _pinned_note(f: dict) -> str:
    """Where each output went: a NumPy output goes into the engine's page-locked pool (reused by later calls) where
    it fits ``options.pinned_bytes``, else into a plain NumPy array (its pages touched for the first time and
    copied through pageable memory: a slower copy)."""
    cap = f.get("pinned_cap_bytes")
    if cap is None:
        return ""
    where = {dt: f["rows"] * f[f"{dt}_bytes_per_row"] <= cap for dt in ("float64", "float32")}
    text = "; ".join(f"{dt}: {f['rows'] * f[f'{dt}_bytes_per_row'] / 2**30:.2f} GiB, "
                     f"{'page-locked pool' if fits else 'a plain NumPy array (beyond the pool)'}"
                     for dt, fits in where.items())
    note = f"Output of one call ({text}; pool cap `options.pinned_bytes` = {cap / 2**30:.0f} GiB)."
    if where["float32"] and not where["float64"]:
        note += (" Here float32 gains twice: half the bytes, and an output that fits the page-locked pool where the "
                 "float64 one does not. Where both fit (fewer rows), the ratio is that of the bytes alone, below 2x "
                 "(the compute does not halve): run with a smaller --oc-rows to see it.")
    return note


def main(argv=None):
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--device=cpu" in argv or any(a == "--device" and b == "cpu" for a, b in zip(argv, argv[1:])):
        from integration.bench_treeshap_cpu import main as cpu_main      # the CPU engine's own benchmark
        return cpu_main([a for a in argv if a not in ("--device=cpu", "--device", "cpu")])
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", default="small,medium", help="small|medium|large|all, comma separated")
    ap.add_argument("--datasets", default=",".join(DATASETS))
    ap.add_argument("--device", choices=("cpu", "gpu"), default="gpu")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--inter-rows", type=int, default=200)
    ap.add_argument("--train-rows", type=int, default=50_000)
    ap.add_argument("--large-train-rows", default="covtype=20000,fashion_mnist=70000",
                    help="per-dataset training rows for the large models (leaves per tree near the paper's Table 3)")
    ap.add_argument("--variant-rows", type=int, default=2000, help="rows for the variant timings of large models")
    ap.add_argument("--model-budget", type=float, default=None,
                    help="seconds per model after which the remaining CPU anchors are skipped")
    ap.add_argument("--merge", action="store_true", help="add to (replace models in) the existing JSON of this tag")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--anchor-budget", type=float, default=20.0, help="seconds per slow anchor measurement")
    ap.add_argument("--crossover", action="store_true")
    ap.add_argument("--ab-atomics", action="store_true",
                    help="also time our GPU engine with double atomics (options.deterministic=False), alternating")
    ap.add_argument("--ab-repeats", type=int, default=5, help="alternating calls per mode for --ab-atomics")
    ap.add_argument("--skip-variants", action="store_true", help="skip the kernel-variant timings")
    ap.add_argument("--shap-only", action="store_true",
                    help="GPU: only our SHAP values (NumPy and CuPy in/out, the host-copy bound) and the GPU anchors; "
                         "merged into the earlier records of the tag (interactions, variants, CPU anchors kept)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ap.add_argument("--tag", default=None)
    ap.add_argument("--rewrite", default=None, help="only rewrite the markdown/plot from an existing JSON report")
    ap.add_argument("--profile", default=None, help="only run one model's SHAP twice (for ncu), e.g. cal_housing-medium")
    ap.add_argument("--profile-what", choices=("shap", "inter"), default="shap")
    ap.add_argument("--output-control", action="store_true",
                    help="only the output-control rows (float32 output, the streamed mean |interaction| matrix)")
    ap.add_argument("--oc-size", default="small", help="fashion_mnist model size for the float32 row")
    ap.add_argument("--oc-rows", type=int, default=100_000,
                    help="rows for the float32 row (20,000 rows take 15-30 ms a call: too short to time steadily)")
    ap.add_argument("--oc-stream-rows", type=int, default=100_000_000)
    ap.add_argument("--oc-probe-rows", type=int, default=2_000_000, help="rows timed first to predict the stream")
    ap.add_argument("--oc-max-s", type=float, default=240.0,
                    help="time --oc-fallback-rows instead of the full stream where the probe predicts it slower")
    ap.add_argument("--oc-fallback-rows", type=int, default=20_000_000)
    ap.add_argument("--oc-block-rows", type=int, default=1_000_000, help="rows generated on the GPU per block")
    ap.add_argument("--oc-chunk-mib", type=int, default=256, help="chunk_bytes of the stream, in MiB")
    ap.add_argument("--families", action="store_true",
                    help="only the model-family rows (LightGBM, scikit-learn forests, lossguide XGBoost)")
    ap.add_argument("--family-models", default=",".join(FAMILY_MODELS))
    ap.add_argument("--family-features", type=int, default=50)
    ap.add_argument("--family-train", type=int, default=100_000)
    args = ap.parse_args(argv)
    if args.families:
        return families(args)
    if args.output_control:
        return output_control(args)
    if args.profile:
        return profile(args.profile, args)
    if args.rewrite and Path(args.rewrite).name == "treeshap_gpu_output_control.json":
        return write_output_control(json.loads(Path(args.rewrite).read_text()), Path(args.rewrite).parent)
    if args.rewrite:
        rep = json.loads(Path(args.rewrite).read_text())
        rep["models"] = [r for r in rep["models"] if "error" not in r]
        return write_outputs(rep, Path(args.rewrite).parent, Path(args.rewrite).stem.removeprefix("treeshap_"))
    sizes = list(SIZES) if args.size == "all" else args.size.split(",")
    import numba
    numba.set_num_threads(min(args.threads, numba.config.NUMBA_NUM_THREADS))
    from hitml.kernels.device import device_name
    report = {"device": device_name() if args.device == "gpu" else platform.processor() or "cpu",
              "threads": args.threads, "versions": versions(), "args": vars(args), "models": []}
    data_cache = {}
    tag = args.tag or f"{args.device}_{'_'.join(sizes)}"
    prior = Path(args.out) / f"treeshap_{tag}.json"
    if args.merge and prior.exists():
        names = {f"{n}-{s}" for s in sizes for n in args.datasets.split(",")}
        old = json.loads(prior.read_text())
        report["models"] = [r for r in old["models"] if args.shap_only or r["model"] not in names]
        if old.get("notes"):
            report["notes"] = old["notes"]     # provenance of the kept records; edit for the new ones
    for size in sizes:
        for name in args.datasets.split(","):
            t = time.perf_counter()
            try:
                rec = bench_model(name, size, args, data_cache)
            except Exception as exc:
                import traceback
                traceback.print_exc()
                rec = {"model": f"{name}-{size}", "error": f"{type(exc).__name__}: {exc}"}
            rec["bench_s"] = time.perf_counter() - t
            if rec.get("shap_only"):
                rec = merge_shap_only(next((r for r in report["models"] if r["model"] == rec["model"]), None), rec)
                report["models"] = [r for r in report["models"] if r["model"] != rec["model"]]
            report["models"].append(rec)
            print(json.dumps({k: v for k, v in rec.items() if k in ("model", "shap_ratio", "inter_ratio", "error",
                                                                     "bench_s")}), flush=True)
            write_outputs({**report, "models": [r for r in report["models"] if "error" not in r]}, Path(args.out), tag)
    if args.crossover and args.device == "gpu":
        report["crossover"] = crossover(args, data_cache)
    write_outputs({**report, "models": [r for r in report["models"] if "error" not in r]}, Path(args.out), tag)
    (Path(args.out) / f"treeshap_{tag}.json").write_text(json.dumps(report, indent=1))
    print((Path(args.out) / f"treeshap_{tag}.md").read_text())


if __name__ == "__main__":
    main()
