"""Drop-in XGBRegressor / XGBClassifier that take a `binner` and train `hist` on its cuts."""
from __future__ import annotations

from typing import Any

import numpy as np
import xgboost as xgb
from sklearn.base import clone

from hitml.kernels.sketch import MomentSketch

from .binner import QuantileBinner
from .hook import reference_dmatrix


class _BinnedMixin:
    """Fits the binner on X (with sample_weight) and hands XGBoost a QuantileDMatrix whose ref carries our cuts."""

    def _hitml_fit(self, X, y, sample_weight, fit_kwargs):
        if self.tree_method not in (None, "hist"):
            raise ValueError(f'a binner only applies to tree_method="hist", got {self.tree_method!r}')
        if self.booster not in (None, "gbtree", "dart"):
            raise ValueError(f"a binner needs a tree booster, got booster={self.booster!r}")
        if self.binner is None:
            binner = QuantileBinner(max_bin=self.max_bin if self.max_bin is not None else 256)
        else:
            binner = clone(self.binner)
        if self.max_bin is not None and self.max_bin != binner.max_bin:
            raise ValueError(f"max_bin={self.max_bin} differs from the binner's max_bin={binner.max_bin}")
        ft = self.feature_types
        if ft is not None and not hasattr(X, "iloc") and isinstance(binner.categorical_features, str):
            # category codes marked by feature_types="c" (NumPy or sparse input) are XGBoost's to bin
            binner.set_params(categorical_features=np.array([t == "c" for t in ft], bool))
        if getattr(X, "shape", (1,))[0] == 0 and getattr(X, "ndim", 2) == 2:
            # XGBoost trains on 0 rows; a scikit-learn transformer refuses them: the binner gets a sketch of nothing
            binner.n_features_in_ = X.shape[1]
            self.binner_ = binner.fit_sketch(MomentSketch.empty(X.shape[1], binner.n_moments, int(binner.max_bin),
                                                                binner.n_sample))
        else:
            self.binner_ = binner.fit(X, sample_weight=sample_weight)
        self._hitml_ref = reference_dmatrix(self.binner_, feature_types=ft if not hasattr(X, "iloc") else None)
        try:
            return super().fit(X, y, sample_weight=sample_weight, **fit_kwargs)
        finally:
            self._hitml_ref = None

    def _create_dmatrix(self, ref, **kwargs: Any):
        our = getattr(self, "_hitml_ref", None)
        if our is not None:  # training matrix: our ref; eval matrices: the training matrix as ref, our max_bin
            return xgb.QuantileDMatrix(**kwargs, ref=our if ref is None else ref, nthread=self.n_jobs,
                                       max_bin=self.binner_.max_bin)
        return super()._create_dmatrix(ref=ref, **kwargs)

    def get_xgb_params(self) -> dict[str, Any]:
        params = super().get_xgb_params()
        for k in [k for k in params if k == "binner" or k.startswith("binner__")]:
            params.pop(k)
        if getattr(self, "binner_", None) is not None:
            params["max_bin"] = int(self.binner_.max_bin)
        return params


class XGBRegressor(_BinnedMixin, xgb.XGBRegressor):
    """xgboost.XGBRegressor whose `hist` cuts come from ``binner`` (a QuantileBinner; default QuantileBinner())."""

    def __init__(self, *, binner: QuantileBinner | None = None, **kwargs: Any) -> None:
        self.binner = binner
        super().__init__(**kwargs)

    def fit(self, X, y, *, sample_weight=None, **kwargs):
        return self._hitml_fit(X, y, sample_weight, kwargs)


class XGBClassifier(_BinnedMixin, xgb.XGBClassifier):
    """xgboost.XGBClassifier whose `hist` cuts come from ``binner`` (a QuantileBinner; default QuantileBinner())."""

    def __init__(self, *, binner: QuantileBinner | None = None, **kwargs: Any) -> None:
        self.binner = binner
        super().__init__(**kwargs)

    def fit(self, X, y, *, sample_weight=None, **kwargs):
        return self._hitml_fit(X, y, sample_weight, kwargs)
