"""CPU twin (Numba) of the bijective shuffle: same permutation as the GPU for the same seed, bit for bit."""
from __future__ import annotations

from typing import Any

import numba as nb
import numpy as np

from .. import _registry
from .._background import register_compile_notice
from ._bijection import lcg_scalar, vphilox_scalar
from ._keys import base_key, batch_round_keys, check_rounds, check_size, lcg_params, padded_bits, philox_round_keys

register_compile_notice()  # a one-line notice while Numba compiles these kernels (first use only)

_CHUNK = 1 << 16


@nb.njit(inline="always", cache=True)
def _f(i, lbits, rbits, keys, use_lcg, a, c, mask):
    if use_lcg:
        return lcg_scalar(i, a, c, mask)
    return vphilox_scalar(i, lbits, rbits, keys)


@nb.njit(parallel=True, cache=True)
def _compact(m, n_bits, keys, use_lcg, a, c):
    """Algorithm 1: out[j] = f(i_j), i_j the j-th index of [0, 2^b) whose image is < m (two passes over chunks)."""
    n = np.uint64(1) << np.uint64(n_bits)
    lbits = np.uint64(n_bits // 2)
    rbits = np.uint64(n_bits - n_bits // 2)
    mask = n - np.uint64(1)
    um = np.uint64(m)
    n_chunks = (n + np.uint64(_CHUNK) - np.uint64(1)) // np.uint64(_CHUNK)
    counts = np.zeros(n_chunks + 1, dtype=np.int64)
    for ch in nb.prange(n_chunks):
        lo = np.uint64(ch) * np.uint64(_CHUNK)
        hi = min(lo + np.uint64(_CHUNK), n)
        cnt = 0
        for i in range(lo, hi):
            if _f(np.uint64(i), lbits, rbits, keys, use_lcg, a, c, mask) < um:
                cnt += 1
        counts[ch + 1] = cnt
    offs = np.cumsum(counts)
    out = np.empty(m, dtype=np.int64)
    for ch in nb.prange(n_chunks):
        lo = np.uint64(ch) * np.uint64(_CHUNK)
        hi = min(lo + np.uint64(_CHUNK), n)
        pos = offs[ch]
        for i in range(lo, hi):
            y = _f(np.uint64(i), lbits, rbits, keys, use_lcg, a, c, mask)
            if y < um:
                out[pos] = np.int64(y)
                pos += 1
    return out


@nb.njit(parallel=True, cache=True)
def _batched(k, d, n_bits, keys2d):
    """Row r = the bijective shuffle of range(d) keyed by keys2d[r]."""
    out = np.empty((k, d), dtype=np.int64)
    n = np.uint64(1) << np.uint64(n_bits)
    lbits = np.uint64(n_bits // 2)
    rbits = np.uint64(n_bits - n_bits // 2)
    ud = np.uint64(d)
    for r in nb.prange(k):
        keys = keys2d[r]
        pos = 0
        for i in range(n):
            y = vphilox_scalar(np.uint64(i), lbits, rbits, keys)
            if y < ud:
                out[r, pos] = np.int64(y)
                pos += 1
    return out


def permutation_from_keys(m: int, round_keys: np.ndarray) -> np.ndarray:
    """The bijective shuffle of range(m) under explicit VariablePhilox round keys (int64, shape (m,))."""
    m = check_size("m", m)
    keys = np.ascontiguousarray(round_keys, dtype=np.uint32)
    if m == 0:
        return np.empty(0, dtype=np.int64)
    return _compact(m, padded_bits(m), keys, False, np.uint64(0), np.uint64(0))


def permutation(m: int, seed: Any = None, *, rounds: int = 24, bijection: str = "philox") -> np.ndarray:
    """A uniformly random order of range(m) (int64), as ``np.random.permutation(m)`` gives, from ``seed``.

    ``bijection="lcg"`` uses the paper's weak LCG baseline (for comparison only: it is far from uniform).
    """
    m = check_size("m", m)
    if bijection == "philox":
        return permutation_from_keys(m, philox_round_keys(seed, rounds))
    if bijection == "lcg":
        b = padded_bits(m)
        a, c = lcg_params(seed, b)
        if m == 0:
            return np.empty(0, dtype=np.int64)
        return _compact(m, b, np.zeros(1, np.uint32), True, np.uint64(a), np.uint64(c))
    raise ValueError(f'bijection must be "philox" or "lcg", got {bijection!r}')


def batched_permutations(k: int, d: int, seed: Any = None, *, rounds: int = 24, start: int = 0) -> np.ndarray:
    """k independent permutations of range(d) (int64, shape (k, d)); row i is keyed by per-row keys of the seed.

    ``start`` offsets the row counter, so rows [start, start+k) of a larger batch come out without the others.
    """
    k, d, start = check_size("k", k), check_size("d", d), check_size("start", start)
    rounds = check_rounds(rounds)
    keys2d = batch_round_keys(base_key(seed), np.arange(start, start + k, dtype=np.uint64), rounds)
    return batched_from_keys(d, keys2d)


def batched_from_keys(d: int, keys2d: np.ndarray) -> np.ndarray:
    """Rows of the bijective shuffle of range(d), one per row of round keys ``keys2d`` (k, rounds)."""
    keys2d = np.ascontiguousarray(keys2d, dtype=np.uint32)
    k = keys2d.shape[0]
    if d == 0 or k == 0:
        return np.empty((k, d), dtype=np.int64)
    return _batched(k, d, padded_bits(d), keys2d)


def shuffle_rows(X, seed: Any = None, *, rounds: int = 24) -> np.ndarray:
    """Rows of ``X`` (any ndim >= 1, along axis 0) in the order ``permutation(len(X), seed)``."""
    X = np.asarray(X)
    if X.ndim == 0:
        raise ValueError("shuffle_rows needs an array with at least one dimension")
    return np.take(X, permutation(X.shape[0], seed, rounds=rounds), axis=0)


def shuffle_pairs(keys, values, seed: Any = None, *, rounds: int = 24) -> tuple[np.ndarray, np.ndarray]:
    """Key-value shuffle: both arrays reordered by the same permutation along axis 0."""
    keys, values = np.asarray(keys), np.asarray(values)
    if keys.shape[:1] != values.shape[:1]:
        raise ValueError(f"keys and values must have the same length, got {keys.shape[:1]} and {values.shape[:1]}")
    p = permutation(keys.shape[0], seed, rounds=rounds)
    return np.take(keys, p, axis=0), np.take(values, p, axis=0)


def _warm_shuffle() -> None:
    """The warm-up of the shuffle's kernels (``python -m hitml.kernels warmup``)."""
    permutation(1000, 0)
    batched_permutations(4, 10, 0)
    shuffle_rows(np.arange(20.0).reshape(10, 2), 0)


_registry.register_warmup("shuffle", _warm_shuffle)
