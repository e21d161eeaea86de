"""SHAP values and interactions of a Dask array or DataFrame: lazy, one task per partition, the model sent once."""
from __future__ import annotations

import copy
import inspect
import sys
import types
import weakref
from typing import Any

import numpy as np

from hitml.kernels.device import array_module, check_backend, resolve_backend

__all__ = ["dask_shap_values", "dask_background_summary", "is_dask_collection", "ship_explainer",
           "ShippedExplainer"]


def is_dask_collection(x: Any) -> bool:
    """True for a dask.array or dask.dataframe collection; never imports dask itself."""
    dask = sys.modules.get("dask")
    return dask is not None and dask.is_dask_collection(x)

_LOADS = {"count": 0}  # per process: how many times a ShippedExplainer was unpickled here (tests read it)


class ShippedExplainer:
    """The explainer as workers receive it: its PathSet is built before pickling, so no worker re-extracts paths."""

    def __init__(self, explainer: Any) -> None:
        explainer.paths  # noqa: B018 - build and cache the PathSet on the client, once
        self.explainer = explainer

    def __getstate__(self) -> dict:
        ex = self.explainer
        if getattr(ex, "background_summary", None) is not None and ex.model.get_transform() == "identity":
            # the summary is all a call reads of the background: the rows stay on the client
            ex = copy.copy(ex)
            ex.data = None
            ex._background = None
            ex.masker = None
            ex.__dict__.pop("_data_missing", None)
        # shap's log_loss explainers hold a bound name-mangled method as expected_value (and the engine keeps a copy
        # as _full_expected_value), which pickle cannot look up: send the method's name and rebind it on arrival
        bound = {k: v.__func__.__name__ for k, v in vars(ex).items() if inspect.ismethod(v) and v.__self__ is ex}
        if bound:
            ex = copy.copy(ex)
            for k in bound:
                setattr(ex, k, None)
        return {"explainer": ex, "bound_methods": bound}

    def __setstate__(self, state: dict) -> None:
        _LOADS["count"] += 1
        ex = state["explainer"]
        for attr, name in state.get("bound_methods", {}).items():
            for cls in type(ex).__mro__:
                func = vars(cls).get(f"_{cls.__name__.lstrip('_')}{name}", vars(cls).get(name))
                if func is not None:
                    setattr(ex, attr, types.MethodType(func, ex))
                    break
        self.explainer = ex


# explainer -> (client id, the explainer's attributes when shipped, the scattered future): a later call with the same
# client and the same attribute objects reuses the copy on the workers (weak: the entry goes with the explainer)
_SHIPPED: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _current_client() -> Any:
    """The ``distributed`` client of this context, or None (no distributed, or no client: a local scheduler)."""
    try:
        from distributed import get_client

        return get_client()
    except (ImportError, ValueError):
        return None


def ship_explainer(explainer: Any) -> Any:
    """A reference to the explainer that sends it to each worker at most once.

    With a ``distributed`` client, the explainer is scattered to all workers (``broadcast=True``): one copy per worker,
    replicated so that a lost worker does not lose it. The copy is kept for later calls with the same client while
    the explainer's attributes are the same objects (an attribute set to another value, for example
    ``explainer.model_output``, ships it again). Otherwise (threads, processes, synchronous schedulers) it is one
    ``dask.delayed`` key of the graph, which every task references.
    """
    import dask

    client = _current_client()
    if client is None:
        return dask.delayed(ShippedExplainer(explainer), pure=False)
    state = dict(vars(explainer))
    kept = _SHIPPED.get(explainer)
    if (kept is not None and kept[0] == client.id and kept[1].keys() == state.keys()
            and all(kept[1][k] is v for k, v in state.items()) and kept[2].status == "finished"):
        return kept[2]
    ref = client.scatter(ShippedExplainer(explainer), broadcast=True, hash=False)
    _SHIPPED[explainer] = (client.id, dict(vars(explainer)), ref)
    return ref


def _worker_explainer(shipped: ShippedExplainer, backend: str) -> Any:
    ex = copy.copy(shipped.explainer)  # shallow: shares the PathSet; only the backend differs per worker
    ex.backend = resolve_backend(backend)  # "auto": this worker's GPU if it sees one, else the CPU engine
    return ex


