"""Every private name of shap, scikit-learn and LightGBM that ``hitml.shap_ext`` uses, and nothing else.

The rest of the adapter imports these from here, never from the host libraries' private modules
(``tests/test_compat.py`` fails otherwise). Each entry names the host versions it was checked on and what breaks
if the host renames or moves it, so a host upgrade is one file to read.
"""
from __future__ import annotations

from typing import Any

import numpy as np

# shap 0.54.x (checked on 0.54.1). shap exports neither its tree parser nor its exceptions publicly. If they move,
# ``import hitml.shap_ext`` raises ImportError: TreeExplainer subclasses shap's behaviour around ``TreeEnsemble``
# (parsing every model), ``DEPRECATED_APPROX`` is the sentinel default of shap's ``approximate`` argument, and the
# three exception types are the ones shap's own TreeExplainer raises (callers catch them by type).
from shap.explainers._tree import DEPRECATED_APPROX, TreeEnsemble
from shap.utils._exceptions import DimensionError, ExplainerError, InvalidModelError

__all__ = [
    "spark_collect_arrow", "spark_java_object",
    "DEPRECATED_APPROX", "DimensionError", "ExplainerError", "InvalidModelError", "TreeEnsemble",
    "average_path_length", "check_feature_names", "hgb_encoded_raw", "hgb_predictors", "hgb_preprocess",
    "hgb_preprocessor", "hgb_raw_predict", "lightgbm_frame", "xgb_dmatrix_props",
]


def xgb_dmatrix_props(ens: Any) -> dict:
    """The DMatrix arguments shap's TreeEnsemble stored for an XGBoost model (``enable_categorical``, ``missing``...).

    shap 0.54.x (``TreeEnsemble._xgb_dmatrix_props``). If shap drops it: an empty dict, so the library margin is
    computed on a plain DMatrix and a categorical model's additivity check fails loudly (never silently).
    """
    return dict(getattr(ens, "_xgb_dmatrix_props", {}))


# ---------------------------------------------------------------------------------------------------- scikit-learn
# Checked on scikit-learn 1.9.1 (pyproject allows >= 1.5). HistGradientBoosting with categorical features keeps
# its encoder, its trees and its raw prediction behind private names; shap's own parser reads ``_predictors`` too. If one moves, the
# explainer raises AttributeError on such models (tests/test_shap_ext_parity.py covers them), never a wrong value.


def average_path_length(n_samples: np.ndarray) -> np.ndarray:
    """IsolationForest's c(n): the mean path length of an unsuccessful search in a binary tree of n samples.

    ``sklearn.ensemble._iforest._average_path_length`` (checked on scikit-learn 1.9.1). If it moves: ImportError when
    an IsolationForest is explained (its library margin).
    """
    from sklearn.ensemble._iforest import _average_path_length

    return _average_path_length(n_samples)


def hgb_preprocessor(model: Any) -> Any:
    """HistGradientBoosting's category encoder (a ColumnTransformer), or None without categorical features."""
    return getattr(model, "_preprocessor", None)


def hgb_predictors(model: Any) -> list:
    """HistGradientBoosting's trees: one list of ``TreePredictor`` per iteration (``model._predictors``)."""
    return model._predictors


def hgb_preprocess(model: Any, X: Any) -> np.ndarray:
    """Rows as HistGradientBoosting encodes them for its trees (category columns first), ``model._preprocess_X``."""
    return model._preprocess_X(X, reset=False)


def hgb_raw_predict(model: Any, X: Any) -> np.ndarray:
    """HistGradientBoosting's raw prediction before the link, shape (n, K) (``model._raw_predict``)."""
    return model._raw_predict(X)


def hgb_encoded_raw(model: Any, enc: np.ndarray) -> np.ndarray:
    """``hgb_raw_predict`` on rows already encoded (``enc`` in the encoded layout): its steps after the encoder."""
    raw = np.zeros((len(enc), model.n_trees_per_iteration_), dtype=model._baseline_prediction.dtype, order="F")
    raw += model._baseline_prediction
    model._predict_iterations(enc, model._predictors, raw, False, 1)
    return raw


def check_feature_names(model: Any, df: Any) -> None:
    """scikit-learn's own feature-name check of a fitted estimator against frame ``df`` (its warning or error).

    A function in ``sklearn.utils.validation`` from scikit-learn 1.6 (checked on 1.9.1), a method of BaseEstimator
    before. If both go: AttributeError on a misplaced frame's columns.
    """
    try:
        from sklearn.utils.validation import _check_feature_names
    except ImportError:  # scikit-learn < 1.6: a method
        model._check_feature_names(df, reset=False)
    else:
        _check_feature_names(model, df, reset=False)


# -------------------------------------------------------------------------------------------------------- LightGBM
def lightgbm_native_kinds() -> tuple[str, ...]:
    """The frame kinds LightGBM's own predict takes besides pandas: polars and pyarrow through narwhals' dispatch
    (``lightgbm.basic.nwd``, LightGBM >= 4.7), pyarrow Tables alone in 4.2-4.6 (``_is_pyarrow_table``)."""
    import lightgbm.basic as lgb_basic

    if getattr(lgb_basic, "nwd", None) is not None:
        return ("polars", "pyarrow")
    return ("pyarrow",) if hasattr(lgb_basic, "_is_pyarrow_table") else ()


def lightgbm_frame(df: Any, pandas_categorical: list | None) -> np.ndarray:
    """A frame as LightGBM's ``predict`` reads it: category columns as the codes of the training categories.

    ``lightgbm.basic._data_from_pandas`` (LightGBM 4.x, checked on 4.7.0; its 4-argument form). If it moves or
    changes its signature: ImportError/TypeError when a LightGBM model reads a frame, never silently other codes.
    """
    from lightgbm.basic import _data_from_pandas

    return _data_from_pandas(df, "auto", "auto", pandas_categorical)[0]


def spark_java_object(obj: Any) -> Any:
    """The JVM object behind a pyspark.ml wrapper (``JavaWrapper._java_obj``; pyspark has no public accessor), or
    None where there is none."""
    return getattr(obj, "_java_obj", None)


def spark_collect_arrow(df: Any) -> list:
    """A pyspark DataFrame's rows as Arrow record batches on the driver (``DataFrame._collect_as_arrow``, what
    ``toPandas`` uses; Spark 3.5 has no public ``toArrow``)."""
    return df._collect_as_arrow()
