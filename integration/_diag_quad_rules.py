"""Diagnostic: the per-row quadrature kernel of interactions with each rule size's paths in a launch of their own
(``gpu.QUAD_RULE_CLASSES``, the default) against every path at the longest path's rule, alternating in one process,
on the models of ``_treeshap_families.py`` (synthetic data, said so there). NumPy in and out through
``shap.TreeExplainer(model, backend="gpu")``, median of 3 calls after a warm one per round.

    python3 integration/_diag_quad_rules.py [--models xgb-lossguide-1024,rf-depth30,lgbm-500x255] [--rows 200,2000]
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np


def main() -> None:
    import cupy as cp
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from _diag_lossguide import _save
    from _treeshap_families import _median_time as _t
    from _treeshap_families import data, models
    from hitml.kernels.treeshap import gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="xgb-lossguide-1024,rf-depth30,lgbm-500x255")
    ap.add_argument("--rows", default="200,2000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    sync = cp.cuda.Device().synchronize
    X, _ = data(max(int(r) for r in a.rows.split(",")), 50, seed=7)
    out = []
    for name, (model, _desc, _) in models(a.models.split(","), 50, 100_000, os.cpu_count()).items():
        ex = shap.TreeExplainer(model, backend="gpu")
        for n in (int(r) for r in a.rows.split(",")):
            Xi = X[:n]
            rec = {"model": name, "rows": n, "times": {"classes": [], "one_rule": []}}
            res = {}
            for _ in range(a.rounds):
                for mode in ("classes", "one_rule"):
                    gpu.QUAD_RULE_CLASSES = mode == "classes"
                    res[mode] = ex.shap_interaction_values(Xi)
                    rec["times"][mode].append(_t(lambda: ex.shap_interaction_values(Xi), sync))
            gpu.QUAD_RULE_CLASSES = True
            rec["classes_s"] = float(np.median(rec["times"]["classes"]))
            rec["one_rule_s"] = float(np.median(rec["times"]["one_rule"]))
            rec["speedup"] = rec["one_rule_s"] / rec["classes_s"]
            rec["max_abs_diff"] = float(np.max(np.abs(np.asarray(res["classes"]) - np.asarray(res["one_rule"]))))
            print(json.dumps(rec), flush=True)
            out.append(rec)
    _save(a.out, "diag_quad_rules.json", out)


if __name__ == "__main__":
    main()
