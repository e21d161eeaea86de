"""Every private name of XGBoost and scikit-learn that ``hitml.xgboost_ext`` uses, and nothing else.

The rest of the adapter imports these from here, never from the host libraries' private modules or methods
(``tests/test_compat.py`` fails otherwise). Each entry names the host versions it was checked on and what breaks if
the host renames or moves it, so a host upgrade is one file to read.
"""
from __future__ import annotations

from typing import Any

import xgboost as xgb

# scikit-learn's input checks, as QuantileBinner (a scikit-learn transformer) must run them: feature names and
# counts recorded at fit and compared at transform, sample weights read as scikit-learn reads them, and
# get_feature_names_out's names. Checked on scikit-learn 1.9.1 (pyproject allows >= 1.5). If one moves:
# ImportError at ``import hitml.xgboost_ext.binner``, naming it.
from sklearn.utils.validation import _check_feature_names as check_feature_names
from sklearn.utils.validation import _check_feature_names_in as check_feature_names_in
from sklearn.utils.validation import _check_n_features as check_n_features
from sklearn.utils.validation import _check_sample_weight as check_sample_weight

__all__ = ["DMatrixHook", "check_dmatrix_hook", "check_feature_names", "check_feature_names_in", "check_n_features", "check_sample_weight"]


class DMatrixHook:
    """Mixin for a subclass of XGBoost's scikit-learn estimators that builds the matrices ``fit`` trains on.

    XGBoost's ``XGBModel.fit`` builds the training matrix and every eval matrix through its private method
    ``_create_dmatrix(ref, **kwargs)`` (checked on XGBoost 3.4.1; pyproject allows >= 3). A subclass defines
    ``_hitml_dmatrix(ref, **kwargs)``, returning a DMatrix or None for XGBoost's own, and calls
    :func:`check_dmatrix_hook` before fitting.
    """

    def _hitml_dmatrix(self, ref: Any, **kwargs: Any) -> Any:
        return None

    def _create_dmatrix(self, ref: Any, **kwargs: Any) -> Any:
        dm = self._hitml_dmatrix(ref, **kwargs)
        return super()._create_dmatrix(ref=ref, **kwargs) if dm is None else dm


def check_dmatrix_hook() -> None:
    """Raise ``NotImplementedError`` where XGBoost no longer builds ``fit``'s matrices through ``_create_dmatrix``.

    Without the hook, ``fit`` would train, unseen, on XGBoost's own cuts instead of the binner's.
    """
    if not callable(getattr(xgb.XGBModel, "_create_dmatrix", None)):
        raise NotImplementedError(
            f"xgboost {xgb.__version__} builds its training matrix without XGBModel._create_dmatrix, through which "
            "hitml hands it the binner's cuts (checked on xgboost 3.4.1): use hitml.xgboost_ext.quantile_dmatrix "
            "with xgboost.train")
