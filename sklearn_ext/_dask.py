"""Distributed shuffle and train_test_split for Dask collections through a bijection over the global row index."""
from __future__ import annotations

import numbers
import sys
from typing import Any

import numpy as np

from hitml.kernels.device import cupy_module, is_cupy_array
from hitml.kernels.shuffle import as_generator, padded_bits, philox_round_keys, variable_philox_inverse

from ._compat import validate_shuffle_split

__all__ = ["dask_shuffle", "dask_train_test_split", "is_dask_collection", "destination_keys"]

# How it works. The in-memory shuffle of n rows (kernels.shuffle.permutation) walks the padded domain [0, 2^b) in
# order and emits f(i) for every i whose image f(i) < n (f = keyed VariablePhilox). Row r therefore lands at the rank
# of f^-1(r) among those i: sorting rows by their destination key f^-1(r) reproduces X[permutation(n, seed)] exactly.
# Every partition computes the keys of its own rows (it knows only its global row range), cuts them at Q fixed
# bounds of [0, 2^b) into Q pieces and sorts each; output partition q concatenates the q-th pieces and sorts them by
# key. No index travels between partitions: only the rows themselves, and Q counts per partition for chunk sizes.


def is_dask_collection(x: Any) -> bool:
    """True for a dask.array, dask.dataframe DataFrame or Series; never imports dask itself."""
    dask = sys.modules.get("dask")
    return dask is not None and dask.is_dask_collection(x)


def destination_keys(start: int, stop: int, n: int, round_keys: np.ndarray) -> np.ndarray:
    """Destination keys f^-1(r) (uint64) of global rows r in [start, stop) of an n-row shuffle."""
    return variable_philox_inverse(np.arange(start, stop, dtype=np.uint64), padded_bits(n), round_keys)


# -- partition-level helpers (module level so workers can unpickle them) ----------------------------------------
def _nrows(block: Any) -> int:
    return int(block.shape[0]) if hasattr(block, "shape") else len(block)


def _take(block: Any, idx: np.ndarray) -> Any:
    if hasattr(block, "iloc"):
        return block.iloc[idx]
    if is_cupy_array(block):
        cp = cupy_module()
        return cp.take(block, cp.asarray(idx), axis=0)
    return np.take(np.asarray(block), idx, axis=0)


def _concat(parts: list[Any]) -> Any:
    first = parts[0]
    if hasattr(first, "iloc"):
        import pandas as pd

        return pd.concat(parts) if len(parts) > 1 else first
    if is_cupy_array(first):
        return cupy_module().concatenate(parts, axis=0)
    return np.concatenate(parts, axis=0)


def _bucket_counts(start: int, stop: int, n: int, keys: np.ndarray, bounds: np.ndarray) -> np.ndarray:
    d = destination_keys(start, stop, n, keys)
    return np.bincount(np.searchsorted(bounds, d, side="right") - 1, minlength=len(bounds) - 1)[: len(bounds) - 1]


def _split_block(block: Any, start: int, n: int, keys: np.ndarray, bounds: np.ndarray) -> tuple:
    """The block's rows cut into Q pieces by destination-key range, each as (rows sorted by key, keys)."""
    d = destination_keys(start, start + _nrows(block), n, keys)
    order = np.argsort(d, kind="stable")
    ds = d[order]
    cut = np.searchsorted(ds, bounds)
    return tuple((_take(block, order[cut[q]:cut[q + 1]]), ds[cut[q]:cut[q + 1]]) for q in range(len(bounds) - 1))


def _combine(*pieces: tuple) -> Any:
    """One output partition: the pieces of every input partition merged in destination-key order."""
    d = np.concatenate([k for _, k in pieces])
    rows = _concat([r for r, _ in pieces])
    return _take(rows, np.argsort(d, kind="stable"))


def _slice(block: Any, lo: int, hi: int) -> Any:
    return block.iloc[lo:hi] if hasattr(block, "iloc") else block[lo:hi]


