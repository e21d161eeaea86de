"""Binds the generic samplers and kernels to one backend (NumPy for cpu.py, CuPy for gpu.py)."""
from __future__ import annotations

import functools


from . import _samplers as s
from ._kernels import discrepancy_from_gram, kernel_expectation, kernel_matrix_ranks, rank_vectors

NAMES = ("monte_carlo", "antithetic", "stratified", "owen_masks", "herding", "sbq", "orthogonal", "sobol",
         "kernel_matrix", "discrepancy", "sample")

_DISPATCH = {
    "mc": s.monte_carlo, "antithetic": s.antithetic, "stratified": s.stratified,
    "orthogonal": s.orthogonal, "sobol": s.sobol,
}


def bind(xp, backend: str) -> dict:
    """The public functions of kernels.permutations.<backend> with ``xp`` fixed."""

    def kernel_matrix(perms_a, perms_b=None, kernel: str = "mallows", lam: float = 4.0):
        """Gram matrix between permutation samples given as insertion orders (evaluated on their rank vectors)."""
        ra = rank_vectors(xp.asarray(perms_a), xp)
        rb = None if perms_b is None else rank_vectors(xp.asarray(perms_b), xp)
        return kernel_matrix_ranks(ra, rb, kernel, lam, xp)

    def discrepancy(perms, weights=None, kernel: str = "mallows", lam: float = 4.0) -> float:
        """MMD between the uniform distribution on S_d and the weighted sample (eq. 8 of the seed); w = 1/n by default."""
        perms = xp.asarray(perms)
        n, d = perms.shape
        w = xp.full(n, 1.0 / n) if weights is None else xp.asarray(weights, dtype=xp.float64)
        return discrepancy_from_gram(kernel_matrix(perms, None, kernel, lam), w, kernel_expectation(d, kernel, lam), xp)

    def sample(method: str, n: int, d: int, seed=None, *, kernel: str = "mallows", lam: float = 4.0,
               n_candidates: int = 25):
        """(samples, weights): (n, d) insertion orders (int64), or (n, d) int8 masks for the Owen methods."""
        if method in _DISPATCH:
            perms = _DISPATCH[method](n, d, seed, xp=xp, backend=backend)
            return perms, xp.full(n, 1.0 / n)
        if method in ("owen", "owen_halved"):
            return s.owen_masks(n, d, seed, halved=method == "owen_halved", xp=xp, backend=backend), xp.full(n, 1.0 / n)
        if method == "herding":
            perms = s.herding(n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates, xp=xp, backend=backend)
            return perms, xp.full(n, 1.0 / n)
        if method == "sbq":
            return s.sbq(n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates, xp=xp, backend=backend)
        raise ValueError(f"method must be one of {s.METHODS}, got {method!r}")

    api = {name: functools.partial(getattr(s, name), xp=xp, backend=backend)
           for name in ("monte_carlo", "antithetic", "stratified", "owen_masks", "herding", "sbq", "orthogonal", "sobol")}
    for name, fn in api.items():
        functools.update_wrapper(fn, getattr(s, name))
    api.update(kernel_matrix=kernel_matrix, discrepancy=discrepancy, sample=sample)
    return api


