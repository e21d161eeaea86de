"""The model library's own raw prediction (the reference every explanation must add up to), per model family."""
from __future__ import annotations

from typing import Any

import numpy as np
from ._compat import (TreeEnsemble, average_path_length, hgb_encoded_raw, hgb_preprocessor, hgb_raw_predict,
                      xgb_dmatrix_props)

__all__ = ["LibraryEnsemble", "frame_margin", "library_margin", "transform_margin"]


def transform_margin(margin: np.ndarray, transform: str, y: np.ndarray | None) -> np.ndarray:
    """shap's output transforms (``TreeEnsemble.get_transform``) applied to raw margins."""
    if transform == "identity":
        return margin
    if transform == "logistic":
        return 1.0 / (1.0 + np.exp(-margin))
    if transform == "logistic_nlogloss":
        return np.logaddexp(0.0, margin) - y * margin
    if transform == "squared_loss":
        return (margin - y) ** 2
    raise ValueError(f"unknown output transform {transform!r}")


def _xgboost(ens: Any, X: np.ndarray, tree_limit: int) -> np.ndarray:
    import xgboost

    booster = ens.original_model
    props = xgb_dmatrix_props(ens)
    props.pop("missing", None)  # the explainer has already turned XGBoost's `missing` value into NaN
    if booster.feature_types is not None:
        props["feature_types"] = booster.feature_types
        props["enable_categorical"] = True
    dm = xgboost.DMatrix(np.asarray(X, dtype=np.float32), **props)
    n_iter = tree_limit // ens.num_stacked_models
    return booster.predict(dm, output_margin=True, iteration_range=(0, n_iter), validate_features=False)


def _xgboost_inplace(ens: Any, X: np.ndarray, tree_limit: int) -> np.ndarray:
    """XGBoost's margin through ``inplace_predict``, which (unlike ``DMatrix``) takes ±inf as values."""
    booster = ens.original_model
    n_iter = tree_limit // ens.num_stacked_models
    with np.errstate(over="ignore"):  # beyond float32's range is +-inf, as XGBoost casts
        X = np.asarray(X, dtype=np.float32)
    return booster.inplace_predict(X, iteration_range=(0, n_iter),
                                   predict_type="margin", missing=np.nan, validate_features=False)


def _lightgbm(ens: Any, X: np.ndarray, tree_limit: int) -> np.ndarray:
    booster = ens.original_model
    n_iter = tree_limit // max(int(booster.num_model_per_iteration()), 1)
    return booster.predict(np.asarray(X, dtype=np.float64), raw_score=True, num_iteration=n_iter)


def _isolation_forest_depth(model: Any, X: np.ndarray) -> np.ndarray:
    """Mean path length E[h(x)] (what shap's IsolationForest trees sum to), from scikit-learn's score_samples."""
    score = model.score_samples(X)  # -2 ** (-E[h] / c(max_samples))
    return -np.log2(-score) * average_path_length(np.asarray([model.max_samples_]))[0]


def _hgb_encoded_raw(model: Any, X: np.ndarray) -> np.ndarray:
    """HistGradientBoosting's ``_raw_predict`` on rows already encoded by its own preprocessor (the explainer's
    rows: category codes in input order), i.e. its steps after ``_preprocess_X``."""
    is_cat = np.asarray(model.is_categorical_, dtype=bool)
    layout = np.concatenate([np.flatnonzero(is_cat), np.flatnonzero(~is_cat)])
    enc = np.asarray(X, dtype=np.float64)[:, layout]
    return hgb_encoded_raw(model, enc)


def _sklearn(model: Any, X: np.ndarray) -> np.ndarray | None:
    """scikit-learn's prediction in shap's raw units, or None for a model without a known mapping."""
    name = type(model).__name__
    if name == "IsolationForest":
        return _isolation_forest_depth(model, X)
    if name in ("HistGradientBoostingRegressor", "HistGradientBoostingClassifier"):
        if hgb_preprocessor(model) is not None and isinstance(X, np.ndarray):
            raw = _hgb_encoded_raw(model, X)
        else:
            raw = hgb_raw_predict(model, X)  # before the link (poisson/gamma: log scale); (n, K)
        return raw[:, 0] if raw.shape[1] == 1 else raw
    if name == "GradientBoostingClassifier":
        return model.decision_function(X)
    if name in ("RandomForestClassifier", "ExtraTreesClassifier", "DecisionTreeClassifier",
                "ExtraTreeClassifier"):
        proba = model.predict_proba(X)
        return None if isinstance(proba, list) else proba  # multi-output classifiers: shap's own predictor
    if name in ("RandomForestRegressor", "ExtraTreesRegressor", "DecisionTreeRegressor", "ExtraTreeRegressor",
                "GradientBoostingRegressor"):
        return model.predict(X)
    return None