# -- collections -------------------------------------------------------------------------------------------------
class _Source:
    """A dask collection seen as row partitions: delayed blocks with known global row ranges."""

    def __init__(self, x: Any) -> None:
        import dask.array as da

        self.x = x
        if isinstance(x, da.Array):
            if x.ndim == 0:
                raise ValueError("cannot shuffle a 0-d dask array")
            if x.ndim > 1 and any(len(c) != 1 for c in x.chunks[1:]):
                x = x.rechunk({i: -1 for i in range(1, x.ndim)})
            if any(np.isnan(c) for c in x.chunks[0]):
                x = x.compute_chunk_sizes()
            self.kind = "array"
            self.x = x
            self.lengths = np.asarray(x.chunks[0], dtype=np.int64)
            self.blocks = list(x.to_delayed().reshape(-1))
        elif hasattr(x, "to_delayed") and hasattr(x, "map_partitions"):
            self.kind = "frame"
            self.lengths = np.asarray(x.map_partitions(len).compute(), dtype=np.int64)
            self.blocks = list(x.to_delayed())
        else:
            raise TypeError(f"expected a dask.array or dask.dataframe collection, got {type(x).__module__}."
                            f"{type(x).__qualname__}")
        self.starts = np.concatenate([[0], np.cumsum(self.lengths)[:-1]]).astype(np.int64)
        self.n = int(self.lengths.sum())

    def assemble(self, parts: list[Any], sizes: list[int]) -> Any:
        """A collection like the input from delayed parts of the given row counts (empty parts dropped)."""
        keep = [(p, s) for p, s in zip(parts, sizes) if s > 0]
        if self.kind == "array":
            import dask.array as da

            x = self.x
            if not keep:
                return x[:0]
            return da.concatenate([da.from_delayed(p, shape=(int(s),) + x.shape[1:], dtype=x.dtype, meta=x._meta)
                                   for p, s in keep], axis=0)
        import dask.dataframe as dd

        if not keep:
            return self.x.partitions[0].head(0, compute=False)
        return dd.from_delayed([p for p, _ in keep], meta=self.x._meta, verify_meta=False)


def _positional(parts: list[Any], offsets: np.ndarray, sizes: np.ndarray, a: int, b: int) -> tuple[list, list]:
    """Delayed parts covering global positions [a, b) of a collection whose parts hold [offset, offset+size)."""
    import dask

    out, out_sizes = [], []
    for p, off, s in zip(parts, offsets, sizes):
        lo, hi = max(a, int(off)), min(b, int(off + s))
        if hi <= lo:
            continue
        out.append(p if (lo, hi) == (off, off + s) else dask.delayed(_slice, pure=True)(p, lo - off, hi - off))
        out_sizes.append(hi - lo)
    return out, out_sizes


