"""Uniformity tests for samples of permutations: chi^2 over all n! permutations, and the Mallows-kernel MMD test.

Rows of ``perms`` are permutations of range(n) in one-line notation. Both tests follow Mitchell et al., "Bandwidth-optimal
random shuffling for GPUs" (§5): the paired linear-time MMD estimator Eq.(5) with the closed-form expectation of the
Mallows kernel under the uniform distribution, and its Hoeffding (Eq. 6) or CLT (Eq. 7) p-value.
"""
from __future__ import annotations

import math

import numba as nb
import numpy as np
from scipy import special, stats


def _check_perms(perms, max_n: int | None = None) -> np.ndarray:
    p = np.asarray(perms)
    if p.ndim != 2 or p.shape[0] < 1 or p.shape[1] < 1:
        raise ValueError(f"perms must be a 2-D array (n_samples, n) with n_samples, n >= 1, got shape {p.shape}")
    if p.dtype.kind not in "iu":
        raise TypeError(f"perms must hold integers, got dtype {p.dtype}")
    n = p.shape[1]
    if max_n is not None and n > max_n:
        raise ValueError(f"the chi^2 test enumerates all n! permutations; n={n} > {max_n} is too large")
    srt = np.sort(p, axis=1)
    if not np.array_equal(srt, np.broadcast_to(np.arange(n), p.shape)):
        raise ValueError("every row of perms must be a permutation of range(n)")
    return p.astype(np.int64, copy=False)


def lehmer_rank(perms) -> np.ndarray:
    """Index in [0, n!) of each row (lexicographic rank via the Lehmer code)."""
    p = np.asarray(perms, dtype=np.int64)
    n = p.shape[1]
    rank = np.zeros(p.shape[0], dtype=np.int64)
    for i in range(n):
        smaller_later = (p[:, i + 1:] < p[:, i:i + 1]).sum(axis=1)
        rank = rank * (n - i) + smaller_later
    return rank


def chi2_uniformity_test(perms) -> tuple[float, float]:
    """Pearson chi^2 of the counts of all n! permutations against the uniform law; (statistic, p_value), df = n! - 1.

    Needs n <= 10 and, for a meaningful test, n_samples >= 5 n!. The paper uses n = 5 and 100,000 samples.

    Parameters
    ----------
    perms : array-like of shape (n_samples, n)
        Permutations of range(n).

    Returns
    -------
    tuple of float
        ``(statistic, p_value)``.

    See Also
    --------
    scipy.stats.chisquare : the test it runs on the counts.
    mallows_mmd_test : a test for larger n.

    Examples
    --------
    >>> from hitml.kernels.shuffle import batched_permutations, chi2_uniformity_test
    >>> stat, p = chi2_uniformity_test(batched_permutations(20_000, 4, seed=0))
    >>> p > 1e-3
    True
    """
    p = _check_perms(perms, max_n=10)
    n_cells = math.factorial(p.shape[1])
    if n_cells == 1:
        return 0.0, 1.0
    counts = np.bincount(lehmer_rank(p), minlength=n_cells).astype(np.float64)
    expected = p.shape[0] / n_cells
    stat = float(((counts - expected) ** 2).sum() / expected)
    return stat, float(stats.chi2.sf(stat, n_cells - 1))


@nb.njit(cache=True)
def _inversions(seq, tree):
    """Inversions of a permutation ``seq`` of range(n), with a Fenwick tree (O(n log n))."""
    n = seq.shape[0]
    tree[:] = 0
    inv = 0
    for i in range(n - 1, -1, -1):
        v = seq[i]
        j = v  # count of later elements < v: prefix sum over [0, v)
        s = 0
        while j > 0:
            s += tree[j]
            j -= j & (-j)
        inv += s
        j = v + 1
        while j <= n:
            tree[j] += 1
            j += j & (-j)
    return inv


