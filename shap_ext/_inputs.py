"""Validation and conversion of the rows to explain and of background data (NumPy, pandas, polars, pyarrow, CuPy)."""
from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pandas as pd

from hitml.kernels.device import array_module, is_cupy_array

from ._compat import check_feature_names, hgb_preprocess, hgb_preprocessor, lightgbm_frame, lightgbm_native_kinds

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
    if check_native(X, reader, what) is not None:  # a polars DataFrame or pyarrow Table the library takes
        return _native_host(X, what, reader)
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
        dense = _dmatrix_dense(X)
        return reader.dmatrix_codes(X, dense) if reader is not None and reader.library == "xgboost" else dense
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
        try:  # a lightgbm.Booster casts an object array to float32 (lightgbm.basic._np2d_to_np1d); its scikit-learn
            # wrappers validate X to float64 first (sklearn's check_array, dtype="numeric")
            raw_booster = reader is not None and reader.library == "lightgbm" and reader.booster is reader.model
            arr = arr.astype(np.float32 if raw_booster else np.float64)
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


# -- polars DataFrames and pyarrow Tables ------------------------------------------------------------------------
# Taken where the model's library takes them in its own predict, and read as that library reads them:
#   XGBoost: both (xgboost/data.py, dispatch_data_backend: _is_polars, _is_arrow); a polars frame goes through
#     _transform_polars_df, which needs pyarrow and refuses polars.Categorical, then _transform_arrow_table.
#   LightGBM >= 4.7: both (lightgbm/basic.py, _InnerPredictor.predict: narwhals' is_into_dataframe, then one Arrow C
#     stream, LGBM_BoosterPredictForArrowStream); 4.2-4.6: pyarrow Tables (_is_pyarrow_table).
#   scikit-learn: both (sklearn/utils/validation.py, check_array and _get_feature_names through narwhals;
#     HistGradientBoosting's _preprocess_X through its ColumnTransformer).
#   CatBoost: polars DataFrames (catboost/core.py, ARRAY_TYPES and Pool._check_data_type); a pyarrow Table raises.
_NATIVE_NAMES = {"polars": "a polars DataFrame", "pyarrow": "a pyarrow Table"}
_LIBRARY_NAMES = {"xgboost": "XGBoost", "lightgbm": "LightGBM", "sklearn": "scikit-learn", "catboost": "CatBoost",
                  "pyspark": "Spark ML"}


def _native_kind(X: Any) -> str | None:
    """"polars" for a polars DataFrame, "pyarrow" for a pyarrow Table, "other" for any other polars or pyarrow
    object (LazyFrame, Series, RecordBatch, Array, ...), None otherwise. Imports neither package."""
    roots = {cls.__module__.split(".")[0] for cls in type(X).__mro__}
    for root, frame in (("polars", "DataFrame"), ("pyarrow", "Table")):
        if root in roots:
            mod = sys.modules.get(root)
            return root if mod is not None and isinstance(X, getattr(mod, frame)) else "other"
    return None


def native_columns(X: Any) -> list[str] | None:
    """The column names of a polars DataFrame or pyarrow Table, in order; None for any other input."""
    kind = _native_kind(X)
    if kind == "polars":
        return list(X.columns)
    if kind == "pyarrow":
        return list(X.column_names)
    return None


def native_rows(X: Any) -> np.ndarray:
    """A polars DataFrame's or pyarrow Table's values as a 2-D NumPy array (``DataFrame.values`` for pandas):
    labels of category columns, None for nulls (an object array where the columns are not all numbers)."""
    if _native_kind(X) == "polars":
        return X.to_numpy()
    if X.num_columns == 0:
        return np.empty((X.num_rows, 0))
    return np.column_stack([c.to_numpy(zero_copy_only=False) for c in X.columns])


def _native_kinds(library: str | None) -> tuple[str, ...]:
    """The kinds (``_native_kind``) that ``library``'s own predict takes."""
    if library in ("xgboost", "sklearn"):
        return ("polars", "pyarrow")
    if library == "catboost":
        return ("polars",)
    if library == "lightgbm":
        return lightgbm_native_kinds()
    return ()


