"""Shapley value estimation, one kernel family: permutation samplers and their kernels (Kendall, Mallows, Spearman)
and discrepancy, paired size-stratified coalition designs with kriging or kernel-weighted regression fits, batched
coalition evaluation, the stopping rule (``tol``) and the per-row loop (:func:`shapley_rows`) that adapters call.
"""
from __future__ import annotations

from ._coalitions import estimate_shapley, evaluations_per_row, samples_for_budget
from ._design import ALLOCATIONS, coalition_design, size_mass
from ._family import FAMILY_NUGGETS, FAMILY_RHOS
from ._kriging import HEREDITY_PRIORS, KRIGING_RHO, heredity_kriging, kriging_operator
from ._permutation_kernels import (
    KERNELS,
    discordant_pairs,
    kendall_features,
    kernel_expectation,
    kernel_matrix_ranks,
    kernel_pair,
    mallows_expectation,
    rank_vectors,
)
from ._regression import RegressionPlan, auto_fit, n_terms, shapley_operator, wls_order
from ._rows import PermutationDesign, SequentialDesign, shapley_rows, varying_features
from ._samplers import MASK_METHODS, METHODS, PAIRED_METHODS, PERMUTATION_METHODS
from ._sequential import Z95, interval_width, shapley_until


def backend_module(backend: str = "cpu"):
    """kernels.shapley.cpu or .gpu for a resolved backend name ("cpu" | "gpu" | "auto").

    Parameters
    ----------
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Resolved by :func:`hitml.kernels.resolve_backend`.

    Returns
    -------
    module
        With ``sample``, ``kernel_matrix`` and ``discrepancy``.

    Examples
    --------
    >>> from hitml.kernels.shapley import backend_module
    >>> backend_module("cpu").__name__
    'hitml.kernels.shapley.cpu'
    """
    from hitml.kernels.device import resolve_backend

    if resolve_backend(backend) == "gpu":
        from . import gpu

        return gpu
    from . import cpu

    return cpu


def sample(method: str, n: int, d: int, seed=None, *, kernel: str = "mallows", lam: float = 4.0,
           n_candidates: int = 25, backend: str = "cpu"):
    """(samples, weights) for one method: (n, d) int64 insertion orders (int8 masks for Owen), weights summing to 1.

    Parameters
    ----------
    method : str
        One of ``METHODS``: the permutation samplers ``PERMUTATION_METHODS`` ("mc", "antithetic", "stratified",
        "herding", "sbq", "orthogonal", "sobol") or the Owen masks ``MASK_METHODS``.
    n : int
        Number of samples.
    d : int
        Number of features.
    seed : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed.
    kernel : {"mallows", "kendall", "spearman"}, default "mallows"
        Kernel on permutations (evaluated on rank vectors).
    lam : float, default 4.0
        Bandwidth of the Mallows kernel.
    n_candidates : int, default 25
        Candidates per step of the greedy samplers ("herding", "sbq").
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Where it is computed (the same numbers on both, up to float rounding).

    Returns
    -------
    tuple of arrays
        ``(samples, weights)``.

    See Also
    --------
    numpy.random.Generator.permuted : plain Monte Carlo permutations ("mc").
    estimate_shapley : Shapley values from the sample.

    Examples
    --------
    >>> from hitml.kernels.shapley import sample
    >>> perms, w = sample("antithetic", 4, 5, seed=0)
    >>> perms.shape, bool((perms[1] == perms[0][::-1]).all()), float(w.sum())
    ((4, 5), True, 1.0)
    """
    return backend_module(backend).sample(method, n, d, seed, kernel=kernel, lam=lam, n_candidates=n_candidates)


def kernel_matrix(perms_a, perms_b=None, kernel: str = "mallows", lam: float = 4.0, *, backend: str = "cpu"):
    """Gram matrix of two samples of insertion orders, evaluated on their rank vectors.

    Parameters
    ----------
    perms_a : array-like of shape (n_a, d)
        Insertion orders.
    perms_b : array-like of shape (n_b, d), optional
        Defaults to ``perms_a``.
    kernel : {"mallows", "kendall", "spearman"}, default "mallows"
        Kernel on permutations (evaluated on rank vectors).
    lam : float, default 4.0
        Bandwidth of the Mallows kernel.
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Where it is computed (the same numbers on both, up to float rounding).

    Returns
    -------
    array
        float64, shape (n_a, n_b).

    Examples
    --------
    >>> from hitml.kernels.shapley import kernel_matrix, sample
    >>> perms, _ = sample("mc", 3, 4, seed=0)
    >>> kernel_matrix(perms).shape
    (3, 3)
    """
    return backend_module(backend).kernel_matrix(perms_a, perms_b, kernel, lam)


def discrepancy(perms, weights=None, kernel: str = "mallows", lam: float = 4.0, *, backend: str = "cpu") -> float:
    """MMD of a weighted permutation sample against the uniform distribution (the seed's eq. 8).

    Parameters
    ----------
    perms : array-like of shape (n, d)
        Insertion orders.
    weights : array-like of shape (n,), optional
        Sample weights (default: equal).
    kernel : {"mallows", "kendall", "spearman"}, default "mallows"
        Kernel on permutations (evaluated on rank vectors).
    lam : float, default 4.0
        Bandwidth of the Mallows kernel.
    backend : {"cpu", "gpu", "auto"}, default "cpu"
        Where it is computed (the same numbers on both, up to float rounding).

    Returns
    -------
    float
        Lower is closer to uniform.

    Examples
    --------
    >>> from hitml.kernels.shapley import discrepancy, sample
    >>> mc, w = sample("mc", 64, 6, seed=0)
    >>> ortho, wo = sample("orthogonal", 64, 6, seed=0)
    >>> discrepancy(ortho, wo) < discrepancy(mc, w)
    True
    """
    return backend_module(backend).discrepancy(perms, weights, kernel, lam)


__all__ = [
    "ALLOCATIONS", "FAMILY_NUGGETS", "FAMILY_RHOS", "HEREDITY_PRIORS", "KERNELS", "KRIGING_RHO", "MASK_METHODS",
    "METHODS", "PAIRED_METHODS", "PERMUTATION_METHODS", "PermutationDesign", "RegressionPlan", "SequentialDesign",
    "Z95", "auto_fit", "backend_module", "coalition_design", "discordant_pairs", "discrepancy", "estimate_shapley",
    "evaluations_per_row", "heredity_kriging", "interval_width", "kendall_features", "kernel_expectation",
    "kernel_matrix", "kernel_matrix_ranks", "kernel_pair", "kriging_operator", "mallows_expectation", "n_terms",
    "rank_vectors", "sample", "samples_for_budget", "shapley_operator", "shapley_rows", "shapley_until", "size_mass",
    "varying_features", "wls_order",
]
