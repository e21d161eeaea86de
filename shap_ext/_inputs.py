"""Validation and conversion of the rows to explain and of background data (NumPy, pandas, CuPy)."""
from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from hitml.kernels.device import array_module, is_cupy_array

from ._compat import check_feature_names, hgb_preprocess, hgb_preprocessor, lightgbm_frame

__all__ = ["InputReader", "encode_frame", "model_n_features", "to_matrix"]


def encode_frame(df: pd.DataFrame, what: str = "X") -> pd.DataFrame:
    """A float DataFrame: category columns become their codes (-1 becomes NaN, as XGBoost and LightGBM read them).

    Object, string and other non-numeric columns raise ValueError naming them.
    """
    bad = []
    cols = {}
    for j, name in enumerate(df.columns):
        col = df.iloc[:, j]  # by position: duplicate names are read as shap reads them
        if isinstance(col.dtype, pd.CategoricalDtype):
            codes = col.cat.codes.to_numpy().astype(np.float64)
            codes[codes < 0] = np.nan
            cols[j] = codes
        elif pd.api.types.is_bool_dtype(col.dtype) or pd.api.types.is_numeric_dtype(col.dtype):
            cols[j] = col.to_numpy(dtype=np.float64, na_value=np.nan)
        else:
            bad.append(f"{name!r} ({col.dtype})")
    if bad:
        raise ValueError(
            f"{what} has non-numeric columns: {', '.join(bad)}. TreeExplainer needs numeric features; encode them "
            "(e.g. as pandas 'category' dtype, whose codes the tree models split on) before explaining."
        )
    out = pd.DataFrame(cols, index=df.index)
    out.columns = df.columns
    return out


def _dmatrix_dense(dm: Any) -> np.ndarray:
    """A DMatrix's rows as a dense float array: entries it does not store (XGBoost's missing values) are NaN."""
    csr = dm.get_data()
    out = np.full(csr.shape, np.nan)
    rows = np.repeat(np.arange(csr.shape[0]), np.diff(csr.indptr))
    out[rows, csr.indices] = csr.data
    return out


def _numeric_host(X: Any, what: str, reader: "InputReader | None" = None) -> np.ndarray:
    if isinstance(X, pd.DataFrame):
        return reader.frame(X, what) if reader is not None else encode_frame(X, what).to_numpy()
    if isinstance(X, pd.Series):  # one row of a frame (``df.iloc[i]``): category features hold their labels
        if isinstance(X.dtype, pd.CategoricalDtype) or not (
            pd.api.types.is_numeric_dtype(X.dtype) or pd.api.types.is_bool_dtype(X.dtype)
        ) or (reader is not None and reader.stored_categories()):
            row = _series_row(X, reader)
            return _numeric_host(row, what, reader)[0]
        if reader is not None and reader.reads_frames:
            return reader.frame(X.to_frame().T, what)[0]
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
    if arr.dtype.kind not in "biuf":
        if arr.dtype.kind != "O":
            raise ValueError(f"{what} has non-numeric dtype {arr.dtype}; TreeExplainer needs numeric features")
        try:
            arr = arr.astype(np.float64)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"{what} contains non-numeric values ({exc}); TreeExplainer needs numeric features") from None
    if reader is not None and reader.reads_arrays:
        flat = arr.ndim == 1
        out = reader.array(arr.reshape(1, -1) if flat else arr)
        return out[0] if flat else out
    return arr


def _series_row(X: pd.Series, reader: "InputReader | None") -> pd.DataFrame:
    """One row of mixed values (``df.iloc[i]``) as a one-row frame; labels of the model's category features become
    pandas categories with the model's stored categories, as the row's frame had them."""
    row = pd.DataFrame([X.to_numpy()], columns=X.index).infer_objects()
    cats = reader.stored_categories() if reader is not None else {}
    for j in range(row.shape[1]):
        if j in cats:  # a label of a category feature (a number or a string)
            row.isetitem(j, pd.Categorical(row.iloc[:, j].astype(object), categories=cats[j]))
    return row


