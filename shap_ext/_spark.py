"""SHAP values and interactions of a Spark DataFrame, as a Spark DataFrame: Arrow batches through ``mapInArrow``,
the explainer broadcast once, the backend resolved on each executor."""
from __future__ import annotations

import copy
import functools
import sys
import uuid
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ._dask import ShippedExplainer

__all__ = ["SparkShippedExplainer", "broadcast_explainer", "executor_backend", "is_spark_dataframe",
           "spark_background", "spark_shap_values"]

_FEATURES = "__hitml_features"   # the select's internal names (the user's columns keep theirs)
_LABEL = "__hitml_label"
_MAX_LIST = 2 ** 31 - 1          # Arrow list offsets (Spark's ArrayType) are int32
_LOADS: dict[str, int] = {}      # per process: how many times each shipment was unpickled here (tests read it)


def is_spark_dataframe(x: Any) -> bool:
    """True for a ``pyspark.sql.DataFrame`` (classic or Spark Connect); never imports pyspark itself."""
    mod = sys.modules.get("pyspark.sql")
    return mod is not None and isinstance(x, mod.DataFrame)


# -- shipping the explainer ----------------------------------------------------------------------------------------
class SparkShippedExplainer(ShippedExplainer):
    """The explainer as executors receive it (one broadcast): its PathSet built before pickling (CatBoost's own
    SHAP has none), and a token naming the shipment, counted where it is unpickled."""

    def __init__(self, explainer: Any) -> None:
        if explainer.route != "catboost-native":  # CatBoost's own SHAP has no PathSet
            explainer.paths  # noqa: B018 - build and cache the PathSet on the driver, once
        self.explainer = explainer
        self.token = uuid.uuid4().hex   # names this shipment in the per-process load count

    def __setstate__(self, state: dict) -> None:
        super().__setstate__(state)
        self.token = state["token"]
        _LOADS[self.token] = _LOADS.get(self.token, 0) + 1

    def __getstate__(self) -> dict:
        return {**super().__getstate__(), "token": self.token}


def broadcast_explainer(explainer: Any, spark: Any = None) -> Any:
    """A ``pyspark.Broadcast`` of the explainer, for ``spark_shap_values(..., broadcast=)`` to reuse across calls.

    Each executor receives it once (Spark's torrent broadcast) and each Python worker unpickles it once (PySpark
    keeps a loaded broadcast value per worker process).

    Parameters
    ----------
    explainer : hitml.shap_ext.TreeExplainer
        The explainer to send (its PathSet is built first, on the driver).
    spark : pyspark.sql.SparkSession, optional
        The classic session (the active one by default); Spark Connect has no broadcast variables.

    Returns
    -------
    pyspark.Broadcast
        Pass it as ``spark_shap_values(..., broadcast=)``; ``unpersist()`` / ``destroy()`` it when done.

    See Also
    --------
    spark_shap_values : broadcasts the explainer once per call when no broadcast is given.
    hitml.shap_ext._dask.ship_explainer : the same for Dask (a scatter to every worker).

    Examples
    --------
    >>> bc = broadcast_explainer(explainer, spark)                                # doctest: +SKIP
    >>> a = spark_shap_values(explainer, df, broadcast=bc)                        # doctest: +SKIP
    >>> b = spark_shap_values(explainer, df.filter("day = 2"), broadcast=bc)      # doctest: +SKIP
    """
    if spark is None:
        from pyspark.sql import SparkSession

        spark = SparkSession.getActiveSession()
        if spark is None:
            raise RuntimeError("no active SparkSession: pass spark=")
    sc = getattr(spark, "sparkContext", None)
    if sc is None:
        raise NotImplementedError("Spark Connect sessions have no broadcast variables; hitml's Spark path needs "
                                  "a classic SparkSession (SparkSession.builder without .remote())")
    return sc.broadcast(SparkShippedExplainer(explainer))