def _explain_part(shipped: ShippedExplainer, block: Any, y: Any, backend: str, kind: str,
                  tree_limit: int | None, check_additivity: bool, tail: tuple) -> Any:
    """One partition's values on this worker; an empty partition gives an empty block (the engine rejects none)."""
    if len(block) == 0:
        return array_module(block).empty((0,) + tail, dtype=np.float64)
    ex = _worker_explainer(shipped, backend)
    if kind == "interactions":
        return ex.shap_interaction_values(block, y, tree_limit=tree_limit)
    if kind == "banzhaf":
        return ex.banzhaf_values(block, tree_limit=tree_limit)
    return ex.shap_values(block, y, tree_limit=tree_limit, check_additivity=check_additivity)


def _output_tail(explainer: Any, n_cols: int, interactions: bool) -> tuple[int, ...]:
    """The per-row shape shap gives: (M[, K]) for values, (M, M[, K]) for interactions, (M, 2) for
    probability_doubled."""
    ens = explainer.model
    K = int(ens.num_outputs)
    M = explainer.n_features if explainer._n_features_exact else n_cols
    head = (M, M) if interactions else (M,)
    tail = head if K == 1 else head + (K,)
    if not interactions and ens.model_output == "probability_doubled":
        tail = tail + (2,)
    return tail


def _as_parts(X: Any, lengths: bool) -> tuple[list, list, Any, int]:
    """(delayed row partitions, their row counts (nan if unknown), meta of the partitions, number of columns)."""
    import dask.array as da

    if isinstance(X, da.Array):
        if X.ndim != 2:
            raise ValueError(f"X must be a 2-D dask array (rows x features), got {X.ndim} dimensions")
        if len(X.chunks[1]) != 1:
            X = X.rechunk({1: -1})
        rows = list(X.chunks[0])
        if lengths and any(np.isnan(r) for r in rows):
            X = X.compute_chunk_sizes()
            rows = list(X.chunks[0])
        return list(X.to_delayed().reshape(-1)), rows, X._meta, int(X.shape[1])
    if hasattr(X, "to_delayed") and hasattr(X, "map_partitions") and hasattr(X, "columns"):
        rows = list(X.map_partitions(len).compute()) if lengths else [np.nan] * X.npartitions
        return list(X.to_delayed()), rows, np.empty((0, 0)), len(X.columns)
    raise TypeError(f"X must be a dask.array or dask.dataframe.DataFrame, got {type(X).__module__}."
                    f"{type(X).__qualname__}")


def _y_parts(y: Any, n_parts: int, rows: list) -> list:
    import dask.array as da

    if y is None:
        return [None] * n_parts
    if isinstance(y, da.Array):
        if any(np.isnan(r) for r in rows):
            raise ValueError("y as a dask array needs X with known partition lengths (lengths=True)")
        return list(y.rechunk((tuple(int(r) for r in rows),)).to_delayed().reshape(-1))
    if hasattr(y, "to_delayed"):
        parts = list(y.to_delayed())
        if len(parts) != n_parts:
            raise ValueError(f"y has {len(parts)} partitions, X has {n_parts}; align them (same partitions)")
        return parts
    raise TypeError("y must be a dask array or dask Series aligned with X's partitions")


