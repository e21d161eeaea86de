"""Two GPU SHAP calls on a model of the families benchmark (default: the random forest of depth 30; synthetic rows),
for Nsight Compute to profile its kernels:

    ncu --clock-control none --section SpeedOfLight -k regex:shap python integration/_diag_ncu_forest.py [MODEL] [--inter]
"""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import numpy as np

from _treeshap_families import models, data


def main() -> None:
    import shap

    import hitml.shap_ext  # noqa: F401 - registers the backend

    name = next((a for a in sys.argv[1:] if not a.startswith("--")), "rf-depth30")
    model = models([name], 50, 100_000, 16)[name][0]
    ex = shap.TreeExplainer(model, backend="gpu")
    X, _ = data(2000, 50, seed=7)
    for _ in range(2):
        if "--inter" in sys.argv:
            ex.shap_interaction_values(X[:100])
        else:
            ex.shap_values(X, check_additivity=False)
    print("done", np.diff(ex.paths.path_ptr).mean())


if __name__ == "__main__":
    main()
