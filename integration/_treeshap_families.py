"""GPU TreeSHAP on LightGBM, scikit-learn forests and leafy XGBoost models, against shap-cuda (and XGBoost's GPU
``pred_contribs`` where it applies): the rows of ``bench_treeshap.py --families``.

Synthetic data (said so in the report): standard-normal float32 features, a target mixing products, sines and
thresholds of the first features plus noise; the same rows for every model. Each model: its paths (elements per path,
the share of elements the GPU's pattern tables cover, paths longer than a warp), then SHAP values on ``rows`` rows and
interactions on ``inter_rows`` rows, NumPy in and out and CuPy in and out, beside the anchors in the same process.
"""
from __future__ import annotations

import time

import numpy as np


def data(n: int, M: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, M), dtype=np.float32)
    y = (X[:, 0] * X[:, 1] + np.sin(2 * X[:, 2]) + (X[:, 3] > 0.5) * X[:, 4] + 0.5 * X[:, 5:15].sum(axis=1) / 3
         + 0.3 * rng.standard_normal(n)).astype(np.float32)
    return X, y


def models(which: list[str], M: int, train: int, threads: int) -> dict:
    """name -> (fitted model, description, xgboost booster or None)."""
    out = {}
    X, y = data(train, M)
    Xf, yf = data(min(train, 20_000), M, seed=1)   # forests: fewer training rows (one leaf per row or so)
    for name in which:
        t = time.perf_counter()
        if name.startswith("lgbm"):
            import lightgbm as lgb
            if name == "lgbm-500x255":
                m = lgb.LGBMRegressor(n_estimators=500, num_leaves=255, n_jobs=threads,
                                      verbose=-1).fit(X, y)
                desc = "LightGBM regressor, 500 trees of 255 leaves"
            elif name == "lgbm-1000x31":
                m = lgb.LGBMRegressor(n_estimators=1000, num_leaves=31, n_jobs=threads, verbose=-1).fit(X, y)
                desc = "LightGBM regressor, 1,000 trees of 31 leaves"
            else:
                yc = np.digitize(y, np.quantile(y, np.linspace(0, 1, 11)[1:-1]))
                m = lgb.LGBMClassifier(n_estimators=100, num_leaves=31, n_jobs=threads, verbose=-1).fit(X, yc)
                desc = "LightGBM multiclass (10 classes), 100 rounds of 31 leaves (1,000 trees)"
        elif name == "rf-depth30":
            from sklearn.ensemble import RandomForestRegressor
            m = RandomForestRegressor(n_estimators=100, max_depth=30, n_jobs=threads, random_state=0).fit(Xf, yf)
            desc = f"scikit-learn RandomForestRegressor, 100 trees, max_depth=30 ({len(Xf):,} training rows)"
        elif name == "et-unlimited":
            from sklearn.ensemble import ExtraTreesClassifier
            m = ExtraTreesClassifier(n_estimators=100, n_jobs=threads, random_state=0).fit(Xf, yf > np.median(yf))
            desc = f"scikit-learn ExtraTreesClassifier, 100 trees, unlimited depth ({len(Xf):,} training rows)"
        elif name == "xgb-lossguide-1024":
            import xgboost as xgb
            m = xgb.XGBRegressor(n_estimators=100, grow_policy="lossguide", max_leaves=1024, max_depth=0,
                                 tree_method="hist", n_jobs=threads).fit(X, y)
            desc = "XGBoost regressor, 100 trees, grow_policy='lossguide', max_leaves=1024"
        else:
            raise ValueError(name)
        out[name] = (m, desc, time.perf_counter() - t)
    return out


def _median_time(fn, sync, repeats: int = 3) -> float:
    fn()
    sync()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def _diff(ours, ref, bias=None) -> float | str:
    """Max |ours - ref|, with a reference of another layout brought to shap's ((K, n, M) or a list of K (n, M) to
    (n, M, K)); ``bias``: the reference's bias column, dropped."""
    o = np.asarray(ours)
    r = np.asarray(ref)
    if r.shape != o.shape and r.ndim == o.ndim and r.shape[0] == o.shape[-1]:
        r = np.moveaxis(r, 0, -1)
    if r.shape != o.shape:
        return f"shapes {o.shape} / {r.shape}"
    return float(np.max(np.abs(o - r)))


