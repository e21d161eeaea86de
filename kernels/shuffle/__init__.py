"""Bijective shuffle (Mitchell et al. 2022): keyed VariablePhilox bijections, permutations of any length, row and
key-value shuffles, batched small permutations, and uniformity tests. ``backend="cpu"`` (Numba) and ``"gpu"`` (CuPy)
give the same permutation for the same seed, bit for bit.
"""
from __future__ import annotations

from typing import Any

from ..device import engine_module, resolve_backend
from ._bijection import lcg, variable_philox, variable_philox_inverse
from ._keys import as_generator, base_key, batch_round_keys, lcg_params, padded_bits, philox_round_keys
from .uniformity import chi2_uniformity_test, mallows_mmd_test

__all__ = [
    "philox_round_keys", "variable_philox", "variable_philox_inverse", "lcg", "lcg_params",
    "permutation", "shuffle_rows", "shuffle_pairs", "batched_permutations", "batch_round_keys", "base_key",
    "padded_bits", "as_generator", "chi2_uniformity_test", "mallows_mmd_test",
]


def _impl(backend: str | None, data: Any = None):
    """cpu.py or gpu.py; "auto" (or None) picks the GPU for CuPy ``data`` or where CuPy sees a device."""
    return engine_module(__name__, resolve_backend(backend, data))


def permutation(m: int, seed: Any = None, *, backend: str = "cpu", rounds: int = 24, bijection: str = "philox"):
    """A random order of range(m) (int64; CuPy on the GPU); identical on CPU and GPU for the same seed.

    Parameters
    ----------
    m : int
        Length.
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the keyed bijection; the same seed gives the same order on the CPU and the GPU.
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Where it is computed.
    rounds : int, default 24
        VariablePhilox rounds.
    bijection : {"philox", "lcg"}, default "philox"
        "lcg" is the paper's weak baseline (few distinct permutations), for benchmarks.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        int64, shape (m,).

    See Also
    --------
    numpy.random.Generator.permutation : the NumPy counterpart (other orders for the same seed).
    shuffle_rows : apply an order to the rows of an array.

    Examples
    --------
    >>> from hitml.kernels import shuffle as sh
    >>> p = sh.permutation(10, seed=0)
    >>> sorted(p.tolist()) == list(range(10)), p.tolist() == sh.permutation(10, seed=0).tolist()
    (True, True)
    """
    return _impl(backend).permutation(m, seed, rounds=rounds, bijection=bijection)


def shuffle_rows(X, seed: Any = None, *, backend: str = "auto", rounds: int = 24):
    """Rows of X (axis 0) in the order ``permutation(len(X), seed)``; "auto" follows where X lives.

    Parameters
    ----------
    X : numpy.ndarray or cupy.ndarray
        1-D or 2-D.
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the keyed bijection; the same seed gives the same order on the CPU and the GPU.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        "auto": the GPU for CuPy input, else the CPU.
    rounds : int, default 24
        VariablePhilox rounds.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        A shuffled copy, on the device of the backend.

    See Also
    --------
    numpy.random.Generator.permutation : NumPy's row shuffle (``rng.permutation(X)``).
    hitml.sklearn_ext.shuffle : scikit-learn's ``shuffle`` on the same order.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels import shuffle as sh
    >>> X = np.arange(8).reshape(4, 2)
    >>> bool((sh.shuffle_rows(X, seed=3) == X[sh.permutation(4, seed=3)]).all())
    True
    """
    return _impl(backend, X).shuffle_rows(X, seed, rounds=rounds)


def shuffle_pairs(keys, values, seed: Any = None, *, backend: str = "auto", rounds: int = 24):
    """Key-value shuffle: (keys[p], values[p]) for p = ``permutation(len(keys), seed)``.

    Parameters
    ----------
    keys, values : numpy.ndarray or cupy.ndarray
        1-D, of the same length.
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the keyed bijection; the same seed gives the same order on the CPU and the GPU.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        "auto": the GPU for CuPy input, else the CPU.
    rounds : int, default 24
        VariablePhilox rounds.

    Returns
    -------
    tuple of arrays
        The shuffled keys and values.

    Raises
    ------
    ValueError
        If the lengths differ.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels import shuffle as sh
    >>> k, v = sh.shuffle_pairs(np.arange(5), np.arange(5) * 10, seed=1)
    >>> bool((v == k * 10).all())
    True
    """
    return _impl(backend, keys).shuffle_pairs(keys, values, seed, rounds=rounds)


def batched_permutations(k: int, d: int, seed: Any = None, *, backend: str = "cpu", rounds: int = 24, start: int = 0):
    """k independent permutations of range(d) (int64, shape (k, d)); same on CPU and GPU for a seed.

    Parameters
    ----------
    k : int
        Number of permutations.
    d : int
        Length of each.
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the keyed bijection; the same seed gives the same order on the CPU and the GPU.
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Where they are computed.
    rounds : int, default 24
        VariablePhilox rounds.
    start : int, default 0
        Index of the first row: rows [start, start + k) of the same stream, so a batch can be drawn in pieces.

    Returns
    -------
    numpy.ndarray or cupy.ndarray
        int64, shape (k, d).

    See Also
    --------
    numpy.random.Generator.permuted : NumPy's row-wise permutations.

    Examples
    --------
    >>> from hitml.kernels import shuffle as sh
    >>> P = sh.batched_permutations(6, 4, seed=0)
    >>> P.shape, bool((sh.batched_permutations(3, 4, seed=0, start=3) == P[3:]).all())
    ((6, 4), True)
    """
    return _impl(backend).batched_permutations(k, d, seed, rounds=rounds, start=start)
