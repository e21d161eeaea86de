"""Moment-sketch binning for XGBoost ``hist``: QuantileBinner, QuantileDMatrix hook, sklearn drop-ins, Dask path.

``QuantileBinner`` chooses each feature's cut points from a mergeable moment sketch; ``quantile_dmatrix`` hands them
to ``xgboost.train`` and ``XGBRegressor`` / ``XGBClassifier`` to XGBoost's scikit-learn API. The Dask path is in
:mod:`hitml.xgboost_ext.dask`.
"""
from __future__ import annotations

from hitml.kernels._exports import lazy_exports

# name -> private module that defines it; modules load on first use (hitml.kernels._exports).
_EXPORTS = {
    "QuantileBinner": ".binner",
    "quantile_dmatrix": ".hook",
    "dmatrix": ".hook",
    "reference_dmatrix": ".hook",
    "reference_matrix": ".hook",
    "snap": ".hook",
    "check_cuts": ".hook",
    "xgb_cuts": ".hook",
    "XGBRegressor": ".sklearn",
    "XGBClassifier": ".sklearn",
}

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
