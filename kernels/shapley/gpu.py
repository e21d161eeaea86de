"""GPU (CuPy) twin of cpu.py: the same samples for a seed; kernel matrices, QR and argsort on the device."""
from __future__ import annotations

from hitml.kernels.device import cupy_module

from . import _backend


def sample(method: str, n: int, d: int, seed=None, *, kernel: str = "mallows", lam: float = 4.0,
           n_candidates: int = 25):
    """(samples, weights) as CuPy arrays: see :func:`hitml.kernels.shapley.sample`."""
    return _backend.sample(method, n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates, xp=cupy_module(),
                           backend="gpu")


def kernel_matrix(perms_a, perms_b=None, kernel: str = "mallows", lam: float = 4.0):
    """Gram matrix as a CuPy array: see :func:`hitml.kernels.shapley.kernel_matrix`."""
    return _backend.kernel_matrix(perms_a, perms_b, kernel, lam, xp=cupy_module())


def discrepancy(perms, weights=None, kernel: str = "mallows", lam: float = 4.0) -> float:
    """MMD against the uniform distribution: see :func:`hitml.kernels.shapley.discrepancy`."""
    return _backend.discrepancy(perms, weights, kernel, lam, xp=cupy_module())


__all__ = ["discrepancy", "kernel_matrix", "sample"]