@nb.njit(cache=True)
def _paired_discordant(p):
    """n_dis(p[2i], p[2i+1]) for each pair: inversions of z with z[p[2i][t]] = p[2i+1][t]."""
    n_pairs = p.shape[0] // 2
    n = p.shape[1]
    out = np.empty(n_pairs, dtype=np.int64)
    seq = np.empty(n, dtype=np.int64)
    tree = np.zeros(n + 1, dtype=np.int64)
    for i in range(n_pairs):
        a = p[2 * i]
        b = p[2 * i + 1]
        for t in range(n):
            seq[a[t]] = b[t]
        out[i] = _inversions(seq, tree)
    return out


def _log_mgf_inversions(n: int, t: float) -> float:
    """log E[exp(t * inv(sigma))] for sigma uniform on S_n, t < 0: prod_j (1 - e^{tj}) / (j (1 - e^{t}))."""
    j = np.arange(1, n + 1, dtype=np.float64)
    return float(np.sum(np.log(-np.expm1(t * j)) - np.log(j) - np.log(-np.expm1(t))))


def mallows_expectation(n: int, lam: float = 5.0) -> float:
    """E[K(sigma, sigma')] of the Mallows kernel exp(-lam n_dis / C(n,2)) with sigma' uniform (any fixed sigma)."""
    if n < 2:
        return 1.0
    return math.exp(_log_mgf_inversions(n, -lam / math.comb(n, 2)))


def mallows_variance(n: int, lam: float = 5.0) -> float:
    """Var[K(sigma, sigma')] under the uniform law: the expectation at 2 lam minus the squared expectation."""
    if n < 2:
        return 0.0
    return max(0.0, mallows_expectation(n, 2 * lam) - mallows_expectation(n, lam) ** 2)


def mallows_mmd_test(perms, lam: float = 5.0, *, method: str = "normal") -> tuple[float, float]:
    """Linear-time paired MMD^2 estimate between the sample and the uniform law; (statistic, p_value).

    statistic = (2/N) sum_i K(P[2i], P[2i+1]) - E[K] (Eq. 5; N even, an odd last row is dropped).
    p_value: ``method="normal"`` (CLT, Var = 2 Var[K] / N, Eq. 7) or ``"hoeffding"`` (2 exp(-N t^2), Eq. 6, for N < 100).

    Parameters
    ----------
    perms : array-like of shape (N, n)
        Permutations of range(n).
    lam : float, default 5.0
        Bandwidth of the Mallows kernel.
    method : {"normal", "hoeffding"}, default "normal"
        How the p-value is computed.

    Returns
    -------
    tuple of float
        ``(statistic, p_value)``.

    See Also
    --------
    chi2_uniformity_test : the exact-count test for small n.

    Examples
    --------
    >>> from hitml.kernels.shuffle import batched_permutations, mallows_mmd_test
    >>> stat, p = mallows_mmd_test(batched_permutations(10_000, 20, seed=0))
    >>> p > 1e-3
    True
    """
    if not lam > 0:
        raise ValueError(f"lam must be positive, got {lam}")
    if method not in ("normal", "hoeffding"):
        raise ValueError(f'method must be "normal" or "hoeffding", got {method!r}')
    p = _check_perms(perms)
    N = (p.shape[0] // 2) * 2
    if N < 2:
        raise ValueError("the paired MMD test needs at least two permutations")
    n = p.shape[1]
    if n < 2:
        return 0.0, 1.0
    c2 = math.comb(n, 2)
    k = np.exp(-lam * _paired_discordant(np.ascontiguousarray(p[:N])) / c2)
    stat = float(k.mean() - mallows_expectation(n, lam))
    if method == "hoeffding":
        return stat, float(min(1.0, 2.0 * math.exp(-N * stat * stat)))
    sd = math.sqrt(2.0 * mallows_variance(n, lam) / N)
    if sd == 0:
        return stat, 1.0
    return stat, float(special.erfc(abs(stat) / (math.sqrt(2.0) * sd)))
