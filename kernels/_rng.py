"""The one seed reader of the kernels: scikit-learn-style ``random_state`` -> ``numpy.random.Generator``.

Every kernel family that draws random numbers takes its seed through :func:`as_generator` (exported as
``hitml.kernels.shuffle.as_generator``), so a seed means the same stream in each of them.
"""
from __future__ import annotations

import numbers
from typing import Any

import numpy as np

__all__ = ["as_generator"]


def as_generator(seed: Any) -> np.random.Generator:
    """None | int | np.random.Generator | np.random.RandomState -> a Generator (never the global NumPy RNG).

    A RandomState is advanced (two draws), so repeated calls with the same instance give fresh streams, as sklearn
    does. An int n gives ``numpy.random.default_rng(n)``'s stream.

    Parameters
    ----------
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        A Generator is returned as it is.

    Returns
    -------
    numpy.random.Generator

    Raises
    ------
    ValueError
        For a negative int or any other type.

    See Also
    --------
    sklearn.utils.check_random_state : scikit-learn's counterpart (returns a RandomState).

    Examples
    --------
    >>> from hitml.kernels.shuffle import as_generator
    >>> int(as_generator(3).integers(100)) == int(as_generator(3).integers(100))
    True
    """
    if isinstance(seed, np.random.Generator):
        return seed
    if isinstance(seed, np.random.RandomState):
        return np.random.default_rng(int(seed.randint(0, 2**32, dtype=np.uint64)) << 32
                                     | int(seed.randint(0, 2**32, dtype=np.uint64)))
    if seed is None:
        return np.random.default_rng()
    if isinstance(seed, (numbers.Integral, np.integer)) and not isinstance(seed, bool):
        if int(seed) < 0:
            raise ValueError(f"seed must be a non-negative integer, got {seed}")
        return np.random.default_rng(int(seed))
    raise ValueError(f"{seed!r} cannot be used to seed a random generator "
                     "(expected None, a non-negative int, np.random.Generator or np.random.RandomState)")