def to_matrix(X: Any, n_features: int | None, dtype: np.dtype, what: str = "X",
              reader: "InputReader | None" = None) -> tuple[Any, bool]:
    """``(matrix, flat)``: a 2-D array of ``dtype`` (CuPy stays CuPy); ``flat`` when a single 1-D row was given.

    ``reader`` reads frames and rows as the model's library does (see :class:`InputReader`). Zero rows give an
    empty matrix (shap returns empty values for them). Raises ValueError for zero features, a wrong number of
    features, or non-numeric data.
    """
    if is_cupy_array(X):
        if X.dtype.kind not in "biuf":
            raise ValueError(f"{what} has non-numeric dtype {X.dtype}; TreeExplainer needs numeric features")
        arr = X
    else:
        arr = _numeric_host(X, what, reader)
    flat = arr.ndim == 1
    if flat:
        arr = arr.reshape(1, -1)
    if arr.ndim != 2:
        raise ValueError(f"{what} must be 1-D (one row) or 2-D (rows x features), got {arr.ndim} dimensions")
    if arr.shape[1] == 0:
        raise ValueError(f"{what} has no features (shape {tuple(arr.shape)}); nothing to explain")
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


LIGHTGBM_ZERO = float(np.float32(1e-35))  # LightGBM's kZeroThreshold (a float constant): |x| <= it IsZero


def _library(model: Any) -> str | None:
    mod = type(model).__module__.split(".")[0]
    return mod if mod in ("xgboost", "lightgbm", "sklearn", "catboost") else None


def _duplicates(columns: Any) -> list:
    seen, dup = set(), []
    for c in columns:
        if c in seen and c not in dup:
            dup.append(c)
        seen.add(c)
    return dup


def misplaced(columns: Any, names: list[str] | None) -> list[str]:
    """Frame columns that carry one of the model's feature names at another position (a frame read by position
    would explain them as other features). Names the model does not know are read by position, as shap reads them."""
    if names is None:
        return []
    pos = {n: j for j, n in enumerate(names)}
    return [str(c) for j, c in enumerate(columns) if str(c) in pos and pos[str(c)] != j]


