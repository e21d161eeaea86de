"""VariablePhilox and LCG bijections on [0, 2^b): Numba scalar versions and NumPy array front-ends, plus the inverse."""
from __future__ import annotations

import numba as nb
import numpy as np

from ._keys import MAX_BITS, check_rounds

M0 = np.uint64(0xD2B74407B1CE6E93)
M0_INV = np.uint64(pow(0xD2B74407B1CE6E93, -1, 1 << 64))
_U32 = np.uint64(0xFFFFFFFF)


@nb.njit(inline="always", cache=True)
def vphilox_scalar(x, lbits, rbits, keys):
    """VariablePhilox (paper Fig. 5): left = high bits, right = low bits; uint64 arithmetic throughout."""
    lmask = (np.uint64(1) << lbits) - np.uint64(1)
    rmask = (np.uint64(1) << rbits) - np.uint64(1)
    shift = rbits - lbits
    L = x >> rbits
    R = x & rmask
    for i in range(keys.shape[0]):
        p = M0 * L
        hi = p >> np.uint64(32)
        lo = p & _U32
        lo = ((lo << shift) & _U32) | (R >> lbits)
        L = (hi ^ np.uint64(keys[i]) ^ R) & lmask
        R = lo & rmask
    return (L << rbits) | R


@nb.njit(inline="always", cache=True)
def vphilox_inverse_scalar(y, lbits, rbits, keys):
    """Inverse of vphilox_scalar: rounds in reverse, B = M0*L mod 2^L undone with M0^-1 mod 2^64."""
    lmask = (np.uint64(1) << lbits) - np.uint64(1)
    rmask = (np.uint64(1) << rbits) - np.uint64(1)
    L = y >> rbits
    R = y & rmask
    for i in range(keys.shape[0] - 1, -1, -1):
        if rbits > lbits:
            b = R & np.uint64(1)
            B = R >> np.uint64(1)
        else:
            b = np.uint64(0)
            B = R
        Lp = (B * M0_INV) & lmask
        hi = (M0 * Lp) >> np.uint64(32)
        R = (b << lbits) | ((L ^ hi ^ np.uint64(keys[i])) & lmask)
        L = Lp
    return (L << rbits) | R


@nb.njit(inline="always", cache=True)
def lcg_scalar(x, a, c, mask):
    return (a * x + c) & mask


@nb.njit(parallel=True, cache=True)
def _apply(x, n_bits, keys, inverse):
    out = np.empty(x.shape[0], dtype=np.uint64)
    lbits = np.uint64(n_bits // 2)
    rbits = np.uint64(n_bits - n_bits // 2)
    for i in nb.prange(x.shape[0]):
        if inverse:
            out[i] = vphilox_inverse_scalar(x[i], lbits, rbits, keys)
        else:
            out[i] = vphilox_scalar(x[i], lbits, rbits, keys)
    return out


def _prep(x, n_bits: int, round_keys) -> tuple[np.ndarray, np.ndarray, tuple]:
    if not isinstance(n_bits, (int, np.integer)) or not 1 <= int(n_bits) <= MAX_BITS:
        raise ValueError(f"n_bits must be an integer in [1, {MAX_BITS}], got {n_bits!r}")
    keys = np.ascontiguousarray(round_keys, dtype=np.uint32)
    if keys.ndim != 1:
        raise ValueError("round_keys must be a 1-D array of uint32")
    check_rounds(keys.shape[0])
    arr = np.asarray(x)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"x must be an integer array, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or int(arr.max()) >> int(n_bits)):
        raise ValueError(f"x must lie in [0, 2^{n_bits})")
    return np.ascontiguousarray(arr.reshape(-1), dtype=np.uint64), keys, arr.shape


def variable_philox(x, n_bits: int, round_keys) -> np.ndarray:
    """Apply the VariablePhilox bijection of [0, 2^n_bits) keyed by ``round_keys`` (one uint32 per round) to ``x``.

    Parameters
    ----------
    x : array-like of int
        Values in [0, 2**n_bits).
    n_bits : int
        Bits of the domain.
    round_keys : array-like of uint32
        From :func:`philox_round_keys`; one per round.

    Returns
    -------
    numpy.ndarray
        uint64, the shape of x.

    See Also
    --------
    variable_philox_inverse : its inverse.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shuffle import philox_round_keys, variable_philox
    >>> y = variable_philox(np.arange(16), 4, philox_round_keys(0))
    >>> sorted(y.tolist()) == list(range(16))
    True
    """
    flat, keys, shape = _prep(x, n_bits, round_keys)
    return _apply(flat, int(n_bits), keys, False).reshape(shape)


def variable_philox_inverse(y, n_bits: int, round_keys) -> np.ndarray:
    """Inverse of :func:`variable_philox`: ``variable_philox_inverse(variable_philox(x, b, k), b, k) == x``.

    Parameters
    ----------
    y : array-like of int
        Values in [0, 2**n_bits).
    n_bits : int
        Bits of the domain.
    round_keys : array-like of uint32
        The keys ``y`` was computed with.

    Returns
    -------
    numpy.ndarray
        uint64, the shape of y.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shuffle import philox_round_keys, variable_philox, variable_philox_inverse
    >>> k = philox_round_keys(1)
    >>> variable_philox_inverse(variable_philox(np.arange(5), 8, k), 8, k).tolist()
    [0, 1, 2, 3, 4]
    """
    flat, keys, shape = _prep(y, n_bits, round_keys)
    return _apply(flat, int(n_bits), keys, True).reshape(shape)


def lcg(x, n_bits: int, multiplier: int, increment: int) -> np.ndarray:
    """The paper's weak LCG baseline y = (a x + c) mod 2^n_bits (a odd): a bijection, but only 2^(2b-1) permutations.

    Parameters
    ----------
    x : array-like of int
        Values in [0, 2**n_bits).
    n_bits : int
        Bits of the domain.
    multiplier, increment : int
        From :func:`lcg_params` (the multiplier must be odd).

    Returns
    -------
    numpy.ndarray
        uint64, the shape of x.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shuffle import lcg
    >>> lcg(np.arange(4), 2, 3, 1).tolist()
    [1, 0, 3, 2]
    """
    if multiplier % 2 == 0:
        raise ValueError("the LCG multiplier must be odd to be a bijection modulo a power of two")
    mask = np.uint64((1 << int(n_bits)) - 1)
    with np.errstate(over="ignore"):
        return (np.uint64(multiplier) * np.asarray(x, dtype=np.uint64) + np.uint64(increment)) & mask
