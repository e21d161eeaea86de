"""Moment-sketch binning for XGBoost ``hist``: QuantileBinner, QuantileDMatrix hook, sklearn drop-ins, Dask path.

``QuantileBinner`` chooses each feature's cut points from a mergeable moment sketch; ``quantile_dmatrix`` hands them
to ``xgboost.train`` and ``XGBRegressor`` / ``XGBClassifier`` to XGBoost's scikit-learn API. The Dask path is in
:mod:`hitml.xgboost_ext.dask`.
"""
from __future__ import annotations

import importlib

# name -> private module that defines it; modules load on first use (as in hitml.sklearn_ext).
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

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name], __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return __all__
