"""Moment-sketch binning for XGBoost `hist`: QuantileBinner, QuantileDMatrix hook, sklearn drop-ins, Dask path."""
from __future__ import annotations

from .binner import QuantileBinner

__all__ = ["QuantileBinner", "quantile_dmatrix", "dmatrix", "reference_dmatrix", "snap", "check_cuts",
           "XGBRegressor", "XGBClassifier"]

_LAZY = {
    "quantile_dmatrix": "hook", "dmatrix": "hook", "reference_dmatrix": "hook", "reference_matrix": "hook",
    "snap": "hook", "check_cuts": "hook", "xgb_cuts": "hook", "XGBRegressor": "sklearn", "XGBClassifier": "sklearn",
}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(name)
