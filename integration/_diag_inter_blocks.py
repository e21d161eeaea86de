"""Diagnostic: where the streamed mean |interaction| matrix spends its time on the GPU (the output-control model:
XGBoost 100 trees depth 6, 50 features), per chunk of 12,900 rows: the interaction table kernel (direct and block
sums), mirror_upper, the zeroing, the |v| sum over rows, the explainer call, and the whole stream.

    python integration/_diag_inter_blocks.py
"""
from __future__ import annotations

import json
import time

import numpy as np


def main() -> None:
    import cupy as cp
    import xgboost as xgb

    from hitml.kernels.outputs import _kernels, abs_sums
    from hitml.kernels.treeshap import _gpu_core as core
    from hitml.kernels.treeshap import gpu
    from hitml.shap_ext import TreeExplainer, _outputs

    M = 50
    rng = np.random.default_rng(50)
    Xtr = rng.normal(size=(200_000, M)).astype(np.float32)
    ytr = (Xtr[:, 0] * Xtr[:, 1] + np.sin(Xtr[:, 2]) * Xtr[:, 3] + Xtr[:, 4:10].sum(1)
           + 0.5 * Xtr[:, 10] * Xtr[:, 11] * Xtr[:, 12] + rng.normal(scale=0.1, size=len(Xtr)))
    bst = xgb.train({"max_depth": 6, "eta": 0.1, "tree_method": "hist", "device": "cuda"},
                    xgb.DMatrix(Xtr, label=ytr), num_boost_round=100)
    ex = TreeExplainer(bst, backend="gpu", progress=False)
    ps = ex.paths
    pk = gpu.packed_paths(ps)
    K = 1
    variant, tp, dp = gpu._setup(pk, "inter")
    rep = {"variant": variant, "paths": int(ps.n_paths), "bins": int(pk.n_bins)}
    for w in (4, 8):
        rep[f"slots_w{w}"] = core.inter_block_slots(pk, M, K, w)[3]
    n = (256 << 20) // ((M + 1) ** 2 * 8)
    Xd = cp.random.RandomState(1).standard_normal((n, M), dtype=cp.float32)
    phi = cp.zeros((n, M + 1, M + 1, K))
    scale = gpu._fixed(pk, "inter")
    tables = gpu._tables(pk, "inter")

    def ev(fn, reps=10):
        fn()
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        return cp.cuda.get_elapsed_time(a, b) / reps

    def direct():
        gpu.options.shap_sums = "direct"
        gpu._launch_variant(pk, Xd, phi, M, K, "inter")
        gpu.options.shap_sums = "auto"

    def block(w):
        return lambda: core.launch_inter_block(pk, Xd, M, K, scale, tables, phi, w)

    inv = core.inverse_scale(scale)

    def mirror():
        core.get_kernel(core._SRC, "mirror_upper")((core._grid_for(phi.size),), (core._THREADS,),
                                                   (phi, np.int64(n), np.int32(M + 1), np.int32(K), pk.bias_d, inv))

    abs_sum = _kernels()[1]                     # CuPy's plain reduction, for comparison
    ms_new_abs = ev(lambda: abs_sums(phi[:, :-1, :-1, 0]))
    ms = {"zero": ev(lambda: phi.data.memset_async(0, phi.nbytes)), "direct": ev(direct)}
    for w in (4, 8):
        ms[f"block_w{w}"] = ev(block(w))
    ms["mirror"] = ev(mirror)
    ms["abs_sum_view"] = ev(lambda: abs_sum(phi[:, :-1, :-1, 0], axis=0))
    ms["abs_sum_full"] = ev(lambda: abs_sum(phi, axis=0))
    ms["device_abs_sums_view"] = ms_new_abs
    ms["explainer_call"] = ev(lambda: ex.shap_interaction_values(Xd))
    sums = _outputs._Sums()
    ms["explainer_call_and_add"] = ev(lambda: sums.add(ex.shap_interaction_values(Xd)))
    cp.cuda.Device().synchronize()
    t = time.perf_counter()
    for _ in range(20):
        sums.add(ex.shap_interaction_values(Xd))
    host = (time.perf_counter() - t) / 20
    cp.cuda.Device().synchronize()
    ms["host_loop_per_chunk_nosync"] = host * 1e3
    ms["host_loop_per_chunk"] = (time.perf_counter() - t) / 20 * 1e3
    rep["chunk_rows"] = n
    rep["ms"] = ms
    # bytes: direct against block sums
    same = {}
    for w in (4, 8):
        phi.fill(0)
        direct()
        ref = phi.copy()
        phi.fill(0)
        block(w)()
        same[w] = bool((phi.view(cp.int64) == ref.view(cp.int64)).all())
    rep["block_equals_direct"] = same

    def blocks(rows, size=1_000_000):
        for b, a in enumerate(range(0, rows, size)):
            yield cp.random.RandomState(1000 + b).standard_normal((min(size, rows - a), M), dtype=cp.float32)

    for sums_mode in ("direct", "auto"):
        gpu.options.shap_sums = sums_mode
        ex.global_interaction_values(blocks(100_000))
        cp.cuda.Device().synchronize()
        t = time.perf_counter()
        ex.global_interaction_values(blocks(2_000_000))
        cp.cuda.Device().synchronize()
        rep[f"stream_2M_s_{sums_mode}"] = time.perf_counter() - t
    gpu.options.shap_sums = "auto"
    print(json.dumps(rep, indent=1))


if __name__ == "__main__":
    main()
