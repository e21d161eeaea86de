"""Diagnostic: the interventional background pass on the GPU (``background_summary``) with each number of rows a
``bg_hist`` thread counts at once (``_gpu_patterns.BG_ROWS_PER_THREAD``), on WOODELF's README shape by default
(XGBoost 100 trees of depth 6 on 127 features; a background of synthetic standard-normal float32 rows, said so,
already on the device). Each setting's histograms must equal the first setting's bit for bit (integer counts); then
the settings alternate call by call, and the median of the rounds is reported (seconds, and background rows per
second).

python3 integration/_diag_bg_hist.py [--bg 5000000] [--rpt 1,2,4,8] [--rounds 5]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main() -> None:
    import cupy as cp
    import shap
    import xgboost as xgb

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from hitml.kernels.treeshap import _gpu_patterns, background_summary

    ap = argparse.ArgumentParser()
    ap.add_argument("--bg", type=int, default=5_000_000)
    ap.add_argument("--features", type=int, default=127)
    ap.add_argument("--depth", type=int, default=6)
    ap.add_argument("--rpt", default="1,2,4,8")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    X = rng.standard_normal((200_000, a.features), dtype=np.float32)
    y = X[:, 0] * X[:, 1] + np.sin(X[:, 2]) + (X[:, 3] > 0.5) + 0.1 * rng.standard_normal(len(X))
    bst = xgb.train({"max_depth": a.depth, "tree_method": "hist", "nthread": os.cpu_count()}, xgb.DMatrix(X, y), 100)
    paths = shap.TreeExplainer(bst, backend="gpu").paths
    bg = cp.random.RandomState(1).standard_normal((a.bg, a.features), dtype=cp.float32)
    sync = cp.cuda.Device().synchronize
    modes = [int(v) for v in a.rpt.split(",")]
    ref = None
    rec: dict = {"bg": a.bg, "features": a.features, "paths": int(paths.n_paths)}
    for r in modes:                                  # first calls: compile, and the histograms against the first
        _gpu_patterns.BG_ROWS_PER_THREAD = r
        s = background_summary(paths, bg, backend="gpu")
        sync()
        h = cp.asnumpy(s.hist)
        if ref is None:
            ref = h
        rec[f"rpt{r}_equal"] = bool(np.array_equal(h, ref))
    times: dict = {r: [] for r in modes}
    for _ in range(a.rounds):
        for r in modes:
            _gpu_patterns.BG_ROWS_PER_THREAD = r
            sync()
            t = time.perf_counter()
            background_summary(paths, bg, backend="gpu")
            sync()
            times[r].append(time.perf_counter() - t)
    for r in modes:
        med = float(np.median(times[r]))
        rec[f"rpt{r}_s"] = round(med, 4)
        rec[f"rpt{r}_rows_per_s"] = round(a.bg / med)
    print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
