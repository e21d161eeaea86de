"""Outputs that fit in memory: float32 values, interactions on a feature subset, and one-pass global summaries.

Everything here runs the explainer's own ``shap_values`` / ``shap_interaction_values`` on row chunks, so each chunk's
values are the bytes the whole call gives for those rows (TreeSHAP explains each row on its own), and only what the
caller keeps leaves the chunk:

- ``dtype=np.float32``: each chunk is rounded to float32 (on the device for the GPU backend, before the copy to host);
- ``interaction_features=``: each chunk's ``(c, M, M[, K])`` block is sliced to the subset;
- the global summaries add each chunk's ``|values|`` into float64 sums (on the device for the GPU backend) and never
  hold more than one chunk.

A chunk holds at most ``chunk_bytes`` of the engine's full float64 output (``(M+1)^2 K`` doubles a row for
interactions). Chunk boundaries depend only on the rows, M, K and ``chunk_bytes``, never on free memory, so the sums
are added in the same order on every call and give the same bytes.
"""
from __future__ import annotations

import collections.abc
import functools
from contextlib import contextmanager
from typing import Any, Iterator

import numpy as np
import pandas as pd
import shap

from hitml.kernels._progress import progress_enabled
from hitml.kernels.device import check_backend, cupy_module, is_cupy_array, to_numpy
from hitml.kernels.outputs import abs_sums, exact_to_float32

from ._dask import _as_parts, _output_tail, _worker_explainer, _y_parts, is_dask_collection, ship_explainer
from ._spark import is_spark_dataframe
from ._inputs import native_columns

__all__ = ["CHUNK_BYTES", "check_dtype", "custom_output", "explain_as", "global_summary"]

# The default bound on one chunk's full float64 output: small next to any device's memory, and large enough that a
# chunk is thousands of rows for interactions of 50 features, so the per-chunk host work (a Python call, staging the
# rows) is a small share. For GPU rows from host memory it also sets the pipeline's step: the host work of one chunk
# runs while the previous chunk's values copy to the host, and must take less time than that copy, or the host and
# not the copy bounds the call.
CHUNK_BYTES = 256 << 20


# ------------------------------------------------------------------------------------------------ validation
def check_dtype(dtype: Any) -> np.dtype:
    """``dtype`` as ``np.float64`` (None, the default) or ``np.float32``; ValueError for anything else."""
    if dtype is None:
        return np.dtype(np.float64)
    try:
        dt = np.dtype(dtype)
    except TypeError:                        # not a dtype at all ("nonsense")
        dt = np.dtype(object)
    if dt.type not in (np.float64, np.float32):    # (np.dtype(...) == None is True: compare the scalar types)
        raise ValueError(f"dtype must be numpy.float64 (the default) or numpy.float32, got {dtype!r}")
    return dt


def custom_output(dtype: Any, interaction_features: Any = None) -> bool:
    """Whether a call asks for more than the float64 values of every feature (ValueError for a bad dtype): the
    explainer's methods then hand it to :func:`explain_as`."""
    return check_dtype(dtype) != np.float64 or interaction_features is not None


def _check_chunk_bytes(chunk_bytes: Any) -> int:
    if isinstance(chunk_bytes, (bool, np.bool_)) or not isinstance(chunk_bytes, (int, np.integer)) \
            or chunk_bytes < 1:
        raise ValueError(f"chunk_bytes must be a positive number of bytes, got {chunk_bytes!r}")
    return int(chunk_bytes)


def _columns(X: Any) -> list | None:
    """The column names of a pandas/Dask/polars frame or a pyarrow Table (the output's column order); else None."""
    if isinstance(X, pd.DataFrame):
        return list(X.columns)
    cols = native_columns(X)
    if cols is not None:
        return cols
    if is_dask_collection(X) and hasattr(X, "columns"):
        return list(X.columns)
    return None


def feature_names(explainer: Any, X: Any, M: int) -> list[str]:
    """Names of the output's M columns as shap's ``explainer(X)`` gives them: a frame's columns, else the explainer's
    ``data_feature_names``, else "Feature i" (the label shap's plots give an unnamed feature)."""
    names = _columns(X)
    if names is None:
        names = getattr(explainer, "data_feature_names", None)
    if names is None or len(names) != M:
        return [f"Feature {i}" for i in range(M)]
    return [str(n) for n in names]