def check_native(X: Any, reader: "InputReader | None", what: str = "X") -> list[str] | None:
    """The column names of a polars DataFrame or pyarrow Table that the model's library takes; None for inputs of
    neither package. TypeError, naming the accepted types, for one the library's own predict does not take (a
    pyarrow Table for CatBoost, any for a model without a library) and for other polars/pyarrow objects."""
    kind = _native_kind(X)
    if kind is None:
        return None
    library = reader.library if reader is not None else None
    kinds = _native_kinds(library)
    if kind in kinds:
        return native_columns(X)
    accepted = ", ".join(["a NumPy array", "a pandas DataFrame"] + [_NATIVE_NAMES[k] for k in kinds])
    model = f"a {_LIBRARY_NAMES[library]} model" if library else "a model without a host library"
    raise TypeError(f"{what} of type {type(X).__module__}.{type(X).__qualname__} is not supported for {model}; "
                    f"pass {accepted} (a polars DataFrame or pyarrow Table is taken where the library's own "
                    "predict takes it, and read as it reads it)")


def _native_host(X: Any, what: str, reader: "InputReader") -> np.ndarray:
    """A polars DataFrame or pyarrow Table (that ``check_native`` passed) as a float64 matrix in the model's feature
    order, read as the model's library reads that type."""
    kind = _native_kind(X)
    if reader.library == "xgboost":
        return _xgboost_native(X, kind, what, reader)
    if reader.library == "lightgbm":
        return _lightgbm_native(X, kind, what, reader)
    if reader.library == "sklearn":
        return _sklearn_native(X, reader)
    return _catboost_native_rows(X, what, reader)


def _native_head(X: Any, kind: str) -> Any:
    """The first row (none of none), with the frame's types, names and dictionaries."""
    return X.head(1) if kind == "polars" else X.slice(0, 1)


def _polars_float64(X: Any, what: str) -> np.ndarray:
    """A polars DataFrame's numbers and booleans as float64, nulls NaN, through polars alone (no pyarrow).
    Integers round to the nearest double, as a C++ ``static_cast<double>`` does."""
    pl = sys.modules["polars"]
    out = np.empty((X.height, X.width))
    for j, s in enumerate(X.get_columns()):
        if not (s.dtype.is_integer() or s.dtype.is_float() or s.dtype == pl.Boolean):
            raise TypeError(f"{what}'s column {s.name!r} has polars type {s.dtype}, which is not a number")
        out[:, j] = s.cast(pl.Float64).to_numpy()
    return out


