"""Diagnostic: the per-tree linear kernel with each tree's leaves walked in two classes (``paths.walk_program``:
paths of at most S distinct features apart from the longer ones, each walk with its own Gauss nodes) against one
walk per tree, on the models of ``bench_cpu_linear.py`` (synthetic data, said so there). For each split S: the walk
program's lane-steps (events x Gauss nodes, and x the GPU's lanes: Q rounded up to a power of two), then the SHAP
values (NumPy in and out) in alternating calls, median of the rounds, and the largest difference to one walk.

python3 integration/_diag_leaf_classes.py [--backend cpu|gpu] [--models rf-depth30,xgb-lossguide-1024]
                                          [--splits 0,8,12,16] [--rows 500] [--rounds 3]
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np


def main() -> None:
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from bench_cpu_linear import data, fit
    from hitml.kernels.treeshap import cpu
    from hitml.kernels.treeshap.paths import walk_program

    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", choices=("cpu", "gpu"), default="cpu")
    ap.add_argument("--models", default="rf-depth30,xgb-lossguide-1024")
    ap.add_argument("--splits", default="0,8,12,16")
    ap.add_argument("--rows", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    a = ap.parse_args()
    X, y = data(20_000, 50)
    Xt = X[:a.rows].astype(np.float32)
    splits = [int(s) for s in a.splits.split(",")]
    if a.backend == "gpu":
        from hitml.kernels.treeshap import gpu

        def use(s: int) -> None:
            gpu._gpu_linear.LEAF_SPLIT = s
            gpu.options.shap_linear = "always"
            gpu.clear_cache()
        sync = __import__("cupy").cuda.Device().synchronize
    else:
        def use(s: int) -> None:
            cpu.LEAF_SPLIT = s
            cpu.options.shap_linear = "always"
            cpu._LINEAR.clear()

        def sync() -> None:
            return None
    for name in a.models.split(","):
        model, desc = fit(name, X, y, a.threads)
        ex = shap.TreeExplainer(model, backend=a.backend)
        ps = ex.paths
        rec: dict = {"model": name, "description": desc, "backend": a.backend, "rows": a.rows}
        for s in splits:
            src, ok, q, lev, ptr, _, _ = walk_program(ps.trees, ps.n_features, True, s)
            ev = np.diff(ptr)
            ql = 1 << np.ceil(np.log2(np.maximum(q, 1))).astype(np.int64)
            rec[f"split{s}_walks"] = int(src.size)
            rec[f"split{s}_event_q"] = int((ev * q).sum())
            rec[f"split{s}_event_lanes"] = int((ev * ql).sum())
        outs, times = {}, {s: [] for s in splits}
        for s in splits:                                   # first calls: set-up (and compiles)
            use(s)
            outs[s] = np.asarray(ex.shap_values(Xt, check_additivity=False))
        for _ in range(a.rounds):
            for s in splits:
                use(s)
                ex.shap_values(Xt[:8], check_additivity=False)   # the setting's program, outside the timing
                sync()
                t = time.perf_counter()
                ex.shap_values(Xt, check_additivity=False)
                sync()
                times[s].append(time.perf_counter() - t)
        base = splits[0]
        for s in splits:
            rec[f"split{s}_s"] = round(float(np.median(times[s])), 4)
            rec[f"split{s}_speedup"] = round(rec[f"split{base}_s"] / rec[f"split{s}_s"], 3)
            rec[f"split{s}_max_abs_diff"] = float(np.abs(outs[s] - outs[base]).max())
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