def resolve_features(features: Any, names: list[str] | None, M: int) -> np.ndarray:
    """Column indices (int64) of ``interaction_features``: integers in [0, M) or names of ``names``."""
    if isinstance(features, (str, bytes)) or not isinstance(features, collections.abc.Iterable):
        raise TypeError(f"interaction_features must be a list of column indices or names, got {features!r}")
    items = list(features)
    if not items:
        raise ValueError("interaction_features is empty; give at least one column index or name")
    out = []
    for f in items:
        if isinstance(f, (int, np.integer)) and not isinstance(f, (bool, np.bool_)):
            if not 0 <= int(f) < M:
                raise ValueError(f"interaction_features: column index {f} is out of range for {M} features")
            out.append(int(f))
        elif isinstance(f, str):
            if names is None:
                raise ValueError(f"interaction_features: the name {f!r} needs X as a frame or the explainer's "
                                 "feature_names; pass column indices instead")
            if names.count(f) != 1:
                raise ValueError(f"interaction_features: {f!r} is {'not a' if f not in names else 'an ambiguous'} "
                                 f"feature name (names: {names[:10]}{'...' if len(names) > 10 else ''})")
            out.append(names.index(f))
        else:
            raise TypeError(f"interaction_features: {f!r} is neither a column index nor a name")
    if len(set(out)) != len(out):
        raise ValueError(f"interaction_features names a column twice: {items!r}")
    return np.asarray(out, dtype=np.int64)


def _known_names(explainer: Any, X: Any) -> list[str] | None:
    names = _columns(X)
    return [str(n) for n in names] if names is not None else getattr(explainer, "data_feature_names", None)


# ------------------------------------------------------------------------------------------------ row chunks
def _n_rows(X: Any) -> int | None:
    """Rows of an input that is cut into row chunks here (2-D NumPy/CuPy arrays, pandas, polars, pyarrow); None for
    any other input (one row, a list, a DMatrix, ...), which is explained in one call."""
    if isinstance(X, np.ndarray) or is_cupy_array(X):
        return int(X.shape[0]) if X.ndim == 2 else None
    if isinstance(X, pd.DataFrame) or native_columns(X) is not None:
        return len(X)
    return None


def _flat(X: Any) -> bool:
    """Whether X is one row (a 1-D array or list, or a pandas Series): values then have no row axis."""
    if isinstance(X, pd.Series):
        return True
    if isinstance(X, (np.ndarray, list, tuple)) or is_cupy_array(X):
        return np.ndim(X) == 1 if not is_cupy_array(X) else X.ndim == 1
    return False


def _rows(X: Any, a: int, b: int) -> Any:
    """Rows a:b of an input _n_rows cuts (or of labels y)."""
    if X is None:
        return None
    if isinstance(X, (pd.DataFrame, pd.Series)):
        return X.iloc[a:b]
    if native_columns(X) is not None:
        return X.slice(a, b - a)
    if isinstance(X, np.ndarray) or is_cupy_array(X):
        return X[a:b]
    return np.asarray(X)[a:b]


def _width(explainer: Any, X: Any) -> int:
    shape = getattr(X, "shape", None)
    if shape is not None and len(shape) == 2 and shape[1] is not None and not np.isnan(shape[1]):
        return int(shape[1])
    cols = _columns(X)
    return len(cols) if cols is not None else int(explainer.n_features)


def _row_bytes(explainer: Any, M: int, interactions: bool) -> int:
    """The engine's full float64 output per row: (M+1)[^2] K doubles (K doubled for probability_doubled)."""
    ens = explainer.model
    K = int(getattr(ens, "num_outputs", 1) or 1)
    if getattr(ens, "model_output", None) == "probability_doubled":
        K *= 2
    return 8 * (M + 1) * (M + 1 if interactions else 1) * K


def _device_rows(explainer: Any, X: Any, approximate: bool) -> bool:
    """Whether host rows of X go to the GPU chunk by chunk as CuPy arrays, so that the values stay on the device
    until they are cast and sliced: NumPy float rows of the GPU backend that the model's library reads as they are
    (not HistGradientBoosting's category encoding of arrays, which runs on host rows), outside the CatBoost-native
    route and shap's own Saabas values, which take host rows."""
    return (explainer.backend == "gpu" and isinstance(X, np.ndarray) and X.ndim == 2
            and X.dtype in (np.float32, np.float64) and not approximate
            and explainer.route != "catboost-native"
            and getattr(explainer._reader, "hgb_layout", None) is None)


@contextmanager
def _inner_quiet(explainer: Any):
    """The per-chunk calls without their own progress bars (the caller shows one over the chunks)."""
    saved = explainer.progress
    explainer.progress = False
    try:
        yield
    finally:
        explainer.progress = saved


