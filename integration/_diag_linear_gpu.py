"""Diagnostic: the GPU's per-tree linear kernel against the per-path DP on deep forests (values only, NumPy in and
out, median of 3 after a warm call), with the models of ``_treeshap_families.py`` (synthetic data, said so there);
the linear kernel twice, with its walk program's leaves folded into their edges (the default) and not.

python3 integration/_diag_linear_gpu.py [--models rf-depth30,et-unlimited] [--rows 2000]
"""
from __future__ import annotations

import argparse
import json
import time

import numpy as np


def main() -> None:
    import cupy as cp
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from _treeshap_families import data, models
    from hitml.kernels.treeshap import gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="rf-depth30,et-unlimited")
    ap.add_argument("--rows", type=int, default=2000)
    ap.add_argument("--threads", type=int, default=16)
    ap.add_argument("--shap-cuda", action="store_true", help="time shap-cuda's values on the same rows too")
    a = ap.parse_args()
    X, _ = data(a.rows, 50, seed=7)
    sync = cp.cuda.Device().synchronize
    for name, (model, _desc, _) in models(a.models.split(","), 50, 100_000, a.threads).items():
        ex = shap.TreeExplainer(model, backend="gpu")
        rec = {"model": name}
        outs = {}
        for mode in ("never", "always", "always-unfolded"):
            gpu.options.shap_linear = mode.split("-")[0]
            gpu._gpu_linear.FOLD_LEAVES = mode != "always-unfolded"   # the walk program with leaves folded or not
            gpu.clear_cache()
            t = time.perf_counter()
            outs[mode] = np.asarray(ex.shap_values(X, check_additivity=False))
            sync()
            rec[f"{mode}_first_s"] = time.perf_counter() - t
            ts = []
            for _ in range(3):
                t = time.perf_counter()
                ex.shap_values(X, check_additivity=False)
                sync()
                ts.append(time.perf_counter() - t)
            rec[f"{mode}_s"] = float(np.median(ts))
        gpu.options.shap_linear = "auto"
        gpu._gpu_linear.FOLD_LEAVES = True
        rec["speedup"] = rec["never_s"] / rec["always_s"]
        rec["speedup_unfolded"] = rec["never_s"] / rec["always-unfolded_s"]
        rec["max_abs_diff"] = float(np.abs(outs["never"] - outs["always"]).max())
        rec["max_abs_diff_unfolded"] = float(np.abs(outs["always-unfolded"] - outs["always"]).max())
        rec["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
        if a.shap_cuda:
            from _treeshap_families import _depth, _diff
            depth = _depth(ex)
            if depth >= 32:
                rec["shap_cuda"] = f"not run: GPUTreeShap takes trees of depth < 32, this model reaches {depth}"
            else:
                from shap_cuda import GPUTreeExplainer
                sc = GPUTreeExplainer(model)
                ref = np.asarray(sc.shap_values(X))
                ts = []
                for _ in range(2):
                    t = time.perf_counter()
                    sc.shap_values(X)
                    sync()
                    ts.append(time.perf_counter() - t)
                rec["shap_cuda_s"] = float(np.median(ts))
                rec["ratio_vs_shap_cuda"] = rec["shap_cuda_s"] / rec["always_s"]
                rec["max_abs_diff_vs_shap_cuda"] = _diff(outs["always"], ref)
        rec["scale"] = float(np.abs(outs["never"]).max())
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
