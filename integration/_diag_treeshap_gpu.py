"""Where the GPU SHAP time of a wide-output model goes (fashion_mnist-shaped by default): the kernel against the
download, the output atomics against the rest of the kernel, and how many atomics summing within a tree would save.

    python integration/_diag_treeshap_gpu.py --models fashion_mnist-medium,covtype-medium --rows 10000 --out $OUT

Times options.shap_sums "direct" against "block" (8, 16 and 4 warps per block) with NumPy and CuPy in/out, next to
XGBoost's GPU pred_contribs, and checks that every mode gives the same bytes.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "integration"))
from _treeshap_common import load_dataset, train_model  # noqa: E402 - after the sys.path set-up above

def timed(fn, sync, reps=3):
    fn()
    sync()
    ts = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        sync()
        ts.append(time.perf_counter() - t)
    return float(np.median(ts))


def tree_stats(ps) -> dict:
    """Elements (SHAP terms per row) against distinct (tree node feature, group) outputs per tree."""
    m = np.diff(ps.path_ptr)
    tree_of_elem = np.repeat(ps.tree_index, m)
    grp = np.argmax(ps.leaf_value != 0, axis=1)
    key = (tree_of_elem.astype(np.int64) << 32) | (ps.feature.astype(np.int64) * 64 + np.repeat(grp, m))
    per_tree = np.unique(key).size
    return {"elements": int(m.sum()), "distinct_per_tree": int(per_tree), "ratio_tree": float(m.sum() / per_tree)}


def one_model(model: str, args) -> dict:
    name, size = model.split("-")
    X, y, obj, k, _ = load_dataset(name, args.train_rows)
    bst, _ = train_model(name, size, X, y, obj, k, "cuda")
    rng = np.random.RandomState(432)
    Xt = X[rng.randint(0, len(X), args.rows)]
    from bench_treeshap import our_paths
    ps, _ = our_paths(bst, X.shape[1])
    import cupy as cp
    import xgboost as xgb

    from hitml.kernels.treeshap import _gpu_core as core
    from hitml.kernels.treeshap import gpu
    sync = cp.cuda.Device().synchronize
    res = {"model": model, "rows": args.rows, "paths": int(ps.n_paths), **tree_stats(ps)}
    pk = gpu.packed_paths(ps)
    res["bins"], res["utilisation"], res["plan"] = pk.n_bins, pk.utilisation, str(gpu._planned(pk, "shap"))
    Xc = cp.asarray(Xt)
    b = bst.copy()
    b.set_param({"device": "cuda"})
    res["xgb_gpu_s"] = timed(lambda: b.predict(xgb.DMatrix(Xt), pred_contribs=True), sync)
    ref = None
    for sums, warps in (("direct", 8), ("block", 8), ("block", 16), ("block", 4)):
        gpu.options.shap_sums = sums
        core.BLOCK_WARPS = warps
        key = sums if sums == "direct" else f"block{warps}"
        out = gpu.shap_values(ps, Xc, progress=False)
        if ref is None:
            ref = out
        res[f"{key}_same_bytes"] = bool(cp.all(out.view(cp.uint64) == ref.view(cp.uint64)))
        del out
        res[f"{key}_numpy_s"] = timed(lambda: gpu.shap_values(ps, Xt, progress=False), sync)
        res[f"{key}_cupy_s"] = timed(lambda: gpu.shap_values(ps, Xc, progress=False), sync)
        res[f"{key}_x_fastest_numpy"] = res["xgb_gpu_s"] / res[f"{key}_numpy_s"]
    gpu.options.shap_sums = "auto"
    core.BLOCK_WARPS = 8
    del ref
    Xi = Xt[: args.inter_rows]
    times = {}
    for _ in range(3):                        # NumPy output in pieces (overlapped download) against one piece
        for pieces in (1, 8):
            core._PIECES = pieces
            times.setdefault(f"shap_pieces{pieces}", []).append(timed(lambda: gpu.shap_values(ps, Xt, progress=False),
                                                                      sync, 1))
            times.setdefault(f"inter_pieces{pieces}", []).append(
                timed(lambda: gpu.interaction_values(ps, Xi, progress=False), sync, 1))
    core._PIECES = 8
    res.update({k: float(np.median(v)) for k, v in times.items()})
    gpu.clear_cache()
    print(json.dumps(res), flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="fashion_mnist-medium")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--train-rows", type=int, default=50_000)
    ap.add_argument("--inter-rows", type=int, default=200)
    ap.add_argument("--out", default="/tmp")
    args = ap.parse_args()
    res = [one_model(m, args) for m in args.models.split(",")]
    (Path(args.out) / "diag_treeshap_gpu.json").write_text(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
