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
    ap.add_argument("--modes", default="never,always,always-unfolded",
                    help="never (per-path DP); always (linear, the engine's kernel); always-unfolded (the walk "
                         "program without leaves folded into their edges); always-divide (dividing by a feature's "
                         "first factor too); always-prev (the kernel in integration/_ab/linear_prev.cu: put an "
                         "earlier commit's linear.cu there, untracked, to A/B against it); always-ks1 (one output per "
                         "walk); always-nobits (the row's branch tested at each edge, not per chunk of events first); "
                         "always-shared (the walk's stack in shared memory, not local memory); always-ev64 (64 events "
                         "staged per step); always-t256 (blocks of 256 threads); always-tables (each chunk's ratios "
                         "and coefficients filled once per block, 32 events per chunk; -tables16, -tables64: 16 or 64). "
                         "These combine, e.g. always-shared-nobits (the kernel before both)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--shap-cuda", action="store_true", help="time shap-cuda's values on the same rows too")
    a = ap.parse_args()
    X, _ = data(a.rows, 50, seed=7)
    sync = cp.cuda.Device().synchronize
    ks_max = gpu._gpu_linear._KS_MAX
    for name, (model, _desc, _) in models(a.models.split(","), 50, 100_000, a.threads).items():
        ex = shap.TreeExplainer(model, backend="gpu")
        rec = {"model": name}
        outs = {}
        modes = a.modes.split(",")

        def use(mode: str) -> None:
            gpu.options.shap_linear = mode.split("-")[0]
            gpu._gpu_linear.FOLD_LEAVES = mode != "always-unfolded"   # the walk program with leaves folded or not
            gpu._gpu_linear.DIVIDE_FIRST = mode == "always-divide"    # a feature's first factor divided by too
            gpu._gpu_linear.BRANCH_BITS = "nobits" not in mode          # the row's branches tested per chunk first
            gpu._gpu_linear.LOCAL_STACK = "shared" not in mode          # the stack in local (else shared) memory
            gpu._gpu_linear._EV_CHUNK = 64 if "ev64" in mode else 128   # events staged per step
            gpu._gpu_linear.TABLES = "tables" in mode                   # the chunk's ratios filled once per block
            gpu._gpu_linear.TABLES_EV_CHUNK = 64 if "tables64" in mode else (16 if "tables16" in mode else 32)
            gpu._gpu_linear._THREADS = 256 if "t256" in mode else 128   # threads per block
            gpu._gpu_linear._KS_MAX = 1 if mode == "always-ks1" else ks_max    # outputs per walk
            # "always-prev": the kernel source in integration/_ab/linear_prev.cu (an earlier commit's, for A/B)
            gpu._gpu_linear._SRC = "../integration/_ab/linear_prev.cu" if mode == "always-prev" else "treeshap/linear.cu"
            gpu.clear_cache()
        times = {m: [] for m in modes}
        for mode in modes:                                            # first calls: compile and set up
            use(mode)
            t = time.perf_counter()
            outs[mode] = np.asarray(ex.shap_values(X, check_additivity=False))
            sync()
            rec[f"{mode}_first_s"] = time.perf_counter() - t
        for _ in range(a.rounds):                                     # then the modes alternate, call by call
            for mode in modes:
                use(mode)
                ex.shap_values(X[:64], check_additivity=False)        # the mode's set-up, outside the timing
                sync()
                t = time.perf_counter()
                ex.shap_values(X, check_additivity=False)
                sync()
                times[mode].append(time.perf_counter() - t)
        for mode in modes:
            rec[f"{mode}_s"] = float(np.median(times[mode]))
        use("auto")
        ref = "never" if "never" in modes else modes[0]
        for mode in modes:
            if mode != ref:
                rec[f"speedup_{mode}"] = rec[f"{ref}_s"] / rec[f"{mode}_s"]
                rec[f"max_abs_diff_{mode}_vs_{ref}"] = float(np.abs(outs[ref] - outs[mode]).max())
        for other in modes:
            if "always" in modes and other.startswith("always-") and other != "always-unfolded":
                rec[f"bytes_equal_{other}"] = outs["always"].tobytes() == outs[other].tobytes()
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
                rec["ratio_vs_shap_cuda"] = rec["shap_cuda_s"] / rec["always_s"] if "always_s" in rec else None
                rec["max_abs_diff_vs_shap_cuda"] = _diff(outs.get("always", outs[modes[0]]), ref)
        rec["scale"] = float(np.abs(outs[modes[0]]).max())
        print(json.dumps(rec), flush=True)


if __name__ == "__main__":
    main()
