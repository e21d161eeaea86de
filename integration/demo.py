"""Demo: an XGBoost regressor on California housing, explained by shap.TreeExplainer(model, backend="auto") (hitml)
next to shap's own explainer, with timings and the largest difference."""
from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import shap
import xgboost as xgb
from shap.explainers._tree import TreeEnsemble

from hitml import shap_ext  # noqa: F401  (installs the backend= hook on shap.TreeExplainer)
from hitml.kernels.device import device_name

DATA = Path(__file__).resolve().parents[1] / "data" / "cal_housing.csv.gz"


def timed(fn, repeat: int = 1):
    """(result, best wall time in seconds) over ``repeat`` runs."""
    best, out = np.inf, None
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return out, best


def shap_own(model):
    """shap's own TreeExplainer on ``model``, also when ``python -m hitml.shap_ext`` routes every
    ``shap.TreeExplainer(...)`` to hitml: the anchor rows of the table must be shap's, not ours again."""
    explainer = object.__new__(shap.explainers.TreeExplainer)  # skips the hook's __new__, nothing else
    explainer.__init__(model)
    assert type(explainer) is shap.explainers.TreeExplainer
    return explainer


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rows", type=int, default=2000, help="rows to explain (default 2000)")
    ap.add_argument("--rounds", type=int, default=200, help="boosting rounds (default 200)")
    ap.add_argument("--depth", type=int, default=6, help="max_depth (default 6)")
    ap.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu"])
    args = ap.parse_args()
    os.environ.setdefault("HITML_PROGRESS", "0")
    threads = os.cpu_count() or 1

    df = pd.read_csv(DATA)
    y = df.pop("median_house_value").to_numpy() / 1e5
    X = df
    print(f"cal_housing: {X.shape[0]} rows x {X.shape[1]} features; explaining {args.rows} rows")
    t0 = time.perf_counter()
    model = xgb.XGBRegressor(n_estimators=args.rounds, max_depth=args.depth, learning_rate=0.1, n_jobs=threads)
    model.fit(X, y)
    print(f"trained XGBoost ({args.rounds} rounds, depth {args.depth}) in {time.perf_counter() - t0:.1f} s")
    Xe = X.iloc[: args.rows]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the once-only "no GPU, using the CPU" notice
        ours = shap.TreeExplainer(model, backend=args.backend)
    print(f"hitml backend: {ours.backend} ({device_name() if ours.backend == 'gpu' else f'{threads} CPU threads'})")
    ours.shap_values(Xe.iloc[:10])  # warm-up: numba compilation / CUDA module load out of the timings
    sv_ours, t_ours = timed(lambda: ours.shap_values(Xe), repeat=3)

    shap_default = shap_own(model)  # shap's default for XGBoost: XGBoost's native pred_contribs
    sv_native, t_native = timed(lambda: shap_default.shap_values(Xe), repeat=3)

    ens = TreeEnsemble(model, model_output="raw")
    ens.model_type = "internal"  # shap's own C++ TreeSHAP on the parsed trees (no native short-circuit)
    shap_cpp = shap_own(ens)
    sv_cpp, t_cpp = timed(lambda: shap_cpp.shap_values(Xe, check_additivity=False), repeat=1)

    # interaction values on fewer rows (each row is an M+1 x M+1 matrix): ours against XGBoost's pred_interactions
    Xi = Xe.iloc[: max(1, args.rows // 10)]
    ours.shap_interaction_values(Xi.iloc[:10])
    iv_ours, ti_ours = timed(lambda: ours.shap_interaction_values(Xi), repeat=3)
    booster = model.get_booster()
    iv_native, ti_native = timed(lambda: booster.predict(xgb.DMatrix(Xi), pred_interactions=True), repeat=3)
    iv_diff = float(np.abs(iv_ours - iv_native[:, :-1, :-1]).max())

    margin = model.predict(Xe, output_margin=True)
    rows = [
        ("hitml shap.TreeExplainer(model, backend=...)", t_ours, sv_ours),
        ("shap default (XGBoost native pred_contribs)", t_native, sv_native),
        ("shap C++ TreeSHAP on its TreeEnsemble", t_cpp, sv_cpp),
    ]
    print(f"\n{'explainer':48s} {'time (s)':>9s} {'rows/s':>10s} {'max |diff| vs hitml':>20s}")
    for name, t, sv in rows:
        diff = float(np.abs(sv - sv_ours).max())
        print(f"{name:48s} {t:9.3f} {args.rows / t:10.0f} {diff:20.3e}")
    add = float(np.abs(sv_ours.sum(1) + float(np.ravel(ours.expected_value)[0]) - margin).max())
    print(f"\nhitml additivity: max |sum(phi) + E[f] - margin| = {add:.3e}")
    print(f"speed (rows/s of hitml over rows/s of the anchor, >1 means hitml is faster): {t_cpp / t_ours:.2f}x "
          f"shap's C++ (one thread), {t_native / t_ours:.2f}x XGBoost's native ({threads} threads; Quadrature-TreeSHAP "
          "since XGBoost 3.3); small runs (--rows, --rounds) measure start-up more than throughput")
    print(f"interactions ({len(Xi)} rows): hitml {len(Xi) / ti_ours:.0f} rows/s, XGBoost native pred_interactions "
          f"{len(Xi) / ti_native:.0f} rows/s: {ti_native / ti_ours:.2f}x (max |diff| {iv_diff:.1e})")
    print(f"versions: shap {shap.__version__}, xgboost {xgb.__version__}")


if __name__ == "__main__":
    main()