def _bar(total: int | None, desc: str, progress: Any):
    """A tqdm bar over chunks where progress allows (None: on unless HITML_PROGRESS=0; one chunk shows none)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="chunk", leave=False,
                disable=not progress_enabled(progress) or (total is not None and total < 2))


def _take(v: Any, idx: np.ndarray | None, axis: int) -> Any:
    """v restricted to the columns idx on axes ``axis`` and ``axis + 1`` (an interaction block's two feature axes)."""
    if idx is None:
        return v
    if is_cupy_array(v):
        idx = cupy_module().asarray(idx)
    return v.take(idx, axis=axis).take(idx, axis=axis + 1)


def _cast(v: Any, dtype: np.dtype, out: Any = None) -> Any:
    """v as ``dtype``: NumPy's rounding on the host, the exact kernel on the device (into ``out`` if given)."""
    if dtype == np.float32:
        return exact_to_float32(v, out)
    if is_cupy_array(v):
        if out is not None:
            out[...] = v
            return out
        return cupy_module().ascontiguousarray(v)
    if out is not None:
        np.copyto(out, v, casting="unsafe")
        return out
    return np.ascontiguousarray(v, dtype=dtype)


# ------------------------------------------------------------------------------------------------ values
def explain_as(explainer: Any, X: Any, y: Any = None, *, interactions: bool, tree_limit: int | None = None,
               check_additivity: bool = True, approximate: bool = False, from_call: bool = False,
               dtype: Any = None, interaction_features: Any = None, chunk_bytes: int | None = None) -> Any:
    """``shap_values`` / ``shap_interaction_values`` of ``explainer`` in ``dtype``, interactions over a subset.

    The rows go through the explainer's own method in chunks of at most ``chunk_bytes`` of its float64 output; each
    chunk is sliced to ``interaction_features`` and rounded to ``dtype`` before the next one is computed (on the
    GPU backend on the device, so only the kept bytes reach the host). The values are those of one whole call,
    sliced and rounded. Dask collections give a lazy dask array of the same (per-partition chunked) computation.
    """
    dt = check_dtype(dtype)
    if interaction_features is not None and not interactions:
        raise TypeError("interaction_features is a keyword of shap_interaction_values only")
    if is_dask_collection(X):
        return _dask_values(explainer, X, y, interactions, tree_limit, check_additivity, dt, interaction_features)
    if is_spark_dataframe(X):
        raise NotImplementedError("dtype= and interaction_features= with a Spark DataFrame: its values come as "
                                  "array<double> columns (shap_ext.spark_shap_values); for global views of all its "
                                  "rows use global_shap_values / global_interaction_values")
    idx = None
    if interaction_features is not None:
        idx = resolve_features(interaction_features, _known_names(explainer, X), _width(explainer, X))

    def call(Xc: Any, yc: Any) -> Any:
        if interactions:
            return explainer.shap_interaction_values(Xc, yc, tree_limit=tree_limit)
        return explainer.shap_values(Xc, yc, tree_limit=tree_limit, approximate=approximate,
                                     check_additivity=check_additivity, from_call=from_call)

    n = _n_rows(X)
    if n is None or n == 0:                  # one row, an empty matrix or an input not cut here: one call
        return _cast(_take(call(X, y), idx, 0 if _flat(X) else 1), dt)
    device = _device_rows(explainer, X, approximate)
    bound = _check_chunk_bytes(chunk_bytes) if chunk_bytes is not None else CHUNK_BYTES
    step = max(1, bound // _row_bytes(explainer, _width(explainer, X), interactions))
    if n <= step:
        if device:
            return _device_to_host(explainer, X, y, call, idx, dt, [(0, n)])
        return _cast(_take(call(X, y), idx, 1), dt)
    chunks = [(a, min(n, a + step)) for a in range(0, n, step)]
    if device:
        return _device_to_host(explainer, X, y, call, idx, dt, chunks)
    out = None
    with _inner_quiet(explainer), _bar(len(chunks), "hitml TreeSHAP chunks", explainer.progress) as bar:
        for a, b in chunks:
            v = _take(call(_rows(X, a, b), _rows(y, a, b)), idx, 1)
            if out is None:
                out = (cupy_module().empty if is_cupy_array(v) else np.empty)((n,) + v.shape[1:], dtype=dt)
            _cast(v, dt, out[a:b])
            bar.update(1)
    return out


def _device_to_host(explainer: Any, X: np.ndarray, y: Any, call, idx, dt: np.dtype, chunks: list) -> np.ndarray:
    """Host rows explained on the GPU chunk by chunk: each chunk goes up through a pinned block, its values are
    sliced and cast on the device, and copied into pinned host output on a copy stream while the next chunk
    computes (each chunk's device result is held until its copy is done)."""
    from hitml.kernels import device
    from hitml.kernels.treeshap._gpu_core import options

    cp = cupy_module()
    main = cp.cuda.get_current_stream()
    out = None
    copier = None
    inflight: collections.deque = collections.deque()   # (copy done event, device block, pinned input block)
    try:
        with _inner_quiet(explainer), _bar(len(chunks), "hitml TreeSHAP chunks", explainer.progress) as bar:
            for a, b in chunks:
                keep: list = []
                Xd = device.upload(X[a:b], X.dtype, options.pinned_bytes, keep)
                v = _take(call(Xd, _rows(y, a, b)), idx, 1)
                if out is None:
                    shape = (X.shape[0],) + tuple(v.shape[1:])
                    out = device.pinned_empty(shape, dt, options.pinned_bytes)
                    if out is None:
                        out = np.empty(shape, dtype=dt)
                    elif len(chunks) > 1:
                        copier = device.copy_stream()
                d = _cast(v, dt)
                if copier is None:
                    d.get(out=out[a:b])
                    bar.update(1)
                    continue
                copier.wait_event(main.record())
                piece = out[a:b]
                d.data.copy_to_host_async(piece.ctypes.data, piece.nbytes, copier)
                inflight.append((copier.record(), d, keep))
                while len(inflight) > 2:          # two copies queued at most: memory stays a few chunks
                    inflight.popleft()[0].synchronize()
                bar.update(1)
    finally:                                     # also on an error: no copy may still write into ``out``
        if copier is not None:
            copier.synchronize()
    return out


def _dask_part(shipped: Any, block: Any, y: Any, backend: str, interactions: bool, tree_limit: int | None,
               check_additivity: bool, dtype: np.dtype, features: Any, tail: tuple) -> Any:
    from hitml.kernels.device import array_module

    if len(block) == 0:
        return array_module(block).empty((0,) + tail, dtype=dtype)
    ex = _worker_explainer(shipped, backend)
    return explain_as(ex, block, y, interactions=interactions, tree_limit=tree_limit,
                      check_additivity=check_additivity, dtype=dtype, interaction_features=features)


def _dask_values(explainer: Any, X: Any, y: Any, interactions: bool, tree_limit: int | None,
                 check_additivity: bool, dt: np.dtype, features: Any) -> Any:
    """A lazy dask array of explain_as over each partition (the explainer shipped once, as dask_shap_values)."""
    import dask
    import dask.array as da

    from hitml.kernels.device import array_module

    if interactions and explainer.model.model_output != "raw":
        raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
    parts, rows, meta, n_cols = _as_parts(X, True)
    idx = None
    if features is not None:
        idx = resolve_features(features, _known_names(explainer, X), n_cols)
    ys = _y_parts(y, len(parts), rows)
    tail = _output_tail(explainer, n_cols, interactions)
    if idx is not None:
        tail = (len(idx), len(idx)) + tail[2:]
    be = check_backend(explainer.requested_backend)
    ref = ship_explainer(explainer)
    task = dask.delayed(_dask_part, pure=True)
    out_meta = array_module(meta).empty((0,) * (1 + len(tail)), dtype=dt)
    blocks = [da.from_delayed(task(ref, p, yp, be, interactions, tree_limit, check_additivity, dt, idx, tail),
                              shape=(r,) + tail, dtype=dt, meta=out_meta) for p, yp, r in zip(parts, ys, rows)]
    return da.concatenate(blocks, axis=0)


# ------------------------------------------------------------------------------------------------ summaries
class _Sums:
    """Float64 sums of |values| over rows: a device accumulator for CuPy chunks, a host one for NumPy chunks."""

    def __init__(self) -> None:
        self.host = None
        self.dev = None
        self.rows = 0

    def add(self, v: Any) -> None:
        self.rows += int(v.shape[0])
        part = abs_sums(v)                              # |x| summed over the chunk's rows where they lie
        if is_cupy_array(v):
            self.dev = part if self.dev is None else self.dev + part
        else:
            self.host = part if self.host is None else self.host + part

    def total(self) -> np.ndarray | None:
        """The sums on the host (only these M[^2] K doubles leave the device)."""
        dev = None if self.dev is None else to_numpy(self.dev)
        if dev is None:
            return self.host
        return dev if self.host is None else self.host + dev


def _blocks(X: Any, y: Any) -> Iterator[tuple[Any, Any]]:
    """(rows, labels) blocks of X: one for an array or frame; each item of an iterator of blocks (with y an
    iterator of label blocks, or None)."""
    if isinstance(X, collections.abc.Iterator):
        ys = iter(y) if y is not None else None
        for block in X:
            yield block, (next(ys) if ys is not None else None)
        return
    yield X, y


def _accumulate(explainer: Any, X: Any, y: Any, interactions: bool, tree_limit: int | None,
                check_additivity: bool, features: Any, chunk_bytes: int,
                progress: Any = None) -> tuple[_Sums, list[str] | None]:
    """Sums of |values| (sliced to the features) over X's rows, chunk by chunk; (sums, names of the kept
    columns)."""
    sums = _Sums()
    names = idx = None
    stream = isinstance(X, collections.abc.Iterator)
    bar = None
    try:
        with _inner_quiet(explainer):
            for block, yb in _blocks(X, y):
                n = _n_rows(block)
                if n is None:
                    raise TypeError("global summaries take 2-D NumPy/CuPy arrays, pandas/polars DataFrames, pyarrow "
                                    f"Tables, Dask collections or an iterator of them; got {type(block).__name__}")
                M = _width(explainer, block)
                if names is None:
                    all_names = feature_names(explainer, block, M)
                    idx = None if features is None else resolve_features(features, _known_names(explainer, block), M)
                    names = all_names if idx is None else [all_names[i] for i in idx]
                step = max(1, chunk_bytes // _row_bytes(explainer, M, interactions))
                if bar is None:
                    bar = _bar(None if stream else -(-n // step), "hitml global SHAP", progress)
                device = _device_rows(explainer, block, False)
                for a in range(0, n, step):
                    b = min(n, a + step)
                    Xc = _rows(block, a, b)
                    if device:                   # the values stay on the device; only the sums leave it
                        Xc = cupy_module().asarray(Xc)
                    yc = _rows(yb, a, b)
                    if interactions:
                        v = explainer.shap_interaction_values(Xc, yc, tree_limit=tree_limit)
                    else:
                        v = explainer.shap_values(Xc, yc, tree_limit=tree_limit, check_additivity=check_additivity)
                    sums.add(_take(v, idx, 1))
                    bar.update(1)
    finally:
        if bar is not None:
            bar.close()
    return sums, names


def _dask_sums(shipped: Any, block: Any, y: Any, backend: str, interactions: bool, tree_limit: int | None,
               check_additivity: bool, features: Any, chunk_bytes: int) -> tuple[np.ndarray | None, int]:
    """One partition's float64 sums of |values| and its row count, on its worker's backend."""
    if len(block) == 0:
        return None, 0
    ex = _worker_explainer(shipped, backend)
    sums = _accumulate(ex, block, y, interactions, tree_limit, check_additivity, features, chunk_bytes,
                       progress=False)[0]
    return sums.total(), sums.rows


def _add_in_order(parts: list) -> tuple[np.ndarray | None, int]:
    """The partitions' sums added in partition order (a fixed order: the same bytes on every call)."""
    total, rows = None, 0
    for s, n in parts:
        if s is not None:
            total = s if total is None else total + s
        rows += n
    return total, rows


def _dask_summary(explainer: Any, X: Any, y: Any, interactions: bool, tree_limit: int | None,
                  check_additivity: bool, features: Any, chunk_bytes: int) -> tuple[np.ndarray | None, int, list]:
    import dask

    parts, rows, _meta, n_cols = _as_parts(X, y is not None)
    all_names = feature_names(explainer, X, n_cols)
    idx = None if features is None else resolve_features(features, _known_names(explainer, X), n_cols)
    names = all_names if idx is None else [all_names[i] for i in idx]
    ys = _y_parts(y, len(parts), rows)
    be = check_backend(explainer.requested_backend)
    ref = ship_explainer(explainer)
    task = dask.delayed(_dask_sums, pure=True)
    partial = [task(ref, p, yp, be, interactions, tree_limit, check_additivity, idx, chunk_bytes)
               for p, yp in zip(parts, ys)]
    (total, n), = dask.compute(dask.delayed(_add_in_order)(partial))
    return total, n, names


def _spark_sums(ex: Any, X: Any, y: Any, *, interactions: bool, tree_limit: int | None, check_additivity: bool,
                features: Any, chunk_bytes: int) -> tuple[np.ndarray | None, int]:
    """One Arrow batch's float64 sums of |values| on its executor (``spark_global_sums``' per-batch step)."""
    sums = _accumulate(ex, X, y, interactions, tree_limit, check_additivity, features, chunk_bytes,
                       progress=False)[0]
    return sums.total(), sums.rows


def _spark_summary(explainer: Any, X: Any, y: Any, interactions: bool, tree_limit: int | None,
                   check_additivity: bool, features: Any, chunk_bytes: int) -> tuple[np.ndarray | None, int, list]:
    from ._spark import spark_global_sums

    width = int(explainer.n_features)
    probe = explainer.data_feature_names if getattr(explainer, "data_feature_names", None) else None
    idx = None if features is None else resolve_features(features, probe or _spark_names(explainer), width)
    step = functools.partial(_spark_sums, interactions=interactions, tree_limit=tree_limit,
                             check_additivity=check_additivity, features=idx, chunk_bytes=chunk_bytes)
    total, n, names = spark_global_sums(explainer, X, y, step)
    return total, n, names if idx is None else [names[i] for i in idx]


def _spark_names(explainer: Any) -> list[str] | None:
    from ._spark import _model_names

    return _model_names(explainer)


def _top_pairs(mean: np.ndarray, names: list[str], top_k: int | None) -> pd.DataFrame:
    """The off-diagonal pairs (i < j) ranked by mean |interaction| at [i, j], largest first (ties in (i, j) order);
    one ranking per output for multi-output models (column "output")."""
    m = mean.shape[0]
    iu, ju = np.triu_indices(m, k=1)
    multi = mean.ndim == 3
    frames = []
    for k in range(mean.shape[2] if multi else 1):
        vals = mean[iu, ju, k] if multi else mean[iu, ju]
        order = np.argsort(-vals, kind="stable")
        if top_k is not None:
            order = order[:top_k]
        cols = {"feature_i": [names[i] for i in iu[order]], "feature_j": [names[j] for j in ju[order]],
                "mean_abs_interaction": vals[order]}
        frames.append(pd.DataFrame({"output": k, **cols}) if multi else pd.DataFrame(cols))
    return pd.concat(frames, ignore_index=True) if multi else frames[0]


def global_summary(explainer: Any, X: Any, y: Any = None, *, interactions: bool, tree_limit: int | None = None,
                   check_additivity: bool = True, top_k: int | None = 10, interaction_features: Any = None,
                   chunk_bytes: int | None = None) -> shap.Explanation:
    """Mean |SHAP| per feature (or the mean |interaction| matrix and its top pairs) over X, as a shap.Explanation."""
    if interaction_features is not None and not interactions:
        raise TypeError("interaction_features is a keyword of global_interaction_values only")
    if top_k is not None and (isinstance(top_k, (bool, np.bool_)) or not isinstance(top_k, (int, np.integer))
                              or top_k < 0):
        raise ValueError(f"top_k must be a non-negative integer or None (every pair), got {top_k!r}")
    bound = CHUNK_BYTES if chunk_bytes is None else _check_chunk_bytes(chunk_bytes)
    if interactions and explainer.model.model_output != "raw":
        raise ValueError('Only model_output = "raw" is supported for SHAP interaction values right now!')
    if is_dask_collection(X):
        total, n, names = _dask_summary(explainer, X, y, interactions, tree_limit, check_additivity,
                                        interaction_features, bound)
    elif is_spark_dataframe(X):
        total, n, names = _spark_summary(explainer, X, y, interactions, tree_limit, check_additivity,
                                         interaction_features, bound)
    else:
        sums, names = _accumulate(explainer, X, y, interactions, tree_limit, check_additivity,
                                     interaction_features, bound, progress=explainer.progress)
        total, n = sums.total(), sums.rows
    if n == 0 or total is None:
        raise ValueError("X has no rows; a mean over rows needs at least one")
    mean = total / n
    base = explainer.expected_value
    if base is not None:                     # as explainer(X).abs.mean(0) holds it: a scalar, or (K,)
        base = np.float64(base) if np.ndim(base) == 0 else np.asarray(base, dtype=np.float64)
    out = shap.Explanation(values=mean, base_values=base, feature_names=names)
    out.n_rows = n
    if interactions:
        out.top_interactions = _top_pairs(mean, names, None if top_k is None else int(top_k))
    return out