# -- the backend on an executor --------------------------------------------------------------------------------------
def executor_backend(requested: str, context: Any, is_local: bool) -> tuple[str, int | None]:
    """``(backend, device)`` for one task: the GPU that Spark gave the task, else the CPU engine.

    - ``"cpu"``: the CPU engine.
    - a task with a ``gpu`` resource (``spark.task.resource.gpu.amount``; ``TaskContext.resources()["gpu"]``):
      its first address is the CUDA device, as ``xgboost.spark`` reads it (xgboost/spark/utils.py,
      ``_get_gpu_id``); ``"auto"`` falls back to the CPU engine (with a warning) where CuPy cannot use it,
      ``"gpu"`` raises ``GPUUnavailableError``.
    - no ``gpu`` resource: in local mode (``local[...]`` master, no resource scheduling) ``"gpu"`` uses the
      machine's GPU, device ``partitionId % device count`` as ``xgboost.spark`` spreads local tasks
      (xgboost/spark/core.py, ``_SparkXGBModel._transform``); ``"auto"`` runs on the CPU engine; on a cluster
      ``"gpu"`` raises ``GPUUnavailableError`` naming the setting.
    """
    from hitml.kernels import device
    from hitml.kernels.device import GPUUnavailableError

    # looked up per call, so that a test can stand in for the device
    resolve_backend, device_module = device.resolve_backend, device.cupy_module

    if requested == "cpu":
        return "cpu", None
    resources = context.resources() if context is not None else {}
    info = resources.get("gpu") if resources else None
    addresses = list(getattr(info, "addresses", None) or [])
    if addresses:
        backend = resolve_backend(requested)
        return backend, (int(str(addresses[0]).strip()) if backend == "gpu" else None)
    if requested == "gpu":
        if not is_local:
            raise GPUUnavailableError("backend='gpu' but this Spark task was given no GPU; set "
                                      "spark.task.resource.gpu.amount (and spark.executor.resource.gpu.amount), "
                                      "or use backend='auto' to run on the executors' CPUs")
        backend = resolve_backend("gpu")
        count = device_module().cuda.runtime.getDeviceCount()
        return backend, (context.partitionId() % count if context is not None else 0)
    return "cpu", None


# -- what the job does ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Plan:
    """What each task needs besides the explainer (pickled into the mapInArrow closure)."""

    n_keep: int
    features: tuple[str, ...] | None   # scalar feature columns (internal names), or None for one array column
    features_name: str                 # the user's name(s) of the features, for messages
    width: int | None                  # the model's number of features where exact
    label: bool
    interactions: bool
    tree_limit: int | None
    check_additivity: bool
    backend: str
    is_local: bool
    out_fields: Any                    # the Arrow fields of the values and base value columns


def _load(shipped: Any) -> Any:
    """The broadcast explainer on this executor; ImportError naming what is missing where it cannot be unpickled."""
    try:
        return shipped.value.explainer
    except ImportError as exc:
        raise ImportError(
            f"hitml: this Spark executor cannot load the explainer: {exc}. The model's library must be installed "
            f"on every executor (Python {sys.executable}), with the versions of the driver"
        ) from exc


def _task_explainer(shipped: Any, plan: _Plan) -> tuple[Any, int | None]:
    from pyspark import TaskContext

    context = TaskContext.get()
    ex = copy.copy(_load(shipped))   # shallow: shares the PathSet; only the backend differs per task
    ex.backend, device = executor_backend(plan.backend, context, plan.is_local)
    if ex.backend == "cpu" and context is not None and hasattr(context, "cpus"):
        import numba

        # as many engine threads as Spark gave the task cores (xgboost.spark sets nthread from spark.task.cpus)
        numba.set_num_threads(max(1, min(int(context.cpus()), numba.config.NUMBA_NUM_THREADS)))
    return ex, device


def _matrix(batch: Any, plan: _Plan) -> np.ndarray:
    """The batch's features as a float64 (rows, features) matrix in the model's order (nulls are NaN, missing)."""
    n = batch.num_rows
    if plan.features is not None:
        cols = [batch.column(plan.n_keep + j).to_numpy(zero_copy_only=False) for j in range(len(plan.features))]
        return np.column_stack(cols).astype(np.float64, copy=False) if cols else np.empty((n, 0))
    col = batch.column(plan.n_keep)
    if col.null_count:
        raise ValueError(f"features column {plan.features_name!r} holds null vectors; every row needs its features")
    offsets = np.asarray(col.offsets)
    sizes = np.diff(offsets)
    width = int(sizes[0]) if n else (plan.width or 0)
    if n and np.any(sizes != width):
        raise ValueError(f"features column {plan.features_name!r} holds vectors of {sorted(set(sizes.tolist()))} "
                         "elements; all rows need the same number of features")
    if plan.width is not None and width != plan.width:
        raise ValueError(f"features column {plan.features_name!r} holds vectors of {width} elements, but the model "
                         f"was trained on {plan.width} features")
    values = col.flatten().to_numpy(zero_copy_only=False)
    return values.astype(np.float64, copy=False).reshape(n, width)


