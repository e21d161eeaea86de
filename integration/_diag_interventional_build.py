"""Where the interventional explainer's build and first call spend time and host memory (a diagnosis, not a
benchmark): phases timed with device syncs, resident size sampled around each.

    python integration/_diag_interventional_build.py [--bg 5000000] [--rows 3000000] [--backend gpu]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("HITML_PROGRESS", "0")

import numpy as np

from integration._machine import RssPeak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bg", type=int, default=5_000_000)
    ap.add_argument("--rows", type=int, default=3_000_000)
    ap.add_argument("--features", type=int, default=127)
    ap.add_argument("--backend", default="gpu")
    a = ap.parse_args()
    import shap
    import xgboost as xgb

    import hitml.shap_ext  # noqa: F401 - registers the backend
    from hitml.kernels.treeshap import _gpu_patterns

    rng = np.random.default_rng(0)
    M = a.features
    bg = rng.standard_normal(size=(a.bg, M), dtype=np.float32)
    X = rng.standard_normal(size=(a.rows, M), dtype=np.float32)
    model = xgb.XGBRegressor(n_estimators=100, max_depth=6, tree_method="hist").fit(bg[:200_000],
                                                                                 bg[:200_000, 0] * bg[:200_000, 1])
    warnings.simplefilter("ignore")
    tiny = shap.TreeExplainer(model, shap.maskers.Independent(bg[:64], max_samples=64), backend=a.backend)
    tiny.shap_values(X[:8])
    timings = {}
    orig = _gpu_patterns.summarize

    def timed(*args, **kw):
        kw["timings"] = timings
        return orig(*args, **kw)

    _gpu_patterns.summarize = timed
    import cProfile
    import pstats
    pr = cProfile.Profile()
    with RssPeak() as r:
        t = time.perf_counter()
        pr.enable()
        ex = shap.TreeExplainer(model, shap.maskers.Independent(bg, max_samples=len(bg)), backend=a.backend)
        pr.disable()
        build = time.perf_counter() - t
    print(f"build {build:.3f} s, peak RSS above before {(r.peak - r.before) / 1e9:.2f} GB "
          f"(background {bg.nbytes / 1e9:.2f} GB); summary phases {timings}", flush=True)
    pstats.Stats(pr).sort_stats("cumulative").print_stats(25)
    for k in range(2):
        pr = cProfile.Profile()
        with RssPeak() as r:
            t = time.perf_counter()
            pr.enable()
            ex.shap_values(X, check_additivity=False)
            pr.disable()
            print(f"call {k}: {time.perf_counter() - t:.3f} s, peak RSS above {(r.peak - r.before) / 1e9:.2f} GB",
                  flush=True)
        if k == 0:
            pstats.Stats(pr).sort_stats("cumulative").print_stats(15)


if __name__ == "__main__":
    main()
