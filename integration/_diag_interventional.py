"""Where the time of one interventional GPU call goes, on WOODELF's README shape (3,000,000 rows x 127 features,
5,000,000-row background, XGBoost 100 trees depth 6): background phases (upload, histograms, tables), the rows on
the device with CuPy in and out, and the whole explainer call with NumPy and with CuPy rows. Prints JSON.

    python integration/_diag_interventional.py --rows 3000000 --bg 5000000 --out /tmp/diag.json
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
os.environ.setdefault("HITML_PROGRESS", "0")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--bg", type=int, default=5_000_000)
    ap.add_argument("--features", type=int, default=127)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    import cupy as cp
    import shap

    from bench_interventional import data, target, train
    from hitml.kernels.treeshap import _gpu_core as core
    from hitml.kernels.treeshap import _gpu_patterns as gp
    from hitml.kernels.treeshap import _patterns as pat
    from hitml.shap_ext import TreeExplainer

    bg = data(a.bg, a.features, 1)
    X = data(a.rows, a.features, 2)
    model = train("xgboost", bg[:200_000], target(bg[:200_000]), 100, 6, os.cpu_count())
    t = time.perf_counter()
    ex = TreeExplainer(model, data=shap.maskers.Independent(bg, max_samples=len(bg)), backend="gpu")
    res = {"explainer_setup_s": time.perf_counter() - t}
    sync = cp.cuda.Device().synchronize
    pk = core.packed_paths(ex.paths, None)
    gp.Prepared(pk.ps, ex._background[:1000], None, pat.SHAPLEY, False, pk.xdtype)   # compile
    timings: dict = {}
    t = time.perf_counter()
    prep = gp.Prepared(pk.ps, ex._background, None, pat.SHAPLEY, False, pk.xdtype, timings)
    sync()
    res["background_s"] = time.perf_counter() - t
    res["background_phases_s"] = timings
    t = time.perf_counter()
    Xd = cp.asarray(X)
    sync()
    res["upload_rows_s"] = time.perf_counter() - t
    out = cp.empty((a.rows, a.features + 1, 1))
    prep.compute(Xd[:1000], out[:1000])
    sync()
    t = time.perf_counter()
    prep.compute(Xd, out)
    sync()
    res["rows_on_device_s"] = time.perf_counter() - t
    t = time.perf_counter()
    host = out.get()
    res["download_fresh_pageable_s"] = time.perf_counter() - t
    del host, out
    for label, rows in (("explainer_cupy_s", Xd), ("explainer_numpy_s", X)):
        ex.shap_values(rows[:1000], check_additivity=False)
        sync()
        t = time.perf_counter()
        ex.shap_values(rows, check_additivity=False)
        sync()
        res[label] = time.perf_counter() - t
    res["shape"] = {"rows": a.rows, "background": a.bg, "features": a.features, "paths": int(pk.ps.n_paths)}
    print(json.dumps(res), flush=True)
    if a.out:
        Path(a.out).write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
