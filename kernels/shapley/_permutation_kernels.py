"""Kernels on permutations (Kendall, Mallows, Spearman) evaluated on rank vectors, and the MMD discrepancy."""
from __future__ import annotations

import math

import numba
import numpy as np

from .._background import register_compile_notice

register_compile_notice()  # a one-line notice while Numba compiles these kernels (first use only)

KERNELS = ("mallows", "kendall", "spearman")


def rank_vectors(perms, xp=np):
    """Rank vectors of insertion orders: ``rank[i, perms[i, t]] = t`` (the inverse permutation, = argsort(order)).

    Samplers return insertion orders (``perms[i, t]`` = the feature that joins at step t); every kernel here is
    defined on ranks (sigma(j) = the step at which feature j joins), the convention the seed's Table 4 uses.

    Parameters
    ----------
    perms : array-like of int, shape (n, d)
        Insertion orders.
    xp : module, default numpy
        ``numpy`` or ``cupy``.

    Returns
    -------
    array
        int64, shape (n, d).

    See Also
    --------
    numpy.argsort : the same, slower.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import rank_vectors
    >>> rank_vectors(np.array([[2, 0, 1]])).tolist()
    [[1, 2, 0]]
    """
    perms = xp.asarray(perms)
    n, d = perms.shape
    ranks = xp.empty_like(perms)
    rows = xp.arange(n)[:, None]
    ranks[rows, perms] = xp.arange(d, dtype=perms.dtype)[None, :]
    return ranks


@numba.njit(cache=True)
def _count_inversions(a, buf):
    """Inversions of a (in place merge sort), O(d log d)."""
    n = a.shape[0]
    inv = 0
    width = 1
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                if a[j] < a[i]:
                    buf[k] = a[j]
                    inv += mid - i
                    j += 1
                else:
                    buf[k] = a[i]
                    i += 1
                k += 1
            while i < mid:
                buf[k] = a[i]
                i += 1
                k += 1
            while j < hi:
                buf[k] = a[j]
                j += 1
                k += 1
            for t in range(lo, hi):
                a[t] = buf[t]
        width *= 2
    return inv


@numba.njit(cache=True)
def _discordant_rows(ra, rb):
    n, d = ra.shape
    out = np.empty(n, np.int64)
    seq = np.empty(d, np.int64)
    buf = np.empty(d, np.int64)
    for r in range(n):
        # order the elements by their rank in ra; inversions of rb in that order = discordant pairs
        for j in range(d):
            seq[ra[r, j]] = rb[r, j]
        out[r] = _count_inversions(seq, buf)
    return out


def discordant_pairs(ranks_a, ranks_b) -> np.ndarray:
    """n_dis between paired rank vectors (rows of two (n, d) arrays, or two (d,) vectors), O(d log d) each.

    Parameters
    ----------
    ranks_a, ranks_b : array-like of int, shape (n, d) or (d,)
        Rank vectors, paired by row.

    Returns
    -------
    numpy.ndarray
        int64, shape (n,) (or a 0-d array for two vectors).

    See Also
    --------
    scipy.stats.kendalltau : Kendall's tau, an affine function of n_dis.

    Examples
    --------
    >>> from hitml.kernels.shapley import discordant_pairs
    >>> int(discordant_pairs([0, 1, 2, 3], [3, 2, 1, 0]))
    6
    """
    a = np.atleast_2d(np.asarray(ranks_a, dtype=np.int64))
    b = np.atleast_2d(np.asarray(ranks_b, dtype=np.int64))
    if a.shape != b.shape:
        raise ValueError(f"rank arrays must have the same shape, got {a.shape} and {b.shape}")
    out = _discordant_rows(np.ascontiguousarray(a), np.ascontiguousarray(b))
    return out if np.ndim(ranks_a) > 1 else int(out[0])