def _native(model, X):
    """(the library's own SHAP values in shap's layout, None) for LightGBM and XGBoost; None for others."""
    M = X.shape[1]
    if type(model).__module__.startswith("lightgbm"):
        c = model.booster_.predict(X, pred_contrib=True)
        K = c.shape[1] // (M + 1)
        c = c.reshape(len(X), K, M + 1)[:, :, :M]
        return (c[:, 0, :] if K == 1 else np.moveaxis(c, 1, 2)), None
    if type(model).__module__.startswith("xgboost"):
        import xgboost as xgb
        c = model.get_booster().predict(xgb.DMatrix(X), pred_contribs=True)
        return c[..., :M], None
    return None


def _depth(ex) -> int:
    """Depth of the model's deepest leaf (root at depth 0)."""
    from hitml.kernels.treeshap.paths import tree_program

    ps = ex.paths
    return int(tree_program(ps.trees, ps.n_features)[2].max()) - 1 if ps.trees is not None else -1


def path_stats(ex) -> dict:
    from hitml.kernels.treeshap import _gpu_core as core
    from hitml.kernels.treeshap import gpu

    ps = ex.paths
    m = np.diff(ps.path_ptr)
    pk = core.packed_paths(ps)
    sv = gpu._shap_variant(pk, ps.n_features, ps.n_outputs)
    iv = gpu._inter_plan(pk)
    q = np.percentile(m, [50, 90, 99, 100]).tolist()
    lp = gpu._linear_part(pk, "shap")
    if lp is not None:              # the per-tree linear kernel takes these trees' values; the rest keep the plan
        n_lin = ps.n_paths - (0 if lp.rest is None else lp.rest.ps.n_paths)
        sv = [f"per-tree linear ({n_lin:,} of {ps.n_paths:,} paths)"] + ([] if lp.rest is None else list(sv))
    return {"paths": int(ps.n_paths), "elements": int(m.sum()), "elements_per_path_p50_p90_p99_max": q,
            "share_elements_le12": float(m[m <= 12].sum() / m.sum()),
            "paths_over_31": int(np.count_nonzero(m > 31)),
            "shap_plan": list(map(str, sv)), "inter_plan": list(map(str, iv))}


def _xgboost_gpu_anchor(model, X, Xi, rec: dict, sync, contribs) -> None:
    """XGBoost's own GPU ``pred_contribs`` / ``pred_interactions`` (``contribs``: ``_treeshap_common.xgb_contribs``,
    which the caller passes, as this helper imports no other integration module), where the installed XGBoost is a
    CUDA build; the reason in ``rec["xgboost_gpu_error"]`` otherwise."""
    import os

    import xgboost as xgb

    if contribs is None:
        rec["xgboost_gpu_error"] = "not timed: run through bench_treeshap.py --families"
        return
    if not xgb.build_info().get("USE_CUDA"):
        rec["xgboost_gpu_error"] = "the installed XGBoost is a CPU build"
        return
    values = contribs(model.get_booster(), "cuda", os.cpu_count())
    inter = contribs(model.get_booster(), "cuda", os.cpu_count(), interactions=True)
    rec["xgboost_gpu_values_s"] = _median_time(lambda: values(X), sync, repeats=2)
    rec["xgboost_gpu_inter_s"] = _median_time(lambda: inter(Xi), sync, repeats=2)


def _shap_cpp_anchor(model, X, Xi, rec: dict, values_rows: int = 10, inter_rows: int = 1) -> None:
    """shap's own C++ ``TreeExplainer`` (on the CPU), where no GPU anchor reads the model (GPUTreeShap stops at depth
    32): timed on the first ``values_rows`` / ``inter_rows`` rows, scaled to ``len(X)`` / ``len(Xi)`` rows (it is
    linear in rows); the row counts are recorded."""
    import shap

    ex = shap.TreeExplainer(model)
    t = time.perf_counter()
    ex.shap_values(X[:values_rows], check_additivity=False)
    rec["shap_cpp_values_s"] = (time.perf_counter() - t) * len(X) / values_rows
    t = time.perf_counter()
    ex.shap_interaction_values(Xi[:inter_rows])
    rec["shap_cpp_inter_s"] = (time.perf_counter() - t) * len(Xi) / inter_rows
    rec["shap_cpp_rows"] = [values_rows, inter_rows]