def _arrow_float64(col: Any, what: str) -> np.ndarray:
    """An Arrow array's numbers and booleans as float64, nulls NaN (integers round to the nearest double)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not (pa.types.is_integer(col.type) or pa.types.is_floating(col.type) or pa.types.is_boolean(col.type)):
        raise TypeError(f"{what} has a column of Arrow type {col.type}, which is not a number")
    # safe=False: integers beyond 2**53 round instead of raising; a copy (a zero-copy view is read-only)
    return np.array(pc.cast(col, pa.float64(), safe=False).to_numpy(zero_copy_only=False), dtype=np.float64)


def _xgboost_native(X: Any, kind: str, what: str, reader: "InputReader") -> np.ndarray:
    import xgboost

    # XGBoost's own checks on the first row: pyarrow for a polars frame, polars.Categorical refused, dictionaries
    # of strings only, column types, names and their order (predict's validate_features=True default), duplicate
    # names, categories unseen in training (the whole dictionary is checked, used or not). Float values become
    # 0 or NaN (inf * 0): XGBoost would refuse an inf the explainer can take.
    probe = _native_head(X, kind)
    if kind == "polars":
        pl = sys.modules["polars"]
        probe = probe.with_columns([(pl.col(n) * 0).alias(n) for n, t in probe.schema.items() if t.is_float()])
    else:
        import pyarrow as pa
        import pyarrow.compute as pc

        for j, field in enumerate(probe.schema):
            if pa.types.is_floating(field.type):
                probe = probe.set_column(j, field, pc.multiply(probe.column(j), 0).cast(field.type))
    reader.booster.predict(xgboost.DMatrix(probe, enable_categorical=True), validate_features=True)
    # xgboost.data._transform_polars_df reads a polars frame as its Arrow table
    return _xgboost_arrow_rows(X.to_arrow() if kind == "polars" else X, reader._xgboost_categories(), what)


def _xgboost_arrow_rows(table: Any, cats: dict, what: str) -> np.ndarray:
    """A pyarrow Table as XGBoost reads it (xgboost.data._transform_arrow_table, ArrowTransformed): each column's
    chunks combined; numbers and booleans (cast to int8 there) by value, nulls missing; a dictionary column by
    label, re-coded to the model's stored categories (XGBoost >= 3.1 re-codes by label at predict), or by its
    indices where the model stores none; null entries missing."""
    import pyarrow as pa

    out = np.empty((table.num_rows, table.num_columns))
    for j in range(table.num_columns):
        col = table.column(j).combine_chunks()  # one dictionary for all chunks, as XGBoost combines them
        if not pa.types.is_dictionary(col.type):
            out[:, j] = _arrow_float64(col, what)
            continue
        codes = _arrow_float64(col.indices, what)
        if j in cats:
            labels = pd.Index(col.dictionary.to_pylist(), dtype=object)
            lut = pd.Index(cats[j]).get_indexer(labels).astype(np.float64)
            lut[lut < 0] = np.nan  # a label the model does not know (XGBoost refused it on the first row)
            known = ~np.isnan(codes)
            codes[known] = lut[codes[known].astype(np.int64)]
        out[:, j] = codes
    return out


def _lightgbm_native(X: Any, kind: str, what: str, reader: "InputReader") -> np.ndarray:
    import warnings

    # LightGBM's own reading of the first row: column types (integers, float32/64 and booleans; dictionary,
    # string, float16, date, ... columns raise LightGBMError "Unsupported Arrow type", src/arrow/array.hpp,
    # ArrowChunkedArray::View::visit) and the number of columns
    reader.booster.predict(_native_head(X, kind))
    cols = [str(c) for c in native_columns(X)]
    if misplaced(cols, reader.names) and not _duplicates(cols):
        warnings.warn(
            f"{what}'s columns {misplaced(cols, reader.names)} carry the model's feature names at other positions; "
            f"LightGBM reads columns by position (as its predict does), so the values are for the model's "
            f"features {reader.names}, not for {cols}. Order the columns as the model's.", UserWarning, stacklevel=5)
    # every value as a double, nulls NaN (ArrowChunkedArray::Iterator<double>: null_default() is quiet_NaN)
    arr = _polars_float64(X, what) if kind == "polars" else (
        np.column_stack([_arrow_float64(c, what) for c in X.columns]) if X.num_columns else np.empty((X.num_rows, 0)))
    if np.any(arr == -LIGHTGBM_ZERO):
        # The Arrow reader hands LightGBM every value as it is (LGBM_BoosterPredictForArrowChunkedArray,
        # src/c_api.cpp), its dense-row reader reads |x| <= kZeroThreshold as 0.0, and hitml reads rows as the
        # latter does. The two differ only at x == -kZeroThreshold, LightGBM's own split threshold next to zero
        # (src/io/bin.cpp, FindBinWithZeroAsOneBin: no other threshold lies within +-kZeroThreshold).
        raise ValueError(f"{what} holds {-LIGHTGBM_ZERO!r} (LightGBM's -kZeroThreshold), which LightGBM's Arrow "
                         "reader and its NumPy reader send down different sides of a split at that threshold; "
                         "hitml reads it as the NumPy reader does (0.0): pass the rows as a NumPy array")
    return arr


def _sklearn_native(X: Any, reader: "InputReader") -> np.ndarray:
    from sklearn.utils.validation import check_array

    # scikit-learn's own feature-name check, as its predict runs it (validate_data(reset=False)): ValueError for
    # other names or their order, a warning where the model was fitted without names
    check_feature_names(reader.model, X)
    if reader.hgb_layout is None:
        # its own conversion (np.asarray of the frame: nulls NaN, a string or category column raises ValueError);
        # rows without values give an empty matrix, as for other inputs
        return check_array(X, dtype=np.float64, ensure_all_finite=False, ensure_min_samples=0)
    if X.shape[0] == 0:
        return np.empty((0, X.shape[1]))
    # HistGradientBoosting's own encoder (OrdinalEncoder by label: unknown and null categories NaN)
    return reader._hgb_back(hgb_preprocess(reader.model, X))


def _catboost_native_rows(X: Any, what: str, reader: "InputReader") -> np.ndarray:
    # CatBoost's own reading of the first row: names (CatBoostError for other names), column types
    if X.height:
        reader.model.predict(X.head(1), prediction_type="RawFormulaVal")
    df = pd.DataFrame(_polars_float64(X, what), columns=list(X.columns))
    return reader.frame(df, what)  # CatBoost's name rules; the model's names in another order are read by name


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
        # LightGBM reads integer and bool arrays as float32 (InputReader.array); integers widen exactly on the GPU
        arr = X.astype(np.float32) if reader is not None and reader.library == "lightgbm" and X.dtype.kind in "biu" \
            else X
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
        # CuPy's astype flushes float32 subnormals to zero (its kernels are compiled with -ftz=true); a value beyond
        # float32's range becomes +-inf, as the libraries' own float casts make it (no warning)
        with np.errstate(over="ignore"):
            arr = _exact_astype(arr, dtype) if is_cupy_array(arr) else arr.astype(dtype)
    return arr, flat


_ROW_CHUNK = 1 << 16


def _missing_to_nan(arr: np.ndarray, missing: float, owned: bool = False) -> np.ndarray:
    """NumPy rows with XGBoost's ``missing`` value as NaN: a value is missing where its float32 rounding, widened,
    equals ``missing`` (XGBoost compares float32 values). Row chunks bound the temporaries; the rows are copied
    (unless ``owned``) only where some value is missing, so a background without one is read with no copy."""
    with np.errstate(over="ignore"):
        for a in range(0, arr.shape[0], _ROW_CHUNK):
            part = arr[a:a + _ROW_CHUNK]
            hit = (part if part.dtype == np.float32 else part.astype(np.float32)).astype(np.float64) == missing
            if not hit.any():
                continue
            if not owned:
                arr = arr.copy()
                owned = True
                part = arr[a:a + _ROW_CHUNK]
            part[hit] = np.nan
    return arr


def read_background(block: Any, reader: "InputReader", input_dtype: Any, row_dtype: Any = None) -> Any:
    """Background rows (an array, frame or table; NumPy or CuPy) as the model's library reads them, in the precision
    the trees compare in (:func:`model_rows`): float32 and float64 arrays keep their precision (no float64 copy of
    float32 rows), frames and other arrays are read as float64; the library's value rules
    (``InputReader.missing_rules``) applied."""
    dtype = getattr(block, "dtype", None)
    dtype = dtype if dtype in (np.float32, np.float64) else np.dtype(np.float64)
    rows = to_matrix(block, None, np.dtype(dtype), "background data", reader)[0]
    return model_rows(reader.missing_rules(rows), input_dtype, row_dtype)


def model_rows(rows: Any, input_dtype: Any, row_dtype: Any = None) -> Any:
    """Rows (NumPy or CuPy) as the trees compare them: rounded to the precision the library compares rows in
    (``row_dtype``: XGBoost's and scikit-learn's float32) and to the trees' ``input_dtype`` where those are
    narrower. float32 rows stay float32 even for float64 trees (the engines widen them exactly as they read them,
    so no float64 copy is made); the same array where nothing changes."""
    xp = array_module(rows)
    cast = _exact_astype if is_cupy_array(rows) else (lambda a, d: a.astype(d))
    for narrow in (row_dtype, input_dtype):
        if narrow is not None and rows.dtype != narrow and np.dtype(narrow).itemsize < rows.dtype.itemsize:
            with np.errstate(over="ignore"):   # beyond float32's range is +-inf, as the library casts
                rows = cast(rows, narrow)
    if rows.dtype not in (np.float32, np.float64):
        rows = cast(rows, input_dtype)
    return xp.ascontiguousarray(rows)


def _exact_astype(arr: Any, dtype: Any) -> Any:
    """A CuPy array cast as NumPy casts on the host (float32 subnormals kept): the GPU engine's conversion."""
    from hitml.kernels.treeshap._gpu_core import exact_astype

    return exact_astype(arr, dtype)


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
        except (AttributeError, TypeError):  # not this library's attribute (None where a model keeps no names)
            continue
        if n > 0:
            return n, True
    if ensemble is None:
        return 0, False
    internal = ensemble.children_left >= 0
    used = ensemble.features[internal]
    return (int(used.max()) + 1 if used.size else 1), False