def _base_values(ex: Any, y: np.ndarray | None, n: int, K: int) -> np.ndarray:
    """(n, K) base values: the explainer's expected value, or shap's per-label one for log_loss."""
    ev = ex.expected_value
    if callable(ev):  # model_output="log_loss": shap's expected value depends on the row's label
        out = np.full((n, K), np.nan)   # a null label has no base value
        for label in np.unique(y[~np.isnan(y)]):
            out[y == label] = np.asarray(ev(label), dtype=np.float64).reshape(-1)
        return out
    return np.broadcast_to(np.asarray(ev, dtype=np.float64).reshape(1, -1), (n, K))


def _nested(arr: np.ndarray) -> Any:
    """Nested Arrow lists (Spark's array<...array<double>>) over a C-contiguous float64 array, without copies."""
    import pyarrow as pa

    out = pa.array(np.ascontiguousarray(arr).reshape(-1))
    for size in reversed(arr.shape[1:]):
        count = len(out) // size
        out = pa.ListArray.from_arrays(pa.array(np.arange(count + 1, dtype=np.int32) * size), out)
    return out


def _with_bias(out: np.ndarray, base: np.ndarray, interactions: bool, K: int) -> np.ndarray:
    """shap's values with the base value appended, outputs first: XGBoost's pred_contribs / pred_interactions layout
    (bias last; for interactions at ``[M, M]``, zeros elsewhere in the last row and column)."""
    n = out.shape[0]
    if K > 1:  # shap puts outputs last; xgboost.spark's strict_shape puts them first
        out = np.moveaxis(out, -1, 1)
    M = out.shape[-1]
    lead = out.shape[:-2] if interactions else out.shape[:-1]
    if interactions:
        full = np.zeros(lead + (M + 1, M + 1))
        full[..., :M, :M] = out
        full[..., M, M] = base if K > 1 else base[:, 0]
    else:
        full = np.empty(lead + (M + 1,))
        full[..., :M] = out
        full[..., M] = base if K > 1 else base[:, 0]
    return full.reshape((n,) + full.shape[1:])


