"""Permutation kernels, samplers, discrepancy and batched coalition evaluation for Shapley value estimation."""
from __future__ import annotations

from ._kernels import (
    KERNELS,
    discordant_pairs,
    kendall_features,
    kernel_expectation,
    kernel_matrix_ranks,
    kernel_pair,
    mallows_expectation,
    rank_vectors,
)
from ._samplers import MASK_METHODS, METHODS, PAIRED_METHODS, PERMUTATION_METHODS
from .coalitions import estimate_shapley, evaluations_per_row, samples_for_budget


def backend_module(backend: str = "cpu"):
    """kernels.permutations.cpu or .gpu for a resolved backend name ("cpu" | "gpu" | "auto")."""
    from hitml.kernels.device import resolve_backend

    if resolve_backend(backend) == "gpu":
        from . import gpu

        return gpu
    from . import cpu

    return cpu


def sample(method: str, n: int, d: int, seed=None, *, kernel: str = "mallows", lam: float = 4.0,
           n_candidates: int = 25, backend: str = "cpu"):
    """(samples, weights) for one method: (n, d) int64 insertion orders (int8 masks for Owen), weights summing to 1."""
    return backend_module(backend).sample(method, n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates)


def kernel_matrix(perms_a, perms_b=None, kernel: str = "mallows", lam: float = 4.0, *, backend: str = "cpu"):
    """Gram matrix of two samples of insertion orders, evaluated on their rank vectors."""
    return backend_module(backend).kernel_matrix(perms_a, perms_b, kernel, lam)


def discrepancy(perms, weights=None, kernel: str = "mallows", lam: float = 4.0, *, backend: str = "cpu") -> float:
    """MMD of a weighted permutation sample against the uniform distribution (the seed's eq. 8)."""
    return backend_module(backend).discrepancy(perms, weights, kernel, lam)


__all__ = [
    "KERNELS", "MASK_METHODS", "METHODS", "PAIRED_METHODS", "PERMUTATION_METHODS", "backend_module", "discordant_pairs",
    "discrepancy", "estimate_shapley", "evaluations_per_row", "kendall_features", "kernel_expectation", "kernel_matrix",
    "kernel_matrix_ranks", "kernel_pair", "mallows_expectation", "rank_vectors", "sample", "samples_for_budget",
]
