"""Bijective shuffle (Mitchell et al. 2022): keyed VariablePhilox bijections, permutations of any length, row and
key-value shuffles, batched small permutations, and uniformity tests. ``backend="cpu"`` (Numba) and ``"gpu"`` (CuPy)
give the same permutation for the same seed, bit for bit.
"""
from __future__ import annotations

from typing import Any

from . import cpu
from ._bijection import lcg, variable_philox, variable_philox_inverse
from ._keys import as_generator, base_key, batch_round_keys, lcg_params, padded_bits, philox_round_keys
from .uniformity import chi2_uniformity_test, mallows_mmd_test

__all__ = [
    "philox_round_keys", "variable_philox", "variable_philox_inverse", "lcg", "lcg_params",
    "permutation", "shuffle_rows", "shuffle_pairs", "batched_permutations", "batch_round_keys", "base_key",
    "padded_bits", "as_generator", "chi2_uniformity_test", "mallows_mmd_test",
]


def _impl(backend: str | None, data: Any = None):
    from ..device import is_cupy_array, resolve_backend

    if backend is None or backend == "auto":
        backend = "gpu" if is_cupy_array(data) else resolve_backend("auto")
    if resolve_backend(backend) == "gpu":
        from . import gpu

        return gpu
    return cpu


def permutation(m: int, seed: Any = None, *, backend: str = "cpu", rounds: int = 24, bijection: str = "philox"):
    """A random order of range(m) (int64; CuPy on the GPU); identical on CPU and GPU for the same seed."""
    return _impl(backend).permutation(m, seed, rounds=rounds, bijection=bijection)


def shuffle_rows(X, seed: Any = None, *, backend: str = "auto", rounds: int = 24):
    """Rows of X (axis 0) in the order ``permutation(len(X), seed)``; "auto" follows where X lives."""
    return _impl(backend, X).shuffle_rows(X, seed, rounds=rounds)


def shuffle_pairs(keys, values, seed: Any = None, *, backend: str = "auto", rounds: int = 24):
    """Key-value shuffle: (keys[p], values[p]) for p = ``permutation(len(keys), seed)``."""
    return _impl(backend, keys).shuffle_pairs(keys, values, seed, rounds=rounds)


def batched_permutations(k: int, d: int, seed: Any = None, *, backend: str = "cpu", rounds: int = 24, start: int = 0):
    """k independent permutations of range(d) (int64, shape (k, d)); same on CPU and GPU for a seed."""
    return _impl(backend).batched_permutations(k, d, seed, rounds=rounds, start=start)