def _versions_line(recs: list[dict], versions: dict) -> str:
    """The packages' versions: one per package where every row ran with it, else each version with the rows that ran
    with it (a row's own ``versions``, from its run, over ``versions``; a package a run lacked is left out)."""
    parts = []
    for k in versions:
        seen: dict = {}
        for r in recs:
            v = {**versions, **r.get("versions", {})}.get(k)
            if v:
                seen.setdefault(v, []).append(r["model"])
        if len(seen) == 1:
            parts.append(f"{k} {next(iter(seen))}")
        elif seen:
            parts.append(f"{k} " + "; ".join(f"{v} (rows {', '.join(m)})" for v, m in seen.items()))
    return ", ".join(parts)


def report(recs: list[dict], device: str, versions: dict, rows: int, inter_rows: int, M: int, train: int) -> str:
    """Markdown for ``recs`` (one table row a model)."""
    lines = ["# GPU TreeSHAP on LightGBM, scikit-learn forests and leafy XGBoost (treeshap_gpu_families)", "",
             "`integration/bench_treeshap.py --families` (`integration/_treeshap_families.py`) on one " + device
             + ". Versions: " + _versions_line(recs, versions) + ".", "",
             f"Synthetic data: standard-normal float32, {M} features; boosters trained on {train:,} rows, forests on "
             f"{min(train, 20_000):,}. Seconds for {rows:,} rows (values) and {inter_rows:,} rows (interactions), "
             "median of 3 warm calls (anchors: of 2), NumPy in and out, and CuPy in and out. The ratio is the fastest "
             "GPU anchor's time over ours: shap-cuda's `GPUTreeExplainer`, and XGBoost's GPU `pred_contribs` / "
             "`pred_interactions` on XGBoost models (it does not read the other families); where neither reads the model, "
             "shap's own C++ explainer on the CPU, timed on a few rows and scaled (said so in its cell).", "",
             "| model | max depth | paths | elements per path p50/p90/p99/max | plan (values / interactions) | "
             "values s (NumPy / CuPy) | fastest anchor s | x anchor (NumPy / CuPy) | interactions s (NumPy / CuPy) | "
             "fastest anchor s | x anchor (NumPy / CuPy) |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    notes = []

    def anchor(r, k):
        a = r.get(f"fastest_anchor_{k}")
        if not a:
            return "-", "-"
        label = "shap C++ on the CPU, no GPU anchor runs" if a == "shap_cpp" else a.replace("_", "-")
        return (f"{r[f'{a}_{k}_s']:.4g} ({label})",
                f"**{r[f'ratio_{k}']:.2f}x** / {r[f'ratio_{k}_cupy']:.2f}x")
    for r in recs:
        q = "/".join(f"{v:g}" for v in r["elements_per_path_p50_p90_p99_max"])
        va, vr = anchor(r, "values")
        ia, ir = anchor(r, "inter")
        lines.append(f"| {r['description']} | {r['max_depth']} | {r['paths']:,} | {q} | {' / '.join(r['shap_plan'])}"
                     f" ; {' / '.join(r['inter_plan'])} | {r['ours_values_s']:.4g} / {r['ours_values_cupy_s']:.4g} | "
                     f"{va} | {vr} | {r['ours_inter_s']:.4g} / {r['ours_inter_cupy_s']:.4g} | {ia} | {ir} |")
        if r.get("shap_cpp_rows"):
            notes.append(f"- {r['description']}: shap's C++ timed on {r['shap_cpp_rows'][0]} rows (values) and "
                         f"{r['shap_cpp_rows'][1]} (interactions), scaled to the table's rows")
        for a in ("shap_cuda", "xgboost_gpu"):
            if r.get(f"{a}_error"):
                notes.append(f"- {r['description']}: {a.replace('_', '-')} did not run: {r[f'{a}_error']}")
        for k, what in (("max_abs_diff_vs_library", "the library's own SHAP values (CPU, first 1,000 rows)"),
                        ("max_abs_diff_vs_shap_cuda", "shap-cuda's values (float32, first 1,000 rows)"),
                        ("max_abs_diff_inter_vs_shap_cuda", "shap-cuda's interactions (first 50 rows)")):
            if k in r:
                v = r[k]
                notes.append(f"- {r['model']}: max |ours - {what}| = "
                             + (f"{v:.2g}" if isinstance(v, float) else str(v)))
    lines += ["", "Target: 3x the fastest GPU anchor on every row, for values and interactions, NumPy in and out.", ""]
    lines += notes + [""]
    return "\n".join(lines)


def run(which: list[str], rows: int, inter_rows: int, M: int, train: int, threads: int, log=print,
        xgb_contribs=None) -> list[dict]:
    import cupy as cp
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend

    sync = cp.cuda.Device().synchronize
    X, _ = data(rows, M, seed=7)
    recs = []
    for name, (model, desc, fit_s) in models(which, M, train, threads).items():
        rec = {"model": name, "description": desc, "fit_s": fit_s}
        t = time.perf_counter()
        ex = shap.TreeExplainer(model, backend="gpu")
        rec["explainer_s"] = time.perf_counter() - t
        rec.update(path_stats(ex))
        log(name, rec)
        Xi = X[:inter_rows]
        Xd, Xid = cp.asarray(X), cp.asarray(Xi)
        t = time.perf_counter()
        ours = ex.shap_values(X, check_additivity=False)
        rec["ours_first_call_s"] = time.perf_counter() - t
        rec["ours_values_s"] = _median_time(lambda: ex.shap_values(X, check_additivity=False), sync)
        rec["ours_values_cupy_s"] = _median_time(lambda: ex.shap_values(Xd, check_additivity=False), sync)
        oi = ex.shap_interaction_values(Xi)
        rec["ours_inter_s"] = _median_time(lambda: ex.shap_interaction_values(Xi), sync)
        rec["ours_inter_cupy_s"] = _median_time(lambda: ex.shap_interaction_values(Xid), sync)
        log(name, {k: v for k, v in rec.items() if k.startswith("ours")})
        native = _native(model, X[:1000])
        if native is not None:
            rec["max_abs_diff_vs_library"] = _diff(ours[:1000], native[0], native[1])
        depth = _depth(ex)
        rec["max_depth"] = depth
        try:
            if depth >= 32:        # GPUTreeShap throws std::invalid_argument, which ends the process
                raise ValueError(f"GPUTreeShap takes trees of depth < 32 ('Tree depth must be < 32'); this model's "
                                 f"deepest leaf is at depth {depth}")
            from shap_cuda import GPUTreeExplainer
            sc = GPUTreeExplainer(model)
            ref = sc.shap_values(X[:1000])
            rec["shap_cuda_values_s"] = _median_time(lambda: sc.shap_values(X), sync, repeats=2)
            refi = sc.shap_interaction_values(Xi[:50])
            rec["shap_cuda_inter_s"] = _median_time(lambda: sc.shap_interaction_values(Xi), sync, repeats=2)
            rec["max_abs_diff_vs_shap_cuda"] = _diff(ours[:1000], ref)
            rec["max_abs_diff_inter_vs_shap_cuda"] = _diff(oi[:50], refi)
        except Exception as exc:
            rec["shap_cuda_error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
        if type(model).__module__.startswith("xgboost"):
            _xgboost_gpu_anchor(model, X, Xi, rec, sync, xgb_contribs)
        if not any(rec.get(f"{a}_values_s") for a in ("shap_cuda", "xgboost_gpu")):
            _shap_cpp_anchor(model, X, Xi, rec)
        for k in ("values", "inter"):
            anchors = {a: rec[f"{a}_{k}_s"] for a in ("shap_cuda", "xgboost_gpu", "shap_cpp") if rec.get(f"{a}_{k}_s")}
            if anchors:
                best = min(anchors, key=anchors.get)
                rec[f"fastest_anchor_{k}"] = best
                rec[f"ratio_{k}"] = anchors[best] / rec[f"ours_{k}_s"]
                rec[f"ratio_{k}_cupy"] = anchors[best] / rec[f"ours_{k}_cupy_s"]
        log(name, rec)
        recs.append(rec)
        ex = None  # the model's device arrays go before the next model
        cp.get_default_memory_pool().free_all_blocks()
    return recs


if __name__ == "__main__":
    import argparse
    import json
    import sys
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="lgbm-500x255,lgbm-1000x31,lgbm-multiclass10,rf-depth30,et-unlimited,"
                                        "xgb-lossguide-1024")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--inter-rows", type=int, default=200)
    ap.add_argument("--features", type=int, default=50)
    ap.add_argument("--train", type=int, default=100_000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    recs = run(a.models.split(","), a.rows, a.inter_rows, a.features, a.train, a.threads,
               log=lambda *x: print(*x, file=sys.stderr, flush=True))
    if a.out:
        open(a.out, "w").write(json.dumps(recs, indent=1))
    print(json.dumps(recs))
