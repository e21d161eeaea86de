"""The Shapley family's backend-dispatched entry points: samplers, permutation kernel matrices and discrepancy."""
from __future__ import annotations

from hitml.kernels import _registry
from hitml.kernels.device import engine_module, resolve_backend


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
    return engine_module("hitml.kernels.shapley", resolve_backend(backend))


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


def _warm_permutations() -> None:
    """The warm-up of the permutation samplers' and kernels' Numba code (``python -m hitml.kernels warmup``)."""
    perms, w = sample("herding", 8, 6, 0)
    discrepancy(perms, w)


_registry.register_warmup("permutations", _warm_permutations)
