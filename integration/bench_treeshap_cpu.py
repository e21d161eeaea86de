"""CPU TreeSHAP benchmark: our Numba engine against XGBoost's, LightGBM's and CatBoost's native SHAP and shap's C++.

    python integration/bench_treeshap_cpu.py --threads 1,2 --out docs/benchmarks
    python integration/bench_treeshap.py --device cpu --threads 1,16      (forwards here)

Models: the GPUTreeShap paper's XGBoost grid at small (10 rounds, depth 3) and medium (100 rounds, depth 8) size on
cal_housing, adult, covtype- and fashion_mnist-shaped data (integration/bench_treeshap.py trains them), and one
medium model of each other library: LightGBM, scikit-learn RandomForest, CatBoost (skipped where not installed).
Every anchor runs in the same process at the same thread count as ours (shap's C++ is single-threaded: timed at one
thread only). Rows/s for SHAP values and interactions; JSON and markdown to --out, named by --tag.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "integration"))

from _treeshap_common import (  # noqa: E402 - after the sys.path set-up above
    load_dataset,
    shap_cext,
    timed,
    timed_rows,
    train_model,
)

LIBS = ("lightgbm", "sklearn_rf", "catboost")
NATIVE = {"xgboost": "XGBoost native", "lightgbm": "LightGBM native", "catboost": "CatBoost native"}


# ------------------------------------------------------------------------------------------------------ models
def lib_model(lib: str, X, y, num_class: int, threads: int):
    """A medium model (100 trees, depth 8) of one library, or None when it is not installed."""
    try:
        if lib == "lightgbm":
            import lightgbm as lgb
            cls = lgb.LGBMClassifier if num_class > 1 or set(np.unique(y)) <= {0, 1} else lgb.LGBMRegressor
            return cls(n_estimators=100, max_depth=8, num_leaves=255, learning_rate=0.05, n_jobs=threads,
                       verbose=-1).fit(X, y)
        if lib == "sklearn_rf":
            from sklearn.ensemble import RandomForestRegressor
            return RandomForestRegressor(n_estimators=100, max_depth=8, n_jobs=threads, random_state=0).fit(X, y)
        if lib == "catboost":
            import catboost as cb
            return cb.CatBoostClassifier(iterations=100, depth=8, thread_count=threads, verbose=False,
                                         random_seed=0).fit(X, y)
    except ImportError:
        return None
    raise ValueError(lib)


def native_fn(lib: str, model, threads: int, interactions: bool):
    """Rows -> the library's own SHAP (values or interactions) at ``threads`` threads, or None where it has none."""
    if lib == "xgboost":
        import xgboost as xgb
        b = model.copy()
        b.set_param({"device": "cpu", "nthread": threads})    # a CUDA build would otherwise predict on the GPU
        return lambda A: b.predict(xgb.DMatrix(A, nthread=threads), pred_contribs=not interactions,
                                   pred_interactions=interactions)
    if lib == "lightgbm":
        if interactions:
            return None
        return lambda A: model.booster_.predict(A, pred_contrib=True, num_threads=threads)
    if lib == "catboost":
        import catboost as cb
        kind = "ShapInteractionValues" if interactions else "ShapValues"
        return lambda A: model.get_feature_importance(cb.Pool(A), type=kind, thread_count=threads)
    return None


# --------------------------------------------------------------------------------------------------- measuring
def set_threads(n: int) -> None:
    import numba
    numba.set_num_threads(n)


def rate(fn, X, budget: float, repeats: int, threads: int = 1, block: int = 32) -> tuple[int, float]:
    """(rows, seconds) of fn on up to len(X) rows within the time budget (see bench_treeshap.timed_rows), starting
    at two row blocks of ``block`` rows per thread, so that every thread has work (SHAP values: blocks of 128, the
    width the engine uses on many rows; interactions, whose output is large: 32)."""
    return timed_rows(fn, X, len(X), budget, repeats, start=min(len(X), 2 * block * threads))