class InputReader:
    """Rows as the model's library reads them: the one place where each library's reading is reproduced.

    - XGBoost: the library itself validates a frame (a one-row probe through ``DMatrix(enable_categorical=True)``
      and ``predict(validate_features=True)``: ``feature_names mismatch``, duplicate names, categories unseen in
      training raise XGBoost's own errors); category columns are re-coded by label against the categories stored in
      the model (``Booster.get_categories``), NaN categories are missing; the sklearn wrapper's ``missing`` value
      reads as NaN.
    - LightGBM: ``lightgbm.basic._data_from_pandas`` with the model's ``pandas_categorical`` (category columns
      re-coded by label; unseen and NaN labels become NaN); columns by position, as LightGBM reads them (a frame
      whose names are the model's in another order warns); values within 1e-35 of zero are missing on features whose
      splits use missing type Zero.
    - scikit-learn: the estimator's own feature-name check (``ValueError`` for other names or order); a
      HistGradientBoosting model with categorical features reads rows through its own ``_preprocess_X`` (its
      OrdinalEncoder: unknown and NaN categories become NaN, the missing side), placed back in input order.
    - CatBoost: duplicate names raise ``CatBoostError``; a frame with the model's names in another order is read by
      name, as CatBoost reads it, and values come back in the frame's column order (:meth:`output_order`).
    """

    def __init__(self, model: Any) -> None:
        self.model = model
        self.library = _library(model)
        self.names: list[str] | None = None
        self.missing: float | None = None
        self.zero_features: np.ndarray | None = None   # LightGBM features with missing type Zero (set later)
        self.cat_features: np.ndarray | None = None    # features whose category splits truncate values toward 0
        self.hgb_layout: Any = None
        self._xgb_cats: dict[int, list] | None = None
        self._stored: dict[int, list] | None = None
        lib = self.library
        try:
            if lib == "xgboost":
                self.booster = model.get_booster() if hasattr(model, "get_booster") else model
                self.names = self.booster.feature_names
                self.types = self.booster.feature_types or []
                m = getattr(model, "missing", np.nan) if hasattr(model, "get_booster") else np.nan
                self.missing = None if m is None or np.isnan(m) else float(m)
            elif lib == "lightgbm":
                self.booster = model.booster_ if hasattr(model, "booster_") else model
                self.names = list(self.booster.feature_name())
            elif lib == "sklearn":
                names = getattr(model, "feature_names_in_", None)
                self.names = None if names is None else [str(n) for n in names]
                if "HistGradientBoosting" in type(model).__name__ and hgb_preprocessor(model) is not None:
                    is_cat = np.asarray(model.is_categorical_, dtype=bool)
                    self.hgb_layout = np.concatenate([np.flatnonzero(is_cat), np.flatnonzero(~is_cat)])
            elif lib == "catboost":
                self.names = [str(n) for n in model.feature_names_]
        except Exception:  # noqa: BLE001 - an unfitted model: the explainer reports shap's own error
            self.library = None

    # -- what the explainer asks -------------------------------------------------------------------------------
    @property
    def reads_frames(self) -> bool:
        return self.library in ("xgboost", "sklearn", "catboost", "lightgbm")

    @property
    def reads_arrays(self) -> bool:
        return self.hgb_layout is not None

    def stored_categories(self) -> dict[int, list]:
        """``{column: categories}`` of the model's category features, where the model stores their labels."""
        if self._stored is None:
            self._stored = self._read_stored_categories()
        return self._stored

    def _read_stored_categories(self) -> dict[int, list]:
        if self.library == "xgboost":
            return self._xgboost_categories()
        if self.library == "lightgbm" and self.booster.pandas_categorical:
            infos = self.booster.dump_model().get("feature_infos", {})
            cat_cols = [j for j, n in enumerate(self.names) if infos.get(n, {}).get("values")]
            return dict(zip(cat_cols, self.booster.pandas_categorical))
        if self.hgb_layout is not None:
            enc = hgb_preprocessor(self.model).named_transformers_["encoder"]
            return {int(c): [v for v in cats if not pd.isna(v)] for c, cats in zip(self.hgb_layout, enc.categories_)}
        return {}

    def keeps_values(self) -> bool:
        """True where missing_rules changes no value (no missing value other than NaN, no LightGBM zero-as-missing
        features, no category features)."""
        zero = self.zero_features is not None and len(self.zero_features)
        cats = self.cat_features is not None and len(self.cat_features)
        return self.missing is None and not zero and not cats

    def missing_rules(self, arr: Any) -> Any:
        """Values as the library's split rules read them (NumPy or CuPy): XGBoost's ``missing`` value and
        LightGBM's near-zero values (missing type Zero) become NaN; on category features of XGBoost and LightGBM,
        a value in (-1, 0) is category 0 (both truncate to an int before testing for a negative category)."""
        if self.keeps_values():
            return arr
        zero = self.zero_features is not None and len(self.zero_features)
        cats = self.cat_features is not None and len(self.cat_features)
        xp = array_module(arr)
        arr = arr.copy()
        if self.missing is not None:
            arr[arr == self.missing] = np.nan
        if zero:
            cols = arr[:, self.zero_features]
            arr[:, self.zero_features] = xp.where(xp.abs(cols) <= LIGHTGBM_ZERO, np.nan, cols)
        if cats:
            cols = arr[:, self.cat_features]
            arr[:, self.cat_features] = xp.where((cols > -1) & (cols < 0), 0.0, cols)
        return arr

    def output_order(self, X: Any) -> np.ndarray | None:
        """Columns of the model's values to return, in the frame's order (CatBoost reads frames by name)."""
        if self.library != "catboost" or not isinstance(X, (pd.DataFrame, pd.Series)) or self.names is None:
            return None
        cols = [str(c) for c in (X.columns if isinstance(X, pd.DataFrame) else X.index)]
        if cols == self.names or sorted(cols) != sorted(self.names) or _duplicates(cols):
            return None
        pos = {n: j for j, n in enumerate(self.names)}
        return np.asarray([pos[c] for c in cols], dtype=np.int64)

    # -- frames ---------------------------------------------------------------------------------------------------
    def frame(self, df: pd.DataFrame, what: str = "X") -> np.ndarray:
        """``df`` as a float64 matrix in the model's feature order, read as the model's library reads it."""
        if self.library == "xgboost":
            return self._xgboost_frame(df, what)
        if self.library == "lightgbm":
            return self._lightgbm_frame(df, what)
        if self.library == "sklearn":
            return self._sklearn_frame(df, what)
        if self.library == "catboost":
            return self._catboost_frame(df, what)
        return encode_frame(df, what).to_numpy()

    def array(self, arr: np.ndarray) -> np.ndarray:
        """A 2-D host array as the library reads it (HistGradientBoosting: its own category encoding)."""
        if self.hgb_layout is None or arr.shape[0] == 0:
            return arr
        import warnings

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="X does not have valid feature names")
            return self._hgb_back(hgb_preprocess(self.model, arr))

    def _hgb_back(self, enc: np.ndarray) -> np.ndarray:
        out = np.empty(enc.shape, dtype=np.float64)
        out[:, self.hgb_layout] = enc
        return out

    def _xgboost_categories(self) -> dict[int, list]:
        if self._xgb_cats is None:
            cats: dict[int, list] = {}
            try:
                arrays = self.booster.get_categories(export_to_arrow=True).to_arrow()
            except Exception:  # noqa: BLE001 - XGBoost < 3.1 stores no categories: codes are read as they are
                arrays = []
            for j, (_, values) in enumerate(arrays or []):
                if values is not None and len(values):
                    cats[j] = values.to_pylist()
            self._xgb_cats = cats
        return self._xgb_cats

    def _xgboost_frame(self, df: pd.DataFrame, what: str) -> np.ndarray:
        import xgboost

        # XGBoost's own checks (names and their order, duplicates, unseen categories, column types), on one row
        # whose numeric values are zeroed (XGBoost would refuse an inf the explainer can take)
        probe = df.iloc[:1].copy()
        for j in range(probe.shape[1]):
            col = probe.iloc[:, j]
            if pd.api.types.is_numeric_dtype(col.dtype) and not isinstance(col.dtype, pd.CategoricalDtype):
                probe.isetitem(j, np.zeros(len(probe), dtype=col.dtype))
        dm = xgboost.DMatrix(probe, enable_categorical=True)
        self.booster.predict(dm, validate_features=bool(misplaced(df.columns, self.names)))
        cats = self._xgboost_categories()
        cols = {}
        for j in range(df.shape[1]):
            col = df.iloc[:, j]
            if isinstance(col.dtype, pd.CategoricalDtype) and j in cats:
                codes = pd.Categorical(col, categories=cats[j]).codes.astype(np.float64)
                codes[codes < 0] = np.nan
                cols[j] = codes
            else:
                cols[j] = col
        out = encode_frame(pd.DataFrame({j: c for j, c in cols.items()}, index=df.index), what).to_numpy()
        return out

    def _lightgbm_frame(self, df: pd.DataFrame, what: str) -> np.ndarray:
        import warnings

        cols = [str(c) for c in df.columns]
        if misplaced(cols, self.names) and not _duplicates(cols):
            warnings.warn(
                f"{what}'s columns {misplaced(cols, self.names)} carry the model's feature names at other positions; "
                f"LightGBM reads columns by position (as its predict does), so the values are for the model's "
                f"features {self.names}, not for {cols}. Order the columns as the model's.", UserWarning, stacklevel=4)
        if df.shape[0] == 0:
            return encode_frame(df, what).to_numpy()
        arr = lightgbm_frame(df, self.booster.pandas_categorical)
        return np.asarray(arr, dtype=np.float64)

    def _sklearn_frame(self, df: pd.DataFrame, what: str) -> np.ndarray:
        dup = _duplicates(df.columns)
        if not dup and self.hgb_layout is None and misplaced(df.columns, self.names):
            check_feature_names(self.model, df)
        if self.hgb_layout is None:
            return encode_frame(df, what).to_numpy()
        if df.shape[0] == 0:
            return np.empty((0, df.shape[1]))
        cols = [str(c) for c in df.columns]
        if dup or (self.names is not None and cols != self.names and not misplaced(cols, self.names)):
            # duplicate or unknown names: read by position, as shap reads such a frame (scikit-learn would refuse)
            return self.array(df.to_numpy())
        return self._hgb_back(hgb_preprocess(self.model, df))

    def _catboost_frame(self, df: pd.DataFrame, what: str) -> np.ndarray:
        order = self.catboost_names(df)
        if order is not None:
            df = df.iloc[:, np.argsort(order)]  # the model's order, as CatBoost reads a frame by name
        return encode_frame(df, what).to_numpy()

    def catboost_names(self, df: pd.DataFrame) -> np.ndarray | None:
        """CatBoost's name rules for a frame: duplicates and other names raise ``CatBoostError``; the model's
        names in another order are read by name (returns :meth:`output_order`)."""
        import catboost

        cols = [str(c) for c in df.columns]
        dup = _duplicates(cols)
        if dup:
            raise catboost.CatBoostError(f"All feature names should be different, but '{dup[0]}' used more than once.")
        order = self.output_order(df)
        wrong = misplaced(cols, self.names) if order is None else []
        if wrong:
            bad = cols.index(wrong[0])
            raise catboost.CatBoostError(f"At position {bad} should be feature with name {self.names[bad]} "
                                         f"(found {cols[bad]}).")
        return order
