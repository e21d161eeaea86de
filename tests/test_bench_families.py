"""integration/_treeshap_families.py's report header (no GPU needed): each package's version once where every row
ran with it, else each version with the rows that ran with it."""
from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))
import _treeshap_families as fam


def test_versions_line_names_the_rows_of_each_build():
    cpu = {"numpy": "2.5.2", "xgboost": "3.4.1 (CPU build)", "shap_cuda": "0.54.1"}
    cuda = {"numpy": "2.5.2", "xgboost": "3.4.1 (CUDA build)", "shap_cuda": None}   # a run without shap-cuda
    recs = [{"model": "rf", "versions": cpu}, {"model": "lossguide", "versions": cuda}, {"model": "old"}]
    line = fam._versions_line(recs, cpu)        # "old" predates per-row versions: the report's own apply
    assert line == ("numpy 2.5.2, xgboost 3.4.1 (CPU build) (rows rf, old); 3.4.1 (CUDA build) (rows lossguide), "
                    "shap_cuda 0.54.1")


def test_versions_line_one_version_when_rows_agree():
    v = {"numpy": "2.5.2", "xgboost": "3.4.1 (CPU build)", "lightgbm": None}
    assert fam._versions_line([{"model": "a", "versions": v}, {"model": "b"}], v) == \
        "numpy 2.5.2, xgboost 3.4.1 (CPU build)"