def _explain_batch(ex: Any, batch: Any, plan: _Plan) -> Iterator[Any]:
    import pyarrow as pa

    from hitml.kernels.device import to_numpy

    n = batch.num_rows
    schema = pa.schema(list(batch.schema)[:plan.n_keep] + plan.out_fields)
    if n == 0:
        yield pa.RecordBatch.from_arrays([pa.array([], type=f.type) for f in schema], schema=schema)
        return
    X = _matrix(batch, plan)
    y = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False) if plan.label else None
    if plan.interactions:
        out = ex.shap_interaction_values(X, y, tree_limit=plan.tree_limit)
    else:
        out = ex.shap_values(X, y, tree_limit=plan.tree_limit, check_additivity=plan.check_additivity)
    out = np.asarray(to_numpy(out), dtype=np.float64)
    per_row = out.shape[1:]
    K = per_row[-1] if len(per_row) == (3 if plan.interactions else 2) else 1
    base = _base_values(ex, y, n, K)
    full = _with_bias(out, base, plan.interactions, K)
    step = max(1, _MAX_LIST // max(1, int(np.prod(full.shape[1:]))))  # rows per output batch within int32 offsets
    for a in range(0, n, step):
        b = min(n, a + step)
        cols = [batch.column(i).slice(a, b - a) for i in range(plan.n_keep)]
        cols.append(_nested(full[a:b]))
        cols.append(pa.array(base[a:b, 0]) if K == 1 else _nested(np.ascontiguousarray(base[a:b])))
        yield pa.RecordBatch.from_arrays(cols, schema=schema)


def _explain_partition(batches: Iterator[Any], shipped: Any, plan: _Plan) -> Iterator[Any]:
    """mapInArrow's function: every Arrow batch of the partition through the same engine as in process."""
    ex, device = None, None
    for batch in batches:
        if ex is None:
            ex, device = _task_explainer(shipped, plan)
        if device is None:
            yield from _explain_batch(ex, batch, plan)
        else:
            from hitml.kernels.device import cupy_module

            with cupy_module().cuda.Device(device):
                yield from _explain_batch(ex, batch, plan)


def _batch_rows(batch: Any, plan: _Plan, names: list[str] | None) -> Any:
    """The batch's features: a float64 matrix, or a frame of the named columns (which the model's library reads by
    name)."""
    X = _matrix(batch, plan)
    if names is None:
        return X
    import pandas as pd

    return pd.DataFrame(X, columns=names)


def _on(device: int | None, fn: Any, *args: Any) -> Any:
    """``fn(*args)`` with CUDA device ``device`` current (None: as it is)."""
    if device is None:
        return fn(*args)
    from hitml.kernels.device import cupy_module

    with cupy_module().cuda.Device(device):
        return fn(*args)


def _summarize_partition(batches: Iterator[Any], ctx: Any, plan: _Plan, names: list[str] | None) -> Iterator[Any]:
    """mapInArrow's function for a background: the partition's rows counted on this executor (its GPU where Spark
    gave it one), one pickled summary per partition (none for an empty one)."""
    import pickle

    import pyarrow as pa
    from pyspark import TaskContext

    from hitml.kernels.treeshap import BackgroundSummary

    from ._dask import _summarize_part

    backend, device = executor_backend(plan.backend, TaskContext.get(), plan.is_local)
    parts = []
    for batch in batches:
        if batch.num_rows == 0:
            continue
        parts.append(_on(device, _summarize_part, ctx.value, _batch_rows(batch, plan, names), backend))
    parts = [p for p in parts if p is not None]
    if parts:
        blob = pickle.dumps(BackgroundSummary.merge(parts))
        yield pa.RecordBatch.from_pydict({"summary": [blob]}, schema=pa.schema([("summary", pa.binary())]))


def spark_background_summary(paths: Any, df: Any, features: str | list[str], how: str, reader: Any,
                             input_dtype: Any, row_dtype: Any, width: int | None, backend: str) -> Any:
    """The background summary of a Spark DataFrame, counted where its rows lie: each partition is read (through
    Arrow, with the model's reader) and counted on its executor, and only the per-partition summaries (the paths'
    histograms) reach the driver, where they are summed (``BackgroundSummary.merge``: exact integers, so the result
    equals the whole background's summary in one piece)."""
    import pickle

    from pyspark.sql import types as T

    from hitml.kernels.treeshap import BackgroundSummary

    from ._dask import _PartReader

    exprs, names, scalar = _select_features(df, features, how, width)
    plan = _Plan(n_keep=0, features=scalar, features_name=", ".join(names), width=width, label=False,
                 interactions=False, tree_limit=None, check_additivity=False, backend=backend,
                 is_local=_is_local(df), out_fields=None)
    ctx = df.sparkSession.sparkContext.broadcast(_PartReader(reader, input_dtype, row_dtype, paths))
    schema = T.StructType([T.StructField("summary", T.BinaryType())])
    fn = functools.partial(_summarize_partition, ctx=ctx, plan=plan, names=names if scalar is not None else None)
    blobs = [r[0] for r in df.select(*exprs).mapInArrow(fn, schema).collect()]
    ctx.unpersist()
    if not blobs:
        raise ValueError("the background has no rows")
    return BackgroundSummary.merge([pickle.loads(b) for b in blobs])


def _sum_partition(batches: Iterator[Any], shipped: Any, plan: _Plan, names: list[str] | None, sums: Any) -> \
        Iterator[Any]:
    """mapInArrow's function for a global summary: the partition's sums of |values| on this executor, pickled."""
    import pickle

    import pyarrow as pa


    ex, device, total, rows = None, None, None, 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        if ex is None:
            ex, device = _task_explainer(shipped, plan)
        y = batch.column(batch.num_columns - 1).to_numpy(zero_copy_only=False).astype(np.float64) \
            if plan.label else None
        part, n = _on(device, sums, ex, _batch_rows(batch, plan, names), y)
        total = part if total is None else total + part   # batches in their order: the same bytes each call
        rows += n
    if rows:
        yield pa.RecordBatch.from_pydict({"sums": [pickle.dumps((total, rows))]},
                                         schema=pa.schema([("sums", pa.binary())]))


def spark_global_sums(explainer: Any, df: Any, y: str | None, sums: Any) -> tuple[Any, int, list[str]]:
    """(the sum over the DataFrame's rows of what ``sums(explainer, X, y) -> (array, rows)`` adds up per Arrow
    batch, the number of rows, the feature names): each partition sums its batches on its executor, and the
    driver adds the partitions' sums in partition order (the same bytes on every call)."""
    import pickle

    from pyspark.sql import types as T

    from hitml.kernels.device import check_backend

    if y is not None and not isinstance(y, str):
        raise TypeError(f"y must name a label column of the Spark DataFrame, got {type(y).__qualname__}")
    spec, how = _feature_columns(df, explainer, None)
    width = int(explainer.n_features) if explainer._n_features_exact else None
    exprs, names, scalar = _select_features(df, spec, how, width)
    if y is not None:
        exprs.append(_column(y).cast("double").alias(_LABEL))
    plan = _Plan(n_keep=0, features=scalar, features_name=", ".join(names), width=width, label=y is not None,
                 interactions=False, tree_limit=None, check_additivity=False,
                 backend=check_backend(explainer.requested_backend), is_local=_is_local(df), out_fields=None)
    shipped = broadcast_explainer(explainer, df.sparkSession)
    fn = functools.partial(_sum_partition, shipped=shipped, plan=plan, names=names if scalar is not None else None,
                           sums=sums)
    schema = T.StructType([T.StructField("sums", T.BinaryType())])
    total, rows = None, 0
    for r in df.select(*exprs).mapInArrow(fn, schema).collect():
        part, n = pickle.loads(r[0])
        total = part if total is None else total + part
        rows += n
    out_names = names if scalar is not None else (_model_names(explainer) or [f"Feature {i}" for i in
                                                                             range(width or 0)])
    return total, rows, out_names


# -- the driver's side -----------------------------------------------------------------------------------------------
def _is_vector(dtype: Any) -> bool:
    return type(dtype).__name__ == "VectorUDT"


def _is_numeric(dtype: Any) -> bool:
    from pyspark.sql import types as T

    return isinstance(dtype, (T.NumericType, T.BooleanType))


def _model_names(explainer: Any) -> list[str] | None:
    """The feature names the model keeps (XGBoost, LightGBM, scikit-learn, CatBoost), else the explainer's
    (shap's ``feature_names=``, or the columns of a background DataFrame); None where neither has any."""
    names = getattr(explainer._reader, "names", None)
    if names is None:
        names = getattr(explainer, "data_feature_names", None)
    return None if names is None else [str(n) for n in names]


def _feature_columns(df: Any, explainer: Any, features_col: str | list[str] | None) -> tuple[str | list[str], str]:
    """The features as the user names them (one vector/array column, or numeric columns in the model's order) and
    how they were chosen (for messages); ``features_col`` follows ``xgboost.spark``'s parameter of that name."""
    if features_col is not None:
        if isinstance(features_col, str):
            return features_col, "features_col"
        return [str(c) for c in features_col], "features_col"
    spark_ml = getattr(explainer.model, "original_model", None)
    if type(spark_ml).__name__ == "SparkMLModel":
        return spark_ml.features_col, "the Spark ML model's featuresCol"
    names = _model_names(explainer)
    columns = set(df.columns)
    if names is not None and any(n in columns for n in names):
        return names, "the model's feature names"
    if "features" in columns:   # xgboost.spark's default features_col
        return "features", "the default features_col 'features'"
    which = f"the model's feature names {names[:5]}{'...' if len(names) > 5 else ''}" if names else \
        "no feature names in the model"
    raise ValueError(f"cannot tell which columns of the Spark DataFrame are the features ({which}; no 'features' "
                     "column); pass features_col= a vector/array column or a list of numeric columns")


def _resolve(df: Any, name: str, how: str) -> Any:
    """The column's StructField, or Spark's own AnalysisException (with a note saying how it was chosen)."""
    from pyspark.errors import AnalysisException

    try:
        return df.select(_column(name)).schema.fields[0]
    except AnalysisException as exc:
        exc.add_note(f"hitml: the features column {name!r} comes from {how}")
        raise


def _column(name: str) -> Any:
    """A column by its exact name (dots and spaces in it are not paths)."""
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def _select_features(df: Any, spec: str | list[str], how: str, width: int | None) -> tuple[list, list[str], Any]:
    """(Spark expressions selecting the features as doubles, the user's feature column names, the internal scalar
    column names or None for one array column)."""
    from pyspark.sql import types as T

    if isinstance(spec, str):
        field = _resolve(df, spec, how)
        if _is_vector(field.dataType):
            from pyspark.ml.functions import vector_to_array

            feature_exprs = [vector_to_array(_column(spec), "float64").alias(_FEATURES)]
        elif isinstance(field.dataType, T.ArrayType) and _is_numeric(field.dataType.elementType):
            feature_exprs = [_column(spec).cast("array<double>").alias(_FEATURES)]
        else:
            raise TypeError(f"features column {spec!r} has type {field.dataType.simpleString()}; it must be a vector "
                            "(pyspark.ml.linalg) or a numeric array, or pass features_col= a list of numeric columns")
        feature_names: list[str] = [spec]
        scalar = None
    else:
        fields = [_resolve(df, c, how) for c in spec]
        bad = [f"{f.name} ({f.dataType.simpleString()})" for f in fields if not _is_numeric(f.dataType)]
        if bad:
            raise TypeError(f"feature columns must be numeric; got {', '.join(bad)}")
        if width is not None and len(spec) != width:
            raise ValueError(f"{len(spec)} feature columns given ({how}), but the model was trained on {width} "
                             "features")
        feature_exprs = [_column(c).cast("double").alias(f"{_FEATURES}_{j}") for j, c in enumerate(spec)]
        feature_names = list(spec)
        scalar = tuple(f"{_FEATURES}_{j}" for j in range(len(spec)))
    return feature_exprs, feature_names, scalar


def spark_shap_values(explainer: Any, df: Any, y: str | None = None, *, interactions: bool = False,
                      features_col: str | list[str] | None = None, keep_columns: list[str] | None = None,
                      values_col: str | None = None, base_value_col: str = "base_value",
                      tree_limit: int | None = None, check_additivity: bool = True, backend: str | None = None,
                      broadcast: Any = None) -> Any:
    """SHAP values (or interaction values) of a Spark DataFrame, as a lazy Spark DataFrame.

    Each Arrow record batch of ``df`` goes through ``explainer.shap_values`` (``shap_interaction_values``) on an
    executor, the same engine as in process, so each row's values equal ``explainer.shap_values(rows)``'s byte for
    byte. The explainer reaches each executor once (a broadcast); each task runs on its GPU where Spark gave it one,
    else on the CPU engine (:func:`executor_backend`).

    Parameters
    ----------
    explainer : hitml.shap_ext.TreeExplainer
        ``shap.TreeExplainer(model, backend=...)``.
    df : pyspark.sql.DataFrame
        The rows to explain.
    y : str, optional
        The label column (``model_output="log_loss"`` only).
    interactions : bool, default False
        SHAP interaction values instead of SHAP values.
    features_col : str or list of str, optional
        As ``xgboost.spark``'s ``features_col``: one vector (``pyspark.ml.linalg.Vector``) or numeric array column,
        or a list of numeric columns in the model's feature order. By default: a Spark ML model's ``featuresCol``;
        else the model's feature names (or the explainer's ``feature_names``) where the DataFrame has them; else a
        column named ``features``.
    keep_columns : list of str, optional
        Input columns to carry into the output (ids, labels). By default every column that is not a feature
        column; ``[]`` keeps none.
    values_col : str, optional
        The values' column: ``"shap_values"`` (``"shap_interaction_values"``) by default.
    base_value_col : str, default "base_value"
        The base value's column (``double``, or ``array<double>`` for K outputs).
    tree_limit, check_additivity
        As in ``shap_values``.
    backend : {"auto", "cpu", "gpu"}, optional
        Per executor (:func:`executor_backend`); the explainer's own requested backend by default.
    broadcast : pyspark.Broadcast, optional
        From :func:`broadcast_explainer`, to reuse one broadcast across calls (each call broadcasts by default).

    Returns
    -------
    pyspark.sql.DataFrame
        The kept columns, then ``values_col`` and ``base_value_col``. The values follow ``xgboost.spark``'s
        ``pred_contrib_col`` (XGBoost's ``pred_contribs``): for one output an ``array<double>`` of M + 1 numbers,
        the M SHAP values in the model's feature order and the base value last; for K outputs
        ``array<array<double>>``, K rows of M + 1 (``strict_shape``'s layout, outputs first). Interactions:
        ``array<array<double>>`` of (M + 1) x (M + 1) as XGBoost's ``pred_interactions`` (the base value at
        ``[M][M]``, zeros elsewhere in the last row and column), one more level for K outputs. Each row sums to
        the explained output (the margin).

    Raises
    ------
    pyspark.errors.AnalysisException
        For a features or kept column the DataFrame does not have.
    TypeError
        For a features column that is not numeric, a vector or a numeric array.
    ValueError
        For another number of feature columns than the model's, or output columns that clash with kept ones. On
        the executors (the job fails with it): vectors of another length than the model's features, null vectors,
        and (ImportError) an executor that cannot load the model's library.

    See Also
    --------
    xgboost.spark.SparkXGBRegressor : ``pred_contrib_col`` gives XGBoost's own path-dependent contributions in
        this layout; this function gives hitml's (path-dependent or interventional, interactions, every model
        family and Spark ML's own trees).
    hitml.shap_ext.TreeExplainer.shap_values : the same values in process; ``explainer.shap_values(df)`` of a
        Spark DataFrame calls this function with its defaults.

    Examples
    --------
    A Spark DataFrame with the model's feature columns and an ``id`` (docs/shap_ext.md, "Spark", runs this):

    >>> explainer = shap.TreeExplainer(model, backend="auto")                          # doctest: +SKIP
    >>> out = spark_shap_values(explainer, df, keep_columns=["id"])                    # doctest: +SKIP
    >>> out.columns                                                                    # doctest: +SKIP
    ['id', 'shap_values', 'base_value']
    >>> out.write.parquet("shap_values.parquet")                                       # doctest: +SKIP
    """
    from pyspark.sql import types as T

    from hitml.kernels.device import check_backend

    if not hasattr(explainer, "_paths") or not hasattr(explainer, "requested_backend"):
        raise TypeError("spark_shap_values needs a shap_ext.TreeExplainer (shap.TreeExplainer(model, backend=...))")
    if y is not None and not isinstance(y, str):
        raise TypeError(f"y must name a label column of the Spark DataFrame, got {type(y).__qualname__}")
    if interactions and explainer.model.model_output != "raw":
        raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
    values_col = values_col or ("shap_interaction_values" if interactions else "shap_values")
    be = check_backend(backend if backend is not None else explainer.requested_backend)
    spec, how = _feature_columns(df, explainer, features_col)
    exact = explainer._n_features_exact
    width = int(explainer.n_features) if exact else None
    feature_exprs, feature_names, scalar = _select_features(df, spec, how, width)
    if keep_columns is None:
        keep = [c for c in df.columns if c not in set(feature_names)]
    else:
        keep = [str(c) for c in keep_columns]
    clash = {values_col, base_value_col} & set(keep)
    if clash or values_col == base_value_col:
        raise ValueError(f"output column(s) {sorted(clash or {values_col})} clash with kept columns; pass "
                         "values_col= / base_value_col= or keep_columns=")
    exprs = [_column(c) for c in keep] + feature_exprs
    if y is not None:
        exprs.append(_column(y).cast("double").alias(_LABEL))
    selected = df.select(*exprs)
    K = int(explainer.model.num_outputs)
    if not interactions and explainer.model.model_output == "probability_doubled":
        K = 2
    leaf = T.ArrayType(T.DoubleType())
    values_type = T.ArrayType(leaf) if interactions else leaf
    if K > 1:
        values_type = T.ArrayType(values_type)
    base_type = T.DoubleType() if K == 1 else T.ArrayType(T.DoubleType())
    schema = T.StructType(list(selected.schema.fields[:len(keep)])
                          + [T.StructField(values_col, values_type), T.StructField(base_value_col, base_type)])
    from pyspark.sql.pandas.types import to_arrow_schema

    out_fields = list(to_arrow_schema(T.StructType(schema.fields[len(keep):])))
    plan = _Plan(n_keep=len(keep), features=scalar, features_name=", ".join(feature_names), width=width,
                 label=y is not None, interactions=interactions, tree_limit=tree_limit,
                 check_additivity=check_additivity, backend=be, is_local=_is_local(df), out_fields=out_fields)
    shipped = broadcast if broadcast is not None else broadcast_explainer(explainer, df.sparkSession)
    return selected.mapInArrow(functools.partial(_explain_partition, shipped=shipped, plan=plan), schema)


def _is_local(df: Any) -> bool:
    sc = getattr(df.sparkSession, "sparkContext", None)
    return sc is not None and str(sc.master).startswith("local")


def spark_background(df: Any, features: str | list[str], *, sample: float | None = None, limit: int | None = None,
                     seed: int = 0) -> Any:
    """Background rows for interventional values, collected from a Spark DataFrame to the driver through Arrow.

    Parameters
    ----------
    df : pyspark.sql.DataFrame
        Where the background rows live.
    features : str or list of str
        One vector/array column (gives a NumPy array) or numeric columns in the model's feature order (gives a
        pandas DataFrame with those names, read by name where the model's library reads names).
    sample : float, optional
        A Bernoulli sample of this fraction of the rows (``DataFrame.sample``, ``seed``), before ``limit``.
    limit : int, optional
        At most this many rows (``DataFrame.limit``: the first rows Spark finds, not a random sample).
    seed : int, default 0
        The sample's seed.

    Returns
    -------
    numpy.ndarray or pandas.DataFrame
        float64 rows; nulls are NaN (missing).

    Notes
    -----
    Without ``sample`` and ``limit`` every row is collected. The driver holds the Arrow table (8 bytes per value)
    and the float64 matrix made from it (8 more) at once, and Spark refuses a result larger than
    ``spark.driver.maxResultSize`` (1 GiB by default): about 67 million values (1.3 million rows of 50 features).
    The engine's interventional cost is linear in rows plus background, so a large background is affordable
    once it fits in memory.

    See Also
    --------
    shap.sample : shap's way to a background: a sample of rows already in memory.
    spark_shap_values : the values of a Spark DataFrame; with this background, interventional values.

    Examples
    --------
    >>> bg = spark_background(df, ["x0", "x1", "x2"], sample=0.01, limit=100_000)      # doctest: +SKIP
    >>> explainer = shap.TreeExplainer(model, bg, feature_perturbation="interventional",
    ...                                backend="auto")                                 # doctest: +SKIP
    >>> out = explainer.shap_values(df)                                                # doctest: +SKIP
    """
    import pandas as pd
    from pyspark.sql import types as T

    if sample is not None:
        df = df.sample(withReplacement=False, fraction=float(sample), seed=seed)
    if limit is not None:
        df = df.limit(int(limit))
    if isinstance(features, str):
        field = _resolve(df, features, "features")
        if _is_vector(field.dataType):
            from pyspark.ml.functions import vector_to_array

            expr = vector_to_array(_column(features), "float64")
        elif isinstance(field.dataType, T.ArrayType) and _is_numeric(field.dataType.elementType):
            expr = _column(features).cast("array<double>")
        else:
            raise TypeError(f"features column {features!r} has type {field.dataType.simpleString()}; it must be a "
                            "vector or a numeric array, or pass a list of numeric columns")
        table = _to_arrow(df.select(expr.alias(_FEATURES)))
        col = table.column(0).combine_chunks()
        if col.null_count:
            raise ValueError(f"features column {features!r} holds null vectors")
        sizes = np.diff(np.asarray(col.offsets))
        if len(sizes) and np.any(sizes != sizes[0]):
            raise ValueError(f"features column {features!r} holds vectors of {sorted(set(sizes.tolist()))} elements")
        width = int(sizes[0]) if len(sizes) else 0
        return col.flatten().to_numpy(zero_copy_only=False).astype(np.float64, copy=False).reshape(-1, width)
    cols = [str(c) for c in features]
    fields = [_resolve(df, c, "features") for c in cols]
    bad = [f"{f.name} ({f.dataType.simpleString()})" for f in fields if not _is_numeric(f.dataType)]
    if bad:
        raise TypeError(f"feature columns must be numeric; got {', '.join(bad)}")
    table = _to_arrow(df.select(*[_column(c).cast("double").alias(f"{_FEATURES}_{j}")
                                  for j, c in enumerate(cols)]))
    data = np.column_stack([table.column(j).to_numpy() for j in range(len(cols))]) if len(cols) else None
    return pd.DataFrame(data, columns=cols)


def _to_arrow(df: Any) -> Any:
    """A pyarrow Table of the DataFrame (``DataFrame.toArrow``, Spark >= 4.0; Arrow batches collected before)."""
    import pyarrow as pa

    if hasattr(df, "toArrow"):
        return df.toArrow()
    from ._compat import spark_collect_arrow

    return pa.Table.from_batches(spark_collect_arrow(df), schema=None)  # Spark 3.5
