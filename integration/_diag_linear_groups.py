"""Diagnostic: the per-tree walk's tree-group size, one stream or a stream per lane-width class, and the modules
built per lane width against the generic one (``_gpu_linear.GROUP_EVENTS``, ``CONCURRENT``, ``SPECIALIZED``), on a
model of the families benchmark (synthetic data of ``_treeshap_families.py``, said so there). SHAP values, CuPy in
and out, median of 3 after a warm call, alternating rounds in one process; each variant's bytes are checked to
repeat, and the largest difference to the first variant is printed.

    python3 integration/_diag_linear_groups.py [--model xgb-lossguide-1024] [--rows 10000] [--rounds 2]

For Nsight Compute: ``ncu --clock-control none -k regex:linear_shap python3 integration/_diag_ncu_forest.py
xgb-lossguide-1024``.
"""
from __future__ import annotations

import argparse
import json
import os

import numpy as np

VARIANTS = {
    "generic, groups of 65,536, one stream": dict(SPECIALIZED=frozenset(), GROUP_EVENTS=1 << 16, CONCURRENT=False),
    "modules per lane width, groups of 65,536, one stream": dict(GROUP_EVENTS=1 << 16, CONCURRENT=False),
    "modules per lane width, groups of 4,096, one stream": dict(GROUP_EVENTS=4096, CONCURRENT=False),
    "modules per lane width, groups of 4,096, a stream per class": dict(GROUP_EVENTS=4096, CONCURRENT=True),
    "modules per lane width, groups of 2,048, a stream per class": dict(GROUP_EVENTS=2048, CONCURRENT=True),
}


def main() -> None:
    import cupy as cp
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from _treeshap_families import _median_time, data, models
    from hitml.kernels.treeshap import _gpu_core as core
    from hitml.kernels.treeshap import _gpu_linear, gpu

    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="xgb-lossguide-1024")
    ap.add_argument("--rows", type=int, default=10_000)
    ap.add_argument("--rounds", type=int, default=2)
    a = ap.parse_args()
    sync = cp.cuda.Device().synchronize
    model = models([a.model], 50, 100_000, os.cpu_count())[a.model][0]
    X, _ = data(a.rows, 50, seed=7)
    Xd = cp.asarray(X)
    ps = shap.TreeExplainer(model, backend="gpu").paths
    pk = core.packed_paths(ps)
    full = _gpu_linear.SPECIALIZED
    saved = {k: getattr(_gpu_linear, k) for k in ("SPECIALIZED", "GROUP_EVENTS", "CONCURRENT")}
    times: dict[str, list] = {v: [] for v in VARIANTS}
    outs: dict[str, np.ndarray] = {}
    for _ in range(a.rounds):
        for name, kw in VARIANTS.items():
            _gpu_linear.SPECIALIZED = full
            for k, val in kw.items():
                setattr(_gpu_linear, k, val)
            pk.split.pop("linear", None)
            out = cp.asnumpy(gpu.shap_values(ps, Xd))
            assert name not in outs or outs[name].tobytes() == out.tobytes(), name
            outs[name] = out
            times[name].append(round(_median_time(lambda: gpu.shap_values(ps, Xd), sync), 4))
        print(json.dumps(times), flush=True)
    for k, v in saved.items():
        setattr(_gpu_linear, k, v)
    first = next(iter(outs.values()))
    print(json.dumps({"model": a.model, "rows": a.rows, "seconds": times,
                      "max_abs_diff_to_first": {k: float(np.abs(o - first).max()) for k, o in outs.items()},
                      "classes": [(c.ql, int(c.evi.shape[0]), c.n_groups)
                                  for c in (pk.split.get("linear").classes if pk.split.get("linear") else [])]}))


if __name__ == "__main__":
    main()
