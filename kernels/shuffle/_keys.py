"""Seeds to round keys: sklearn-style random_state -> uint32 round keys, LCG parameters, per-row keys for batches."""
from __future__ import annotations

import functools
import numbers
from typing import Any

import numpy as np

from .._rng import as_generator

GOLDEN = 0x9E3779B97F4A7C15
_MASK64 = (1 << 64) - 1


def philox_round_keys(seed: Any = None, rounds: int = 24) -> np.ndarray:
    """``rounds`` independent uniform 32-bit round keys drawn from ``seed`` (uint32, shape (rounds,)).

    Parameters
    ----------
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        An int always gives the same keys.
    rounds : int, default 24
        Number of keys.

    Returns
    -------
    numpy.ndarray
        uint32, shape (rounds,).

    See Also
    --------
    variable_philox : the bijection they key.

    Examples
    --------
    >>> from hitml.kernels.shuffle import philox_round_keys
    >>> keys = philox_round_keys(0)
    >>> keys.dtype, keys.shape, bool((keys == philox_round_keys(0)).all())
    (dtype('uint32'), (24,), True)
    """
    rounds = check_rounds(rounds)
    if isinstance(seed, (numbers.Integral, np.integer)) and not isinstance(seed, bool) and int(seed) >= 0:
        return _int_seed_keys(int(seed), rounds).copy()
    return as_generator(seed).integers(0, 2**32, size=rounds, dtype=np.uint64).astype(np.uint32)


@functools.lru_cache(maxsize=1024)
def _int_seed_keys(seed: int, rounds: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 2**32, size=rounds, dtype=np.uint64).astype(np.uint32)


def lcg_params(seed: Any, n_bits: int) -> tuple[int, int]:
    """(multiplier, increment) for the LCG baseline on [0, 2^n_bits): odd multiplier, any increment.

    Parameters
    ----------
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed.
    n_bits : int
        Bits of the domain.

    Returns
    -------
    tuple of int

    See Also
    --------
    lcg : the bijection they parameterise.

    Examples
    --------
    >>> from hitml.kernels.shuffle import lcg_params
    >>> a, c = lcg_params(0, 10)
    >>> a % 2
    1
    """
    g = as_generator(seed)
    r1, r2 = (int(v) for v in g.integers(0, 2**63, size=2, dtype=np.uint64))
    mod_mask = (1 << n_bits) - 1
    return (r1 * 2 + 1) & mod_mask, r2 & mod_mask


def base_key(seed: Any) -> int:
    """One 64-bit stream key from ``seed``; per-row round keys of a batch are derived from it (batch_round_keys).

    Parameters
    ----------
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed.

    Returns
    -------
    int
        In [0, 2**64).

    Examples
    --------
    >>> from hitml.kernels.shuffle import base_key
    >>> base_key(7) == base_key(7)
    True
    """
    return int(as_generator(seed).integers(0, 2**64, dtype=np.uint64))


def batch_round_keys(base: int, rows: np.ndarray | int, rounds: int = 24) -> np.ndarray:
    """Round keys of rows ``rows`` of a batch: key[r, j] = hi32(splitmix64(base + (r*rounds + j + 1) * GOLDEN)).

    Counter-based, so any row's keys are computed without the others (the GPU kernel does the same per warp).

    Parameters
    ----------
    base : int
        From :func:`base_key`.
    rows : int or array-like of int
        Row indices.
    rounds : int, default 24
        Keys per row.

    Returns
    -------
    numpy.ndarray
        uint32, shape (len(rows), rounds).

    Examples
    --------
    >>> from hitml.kernels.shuffle import base_key, batch_round_keys
    >>> k = batch_round_keys(base_key(0), [0, 1, 2])
    >>> k.shape, bool((batch_round_keys(base_key(0), 2) == k[2]).all())
    ((3, 24), True)
    """
    rows = np.atleast_1d(np.asarray(rows, dtype=np.uint64))
    j = np.arange(rounds, dtype=np.uint64)
    with np.errstate(over="ignore"):
        ctr = rows[:, None] * np.uint64(rounds) + j[None, :] + np.uint64(1)
        z = np.uint64(base) + ctr * np.uint64(GOLDEN)
        z = splitmix64_finalize(z)
    return (z >> np.uint64(32)).astype(np.uint32)


def splitmix64_finalize(z: np.ndarray) -> np.ndarray:
    """The splitmix64 output mix (uint64 arrays, wrapping)."""
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def check_rounds(rounds: Any) -> int:
    if not isinstance(rounds, (numbers.Integral, np.integer)) or isinstance(rounds, bool) or not 1 <= int(rounds) <= 64:
        raise ValueError(f"rounds must be an integer in [1, 64], got {rounds!r}")
    return int(rounds)


def check_size(name: str, v: Any) -> int:
    """A non-negative integer size, or a clear error."""
    if isinstance(v, bool) or not isinstance(v, (numbers.Integral, np.integer)):
        raise TypeError(f"{name} must be a non-negative integer, got {v!r} of type {type(v).__name__}")
    if int(v) < 0:
        raise ValueError(f"{name} must be a non-negative integer, got {v}")
    return int(v)


MIN_BITS = 4
MAX_BITS = 63


def padded_bits(m: int) -> int:
    """Bits b of the padded domain [0, 2^b) for a shuffle of length m: max(4, bit_width(m-1)) (Thrust 1.11 / authors' floor).

    Parameters
    ----------
    m : int
        Length of the shuffle.

    Returns
    -------
    int

    Examples
    --------
    >>> from hitml.kernels.shuffle import padded_bits
    >>> padded_bits(1000), padded_bits(1024), padded_bits(1025), padded_bits(3)
    (10, 10, 11, 4)
    """
    return max(MIN_BITS, (max(m, 1) - 1).bit_length())
