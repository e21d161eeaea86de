"""sklearn.utils.shuffle drop-in backed by the bijective shuffle; NumPy, pandas, sparse and CuPy (stays on the GPU)."""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np
from sklearn.utils import check_consistent_length

from hitml.kernels.device import cupy_module, is_cupy_array, resolve_backend
from hitml.kernels.shuffle import as_generator
from hitml.kernels.shuffle import cpu as _cpu

from ._compat import InvalidParameterError, safe_indexing
from ._dask import dask_shuffle, is_dask_collection


def _backend(arrays, backend: str | None) -> str:
    """"auto" follows the data: the GPU when any input is a CuPy array, else the CPU; "gpu" needs a usable GPU."""
    if backend is None or backend == "auto":
        return "gpu" if any(is_cupy_array(a) for a in arrays) else "cpu"
    return resolve_backend(backend)


def _permutation(n: int, gen: np.random.Generator, backend: str):
    """Random order of range(n) from the generator, on the chosen backend (numpy or cupy int64)."""
    if backend == "gpu":
        from hitml.kernels.shuffle import gpu

        return gpu.permutation(n, gen)
    return _cpu.permutation(n, gen)


def _take(a: Any, idx):
    """Rows ``idx`` of ``a``: CuPy arrays are indexed on the GPU; everything else through sklearn's _safe_indexing."""
    if is_cupy_array(a):
        cp = cupy_module()
        return cp.take(a, cp.asarray(idx), axis=0)
    if is_cupy_array(idx):
        idx = idx.get()
    return safe_indexing(a, idx)


def _host(idx) -> np.ndarray:
    return idx.get() if is_cupy_array(idx) else np.asarray(idx)


def shuffle(*arrays, random_state=None, n_samples=None, backend: str = "auto"):
    """Shuffle arrays or sparse matrices consistently (sklearn.utils.shuffle semantics).

    Returns the shuffled copies (a single object for one input, a list otherwise; None with no input). Rows are ordered
    by the bijective shuffle drawn from ``random_state`` (None, int, Generator or RandomState), which is the same on CPU
    and GPU; for the same int it is not the order sklearn's own shuffle gives.

    Parameters
    ----------
    *arrays : sequence of indexables with the same length
        NumPy, pandas, scipy.sparse, lists or CuPy (CuPy stays on the GPU).
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffle.
    n_samples : int, optional
        Number of rows to return (at most the length of the inputs), as in scikit-learn.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        Where the order is computed: "auto" follows the data (the GPU for CuPy input, else the CPU).

    Returns
    -------
    object or list
        The shuffled copies, of the inputs' types.

    See Also
    --------
    sklearn.utils.shuffle : the function this replaces.
    hitml.kernels.shuffle.permutation : the order itself.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.sklearn_ext import shuffle
    >>> X, y = np.arange(10).reshape(5, 2), np.arange(5)
    >>> Xs, ys = shuffle(X, y, random_state=0)
    >>> bool((Xs[:, 0] // 2 == ys).all()), sorted(ys.tolist())
    (True, [0, 1, 2, 3, 4])
    """
    if n_samples is not None and (isinstance(n_samples, bool) or not isinstance(n_samples, numbers.Integral)
                                  or n_samples < 1):
        raise InvalidParameterError(f"The 'n_samples' parameter of shuffle must be an int in the range [1, inf) or "
                                    f"None. Got {n_samples!r} instead.")
    if len(arrays) == 0:
        return None
    if any(is_dask_collection(a) for a in arrays):
        return dask_shuffle(*arrays, random_state=random_state, n_samples=n_samples)
    arrays = [a.tocsr() if hasattr(a, "tocsr") else a for a in arrays]
    first = arrays[0]
    n = first.shape[0] if hasattr(first, "shape") else len(first)
    check_consistent_length(*arrays)
    if n_samples is None:
        n_samples = n
    elif n_samples > n:
        raise ValueError(f"Cannot sample {n_samples} out of arrays with dim {n} when replace is False")
    be = _backend(arrays, backend)
    idx = _permutation(n, as_generator(random_state), be)[:n_samples]
    out = [_take(a, idx) for a in arrays]
    return out[0] if len(out) == 1 else out