def _reads_inf(user_model: Any, ens: Any) -> bool:
    """Whether the library's own predict takes ±inf rows and routes them by its split rule, so they reach it as
    they are: CatBoost (``val > border`` on float32 values, NaN replaced by ±inf first: catboost/libs/model/cpu/
    quantization.h, ``BinarizeFeatures`` / ``BinarizeFloats``), LightGBM (``fval <= threshold`` on doubles:
    include/LightGBM/tree.h, ``NumericalDecision``) and HistGradientBoosting (``X <= threshold`` on float64, its
    predict validates with ``ensure_all_finite=False``)."""
    original = getattr(ens, "original_model", None)
    if type(original).__name__ == "CatBoostModel" or ens.model_type in ("catboost", "lightgbm"):
        return True
    return type(user_model).__name__ in ("HistGradientBoostingRegressor", "HistGradientBoostingClassifier")


def _inf_bound(ens: Any) -> float:
    """The largest finite value of the precision the library compares rows in (float32 rows: XGBoost, sklearn)."""
    float32 = np.dtype(ens.input_dtype) == np.float32 or getattr(ens, "_row_dtype", None) is not None
    return float(np.finfo(np.float32 if float32 else np.float64).max)


def _finite(X: np.ndarray, ens: Any, user_model: Any = None) -> np.ndarray | None:
    """Rows the library predicts on as it would read ±inf rows, or None where no finite substitute can be.

    Libraries that take ±inf (:func:`_reads_inf`) get the rows as they are. XGBoost's ``DMatrix`` and
    scikit-learn's trees refuse inf (xgboost src/data/data.cc: "Input data contains `inf`"; sklearn
    ``check_array``), so ±inf become ±B, the largest float32, where that takes the library's branch at every
    split of the feature. XGBoost sends x left when ``x < split_cond`` (float32; predict_fn.h, ``GetNextNode``):
    B and +inf part only at ``split_cond = +inf`` (its exact method writes one where two neighbouring values sum
    past B), -B and -inf only at ``split_cond = -B``. scikit-learn sends x left when ``x <= threshold`` (float32 x,
    float64 threshold; _tree.pyx, ``apply_dense``): B and +inf part only at thresholds in ``[B, +inf)``, -B and
    -inf below -B; its thresholds (_splitter.pyx: a midpoint, or the lower value where the midpoint is a
    neighbour or infinite; ExtraTrees: a draw in ``[min, max)``) lie in ``[-B, B)``. In shap's form of the trees
    (``x <= t`` left, XGBoost's ``t`` the float32 below ``split_cond``) both cases show as a ``t >= B`` (+inf) or
    ``t < -B`` (-inf) on the feature, which gives None for a row's +inf (-inf) there.
    """
    if X.dtype.kind != "f" or _reads_inf(user_model, ens) or not hasattr(ens, "children_left"):
        return X
    big = _inf_bound(ens)
    if big < np.finfo(np.float64).max and X.dtype != np.float32:
        with np.errstate(over="ignore"):  # as the library casts: beyond float32's range is +-inf (the row reader
            X = X.astype(np.float32).astype(X.dtype)  # moves XGBoost's -inf above -DBL_MAX at -inf splits)
    if not np.isinf(X).any():
        return X
    internal = np.asarray(ens.children_left) >= 0
    feat = np.asarray(ens.features)[internal]
    thr = np.asarray(ens.thresholds, dtype=np.float64)[internal]
    cols = np.arange(X.shape[1])
    pos = np.isin(cols, feat[thr >= big]) & np.isposinf(X).any(axis=0)
    neg = np.isin(cols, feat[thr < -big]) & np.isneginf(X).any(axis=0)
    if pos.any() or neg.any():
        return None
    return np.clip(X, -big, big)


def library_margin(user_model: Any, ens: Any, X: np.ndarray, tree_limit: int) -> np.ndarray | None:
    """The library's raw prediction of the first ``tree_limit`` trees on host rows ``X``; None where unknown.

    XGBoost ``output_margin``, LightGBM ``raw_score``, CatBoost ``RawFormulaVal`` (through the converted model's
    ``predict_margin``), scikit-learn ``predict`` / ``predict_proba`` / ``decision_function`` / the raw boosting
    score. scikit-learn forests cut by ``tree_limit`` have no library prediction (None).
    """
    X = np.asarray(X)
    finite = _finite(X, ens, user_model)
    original = getattr(ens, "original_model", None)
    if finite is None:
        # a row's ±inf has no finite stand-in: XGBoost's inplace predict reads inf itself (predict_fn.h,
        # GetNextNode: ``fvalue < split_cond``); any other library has no reading of it to compare with
        return np.asarray(_xgboost_inplace(ens, X, tree_limit)) if ens.model_type == "xgboost" else None
    X = finite
    if callable(getattr(original, "predict_margin", None)):  # converted models (CatBoost, treelite)
        return np.asarray(original.predict_margin(X, tree_limit))
    if ens.model_type == "xgboost":
        return np.asarray(_xgboost(ens, X, tree_limit))
    if ens.model_type == "lightgbm":
        return np.asarray(_lightgbm(ens, X, tree_limit))
    if tree_limit < ens.values.shape[0] or user_model is None or type(user_model).__module__.split(".")[0] != "sklearn":
        return None
    with np.errstate(over="ignore", invalid="ignore"):   # its finiteness check sums the rows: +-FLT_MAX overflow
        out = _sklearn(user_model, X)
    return None if out is None else np.asarray(out, dtype=np.float64)


