"""CPU TreeSHAP on deep and leafy models: the per-tree kernel (``cpu.options.shap_linear``) against the per-path
quadrature it replaces there, and against the libraries' own SHAP values, in one process, NumPy in and out.

    python integration/bench_cpu_linear.py --rows 1000 --repeats 3 --out docs/benchmarks

Synthetic data (said so in the report): 20,000 standard-normal rows x 50 features, a target mixing products, sines
and thresholds. Models: scikit-learn RandomForestRegressor (100 trees, max_depth 30), LightGBM (200 trees of 255
leaves; 1,000 trees of 31 leaves; 10 classes x 100 rounds of 31 leaves, where each tree feeds one class), XGBoost
lossguide (50 trees, max_leaves 1,024) and, as the control that "auto" leaves to the per-path kernel, XGBoost
depth 6 (100 trees). The two kernels run in alternating calls on the same rows (the per-path kernel
is the engine's code before the per-tree kernel, ``shap_linear="never"``); the library anchor (XGBoost's and
LightGBM's own ``pred_contribs`` / ``pred_contrib``, shap's C++ for the forest) once per model at the same threads.
Writes ``treeshap_cpu_linear.json`` and ``.md`` to --out.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numba
import numpy as np

from _machine import cpu_name
from _treeshap_common import versions as library_versions

ROOT = Path(__file__).resolve().parents[1]


def data(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m))
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + 0.5 * (X[:, 3] > 0) * X[:, 4] + 0.3 * rng.normal(size=n)
    return X, y


def fit(name: str, X, y, threads: int):
    if name == "rf-depth30":
        from sklearn.ensemble import RandomForestRegressor
        return RandomForestRegressor(n_estimators=100, max_depth=30, n_jobs=threads, random_state=0).fit(X, y), \
            "scikit-learn RandomForestRegressor, 100 trees, max_depth=30"
    if name in ("lgbm-1000x31", "lgbm-multiclass10"):
        import lightgbm as lgb
        if name == "lgbm-1000x31":
            return lgb.LGBMRegressor(n_estimators=1000, num_leaves=31, verbose=-1, n_jobs=threads).fit(X, y), \
                "LightGBM regressor, 1,000 trees of 31 leaves"
        yc = np.digitize(y, np.quantile(y, np.linspace(0, 1, 11)[1:-1]))
        return lgb.LGBMClassifier(n_estimators=100, num_leaves=31, verbose=-1, n_jobs=threads).fit(X, yc), \
            "LightGBM multiclass (10 classes), 100 rounds of 31 leaves"
    if name == "lgbm-200x255":
        import lightgbm as lgb
        return lgb.LGBMRegressor(n_estimators=200, num_leaves=255, min_child_samples=5, verbose=-1,
                                 n_jobs=threads).fit(X, y), "LightGBM regressor, 200 trees of 255 leaves"
    import xgboost as xgb
    if name == "xgb-lossguide-1024":
        return xgb.XGBRegressor(n_estimators=50, grow_policy="lossguide", max_leaves=1024, max_depth=0,
                                n_jobs=threads).fit(X, y), "XGBoost regressor, 50 trees, lossguide, max_leaves=1024"
    return xgb.XGBRegressor(n_estimators=100, max_depth=6, n_jobs=threads).fit(X, y), \
        "XGBoost regressor, 100 trees of depth 6 (control)"


def anchor(model, Xt, cpp_rows: int):
    """(name, rows it explains, function) of the library's own SHAP values for the model; shap's C++ (single
    threaded, for scikit-learn) on the first ``cpp_rows`` rows."""
    mod = type(model).__module__
    if mod.startswith("xgboost"):
        import xgboost as xgb
        booster = model.get_booster()
        return "XGBoost pred_contribs", len(Xt), lambda: booster.predict(xgb.DMatrix(Xt), pred_contribs=True)
    if mod.startswith("lightgbm"):
        return "LightGBM pred_contrib", len(Xt), lambda: model.booster_.predict(Xt, pred_contrib=True)
    import shap
    ref = shap.TreeExplainer(model)
    sub = Xt[:cpp_rows]
    return "shap C++ TreeExplainer", len(sub), lambda: ref.shap_values(sub, check_additivity=False)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="rf-depth30,lgbm-200x255,lgbm-1000x31,lgbm-multiclass10,xgb-lossguide-1024,"
                                         "xgb-depth6")
    ap.add_argument("--rows", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--cpp-rows", type=int, default=20, help="rows for shap's C++ anchor (single threaded, scaled)")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    a = ap.parse_args()

    import shap

    from hitml.kernels.treeshap import cpu
    from hitml.shap_ext import TreeExplainer
    numba.set_num_threads(a.threads)
    X, y = data(20_000, 50)
    Xt = np.ascontiguousarray(X[np.random.default_rng(1).integers(0, len(X), a.rows)])
    recs = []
    for name in a.models.split(","):
        model, desc = fit(name, X, y, a.threads)
        ex = TreeExplainer(model, backend="cpu", progress=False)
        ps = ex._paths(X.shape[1])
        rec = {"model": name, "description": desc, "paths": int(ps.n_paths), "longest_merged_path": ps.max_length}
        cpu.options.shap_linear = "auto"
        rec["auto_takes_it"] = cpu._linear_part(ps) is not None
        times = {"never": [], "always": []}
        outs = {}
        for mode in ("never", "always"):
            cpu.options.shap_linear = mode
            ex.shap_values(Xt[:64])                                     # compiled and packed before timing
        for _ in range(a.repeats):
            for mode in ("never", "always"):
                cpu.options.shap_linear = mode
                t = time.perf_counter()
                outs[mode] = np.asarray(ex.shap_values(Xt))
                times[mode].append(time.perf_counter() - t)
        cpu.options.shap_linear = "auto"
        rec["per_path_s"] = float(np.median(times["never"]))
        rec["per_tree_s"] = float(np.median(times["always"]))
        rec["speedup"] = rec["per_path_s"] / rec["per_tree_s"]
        rec["max_abs_diff"] = float(np.abs(outs["never"] - outs["always"]).max())
        aname, arows, afn = anchor(model, Xt, a.cpp_rows)
        if arows == len(Xt):
            afn()                                                       # the library's own first-call work
        t = time.perf_counter()
        ref = np.asarray(afn())
        rec["anchor"] = aname
        rec["anchor_rows"] = arows
        rec["anchor_s"] = (time.perf_counter() - t) * len(Xt) / arows   # scaled to the rows explained
        rec["x_anchor"] = rec["anchor_s"] / (rec["per_tree_s"] if rec["auto_takes_it"] else rec["per_path_s"])
        M = Xt.shape[1]
        ours = outs["always"].reshape(len(Xt), M, -1)[:arows]
        K = ours.shape[2]
        r = ref.reshape(arows, -1)
        if r.shape[1] == K * (M + 1):            # the libraries' layout: per output, M values and the bias
            r = r.reshape(arows, K, M + 1)[:, :, :M].transpose(0, 2, 1)
        rec["max_abs_diff_vs_anchor"] = float(np.abs(ours - r.reshape(ours.shape)).max())
        print(json.dumps(rec), flush=True)
        recs.append(rec)
    versions = library_versions(("numpy", "numba", "xgboost", "lightgbm", "sklearn", "shap"))
    report = {"device": f"{cpu_name()} ({os.cpu_count()} cores), {a.threads} threads", "versions": versions,
              "rows": a.rows, "repeats": a.repeats, "results": recs, "shap": shap.__version__}
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "treeshap_cpu_linear.json").write_text(json.dumps(report, indent=1))
    lines = ["# CPU TreeSHAP: the per-tree kernel on deep and leafy models", "",
             f"Device: {report['device']}. Versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".", "",
             f"`integration/bench_cpu_linear.py`. Synthetic data (20,000 standard-normal rows x 50 features); "
             f"{a.rows:,} rows explained, NumPy in and out, median of {a.repeats} alternating calls of each kernel "
             "(the per-path quadrature is the engine's code before the per-tree kernel: `cpu.options.shap_linear = "
             "\"never\"`). \"auto\" takes models with merged paths longer than 12; the anchor is timed once "
             f"(shap's C++ on {a.cpp_rows} rows, one thread, scaled to {a.rows:,}), against the kernel \"auto\" "
             "picks.", "",
             "| model | longest merged path | \"auto\" takes it | per-path s | per-tree s | per-tree / per-path | "
             "max abs diff | anchor | anchor s | x anchor |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        lines.append(f"| {r['description']} | {r['longest_merged_path']} | {'yes' if r['auto_takes_it'] else 'no'} | "
                     f"{r['per_path_s']:.3g} | {r['per_tree_s']:.3g} | {r['speedup']:.2f}x | {r['max_abs_diff']:.1e} "
                     f"| {r['anchor']} | {r['anchor_s']:.3g} | {r['x_anchor']:.2f}x |")
    (out / "treeshap_cpu_linear.md").write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
