"""scikit-learn drop-ins: GPU-capable shuffles, splitters and permutation importance; Shapley samplers as estimators."""
from __future__ import annotations

from hitml.kernels._exports import lazy_exports

# name -> private module that defines it; modules load on first use (hitml.kernels._exports), so each stays
# independent.
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

__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