def frame_margin(user_model: Any, ens: Any, df: Any, tree_limit: int) -> np.ndarray | None:
    """The library's raw prediction of the user's own DataFrame (the library reads its names, categories and
    missing values itself); None where the library cannot take it as it is (±inf, duplicate names, no rows), so
    the caller predicts on the rows as read instead."""
    import pandas as pd

    if df.shape[0] == 0 or df.columns.duplicated().any():
        return None
    names = _model_names(user_model, ens)
    cols = [str(c) for c in df.columns]
    if names is not None and cols != names and not (ens.model_type == "catboost" and sorted(cols) == sorted(names)):
        return None  # names the library would refuse or read otherwise: the rows as read are predicted instead
    numeric = df.select_dtypes(include="number")
    if numeric.shape[1] and (np.abs(numeric.to_numpy(dtype=np.float64, na_value=np.nan)) > _inf_bound(ens)).any():
        return None  # ±inf, or beyond the float32 range of a library that rounds rows to float32 (XGBoost refuses it)
    original = getattr(ens, "original_model", None)
    if callable(getattr(original, "predict_margin", None)):
        if type(original).__name__ != "CatBoostModel" or original.model is None:  # JSON alone: the rows as read
            return None
        return np.asarray(original.predict_margin(df, tree_limit))
    if ens.model_type == "xgboost":
        import xgboost

        missing = getattr(user_model, "missing", np.nan) if hasattr(user_model, "get_booster") else np.nan
        dm = xgboost.DMatrix(df, missing=np.nan if missing is None else missing, enable_categorical=True)
        n_iter = tree_limit // ens.num_stacked_models
        booster = ens.original_model
        return np.asarray(booster.predict(dm, output_margin=True, iteration_range=(0, n_iter),
                                          validate_features=booster.feature_names is not None))
    if ens.model_type == "lightgbm":
        booster = ens.original_model
        n_iter = tree_limit // max(int(booster.num_model_per_iteration()), 1)
        return np.asarray(booster.predict(df, raw_score=True, num_iteration=n_iter))
    if isinstance(df, pd.DataFrame) and user_model is not None and _is_sklearn_model(user_model) \
            and tree_limit >= ens.values.shape[0]:
        out = _sklearn(user_model, df)
        return None if out is None else np.asarray(out, dtype=np.float64)
    return None


def _model_names(user_model: Any, ens: Any) -> list[str] | None:
    """The feature names the library checks a frame against (None where it keeps none)."""
    try:
        if ens.model_type == "xgboost":
            names = ens.original_model.feature_names
        elif ens.model_type == "lightgbm":
            names = ens.original_model.feature_name()
        elif getattr(user_model, "feature_names_in_", None) is not None:
            names = user_model.feature_names_in_
        else:
            names = getattr(user_model, "feature_names_", None)
    except AttributeError:  # a model type without these attributes (a library error on a fitted model propagates)
        return None
    return None if names is None else [str(n) for n in names]


def _is_sklearn_model(model: Any) -> bool:
    return type(model).__module__.split(".")[0] == "sklearn"


class LibraryEnsemble(TreeEnsemble):
    """shap's ``TreeEnsemble`` whose ``predict`` is the model library's own prediction where one is known.

    shap's explainer uses ``predict`` for the interventional expected value; taking the library's numbers there
    means models shap cannot predict itself (XGBoost forests, category sets) and parsing errors cannot hide.
    """

    _library_model: Any = None

    def predict(self, X: Any, y: Any = None, output: str | None = None, tree_limit: int | None = None) -> Any:
        if output is None or output == self.model_output:
            if tree_limit is None:
                tree_limit = self.values.shape[0] if self.tree_limit is None else int(self.tree_limit)
            elif tree_limit < 0 or tree_limit > self.values.shape[0]:
                tree_limit = self.values.shape[0]
            Xh = np.asarray(X, dtype=np.float64).astype(self.input_dtype)
            margin = library_margin(self._library_model, self, Xh, int(tree_limit))
            if margin is not None:
                if margin.ndim == 2 and margin.shape[1] == 1:
                    margin = margin[:, 0]
                y_arr = None if y is None else np.asarray(y, dtype=np.float64).reshape(-1)
                if y_arr is not None and margin.ndim == 2:
                    y_arr = y_arr[:, None]
                return transform_margin(margin, self.get_transform(), y_arr)
        return super().predict(X, y=y, output=output, tree_limit=tree_limit)
