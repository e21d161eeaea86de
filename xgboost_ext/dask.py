"""Dask path: sketch each partition, merge the sketches, and train xgboost.dask on data snapped to our cuts."""
from __future__ import annotations

from typing import Any

import numpy as np

from hitml.kernels.device import array_module, is_cupy_array
from hitml.kernels.sketch import N_SAMPLE, MomentSketch, sketch

from .binner import QuantileBinner
from .hook import check_same_max_bin, snap


def _host_or_device(b):
    """A partition as the engines take it: CuPy stays CuPy; anything else becomes a NumPy array."""
    return b if is_cupy_array(b) else np.asarray(b)


def _to_array(X):
    """dask.dataframe -> dask.array (numeric columns, known chunk sizes); dask.array passes through."""
    if hasattr(X, "to_dask_array"):
        return X.to_dask_array(lengths=True)
    return X


def sketch_partitions(X, sample_weight=None, *, n_moments: int = 15, max_distinct: int = 256,
                      n_sample: int = N_SAMPLE, backend: str = "cpu") -> MomentSketch:
    """Sketch a dask.array (or dataframe) partition by partition on the workers, then tree-merge the sketches."""
    import dask
    import dask.array as da

    X = _to_array(X)
    if X.ndim != 2:
        raise ValueError(f"X must be 2-D, got {X.ndim} dimensions")
    if len(X.chunks[1]) != 1:
        X = X.rechunk({1: -1})
    blocks = X.to_delayed().ravel()
    if sample_weight is not None:
        sample_weight = _to_array(sample_weight)
        if isinstance(sample_weight, da.Array):
            sample_weight = sample_weight.rechunk((X.chunks[0],))
            wblocks = sample_weight.to_delayed().ravel()
        else:
            raise ValueError("sample_weight must be a dask array or series aligned with X's partitions")
    else:
        wblocks = [None] * len(blocks)

    def _one(b, w):  # NumPy or CuPy partitions go to the engine as they are (CuPy ones stay on their GPU)
        return sketch(_host_or_device(b), None if w is None else _host_or_device(w), n_moments=n_moments,
                      max_distinct=max_distinct, n_sample=n_sample, backend=backend).to_bytes()

    def _merge(a, b):
        return MomentSketch.from_bytes(a).merge(MomentSketch.from_bytes(b)).to_bytes()

    level = [dask.delayed(_one)(b, w) for b, w in zip(blocks, wblocks)]
    while len(level) > 1:  # pairwise tree: merge is associative, so the order does not matter
        level = [dask.delayed(_merge)(level[i], level[i + 1]) if i + 1 < len(level) else level[i]
                 for i in range(0, len(level), 2)]
    (payload,) = dask.compute(level[0])
    return MomentSketch.from_bytes(payload)


def fit_binner(X, sample_weight=None, binner: QuantileBinner | None = None) -> QuantileBinner:
    """Fit a QuantileBinner (maxent or legendre) on a dask collection through per-partition sketches."""
    binner = QuantileBinner() if binner is None else binner
    binner._check_params()
    sk = sketch_partitions(X, sample_weight, n_moments=binner.n_moments, max_distinct=int(binner.max_bin),
                           n_sample=binner.n_sample, backend=binner.backend)
    return binner.fit_sketch(sk)


def snap_partitions(X, binner: QuantileBinner):
    """A dask.array of X snapped to the binner's lower bin edges (lazy, per partition)."""
    X = _to_array(X)
    if len(X.chunks[1]) != 1:
        X = X.rechunk({1: -1})
    cuts = binner.cuts_
    meta = array_module(X._meta).empty((0, 0), np.float32)  # CuPy partitions are snapped on their GPU and stay there
    return X.map_blocks(lambda b: snap(_host_or_device(b), cuts), dtype=np.float32, meta=meta)


def dask_quantile_dmatrix(client, X, label=None, *, binner: QuantileBinner, **kwargs: Any):
    """xgboost.dask.DaskQuantileDMatrix on snapped data: XGBoost's distributed sketch then yields exactly our cuts.

    (xgboost.dask builds its training matrix without a ref, so the ref trick cannot reach it; snapping can.)
    """
    from xgboost import dask as dxgb

    max_bin = check_same_max_bin(kwargs.pop("max_bin", None), binner.max_bin)
    return dxgb.DaskQuantileDMatrix(client, snap_partitions(X, binner), label, max_bin=max_bin, **kwargs)
