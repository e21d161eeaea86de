"""Sampling, kernel matrices and discrepancy generic over the array module; cpu.py fixes NumPy, gpu.py CuPy."""
from __future__ import annotations

import numpy as np

from . import _samplers as s
from ._permutation_kernels import discrepancy_from_gram, kernel_expectation, kernel_matrix_ranks, rank_vectors

_PLAIN = {
    "mc": s.monte_carlo, "antithetic": s.antithetic, "stratified": s.stratified,
    "orthogonal": s.orthogonal, "sobol": s.sobol,
}


def kernel_matrix(perms_a, perms_b=None, kernel: str = "mallows", lam: float = 4.0, *, xp=np):
    """Gram matrix between permutation samples given as insertion orders (evaluated on their rank vectors)."""
    ra = rank_vectors(xp.asarray(perms_a), xp)
    rb = None if perms_b is None else rank_vectors(xp.asarray(perms_b), xp)
    return kernel_matrix_ranks(ra, rb, kernel, lam, xp)


def discrepancy(perms, weights=None, kernel: str = "mallows", lam: float = 4.0, *, xp=np) -> float:
    """MMD between the uniform distribution on S_d and the weighted sample (eq. 8 of the seed); w = 1/n by default."""
    perms = xp.asarray(perms)
    n, d = perms.shape
    w = xp.full(n, 1.0 / n) if weights is None else xp.asarray(weights, dtype=xp.float64)
    return discrepancy_from_gram(kernel_matrix(perms, None, kernel, lam, xp=xp), w,
                                 kernel_expectation(d, kernel, lam), xp)


def sample(method: str, n: int, d: int, seed=None, *, kernel: str = "mallows", lam: float = 4.0,
           n_candidates: int = 25, xp=np, backend: str = "cpu"):
    """(samples, weights): (n, d) insertion orders (int64), or (n, d) int8 masks for the Owen methods."""
    if method in _PLAIN:
        return _PLAIN[method](n, d, seed, xp=xp, backend=backend), xp.full(n, 1.0 / n)
    if method in ("owen", "owen_halved"):
        return s.owen_masks(n, d, seed, halved=method == "owen_halved", xp=xp, backend=backend), xp.full(n, 1.0 / n)
    if method == "herding":
        perms = s.herding(n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates, xp=xp, backend=backend)
        return perms, xp.full(n, 1.0 / n)
    if method == "sbq":
        return s.sbq(n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates, xp=xp, backend=backend)
    raise ValueError(f"method must be one of {s.METHODS}, got {method!r}")
