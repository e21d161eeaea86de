"""CPU (NumPy/Numba) permutation sampling, kernel matrices and discrepancy; gpu.py is the CuPy twin."""
from __future__ import annotations

import numpy as np

from . import _backend


def sample(method: str, n: int, d: int, seed=None, *, kernel: str = "mallows", lam: float = 4.0,
           n_candidates: int = 25):
    """(samples, weights) as NumPy arrays: see :func:`hitml.kernels.shapley.sample`."""
    return _backend.sample(method, n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates, xp=np,
                           backend="cpu")


def kernel_matrix(perms_a, perms_b=None, kernel: str = "mallows", lam: float = 4.0):
    """Gram matrix as a NumPy array: see :func:`hitml.kernels.shapley.kernel_matrix`."""
    return _backend.kernel_matrix(perms_a, perms_b, kernel, lam, xp=np)


def discrepancy(perms, weights=None, kernel: str = "mallows", lam: float = 4.0) -> float:
    """MMD against the uniform distribution: see :func:`hitml.kernels.shapley.discrepancy`."""
    return _backend.discrepancy(perms, weights, kernel, lam, xp=np)


__all__ = ["discrepancy", "kernel_matrix", "sample"]