def kendall_features(ranks, xp=np):
    """The unnormalised Kendall feature map: sign(r_i - r_j) for i < j, as float32 (n, d(d-1)/2).

    Products of +-1 summed in float32 are exact integers below 2**24, so n_dis from a matmul is exact.

    Parameters
    ----------
    ranks : array-like of int, shape (n, d)
        Rank vectors.
    xp : module, default numpy
        ``numpy`` or ``cupy``.

    Returns
    -------
    array
        float32, shape (n, d(d-1)/2).

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import kendall_features
    >>> kendall_features(np.array([[0, 1, 2]])).tolist()
    [[-1.0, -1.0, -1.0]]
    """
    ranks = xp.asarray(ranks)
    n, d = ranks.shape
    out = xp.empty((n, d * (d - 1) // 2), dtype=xp.float32)
    off = 0
    for i in range(d - 1):  # contiguous column blocks: pairs (i, j > i)
        out[:, off:off + d - 1 - i] = ranks[:, i:i + 1] > ranks[:, i + 1:]
        off += d - 1 - i
    out *= 2.0
    out -= 1.0
    return out


def discordant_matrix(ranks_a, ranks_b=None, xp=np):
    """All-pairs n_dis (na, nb) as float64 from the Kendall feature map (one matmul)."""
    fa = kendall_features(ranks_a, xp)
    fb = fa if ranks_b is None else kendall_features(ranks_b, xp)
    npairs = fa.shape[1]
    return (npairs - (fa @ fb.T).astype(xp.float64)) / 2.0


def kernel_from_discordant(ndis, d: int, kernel: str = "mallows", lam: float = 4.0, xp=np):
    """Kendall or Mallows kernel values from discordant-pair counts."""
    npairs = d * (d - 1) / 2
    if npairs == 0:
        return xp.ones_like(ndis, dtype=xp.float64)
    if kernel == "kendall":
        return 1.0 - 2.0 * ndis / npairs
    if kernel == "mallows":
        return xp.exp(-lam * ndis / npairs)
    raise ValueError(f"kernel_from_discordant: kernel must be 'kendall' or 'mallows', got {kernel!r}")


def _check_kernel(kernel: str, lam: float) -> None:
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {KERNELS}, got {kernel!r}")
    if kernel == "mallows" and not (np.isfinite(lam) and lam >= 0):
        raise ValueError(f"the Mallows kernel needs lam >= 0, got {lam!r}")


def feature_map(ranks, kernel: str, xp=np):
    """Features whose inner products give the kernel: Kendall signs (Kendall/Mallows) or the ranks (Spearman)."""
    if kernel == "spearman":
        return xp.asarray(ranks).astype(xp.float64)
    return kendall_features(ranks, xp)


def kernel_from_inner(ip, d: int, kernel: str, lam: float, xp=np):
    """Kernel values from inner products of ``feature_map`` rows."""
    if kernel == "spearman":
        return ip.astype(xp.float64)
    npairs = d * (d - 1) / 2
    return kernel_from_discordant((npairs - ip.astype(xp.float64)) / 2.0, d, kernel, lam, xp)


def kernel_matrix_ranks(ranks_a, ranks_b=None, kernel: str = "mallows", lam: float = 4.0, xp=np):
    """Gram matrix between rank vectors (rows).

    Parameters
    ----------
    ranks_a : array-like of int, shape (n_a, d)
        Rank vectors.
    ranks_b : array-like of int, shape (n_b, d), optional
        Defaults to ``ranks_a``.
    kernel : {"mallows", "kendall", "spearman"}, default "mallows"
        The kernel.
    lam : float, default 4.0
        Bandwidth of the Mallows kernel.
    xp : module, default numpy
        ``numpy`` or ``cupy``.

    Returns
    -------
    array
        float64, shape (n_a, n_b).

    See Also
    --------
    kernel_matrix : the same from insertion orders.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.kernels.shapley import kernel_matrix_ranks
    >>> K = kernel_matrix_ranks(np.array([[0, 1, 2], [2, 1, 0]]))
    >>> K.shape, bool(np.allclose(np.diag(K), 1.0))
    ((2, 2), True)
    """
    _check_kernel(kernel, lam)
    ranks_a = xp.asarray(ranks_a)
    fa = feature_map(ranks_a, kernel, xp)
    fb = fa if ranks_b is None else feature_map(xp.asarray(ranks_b), kernel, xp)
    return kernel_from_inner(fa @ fb.T, ranks_a.shape[1], kernel, lam, xp)


def kernel_pair(rank_a, rank_b, kernel: str = "mallows", lam: float = 4.0) -> float:
    """One kernel value between two rank vectors, O(d log d) (merge-sort discordant pairs).

    Parameters
    ----------
    rank_a, rank_b : array-like of int, shape (d,)
        Rank vectors.
    kernel : {"mallows", "kendall", "spearman"}, default "mallows"
        The kernel.
    lam : float, default 4.0
        Bandwidth of the Mallows kernel.

    Returns
    -------
    float

    Examples
    --------
    >>> from hitml.kernels.shapley import kernel_pair
    >>> kernel_pair([0, 1, 2], [0, 1, 2])
    1.0
    """
    _check_kernel(kernel, lam)
    a, b = np.asarray(rank_a), np.asarray(rank_b)
    if kernel == "spearman":
        return float(a.astype(np.float64) @ b.astype(np.float64))
    return float(kernel_from_discordant(np.float64(discordant_pairs(a, b)), a.shape[0], kernel, lam))


def kernel_expectation(d: int, kernel: str = "mallows", lam: float = 4.0) -> float:
    """E_{sigma' ~ uniform}[K(sigma, sigma')], the same for every sigma (right-invariance), 0-based ranks.

    Mallows: prod_{j=1}^d (1 - e^{-lam j / C}) / (j (1 - e^{-lam / C})), C = d(d-1)/2 (inversion-count pgf).

    Parameters
    ----------
    d : int
        Length of the permutations.
    kernel : {"mallows", "kendall", "spearman"}, default "mallows"
        The kernel.
    lam : float, default 4.0
        Bandwidth of the Mallows kernel.

    Returns
    -------
    float

    Examples
    --------
    >>> import itertools, numpy as np
    >>> from hitml.kernels.shapley import kernel_expectation, kernel_pair
    >>> brute = np.mean([kernel_pair([0, 1, 2, 3], list(p)) for p in itertools.permutations(range(4))])
    >>> bool(np.isclose(kernel_expectation(4), brute))
    True
    """
    _check_kernel(kernel, lam)
    if kernel == "kendall":
        return 0.0 if d > 1 else 1.0
    if kernel == "spearman":
        return d * (d - 1) ** 2 / 4.0
    npairs = d * (d - 1) / 2
    if npairs == 0 or lam == 0:
        return 1.0
    t = lam / npairs
    logm = 0.0
    for j in range(1, d + 1):
        logm += math.log(-math.expm1(-t * j)) - math.log(j) - math.log(-math.expm1(-t))
    return math.exp(logm)


def mallows_expectation(d: int, lam: float = 4.0) -> float:
    """m_d = E_U[K_M(sigma, .)] in closed form.

    Parameters
    ----------
    d : int
        Length of the permutations.
    lam : float, default 4.0
        Bandwidth.

    Returns
    -------
    float

    See Also
    --------
    kernel_expectation : the same for every kernel.

    Examples
    --------
    >>> from hitml.kernels.shapley import kernel_expectation, mallows_expectation
    >>> mallows_expectation(5) == kernel_expectation(5, "mallows")
    True
    """
    return kernel_expectation(d, "mallows", lam)


def discrepancy_from_gram(gram, weights, expectation: float, xp=np) -> float:
    """D(Pi, w) = sqrt(E - 2 E sum(w) + w^T K w) for a constant kernel mean embedding E."""
    w = xp.asarray(weights, dtype=xp.float64)
    d2 = expectation - 2.0 * expectation * float(w.sum()) + float(w @ (gram @ w))
    return math.sqrt(max(d2, 0.0))
