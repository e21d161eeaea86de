"""Uniformity tests: chi^2 over all n! and Mallows MMD, checked on NumPy permutations, VariablePhilox and the LCG."""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from hitml.kernels import shuffle as sh
from hitml.kernels.shuffle import uniformity as u


def _numpy_perms(N, n, seed=0):
    rng = np.random.default_rng(seed)
    return np.argsort(rng.random((N, n)), axis=1)


def test_closed_form_matches_brute_force():
    for n, lam in ((5, 5.0), (6, 4.0)):
        allp = np.array(list(itertools.permutations(range(n))))
        inv = np.array([sum(p[i] > p[j] for i in range(n) for j in range(i + 1, n)) for p in allp])
        K = np.exp(-lam * inv / math.comb(n, 2))
        assert u.mallows_expectation(n, lam) == pytest.approx(K.mean(), rel=1e-12)
        assert u.mallows_variance(n, lam) == pytest.approx(K.var(), rel=1e-10)
    assert u.mallows_expectation(100) == pytest.approx(0.0832738, abs=1e-7)  # digest §5.3 table
    assert u.mallows_expectation(1000) == pytest.approx(0.0821995, abs=1e-7)


def test_discordant_pairs_brute_force():
    rng = np.random.default_rng(1)
    for _ in range(20):
        a, b = rng.permutation(9), rng.permutation(9)
        brute = sum((a[i] - a[j]) * (b[i] - b[j]) < 0 for i in range(9) for j in range(i + 1, 9))
        assert int(u._paired_discordant(np.stack([a, b]).astype(np.int64))[0]) == brute


def test_lehmer_rank_is_bijective():
    allp = np.array(list(itertools.permutations(range(5))))
    assert np.array_equal(u.lehmer_rank(allp), np.arange(120))


def test_chi2_numpy_and_24_rounds_pass_lcg_and_few_rounds_fail():
    N = 100_000
    _, p_np = u.chi2_uniformity_test(_numpy_perms(N, 5))
    assert p_np > 1e-3
    stat, p24 = u.chi2_uniformity_test(sh.batched_permutations(N, 5, 2024))
    assert p24 > 1e-3 and stat < 160
    stat4, p4 = u.chi2_uniformity_test(sh.batched_permutations(N, 5, 2024, rounds=4))
    assert p4 < 1e-10 and stat4 > 1000
    # LCG shuffles of m=5 on the padded domain [0, 16) (permutation(..., bijection="lcg") == this, see kernel tests)
    params = [sh.lcg_params(s, 4) for s in range(2000)]
    w = np.stack([sh.lcg(np.arange(16), 4, a, c) for a, c in params])
    lcg = w[w < 5].reshape(-1, 5)
    stat_lcg, p_lcg = u.chi2_uniformity_test(lcg)
    assert p_lcg < 1e-12 and stat_lcg > 2e3  # 2,000 samples; paper: "in the region of 500,000" at 100k samples


def test_mmd_passes_for_uniform_fails_for_biased():
    _, p = u.mallows_mmd_test(_numpy_perms(20_000, 100))
    assert p > 1e-3
    _, p = u.mallows_mmd_test(sh.batched_permutations(20_000, 100, 9))
    assert p > 1e-3
    ident = np.broadcast_to(np.arange(20), (1000, 20))
    stat, p = u.mallows_mmd_test(ident)
    assert p < 1e-12 and stat > 0.5
    biased = _numpy_perms(20_000, 20)
    biased[:, :10] = np.sort(biased[:, :10], axis=1)  # first half always increasing
    assert u.mallows_mmd_test(biased)[1] < 1e-6
    assert u.mallows_mmd_test(sh.batched_permutations(20_000, 100, 9, rounds=2))[1] < 1e-6
    assert u.mallows_mmd_test(ident, method="hoeffding")[1] < 1e-6


def test_uniformity_bad_input():
    with pytest.raises(ValueError, match="permutation of range"):
        u.chi2_uniformity_test(np.array([[0, 0, 1]]))
    with pytest.raises(ValueError, match="too large"):
        u.chi2_uniformity_test(np.tile(np.arange(12), (3, 1)))
    with pytest.raises(ValueError, match="2-D"):
        u.mallows_mmd_test(np.arange(5))
    with pytest.raises(ValueError, match="at least two"):
        u.mallows_mmd_test(np.arange(5)[None])
    with pytest.raises(ValueError, match="lam"):
        u.mallows_mmd_test(_numpy_perms(10, 4), lam=0)