def bench_one(name: str, lib: str, model, X, threads_list, args) -> dict:
    from hitml.kernels.treeshap import cpu
    from hitml.shap_ext import TreeExplainer
    exp = TreeExplainer(model, backend="cpu", progress=False)
    ps = exp._paths(X.shape[1])
    ens = exp.model
    rng = np.random.RandomState(432)
    Xt = np.ascontiguousarray(X[rng.randint(0, len(X), args.rows)], dtype=np.float64)
    # interactions write (M+1)^2 K doubles per row: cap the rows at about 1.6 GB of output (fashion_mnist: 32)
    Xi = Xt[: max(16, min(args.inter_rows, int(2e8 / ((X.shape[1] + 1) ** 2 * max(1, int(ens.num_outputs))))))]
    rec = {"model": name, "library": lib, "trees": int(ens.values.shape[0]), "paths": int(ps.n_paths),
           "features": int(X.shape[1]), "outputs": int(ps.n_outputs), "max_path": int(ps.max_length),
           "rows": len(Xt), "inter_rows": len(Xi), "cells": {}}
    ours = (lambda A: cpu.shap_values(ps, A, progress=False)), (lambda A: cpu.interaction_values(ps, A, progress=False))
    set_threads(1)
    for fn, Xw in zip(ours, (Xt, Xi)):  # compile both row-block widths out of the timings
        fn(Xw[:8])
        fn(Xw[:64])
    # accuracy against the native library (XGBoost: float32 output) and shap's C++, on a few rows
    nat = native_fn(lib, model.get_booster() if hasattr(model, "get_booster") else model, 1, False)
    mine = ours[0](Xt[:50])
    ref = shap_cext(ens, Xt[:50])
    rec["max_abs_diff_vs_shap_cpp"] = float(np.abs(mine - ref).max())
    if nat is not None:
        got = np.asarray(nat(Xt[:50]))
        got = got.reshape(50, -1, X.shape[1] + 1)            # (n, K, M + 1)
        rec["max_abs_diff_vs_native"] = float(np.abs(mine[:, :X.shape[1]].transpose(0, 2, 1)
                                                      - got[:, :, :X.shape[1]]).max())
    booster = model.get_booster() if hasattr(model, "get_booster") else model
    for T in threads_list:
        set_threads(T)
        cell = {}
        for what, Xw, fn in (("shap", Xt, ours[0]), ("inter", Xi, ours[1])):
            block = 128 if what == "shap" else 32
            n, t = rate(fn, Xw, args.budget, args.repeats, T, block)
            cell[f"ours_{what}"] = n / t
            cell[f"rows_{what}"] = n
            nf = native_fn(lib, booster, T, what == "inter")
            if nf is not None:
                n, t = rate(nf, Xw, args.budget, args.repeats, T, block)
                cell[f"native_{what}"] = n / t
            if T == 1 and args.cpp:
                n, t = rate(lambda A, w=what: shap_cext(ens, A, interactions=w == "inter"), Xw, args.budget,
                            args.repeats)
                cell[f"shap_cpp_{what}"] = n / t
        rec["cells"][str(T)] = cell
        print(f"  {name} T={T}: " + ", ".join(f"{k} {v:.4g}" for k, v in cell.items()), flush=True)
    if args.scaling and name == args.scaling:        # the thread-scaling curve of ours on one model
        Xs = np.ascontiguousarray(np.tile(Xt, (max(1, 4096 // len(Xt)), 1))[:4096])
        rec["scaling"] = {}
        for T in sorted({1, 2, 4, 8, 16, max(threads_list)} & set(range(1, (os.cpu_count() or 1) + 1))):
            set_threads(T)
            rec["scaling"][str(T)] = len(Xs) / timed(lambda: ours[0](Xs), args.repeats)   # the same rows each time
        print(f"  {name} scaling: {rec['scaling']}", flush=True)
    set_threads(max(threads_list))
    return rec


def models(args):
    """(name, library, model, X) for the grid and the other libraries."""
    for size in args.size.split(","):
        for ds in args.datasets.split(","):
            X, y, objective, num_class, _ = load_dataset(ds, args.train_rows)
            bst, _ = train_model(ds, size, X, y, objective, num_class, args.train_device)
            yield f"{ds}-{size}", "xgboost", bst, X
    for lib in filter(None, args.libs.split(",")):
        ds = "cal_housing" if lib == "sklearn_rf" else "adult"
        X, y, _, num_class, _ = load_dataset(ds, args.train_rows)
        m = lib_model(lib, X, y, num_class, os.cpu_count() or 1)
        if m is None:
            print(f"  {lib}: not installed, skipped", flush=True)
            continue
        yield f"{lib}-{ds}-medium", lib, m, X


# ------------------------------------------------------------------------------------------------------ report
def versions() -> dict:
    out = {"python": platform.python_version()}
    for mod in ("numpy", "numba", "xgboost", "lightgbm", "catboost", "sklearn", "shap"):
        try:
            out[mod] = __import__(mod).__version__
        except (ImportError, AttributeError):
            out[mod] = None
    return out


def _fmt(x) -> str:
    return "-" if x is None else f"{x:.3g}"


def _ratio(a, b) -> str:
    return "-" if a is None or b is None else f"**{a / b:.2f}x**"


def write_outputs(report: dict, out_dir: Path, tag: str) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / f"treeshap_cpu_{tag}.json").write_text(json.dumps(report, indent=1))
    threads = report["threads"]
    versions = ", ".join(f"{k} {v}" for k, v in report["versions"].items())
    intro = ("Rows/s (higher is better); ratios are ours / anchor at the same thread count, same process. "
             f"SHAP values on up to {report['rows']} rows, interactions on up to {report['inter_rows']} "
             "(fashion_mnist: 32, its output is 49 MB per row; slow anchors on fewer rows). shap C++ is shap's "
             "single-threaded `dense_tree_shap` on its TreeEnsemble, timed at 1 thread. Native: XGBoost "
             "`pred_contribs` / `pred_interactions`, LightGBM `pred_contrib` (no interactions), CatBoost "
             "`ShapValues` / `ShapInteractionValues`; scikit-learn has none.")
    lines = [f"# CPU TreeSHAP benchmark ({tag})", "",
             f"Machine: {report['machine']}; {report['cpus']} CPUs; versions: {versions}", "", intro, ""]
    if report.get("note"):
        lines += [f"Note: {report['note']}.", ""]
    for what, title in (("shap", "SHAP values"), ("inter", "SHAP interaction values")):
        for T in threads:
            lines += [f"## {title}, {T} thread{'s' if T > 1 else ''}", ""]
            head = "| model | trees | ours | native | ours / native |"
            sep = "|---|---|---|---|---|"
            if T == 1:
                head += " shap C++ | ours / shap C++ |"
                sep += "---|---|"
            lines += [head, sep]
            for rec in report["models"]:
                c = rec["cells"].get(str(T), {})
                o, n = c.get(f"ours_{what}"), c.get(f"native_{what}")
                row = f"| {rec['model']} | {rec['trees']} | {_fmt(o)} | {_fmt(n)} | {_ratio(o, n)} |"
                if T == 1:
                    s = c.get(f"shap_cpp_{what}")
                    row += f" {_fmt(s)} | {_ratio(o, s)} |"
                lines.append(row)
            lines.append("")
    if len(threads) > 1:
        lo, hi = str(min(threads)), str(max(threads))
        lines += [f"## Thread scaling of ours, {lo} -> {hi} threads (rows/s ratio / {int(hi) // int(lo)})", "",
                  ("From the cells above, whose row counts differ (see the JSON): the curve below times the same "
                   "rows at every thread count."), "",
                  "| model | SHAP | interactions |", "|---|---|---|"]
        for rec in report["models"]:
            c0, c1 = rec["cells"].get(lo, {}), rec["cells"].get(hi, {})
            cells = []
            for what in ("shap", "inter"):
                a, b = c0.get(f"ours_{what}"), c1.get(f"ours_{what}")
                cells.append("-" if not a or not b else f"{b / a / (int(hi) // int(lo)):.2f}")
            lines.append(f"| {rec['model']} | {cells[0]} | {cells[1]} |")
        lines.append("")
    for rec in report["models"]:
        if "scaling" in rec:
            sc = rec["scaling"]
            lines += [f"## Thread scaling curve, {rec['model']} SHAP values (4096 rows)", "",
                      "| threads | rows/s | / (1-thread rows/s x threads) |", "|---|---|---|"]
            lines += [f"| {T} | {v:.4g} | {v / sc['1'] / int(T):.2f} |" for T, v in sc.items()] + [""]
    lines += ["## Accuracy (max |ours - reference| on 50 rows)", "", "| model | vs native | vs shap C++ |",
              "|---|---|---|"]
    for rec in report["models"]:
        lines.append(f"| {rec['model']} | {rec.get('max_abs_diff_vs_native', '-'):.3g} | "
                     f"{rec['max_abs_diff_vs_shap_cpp']:.3g} |" if "max_abs_diff_vs_native" in rec else
                     f"| {rec['model']} | - | {rec['max_abs_diff_vs_shap_cpp']:.3g} |")
    (out_dir / f"treeshap_cpu_{tag}.md").write_text("\n".join(lines) + "\n")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", default=f"1,{os.cpu_count()}", help="thread counts, comma separated")
    ap.add_argument("--size", default="small,medium")
    ap.add_argument("--datasets", default="cal_housing,adult,covtype,fashion_mnist")
    ap.add_argument("--libs", default=",".join(LIBS))
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--inter-rows", type=int, default=200)
    ap.add_argument("--train-rows", type=int, default=20_000)
    ap.add_argument("--train-device", default="cpu", help="XGBoost training device (cuda where there is a GPU)")
    ap.add_argument("--budget", type=float, default=3.0, help="seconds per timing")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scaling", default="cal_housing-medium", help="model whose 1..16-thread curve is measured")
    ap.add_argument("--no-cpp", dest="cpp", action="store_false", help="skip shap's C++ (single-threaded) anchor")
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    ap.add_argument("--tag", default=None)
    args, _ = ap.parse_known_args(argv)
    os.environ.setdefault("HITML_PROGRESS", "0")
    threads = sorted({int(t) for t in args.threads.split(",")})
    report = {"machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "threads": threads,
              "versions": versions(), "rows": args.rows, "inter_rows": args.inter_rows, "models": []}
    for name, lib, model, X in models(args):
        print(f"{name} ({lib})", flush=True)
        report["models"].append(bench_one(name, lib, model, X, threads, args))
        write_outputs(report, Path(args.out), args.tag or f"{max(threads)}threads")


if __name__ == "__main__":
    main()