def dask_shap_values(explainer: Any, X: Any, y: Any = None, *, interactions: bool = False,
                     tree_limit: int | None = None, check_additivity: bool = True, backend: str | None = None,
                     lengths: bool = True, shipped: Any = None, banzhaf: bool = False) -> Any:
    """Lazy SHAP values (or interaction values) of a ``dask.array`` / ``dask.dataframe`` as a ``dask.array``.

    Shapes are shap's: ``(n, M)`` or ``(n, M, K)``; interactions ``(n, M, M)`` or ``(n, M, M, K)``; values equal
    ``explainer.shap_values(X.compute())``. The explainer (with its PathSet) reaches each worker once. Each task runs
    on ``backend`` resolved on its worker: by default the explainer's own ("auto" uses the worker's GPU when it has
    one, the CPU engine otherwise). NumPy partitions give NumPy blocks, CuPy partitions CuPy blocks. ``lengths=False``
    skips counting DataFrame partition rows (the result then has unknown chunk sizes). ``shipped``: the value of
    ``ship_explainer(explainer)`` from an earlier call, so that repeated calls reuse the copy already on the workers
    (by default each call ships the explainer once).
    """
    import dask
    import dask.array as da

    if not hasattr(explainer, "_paths") or not hasattr(explainer, "requested_backend"):
        raise TypeError("dask_shap_values needs a shap_ext.TreeExplainer (shap.TreeExplainer(model, backend=...))")
    if (interactions or banzhaf) and explainer.model.model_output != "raw":
        raise ValueError('Only model_output = "raw" is supported for SHAP interaction values and Banzhaf values')
    if banzhaf and explainer.feature_perturbation != "interventional":
        raise NotImplementedError("banzhaf_values needs background data (feature_perturbation='interventional')")
    be = backend if backend is not None else explainer.requested_backend
    be = check_backend(be)
    parts, rows, meta, n_cols = _as_parts(X, lengths)
    ys = _y_parts(y, len(parts), rows)
    tail = _output_tail(explainer, n_cols, interactions)
    if shipped is not None and not (hasattr(shipped, "key") or isinstance(shipped, ShippedExplainer)):
        raise TypeError("shipped must be the value returned by ship_explainer(explainer)")
    ref = ship_explainer(explainer) if shipped is None else shipped
    task = dask.delayed(_explain_part, pure=True)
    out_meta = array_module(meta).empty((0,) * (1 + len(tail)))  # CuPy partitions give CuPy blocks
    kind = "interactions" if interactions else "banzhaf" if banzhaf else "values"
    blocks = [da.from_delayed(task(ref, p, yp, be, kind, tree_limit, check_additivity, tail),
                              shape=(r,) + tail, dtype=np.float64, meta=out_meta)
              for p, yp, r in zip(parts, ys, rows)]
    return da.concatenate(blocks, axis=0)


class _PartReader:
    """What a worker needs to summarise its partitions of a background: the row reader, the dtypes the trees compare
    in, and the paths (sent once)."""

    def __init__(self, reader: Any, input_dtype: Any, row_dtype: Any, paths: Any) -> None:
        self.reader = reader
        self.input_dtype = np.dtype(input_dtype)
        self.row_dtype = row_dtype
        self.paths = paths


def _summarize_part(ctx: _PartReader, block: Any, backend: str) -> Any:
    """One partition's background summary, on this worker's engine ("auto": its GPU if it has one; CuPy
    partitions always on the GPU), returned in host memory (small: the paths' histograms)."""
    from hitml.kernels.device import is_cupy_array
    from hitml.kernels.treeshap import background_summary

    from ._inputs import read_background

    if len(block) == 0:
        return None
    rows = read_background(block, ctx.reader, ctx.input_dtype, ctx.row_dtype)
    be = "gpu" if is_cupy_array(rows) else resolve_backend(backend)
    return background_summary(ctx.paths, rows, backend=be).to_host()


def _merge(parts: list) -> Any:
    from hitml.kernels.treeshap import BackgroundSummary

    parts = [p for p in parts if p is not None]
    return BackgroundSummary.merge(parts) if parts else None


def dask_background_summary(paths: Any, data: Any, reader: Any, input_dtype: Any, row_dtype: Any,
                            backend: str, fan_in: int = 8) -> Any:
    """The background summary of a Dask array or DataFrame: each partition is read and counted where it lies
    (``_summarize_part``), and the small summaries are summed in a tree of ``fan_in``. The rows are never
    gathered; only the summed histograms reach the client. Integer sums: the result equals the summary of the
    whole background in one piece, whatever the partitions."""
    import dask

    parts, _, _, _ = _as_parts(data, lengths=False)
    ctx = _PartReader(reader, input_dtype, row_dtype, paths)
    client = _current_client()
    ref = dask.delayed(ctx, pure=False) if client is None else client.scatter(ctx, broadcast=True, hash=False)
    count = dask.delayed(_summarize_part, pure=True)
    level = [count(ref, p, backend) for p in parts]
    merge = dask.delayed(_merge, pure=True)
    while len(level) > 1:
        level = [merge(level[i:i + fan_in]) for i in range(0, len(level), fan_in)]
    summary = level[0].compute() if level else None
    if summary is None:
        raise ValueError("the background has no rows")
    return summary