# LightGBM's kZeroThreshold, ``const double kZeroThreshold = 1e-35f`` (include/LightGBM/meta.h): the float 1e-35
# widened, 1.0000000180025095e-35. Its dense-row reader keeps a value only where |x| > it (or x is NaN) and reads
# the others as 0.0; Tree::IsZero is |x| <= it.
LIGHTGBM_ZERO = float(np.float32(1e-35))


def _library(model: Any) -> str | None:
    if type(model).__name__ == "CatBoostModel" and getattr(model, "model", True) is None:
        return "catboost-json"  # a CatBoost model read from its JSON file (load_catboost_json), without catboost
    mod = type(model).__module__.split(".")[0]
    return mod if mod in ("xgboost", "lightgbm", "sklearn", "catboost", "pyspark") else None


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
      whose names are the model's in another order warns); arrays of other dtypes than float32/float64 are read as
      float32 (``lightgbm.basic._np2d_to_np1d``); on every feature a value with ``|x| <= 1e-35f`` (-0.0 and
      subnormals too) is 0.0, as LightGBM's dense-row reader reads it, and missing (NaN) on features whose splits
      use missing type Zero.
    - scikit-learn: the estimator's own feature-name check (``ValueError`` for other names or order); a
      HistGradientBoosting model with categorical features reads rows through its own ``_preprocess_X`` (its
      OrdinalEncoder: unknown and NaN categories become NaN, the missing side), placed back in input order.
    - CatBoost: duplicate names raise ``CatBoostError``; a frame with the model's names in another order is read by
      name, as CatBoost reads it, and values come back in the frame's column order (:meth:`output_order`).
    """

    def __init__(self, model: Any) -> None:
        self.library = _library(model)
        # a Spark ML model is a py4j handle to the driver's JVM, which pickle cannot take; nothing here reads it
        self.model = None if self.library == "pyspark" else model
        self.names: list[str] | None = None
        self.missing: float | None = None
        self.zero_features: np.ndarray | None = None   # LightGBM features with missing type Zero (set later)
        self.cat_features: np.ndarray | None = None    # features whose category splits truncate values toward 0
        self.lowest_features: np.ndarray | None = None  # features split at -inf (see missing_rules; set later)
        self.lowest_move: tuple[float, float] = (0.0, 0.0)  # the value read on the other side there, and where to
        self.hgb_layout: Any = None
        self._xgb_cats: dict[int, list] | None = None
        self._stored: dict[int, list] | None = None
        lib = self.library
        from sklearn.exceptions import NotFittedError  # what XGBoost's and LightGBM's sklearn wrappers raise unfitted

        try:
            if lib == "xgboost":
                self.booster = model.get_booster() if hasattr(model, "get_booster") else model
                self.names = self.booster.feature_names
                self.types = self.booster.feature_types or []
                m = getattr(model, "missing", np.nan) if hasattr(model, "get_booster") else np.nan
                # XGBoost takes `missing` as a float32 (XGDMatrixCreateFromDense) and compares the float32 row value
                self.missing = None if m is None or np.isnan(m) else float(np.float32(m))
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
            elif lib == "catboost-json":
                self.names = model.feature_names_  # the file's feature ids (None where it was trained unnamed)
        except NotFittedError:  # an unfitted model: the explainer reports shap's own error
            self.library = None

    # -- what the explainer asks -------------------------------------------------------------------------------
    @property
    def reads_frames(self) -> bool:
        return self.library in ("xgboost", "sklearn", "catboost", "catboost-json", "lightgbm")

    @property
    def reads_arrays(self) -> bool:
        return self.hgb_layout is not None or self.library == "lightgbm"

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
        """True where missing_rules changes no value (no missing value other than NaN, not a LightGBM model, no
        category features). LightGBM reads ``|x| <= 1e-35f`` as 0.0 on every feature, so its rows always go
        through missing_rules."""
        if self.library == "lightgbm":
            return False
        zero = self.zero_features is not None and len(self.zero_features)
        cats = self.cat_features is not None and len(self.cat_features)
        lowest = self.lowest_features is not None and len(self.lowest_features)
        return self.missing is None and not zero and not cats and not lowest

    def missing_rules(self, arr: Any) -> Any:
        """Values as the library's split rules read them (NumPy or CuPy): XGBoost's ``missing`` value becomes NaN;
        LightGBM reads ``|x| <= 1e-35f`` as 0.0 on every feature, and as missing (NaN) on features with missing
        type Zero; on LightGBM's category features a value in (-1, 0) is category 0 (``Tree::CategoricalDecision``
        truncates to an int before testing for a negative category). XGBoost tests the float first
        (``common::InvalidCat``: ``x < 0`` is no category), as the engines' category test does, so its values
        stay as they are."""
        if self.keeps_values():
            return arr
        zero = self.zero_features is not None and len(self.zero_features)
        cats = self.cat_features is not None and len(self.cat_features)
        xp = array_module(arr)
        if self.library == "lightgbm":
            # LightGBM's dense-row reader (RowPairFunctionFromDenseMatrix, src/c_api.cpp) keeps x only where
            # |x| > kZeroThreshold or x is NaN; the predictor's buffer holds 0.0 for the others. On every feature
            # and missing type, so that a split at +-kZeroThreshold sends them where 0.0 goes. A new array (the
            # caller's rows are not written to); -0.0 becomes +0.0 as in LightGBM.
            arr = xp.where(xp.abs(arr) <= LIGHTGBM_ZERO, arr.dtype.type(0), arr)
        elif is_cupy_array(arr) or zero or cats or (self.lowest_features is not None and len(self.lowest_features)):
            arr = arr.copy()
        else:   # NumPy rows with only XGBoost's `missing` to apply: copied only where a value is missing
            return _missing_to_nan(arr, self.missing)
        if self.missing is not None:
            # XGBoost compares the row's float32 value with its float32 `missing` (src/data/adapter.h, IsValidFunctor)
            with np.errstate(over="ignore"):
                # compared as doubles: a float32 comparison under CuPy's -ftz=true would flush subnormals to 0
                if is_cupy_array(arr):
                    wide = _exact_astype(_exact_astype(arr, np.float32), np.float64)
                    arr[wide == self.missing] = np.nan
                else:
                    arr = _missing_to_nan(arr, self.missing, owned=True)
        if zero:
            cols = arr[:, self.zero_features]
            arr[:, self.zero_features] = xp.where(xp.abs(cols) <= LIGHTGBM_ZERO, np.nan, cols)
        if cats and self.library == "lightgbm":
            cols = arr[:, self.cat_features]
            arr[:, self.cat_features] = xp.where((cols > -1) & (cols < 0), 0.0, cols)
        if cats and self.library == "pyspark":
            # Spark ML's CategoricalSplit tests membership of the double itself (Split.scala, shouldGoLeft): a value
            # >= 0 that is not a whole number is no category (the engines would truncate it to one); -1.0 is
            # outside every category bitset, the side Spark sends non-members to (SparkMLModel)
            cols = arr[:, self.cat_features]
            arr[:, self.cat_features] = xp.where((cols >= 0) & (cols != xp.floor(cols)), -1.0, cols)
        if self.lowest_features is not None and len(self.lowest_features):
            # a split at -inf is stored at -DBL_MAX (shap_ext._models._lowest_splits, which says why); the one value
            # that the move sends to the other side moves with it, to a value on the same side of every other split
            src, dst = self.lowest_move
            cols = arr[:, self.lowest_features]
            arr[:, self.lowest_features] = xp.where(cols == src, arr.dtype.type(dst), cols)
        return arr

    def output_order(self, X: Any) -> np.ndarray | None:
        """Columns of the model's values to return, in the frame's order (CatBoost reads frames by name)."""
        if self.library not in ("catboost", "catboost-json") or not isinstance(X, (pd.DataFrame, pd.Series)) \
                or self.names is None:
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
        if self.library in ("catboost", "catboost-json"):
            return self._catboost_frame(df, what)
        return encode_frame(df, what).to_numpy()

    def array(self, arr: np.ndarray) -> np.ndarray:
        """A 2-D host array as the library reads it (HistGradientBoosting: its own category encoding; LightGBM:
        dtypes other than float32 and float64 as float32)."""
        if self.library == "lightgbm":
            # lightgbm.basic._np2d_to_np1d hands LightGBM float32/float64 arrays as they are and any other dtype
            # (integers above 2**24 included) cast to float32: the values its predict compares
            return arr if arr.dtype in (np.float32, np.float64) else arr.astype(np.float32)
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

    # XGBoost's serialised index type of a numeric category feature (src/data/cat_container.cc, CatIndexType; in
    # 3.1-3.3 the same numbers as include/xgboost/json.h, Value::ValueKind, the typed arrays). XGBoost only
    # predicts with a frame whose category index has the same type (cat_container.h), so rows rebuilt from
    # labels (a pd.Series) need it.
    _XGB_CAT_DTYPES = {7: np.float32, 8: np.float64, 9: np.int8, 10: np.uint8, 11: np.int16, 12: np.uint16,
                       13: np.int32, 14: np.uint32, 15: np.int64, 16: np.uint64}

    def _xgboost_categories(self) -> dict[int, pd.Index]:
        """``{column: categories}`` stored in the model (XGBoost >= 3.1), in the order its trees' codes index.

        Read from the model JSON (XGBoost: "use the booster model IO ... to preserve the categories in a stable
        format", ``xgboost._data_utils.Categories``), so that no optional package (pyarrow, which
        ``Booster.get_categories(export_to_arrow=True)`` needs) decides a value. String labels are the stored UTF-8
        bytes, decoded with ``surrogateescape`` (XGBoost compares bytes; any byte string keeps its identity).
        Empty where the model stores none: XGBoost < 3.1, a model trained on codes, no category features; XGBoost
        then reads a frame's category codes as they are, and so do we.
        """
        if self._xgb_cats is None:
            is_cat = [t == "c" for t in (self.types or [])]
            self._xgb_cats = self._xgboost_model_categories(self.booster, is_cat) if any(is_cat) else {}
        return self._xgb_cats

    @classmethod
    def _xgboost_model_categories(cls, booster: Any, is_cat: list[bool]) -> dict[int, pd.Index]:
        import json

        import xgboost

        gb = json.loads(booster.save_raw(raw_format="json"))["learner"]["gradient_booster"]
        # gbtree, and dart from 3.3: {"model": {..., "cats"}}; dart before: {"gbtree": {"model": ...}}
        # (src/gbm/gbtree.cc, Dart::SaveModel); gblinear stores no categories (gbtree_model.cc, GBTreeModel::SaveModel)
        gb = gb["gbtree"] if "model" not in gb and "gbtree" in gb else gb
        stored = gb.get("model", {}).get("cats")
        if stored is None or not stored.get("enc"):  # XGBoost < 3.1, or an empty CatContainer
            return {}
        enc = stored["enc"]
        if len(enc) != len(is_cat):
            raise xgboost.core.XGBoostError(f"the model stores categories of {len(enc)} features but has "
                                            f"{len(is_cat)} features")
        cats: dict[int, pd.Index] = {}
        for j, col in enumerate(enc):
            if not is_cat[j]:
                continue
            if "offsets" in col:  # strings: UTF-8 bytes (int8 in the JSON) cut at the offsets (CatStrArray)
                offsets = col["offsets"]
                if not offsets:  # no categories stored for this feature (GetCategoriesImpl exports null)
                    continue
                raw = np.asarray(col["values"], dtype=np.int8).tobytes()
                labels = [raw[offsets[i]:offsets[i + 1]].decode("utf-8", "surrogateescape")
                          for i in range(len(offsets) - 1)]
                cats[j] = pd.Index(labels, dtype=object)
            else:
                dtype = cls._XGB_CAT_DTYPES.get(int(col["type"]))
                if dtype is None:  # XGBoost's own loader refuses it too ("Invalid type.")
                    raise xgboost.core.XGBoostError(f"feature {j}: unknown category index type {col['type']}")
                cats[j] = pd.Index(np.asarray(col["values"], dtype=dtype))
        return cats

    def dmatrix_codes(self, dm: Any, dense: np.ndarray) -> np.ndarray:
        """A DMatrix's category codes re-coded to the model's: XGBoost >= 3.1 stores a DMatrix's own categories
        with it (from a frame) and re-codes them by label at prediction (``cat_container.h``). Reading those labels
        needs pyarrow (``DMatrix.get_categories(export_to_arrow=True)``); without it such a DMatrix raises
        ImportError rather than being read as raw codes."""
        model_cats = self._xgboost_categories()
        types = dm.feature_types or []
        if not model_cats or "c" not in types:
            return dense  # codes as they are, as XGBoost reads them without stored categories
        try:
            import pyarrow  # noqa: F401 - only to name the missing package before XGBoost's own export needs it
        except ImportError:
            raise ImportError("explaining an xgboost.DMatrix built from categorical data needs pyarrow, which "
                              "XGBoost needs to export the DMatrix's categories (pip install pyarrow); or pass "
                              "the pandas DataFrame itself") from None
        import xgboost

        exported = dm.get_categories(export_to_arrow=True).to_arrow()
        out = dense
        for j, (_, labels) in enumerate(exported):
            if labels is None or j not in model_cats:
                continue
            own = pd.Index(labels.to_pylist())
            codes = out[:, j]
            ok = ~np.isnan(codes)
            pos = model_cats[j].get_indexer(own[codes[ok].astype(np.int64)])
            if np.any(pos < 0):
                raise xgboost.core.XGBoostError("Found a category not in the training set (the DMatrix's column "
                                                f"{j} holds a label the model was not trained on)")
            out = out.copy() if out is dense else out
            out[np.flatnonzero(ok), j] = pos
        return out

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
                if pd.api.types.infer_dtype(col.cat.categories, skipna=False) == "bytes":
                    # XGBoost compares a bytes label's bytes with the stored UTF-8 (_data_utils.pd_cat_inf)
                    labels = pd.Index([b.decode("utf-8", "surrogateescape") for b in col.cat.categories], dtype=object)
                    col = pd.Categorical.from_codes(col.cat.codes, categories=labels)
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
        names in another order are read by name (returns :meth:`output_order`). Without catboost (a model read from
        its JSON file) the same rules raise ValueError."""
        try:
            from catboost import CatBoostError as error
        except ImportError:
            error = ValueError
        if self.names is None:  # a JSON model trained without names: CatBoost reads a frame by position
            return None
        cols = [str(c) for c in df.columns]
        dup = _duplicates(cols)
        if dup:
            raise error(f"All feature names should be different, but '{dup[0]}' used more than once.")
        order = self.output_order(df)
        wrong = misplaced(cols, self.names) if order is None else []
        if wrong:
            bad = cols.index(wrong[0])
            raise error(f"At position {bad} should be feature with name {self.names[bad]} (found {cols[bad]}).")
        return order
