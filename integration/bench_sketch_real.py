"""Downstream check on the real datasets: XGBoost `hist` on our moment-sketch cuts against XGBoost's own cuts.

    python integration/bench_sketch_real.py --seeds 3 --out docs/benchmarks

cal_housing (regression, held-out RMSE), adult and bank (classification, held-out log loss) with their numeric columns,
max_bin 64 and 256, maxent and legendre cuts, the same split and boosting parameters for both sides; each seed draws a
new 75/25 split and a new subsample seed. Writes sketch_real_downstream.{json,md}.
"""
from __future__ import annotations

import argparse
import json
import platform
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import xgboost as xgb
from sklearn.metrics import log_loss, mean_squared_error
from sklearn.model_selection import train_test_split

from hitml.xgboost_ext import QuantileBinner, XGBClassifier, XGBRegressor

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data"


def datasets() -> dict[str, tuple[pd.DataFrame, np.ndarray, str]]:
    cal = pd.read_csv(DATA / "cal_housing.csv.gz")
    y_cal = cal.pop("median_house_value").to_numpy() / 1e5
    adult = pd.read_csv(DATA / "adult.csv.gz")
    y_adult = adult["income"].astype(str).str.contains(">50K").to_numpy(int)
    adult = adult[["age", "fnlwgt", "education-num", "capital-gain", "capital-loss", "hours-per-week"]].apply(
        pd.to_numeric, errors="coerce")
    bank = pd.read_csv(DATA / "bank_full.csv.gz")
    y_bank = (bank["y"] == "yes").to_numpy(int)
    bank = bank[["age", "balance", "day", "duration", "campaign", "pdays", "previous"]].astype(float)
    return {"cal_housing": (cal, y_cal, "reg"), "adult": (adult, y_adult, "clf"), "bank": (bank, y_bank, "clf")}


def fit_score(X_tr, y_tr, X_te, y_te, task: str, max_bin: int, seed: int, binner) -> float:
    params = dict(n_estimators=200, max_depth=6, learning_rate=0.1, subsample=0.8, max_bin=max_bin,
                  tree_method="hist", random_state=seed, n_jobs=2)
    if task == "reg":
        model = XGBRegressor(binner=binner, **params) if binner else xgb.XGBRegressor(**params)
        return float(np.sqrt(mean_squared_error(y_te, model.fit(X_tr, y_tr).predict(X_te))))
    model = XGBClassifier(binner=binner, **params) if binner else xgb.XGBClassifier(**params)
    return float(log_loss(y_te, model.fit(X_tr, y_tr).predict_proba(X_te)[:, 1]))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--out", default=str(ROOT / "docs" / "benchmarks"))
    args = ap.parse_args()
    rows = []
    for name, (X, y, task) in datasets().items():
        for max_bin in (64, 256):
            for seed in range(args.seeds):
                X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=seed)
                own = fit_score(X_tr, y_tr, X_te, y_te, task, max_bin, seed, None)
                rec = {"dataset": name, "task": task, "max_bin": max_bin, "seed": seed, "xgboost": own}
                for method in ("maxent", "legendre"):
                    with warnings.catch_warnings(record=True) as caught:
                        warnings.simplefilter("always")
                        ours = fit_score(X_tr, y_tr, X_te, y_te, task, max_bin, seed,
                                         QuantileBinner(max_bin=max_bin, method=method, backend="cpu"))
                    rec[method] = ours
                    rec[f"{method}_fallback_warnings"] = sum("fall" in str(w.message).lower() for w in caught)
                rows.append(rec)
                print(json.dumps(rec), flush=True)
    out = Path(args.out)
    report = {"machine": f"{platform.machine()} CPU", "versions": {"xgboost": xgb.__version__, "numpy": np.__version__},
              "rows": rows}
    (out / "sketch_real_downstream.json").write_text(json.dumps(report, indent=1))
    df = pd.DataFrame(rows)
    metric = {"reg": "RMSE", "clf": "log loss"}
    lines = ["# Downstream on the real datasets: our cuts vs XGBoost's own", "",
             f"Machine: {report['machine']}; xgboost {xgb.__version__}. XGBoost hist, 200 rounds, depth 6, eta 0.1, "
             f"subsample 0.8; {args.seeds} seeds (split and subsample); numeric columns only. Ratio = ours / "
             "XGBoost's held-out metric (lower is better, <= 1.01 is the target).", "",
             "| dataset | metric | max_bin | XGBoost's cuts | maxent | ratio | legendre | ratio |", "|---" * 8 + "|"]
    for (name, max_bin), g in df.groupby(["dataset", "max_bin"], sort=False):
        own, me, le = g["xgboost"].mean(), g["maxent"].mean(), g["legendre"].mean()
        lines.append(f"| {name} | {metric[g['task'].iloc[0]]} | {max_bin} | {own:.5f} ± {g['xgboost'].std():.5f} | "
                     f"{me:.5f} | {me / own:.4f} | {le:.5f} | {le / own:.4f} |")
    (out / "sketch_real_downstream.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
