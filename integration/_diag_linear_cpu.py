"""Diagnostic: the per-tree (Linear TreeShap, quadrature) CPU prototype against the CPU engine, rows/s.

    python integration/_diag_linear_cpu.py --rows 2000 --threads 1,2

Models: RandomForestRegressor (100 trees, max_depth 30) on 20,000 synthetic rows x 50 features, and XGBoost
(100 trees, depth 6) on the same data. Both functions get the same rows, after one warm-up call each (compilation and
the engine's path extraction are not timed). Prints the largest difference between the two (a sanity check; the
tests compare against the libraries) and a markdown table of rows/s.
"""
from __future__ import annotations

import argparse
import time

import numba
import numpy as np


def data(n: int, m: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, m))
    y = X[:, 0] + np.sin(3 * X[:, 1]) * X[:, 2] + 0.5 * (X[:, 3] > 0) * X[:, 4] + 0.3 * rng.normal(size=n)
    return X, y


def timed(fn, X, repeats: int) -> float:
    """Best wall time of ``repeats`` calls."""
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(X)
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--engine-rows", type=int, default=0, help="rows for the engine (0: --rows)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--models", default="rf,xgb")
    args = ap.parse_args()

    from sklearn.ensemble import RandomForestRegressor
    import xgboost as xgb

    from hitml.kernels.treeshap._cpu_linear import linear_shap_values
    from hitml.shap_ext import TreeExplainer

    X, y = data(20_000, 50)
    Xt = np.ascontiguousarray(X[np.random.default_rng(1).integers(0, len(X), args.rows)])
    n_eng = args.engine_rows or args.rows
    rows = []
    for name in args.models.split(","):
        t0 = time.perf_counter()
        if name == "rf":
            model = RandomForestRegressor(n_estimators=100, max_depth=30, n_jobs=2, random_state=0).fit(X, y)
        else:
            model = xgb.XGBRegressor(n_estimators=100, max_depth=6, learning_rate=0.1, n_jobs=2).fit(X, y)
        exp = TreeExplainer(model, backend="cpu", progress=False)
        ens = exp.model
        ps = exp._paths(X.shape[1])
        print(f"{name}: trained + explainer in {time.perf_counter() - t0:.1f} s; paths {ps.n_paths}, "
              f"longest merged path {ps.max_length}, split nodes {int((ens.children_left >= 0).sum())}",
              flush=True)
        arrays = (ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                  ens.values, ens.node_sample_weight, ens.base_offset)

        def lin(A, arrays=arrays, dtype=ens.input_dtype):
            return linear_shap_values(*arrays, A, input_dtype=dtype)

        def eng(A, exp=exp):
            return exp.shap_values(A)

        a = lin(Xt[:16])
        b = np.asarray(eng(Xt[:16]))
        diff = np.abs(a[:, :-1, 0] - b.reshape(16, -1)).max()
        bias = abs(a[0, -1, 0] - float(np.ravel(exp.expected_value)[0]))
        print(f"{name}: max |linear - engine| = {diff:.2e} (values), {bias:.2e} (bias)", flush=True)
        for th in (int(t) for t in args.threads.split(",")):
            numba.set_num_threads(th)
            t_lin = timed(lin, Xt, args.repeats)
            t_eng = timed(eng, Xt[:n_eng], args.repeats)
            r_lin, r_eng = len(Xt) / t_lin, n_eng / t_eng
            rows.append((name, th, r_lin, r_eng, r_lin / r_eng))
            print(f"{name} threads={th}: linear {r_lin:.1f} rows/s ({len(Xt)} rows {t_lin:.2f} s), engine "
                  f"{r_eng:.1f} rows/s ({n_eng} rows {t_eng:.2f} s), ratio {r_lin / r_eng:.2f}", flush=True)
    print("\n| model | threads | linear rows/s | engine rows/s | linear / engine |\n|---|---|---|---|---|")
    for name, th, a, b, r in rows:
        print(f"| {name} | {th} | {a:.1f} | {b:.1f} | {r:.2f} |")


if __name__ == "__main__":
    main()