class _Plan:
    """Round keys, the Q key-range bounds of [0, 2^b), and each output partition's row count."""

    def __init__(self, first: _Source, random_state: Any, npartitions: int | None) -> None:
        import dask

        n = first.n
        q = len(first.lengths) if npartitions is None else int(npartitions)
        if q < 1:
            raise ValueError(f"npartitions must be a positive integer, got {npartitions!r}")
        q = max(1, min(q, n))
        self.n, self.n_bits = n, padded_bits(n)
        self.keys = philox_round_keys(as_generator(random_state))  # the keys sklearn_ext.shuffle draws for this seed
        self.bounds = np.array([(j << self.n_bits) // q for j in range(q + 1)], dtype=np.uint64)
        tasks = [dask.delayed(_bucket_counts, pure=True)(int(s), int(s + ln), n, self.keys, self.bounds)
                 for s, ln in zip(first.starts, first.lengths) if ln > 0]
        counts = np.sum(dask.compute(*tasks), axis=0) if tasks else np.zeros(q, np.int64)
        self.sizes = np.asarray(counts, dtype=np.int64)
        self.offsets = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    def shuffled_parts(self, src: _Source) -> list[Any]:
        import dask

        q = len(self.sizes)
        split = [dask.delayed(_split_block, nout=q, pure=True)(b, int(s), self.n, self.keys, self.bounds)
                 for b, s, ln in zip(src.blocks, src.starts, src.lengths) if ln > 0]
        combine = dask.delayed(_combine, pure=True)
        return [combine(*[sp[j] for sp in split]) for j in range(q)]


def _sources(arrays: tuple) -> list[_Source]:
    if not arrays:
        return []
    srcs = [_Source(a) for a in arrays]
    lengths = {s.n for s in srcs}
    if len(lengths) > 1:
        raise ValueError(f"Found input variables with inconsistent numbers of samples: {[s.n for s in srcs]}")
    return srcs


def _check_n_samples(n_samples: Any, n: int) -> int:
    if n_samples is None:
        return n
    if isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral) or n_samples < 1:
        raise ValueError(f"n_samples must be an int in the range [1, inf) or None, got {n_samples!r}")
    if n_samples > n:
        raise ValueError(f"Cannot sample {n_samples} out of arrays with dim {n} when replace is False")
    return int(n_samples)


def dask_shuffle(*arrays: Any, random_state: Any = None, n_samples: int | None = None,
                 npartitions: int | None = None) -> Any:
    """``sklearn.utils.shuffle`` for Dask arrays, DataFrames and Series (lazy, consistent across the inputs).

    The result equals the in-memory ``sklearn_ext.shuffle`` of the computed inputs with the same ``random_state``
    (row for row), whatever the input partitioning; ``npartitions`` (default: the first input's) fixes the output
    partitions, whose sizes are known. NumPy, CuPy and pandas partitions all work; rows move, indices never do.

    Parameters
    ----------
    *arrays : dask.array.Array, dask.dataframe.DataFrame or dask.dataframe.Series
        With the same number of rows.
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffle.
    n_samples : int, optional
        Number of rows to return.
    npartitions : int, optional
        Partitions of the output (default: the first input's).

    Returns
    -------
    object or list
        Lazy Dask collections of the inputs' types.

    See Also
    --------
    sklearn.utils.shuffle : the in-memory function this extends.
    shuffle : the in-memory version, with the same rows.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from hitml.sklearn_ext import dask_shuffle, shuffle
    >>> x = np.arange(12)
    >>> bool((dask_shuffle(da.from_array(x, chunks=5), random_state=1).compute() == shuffle(x, random_state=1)).all())
    True
    """
    srcs = _sources(arrays)
    if not srcs:
        return None
    n = srcs[0].n
    m = _check_n_samples(n_samples, n)
    if n == 0:
        out = [s.x for s in srcs]
        return out[0] if len(out) == 1 else out
    plan = _Plan(srcs[0], random_state, npartitions)
    out = []
    for s in srcs:
        parts, sizes = _positional(plan.shuffled_parts(s), plan.offsets, plan.sizes, 0, m)
        out.append(s.assemble(parts, sizes))
    return out[0] if len(out) == 1 else out


def dask_train_test_split(*arrays: Any, test_size: Any = None, train_size: Any = None, random_state: Any = None,
                          shuffle: bool = True, stratify: Any = None, npartitions: int | None = None) -> list:
    """``sklearn.model_selection.train_test_split`` for Dask collections: ``[X_train, X_test, y_train, y_test, ...]``.

    Sizes follow sklearn exactly (not Dask's approximate ``random_split``). With ``shuffle=True`` the test rows are the
    first ``n_test`` of the bijective order and the training rows the next ``n_train``, so the split equals the
    in-memory ``sklearn_ext.train_test_split`` for the same ``random_state``. ``stratify`` is not supported here.

    Parameters
    ----------
    *arrays : dask.array.Array, dask.dataframe.DataFrame or dask.dataframe.Series
        With the same number of rows.
    test_size, train_size : float, int or None
        As in scikit-learn.
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffle.
    shuffle : bool, default True
        Without it, the first rows train and the last rows test.
    stratify : None
        Not supported (``NotImplementedError`` if given).
    npartitions : int, optional
        Partitions of each output.

    Returns
    -------
    list
        ``[a_train, a_test]`` for each input, lazy.

    See Also
    --------
    sklearn.model_selection.train_test_split : the in-memory function this extends.
    train_test_split : the in-memory version, with the same rows.

    Examples
    --------
    >>> import numpy as np, dask.array as da
    >>> from hitml.sklearn_ext import dask_train_test_split
    >>> X_tr, X_te = dask_train_test_split(da.arange(20, chunks=6), test_size=0.25, random_state=0)
    >>> len(X_tr.compute()), len(X_te.compute())
    (15, 5)
    """
    if not arrays:
        raise ValueError("At least one array required as input")
    if stratify is not None:
        raise NotImplementedError("stratify is not supported for Dask collections; compute the labels and use "
                                  "sklearn_ext.StratifiedShuffleSplit on the indices, or split in memory")
    srcs = _sources(arrays)
    n = srcs[0].n
    n_train, n_test = validate_shuffle_split(n, test_size, train_size, default_test_size=0.25)
    out = []
    if shuffle:
        plan = _Plan(srcs[0], random_state, npartitions)
        ranges = ((n_test, n_test + n_train), (0, n_test))
        for s in srcs:
            parts = plan.shuffled_parts(s)
            for a, b in ranges:
                out.append(s.assemble(*_positional(parts, plan.offsets, plan.sizes, a, b)))
    else:
        for s in srcs:
            for a, b in ((0, n_train), (n_train, n_train + n_test)):
                out.append(s.assemble(*_positional(s.blocks, s.starts, s.lengths, a, b)))
    return out
