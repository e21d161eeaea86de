"""Validation and conversion of the rows to explain and of background data (NumPy, pandas, CuPy)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hitml.kernels.device import is_cupy_array

__all__ = ["encode_frame", "model_n_features", "to_matrix"]


def encode_frame(df: pd.DataFrame, what: str = "X") -> pd.DataFrame:
    """A float DataFrame: category columns become their codes (-1 becomes NaN, as XGBoost and LightGBM read them).

    Object, string and other non-numeric columns raise ValueError naming them.
    """
    bad = []
    cols = {}
    for name in df.columns:
        col = df[name]
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes = col.cat.codes.to_numpy().astype(np.float64)
            codes[codes < 0] = np.nan
            cols[name] = codes
        elif pd.api.types.is_bool_dtype(col.dtype) or pd.api.types.is_numeric_dtype(col.dtype):
            cols[name] = col.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            bad.append(f"{name!r} ({col.dtype})")
    if bad:
        raise ValueError(
            f"{what} has non-numeric columns: {', '.join(bad)}. TreeExplainer needs numeric features; encode them "
            "(e.g. as pandas 'category' dtype, whose codes the tree models split on) before explaining."
        )
    return pd.DataFrame(cols, index=df.index, columns=df.columns)


def _dmatrix_dense(dm: Any) -> np.ndarray:
    """A DMatrix's rows as a dense float array: entries it does not store (XGBoost's missing values) are NaN."""
    csr = dm.get_data()
    out = np.full(csr.shape, np.nan)
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    out[rows, csr.indices] = csr.data
    return out


def _numeric_host(X: Any, what: str) -> np.ndarray:
    if isinstance(X, pd.DataFrame):
        return encode_frame(X, what).to_numpy()
    if isinstance(X, pd.Series):
        if isinstance(X.dtype, pd.CategoricalDtype) or not (
            pd.api.types.is_numeric_dtype(X.dtype) or pd.api.types.is_bool_dtype(X.dtype)
        ):
            return _numeric_host(X.to_frame().T.infer_objects(), what)[0]
        return X.to_numpy(dtype=np.float64, na_value=np.nan)
    if type(X).__name__ == "DMatrix" and type(X).__module__.startswith("xgboost"):
        return _dmatrix_dense(X)
    if type(X).__name__ == "Pool" and type(X).__module__.startswith("catboost"):
        if X.get_cat_feature_indices():
            raise ValueError(f"{what} is a catboost.Pool with categorical features, which only a CatBoost model "
                             "with those features can explain")
        return np.asarray(X.get_features(), dtype=np.float64)
    if hasattr(X, "tocsr") or type(X).__name__ in ("QuantileDMatrix",):
        raise TypeError(
            f"{what} of type {type(X).__module__}.{type(X).__name__} is not supported by the hitml backend; "
            "pass a dense NumPy/CuPy array or a pandas DataFrame"
        )
    arr = np.asarray(X)
    if arr.dtype.kind in "biuf":
        return arr
    if arr.dtype.kind == "O":
        try:
            return arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what} contains non-numeric values ({exc}); TreeExplainer needs numeric features") from None
    raise ValueError(f"{what} has non-numeric dtype {arr.dtype}; TreeExplainer needs numeric features")


def to_matrix(X: Any, n_features: int | None, dtype: np.dtype, what: str = "X") -> tuple[Any, bool]:
    """``(matrix, flat)``: a 2-D array of ``dtype`` (CuPy stays CuPy); ``flat`` when a single 1-D row was given.

    Raises ValueError for empty input, a wrong number of features, or non-numeric data.
    """
    if is_cupy_array(X):
        if X.dtype.kind not in "biuf":
            raise ValueError(f"{what} has non-numeric dtype {X.dtype}; TreeExplainer needs numeric features")
        arr = X
    else:
        arr = _numeric_host(X, what)
    flat = arr.ndim == 1
    if flat:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 1-D (one row) or 2-D (rows x features), got {arr.ndim} dimensions")
    if arr.shape[0] == 0 or arr.shape[1] == 0:
        raise ValueError(f"{what} is empty (shape {tuple(arr.shape)}); nothing to explain")
    if n_features is not None and arr.shape[1] != n_features:
        raise ValueError(f"{what} has {arr.shape[1]} features, but the model was trained on {n_features} features")
    if arr.dtype != dtype:
        arr = arr.astype(dtype)
    return arr, flat


def model_n_features(model: Any, ensemble: Any) -> tuple[int, bool]:
    """``(M, exact)``: the model's number of input features; ``exact=False`` when only a lower bound is known."""
    for getter in (
        lambda m: m.n_features_in_,
        lambda m: m.num_features(),  # xgboost.Booster
        lambda m: m.num_feature(),  # lightgbm.Booster
        lambda m: len(m.feature_names_),  # catboost
    ):
        try:
            n = int(getter(model))
        except Exception:  # noqa: BLE001 - attribute probing across libraries
            continue
        if n > 0:
            return n, True
    if ensemble is None:
        return 0, False
    internal = ensemble.children_left >= 0
    used = ensemble.features[internal]
    return (int(used.max()) + 1 if used.size else 1), False
