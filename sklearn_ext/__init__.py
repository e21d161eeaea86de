"""scikit-learn drop-ins: GPU-capable shuffles, splitters and permutation importance; Shapley samplers as estimators."""
from __future__ import annotations

import importlib

# name -> private module that defines it; modules load on first use so each stays independent.
_EXPORTS = {
    "shuffle": "._shuffle",
    "train_test_split": "._split",
    "KFold": "._split",
    "ShuffleSplit": "._split",
    "StratifiedShuffleSplit": "._split",
    "permutation_importance": "._permutation_importance",
    "ShapleySampler": "._shapley",
    "ShapleyExplainer": "._shapley",
    "SelectFromShapley": "._select",
    "dask_shuffle": "._dask",
    "dask_train_test_split": "._dask",
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
