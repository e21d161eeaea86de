"""Kernels on permutations: discordant pairs, Mallows expectation, Gram matrices and discrepancy vs brute force."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hitml.kernels import shapley as kp


def _ndis_brute(a, b):
    d = len(a)
    return sum((a[i] - a[j]) * (b[i] - b[j]) < 0 for i in range(d) for j in range(i + 1, d))


def _all_perms(d):
    return np.array(list(itertools.permutations(range(d))), dtype=np.int64)


def test_rank_vectors_invert_orders():
    rng = np.random.default_rng(0)
    orders = np.array([rng.permutation(7) for _ in range(20)])
    np.testing.assert_array_equal(kp.rank_vectors(orders), np.argsort(orders, axis=1))


@pytest.mark.parametrize("d", [1, 2, 5, 33, 200])
def test_discordant_pairs_matches_quadratic_count(d):
    rng = np.random.default_rng(d)
    a = np.array([rng.permutation(d) for _ in range(15)])
    b = np.array([rng.permutation(d) for _ in range(15)])
    fast = kp.discordant_pairs(a, b)
    np.testing.assert_array_equal(fast, [_ndis_brute(x, y) for x, y in zip(a, b)])
    # the Kendall-feature matmul route gives the same counts for all pairs
    from hitml.kernels.shapley._permutation_kernels import discordant_matrix

    np.testing.assert_array_equal(np.diag(discordant_matrix(a, b)), fast)


def test_reverse_is_antipode_on_ranks():
    order = np.random.default_rng(1).permutation(12)
    ra, rb = kp.rank_vectors(np.stack([order, order[::-1]]))
    assert kp.discordant_pairs(ra, rb) == 12 * 11 // 2
    assert kp.kernel_pair(ra, rb, "mallows", 4.0) == pytest.approx(math.exp(-4.0))
    assert kp.kernel_pair(ra, rb, "kendall") == pytest.approx(-1.0)


@pytest.mark.parametrize("d,expected", [(3, 0.28074613626), (4, 0.21429181759), (5, 0.18732867501)])
def test_mallows_expectation_closed_form_vs_brute_force(d, expected):
    perms = _all_perms(d)
    ranks = kp.rank_vectors(perms)
    gram = kp.kernel_matrix_ranks(ranks, ranks, "mallows", 4.0)
    brute = gram.mean(axis=1)
    np.testing.assert_allclose(brute, brute[0], rtol=1e-12)  # right-invariance: same for every sigma
    assert kp.mallows_expectation(d, 4.0) == pytest.approx(brute[0], rel=1e-10)
    assert kp.mallows_expectation(d, 4.0) == pytest.approx(expected, abs=1e-10)
    assert kp.mallows_expectation(10, 4.0) == pytest.approx(0.153035, abs=1e-6)


@pytest.mark.parametrize("kernel", ["kendall", "spearman"])
def test_other_expectations_vs_brute_force(kernel):
    ranks = kp.rank_vectors(_all_perms(5))
    gram = kp.kernel_matrix_ranks(ranks, ranks, kernel)
    assert kp.kernel_expectation(5, kernel) == pytest.approx(gram.mean(axis=1)[7], abs=1e-9)


def test_gram_matrices_psd_and_ranks():
    ranks = kp.rank_vectors(_all_perms(4))
    ken = kp.kernel_matrix_ranks(ranks, None, "kendall")
    mal = kp.kernel_matrix_ranks(ranks, None, "mallows", 4.0)
    assert np.linalg.eigvalsh(ken).min() > -1e-9 and np.linalg.eigvalsh(mal).min() > -1e-9
    assert np.linalg.matrix_rank(ken) <= 6  # C(4, 2): Kendall is not universal
    assert np.linalg.matrix_rank(mal) == 24  # Mallows has full rank on S_4
    # pairwise O(d log d) kernel agrees with the matrix
    assert kp.kernel_pair(ranks[3], ranks[17], "mallows", 4.0) == pytest.approx(mal[3, 17])
    spe = kp.kernel_matrix_ranks(ranks, None, "spearman")
    assert spe[2, 5] == pytest.approx(float(ranks[2] @ ranks[5]))


def test_kernel_matrix_takes_orders_and_uses_ranks():
    rng = np.random.default_rng(3)
    orders = np.array([rng.permutation(6) for _ in range(5)])
    k = kp.kernel_matrix(orders, kernel="mallows", lam=4.0)
    ranks = np.argsort(orders, axis=1)
    want = np.exp(-4.0 * np.array([[_ndis_brute(a, b) for b in ranks] for a in ranks]) / 15)
    np.testing.assert_allclose(k, want, rtol=1e-12)


def test_discrepancy_matches_definition_by_brute_force():
    d = 5
    allp = _all_perms(d)
    all_ranks = np.argsort(allp, axis=1)
    rng = np.random.default_rng(4)
    sample = allp[rng.choice(len(allp), 7, replace=False)]
    w = rng.random(7)
    w /= w.sum()
    s_ranks = np.argsort(sample, axis=1)

    def k(a, b):
        return math.exp(-4.0 * _ndis_brute(a, b) / 10)

    e_uu = np.mean([[k(a, b) for b in all_ranks] for a in all_ranks])
    e_su = np.array([np.mean([k(a, b) for b in all_ranks]) for a in s_ranks])
    kss = np.array([[k(a, b) for b in s_ranks] for a in s_ranks])
    want = math.sqrt(e_uu - 2 * w @ e_su + w @ kss @ w)
    assert kp.discrepancy(sample, w) == pytest.approx(want, rel=1e-10)
    # the full group with uniform weights has zero discrepancy
    assert kp.discrepancy(allp) == pytest.approx(0.0, abs=1e-6)


def test_bad_kernel_arguments():
    with pytest.raises(ValueError, match="kernel must be one of"):
        kp.kernel_matrix(np.array([[0, 1]]), kernel="rbf")
    with pytest.raises(ValueError, match="lam >= 0"):
        kp.kernel_matrix(np.array([[0, 1]]), kernel="mallows", lam=-1.0)
    with pytest.raises(ValueError, match="same shape"):
        kp.discordant_pairs(np.zeros((2, 3), int), np.zeros((2, 4), int))
