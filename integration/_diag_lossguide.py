"""Diagnostic: where the GPU engine's time goes on the families benchmark's leafy XGBoost booster
(``grow_policy="lossguide"``, 1,024 leaves; synthetic data of ``_treeshap_families.py``, said so there).

SHAP values (10,000 rows by default): the whole call; each lane-width class of the per-tree linear kernel alone, for
leaf splits of 12 and 16 (``_gpu_linear.LEAF_SPLIT``), with its event count; the path-table kernel alone on the paths
of at most T elements (T = 8, 10, 12). Interactions (200 and 2,000 rows): the whole call; the tables' part and the
per-row part alone. XGBoost's own GPU SHAP (CUDA build) on the same rows. CuPy in and out, median of 3 after a warm
call.

    python3 integration/_diag_lossguide.py [--rows 10000] [--out DIR]
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np


def main() -> None:
    import cupy as cp
    import shap
    import xgboost as xgb

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from _treeshap_families import _median_time as _t
    from _treeshap_families import data, models
    from hitml.kernels.treeshap import _gpu_core as core
    from hitml.kernels.treeshap import _gpu_linear, gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sync = cp.cuda.Device().synchronize
    model = models(["xgb-lossguide-1024"], 50, 100_000, os.cpu_count())["xgb-lossguide-1024"][0]
    X, _ = data(a.rows, 50, seed=7)
    Xd = cp.asarray(X)
    ex = shap.TreeExplainer(model, backend="gpu")
    ps = ex.paths
    M, K = ps.n_features, ps.n_outputs
    m = np.diff(ps.path_ptr)
    rep: dict = {"rows": a.rows, "paths": int(ps.n_paths), "elements": int(m.sum()),
                 "paths_le": {int(T): int((m <= T).sum()) for T in (8, 10, 12, 16)},
                 "elements_le": {int(T): int(m[m <= T].sum()) for T in (8, 10, 12, 16)}}
    rep["values_full_s"] = _t(lambda: gpu.shap_values(ps, Xd), sync)
    bst = model.get_booster()
    bst.set_param({"device": "cuda"})
    rep["xgb_values_s"] = _t(lambda: bst.predict(xgb.DMatrix(Xd), pred_contribs=True), sync, 2)
    print(json.dumps(rep), flush=True)

    pk = core.packed_paths(ps)
    scale = gpu._fixed(pk, "shap")
    phi = cp.zeros((a.rows, M + 1, K), dtype=cp.float64)
    for split in (12, 16, 20):
        _gpu_linear.LEAF_SPLIT = split
        pk.split.pop("linear", None)
        lp = _gpu_linear.part(pk)
        rep[f"linear_split{split}_s"] = _t(lambda: _gpu_linear.launch(lp, pk.xdtype, Xd, M, K, scale, phi), sync)
        for c in lp.classes:
            one = _gpu_linear.LinearPart(rest=None, classes=[c], leaf_value=lp.leaf_value)
            rep[f"linear_split{split}_ql{c.ql}"] = {
                "events": int(c.evi.shape[0]), "groups": c.n_groups, "levels": c.levels,
                "s": _t(lambda: _gpu_linear.launch(one, pk.xdtype, Xd, M, K, scale, phi), sync)}
        print(json.dumps(rep), flush=True)
    _gpu_linear.LEAF_SPLIT = 16
    pk.split.pop("linear", None)

    saved = gpu.options.shap_linear
    for T in (8, 10, 12):
        sub = ps.select(m <= T)
        rep[f"tables_le{T}_s"] = _t(lambda: gpu.shap_values(sub, Xd), sync)
        rep[f"tables_le{T}_plan"] = list(map(str, gpu._shap_variant(core.packed_paths(sub), M, K)))
    gpu.options.shap_linear = "never"
    rep["split_tables_dp_s"] = _t(lambda: gpu.shap_values(ps, Xd), sync)
    gpu.options.shap_linear = saved
    print(json.dumps(rep), flush=True)

    for n in (200, 2000):
        Xi = Xd[:n]
        rep[f"inter{n}_full_s"] = _t(lambda: gpu.interaction_values(ps, Xi), sync)
        rep[f"inter{n}_xgb_s"] = _t(lambda: bst.predict(xgb.DMatrix(Xi), pred_interactions=True), sync, 2)
        iv = gpu._inter_plan(pk)
        rep["inter_plan"] = list(map(str, iv))
        if iv[0] == "split":
            dmax, extra = iv[1], iv[2]
            short = m <= dmax
            short[np.flatnonzero(m == dmax + 1)[:extra]] = True
            for nm, mask in (("tables", short), ("rows", ~short)):
                sub = ps.select(mask)
                rep[f"inter{n}_{nm}_part_s"] = _t(lambda: gpu.interaction_values(sub, Xi), sync)
                rep[f"inter{n}_{nm}_part_plan"] = list(map(str, gpu._inter_plan(core.packed_paths(sub))))
        print(json.dumps(rep), flush=True)
    _save(a.out, "diag_lossguide.json", rep)


def _save(out: str | None, name: str, obj) -> None:
    """``obj`` as JSON in ``out/name`` (nothing where ``out`` is None); the other diagnostics' writer too."""
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, name), "w") as f:
            json.dump(obj, f, indent=1)


if __name__ == "__main__":
    main()
