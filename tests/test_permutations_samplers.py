"""Permutation samplers: validity, determinism, uniform marginals, structure, and the seed's Table 4 discrepancies."""
from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from hitml.kernels import shapley as kp
from hitml.kernels.shuffle.uniformity import chi2_uniformity_test, mallows_mmd_test

PERM_METHODS = list(kp.PERMUTATION_METHODS)


@pytest.mark.parametrize("method", PERM_METHODS)
@pytest.mark.parametrize("n,d", [(1, 1), (3, 2), (7, 3), (25, 9), (40, 17)])
def test_rows_are_permutations_and_seeded(method, n, d):
    p, w = kp.sample(method, n, d, 11)
    assert p.shape == (n, d) and p.dtype == np.int64
    np.testing.assert_array_equal(np.sort(p, axis=1), np.broadcast_to(np.arange(d), (n, d)))
    assert w.shape == (n,) and w.sum() == pytest.approx(1.0)
    p2, w2 = kp.sample(method, n, d, 11)
    np.testing.assert_array_equal(p, p2)
    np.testing.assert_allclose(w, w2)
    if d >= 9 and method != "stratified" or d >= 9 and n > 1:
        assert not np.array_equal(p, kp.sample(method, n, d, 12)[0])


@pytest.mark.parametrize("method", PERM_METHODS)
def test_marginal_uniform_chi2_d4(method):
    """Rows 0 and 1 of many independent samples: each position's marginal is uniform over S_4 (24 cells)."""
    rows = np.array([kp.sample(method, 5, 4, seed)[0][:2] for seed in range(1200)])  # (1200, 2, 4)
    for r in range(2):
        _, p = chi2_uniformity_test(rows[:, r])
        assert p > 1e-3, (method, r, p)


@pytest.mark.parametrize("method", PERM_METHODS)
def test_marginal_uniform_mallows_mmd_d8(method):
    first = np.array([kp.sample(method, 3, 8, 10_000 + seed)[0][0] for seed in range(400)])
    _, p = mallows_mmd_test(first)
    assert p > 1e-3, (method, p)


def test_mmd_test_detects_a_biased_sampler():
    """Sanity check that the uniformity test used above has power: identity-heavy samples are rejected."""
    rng = np.random.default_rng(0)
    biased = np.array([np.sort(rng.permutation(8)[:8]) if rng.random() < 0.3 else rng.permutation(8)
                       for _ in range(400)])
    assert mallows_mmd_test(biased)[1] < 1e-3


def test_antithetic_and_orthogonal_pair_reverses():
    a, _ = kp.sample("antithetic", 10, 7, 3)
    np.testing.assert_array_equal(a[1::2], a[0::2, ::-1])
    o, _ = kp.sample("orthogonal", 24, 7, 3)  # two blocks of 2 (d - 1) = 12
    np.testing.assert_array_equal(o[1::2], o[0::2, ::-1])
    # distinct basis vectors in a block give distinct permutations
    assert len({tuple(r) for r in o[:12]}) == 12


def test_stratified_blocks_are_latin_squares():
    d = 6
    p, _ = kp.sample("stratified", 3 * d, d, 5)
    ranks = np.argsort(p, axis=1)
    for b in range(3):
        block = ranks[b * d:(b + 1) * d]
        for j in range(d):  # feature j takes every position exactly once
            assert sorted(block[:, j]) == list(range(d))


def test_sbq_weights_normalised_and_not_uniform():
    p, w = kp.sample("sbq", 20, 6, 0)
    assert w.sum() == pytest.approx(1.0) and np.ptp(w) > 1e-6


@pytest.mark.parametrize("method", ["owen", "owen_halved"])
def test_owen_mask_sizes_follow_the_shapley_size_law(method):
    """With q ~ U(0, 1), |b| is uniform on 0..d (integral of the binomial pmf over q)."""
    d = 5
    masks = np.concatenate([kp.sample(method, 8, d, s)[0] for s in range(500)])
    assert masks.dtype == np.int8 and masks.shape == (4000, d)
    counts = np.bincount(masks.sum(axis=1), minlength=d + 1)
    assert stats.chisquare(counts).pvalue > 1e-3
    if method == "owen_halved":
        np.testing.assert_array_equal(masks[1::2], 1 - masks[0::2])


def test_bad_sampler_arguments():
    with pytest.raises(ValueError, match="method must be one of"):
        kp.sample("latin", 3, 3)
    with pytest.raises(ValueError, match="positive integer"):
        kp.sample("mc", 0, 3)
    with pytest.raises(ValueError, match="positive integer"):
        kp.sample("orthogonal", 3, 0)


# ---------------------------------------------------------------- Table 4 of the seed (Mallows, lambda = 4)
TABLE4 = {  # (d, n): {method: paper mean}
    (10, 10): {"antithetic": 0.263626, "orthogonal": 0.244233, "sobol": 0.258403, "herding": 0.241113,
               "sbq": 0.240285},
    (10, 100): {"antithetic": 0.083784, "orthogonal": 0.070014, "sobol": 0.068875, "herding": 0.058985,
                "sbq": 0.055803},
    (50, 10): {"antithetic": 0.272373, "orthogonal": 0.269126, "sobol": 0.270824, "herding": 0.270276,
               "sbq": 0.270045},
    (50, 100): {"antithetic": 0.086087, "orthogonal": 0.072479, "sobol": 0.078587, "herding": 0.079701,
                "sbq": 0.079182},
}


def _cell(d, n, method, trials):
    return float(np.mean([kp.discrepancy(*kp.sample(method, n, d, 1000 * d + s)) for s in range(trials)]))


@pytest.mark.parametrize("d,n", [(10, 10), (10, 100), (50, 10)])
@pytest.mark.parametrize("method", ["antithetic", "orthogonal", "sobol", "herding", "sbq"])
def test_table4_discrepancy_within_5_percent(d, n, method):
    got = _cell(d, n, method, 12)
    want = TABLE4[(d, n)][method]
    assert abs(got - want) <= 0.05 * want, (d, n, method, got, want)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["antithetic", "orthogonal", "sobol", "herding", "sbq"])
def test_table4_discrepancy_within_5_percent_d50_n100(method):
    got = _cell(50, 100, method, 8)
    want = TABLE4[(50, 100)][method]
    assert abs(got - want) <= 0.05 * want, (method, got, want)


def test_antithetic_discrepancy_closed_form():
    """E[D^2] = (1 + e^-lam - 2 m_d) / n for antithetic pairs (the digest's derivation)."""
    d, n = 10, 10
    m = kp.mallows_expectation(d, 4.0)
    d2 = np.mean([kp.discrepancy(kp.sample("antithetic", n, d, s)[0]) ** 2 for s in range(300)])
    assert d2 == pytest.approx((1 + math.exp(-4.0) - 2 * m) / n, rel=0.05)
    d2_mc = np.mean([kp.discrepancy(kp.sample("mc", n, d, s)[0]) ** 2 for s in range(300)])
    assert d2_mc == pytest.approx((1 - m) / n, rel=0.05)


def test_sbq_with_more_samples_than_permutations():
    """n > d!: repeats add nothing to the span; the weight per distinct permutation is then the exact quadrature."""
    p, w = kp.sample("sbq", 13, 2, 5)
    ident = (p[:, 0] == 0)
    assert w[ident].sum() == pytest.approx(0.5, abs=1e-6) and w[~ident].sum() == pytest.approx(0.5, abs=1e-6)
    p, w = kp.sample("sbq", 30, 3, 1)
    mass = {}
    for row, wi in zip(map(tuple, p), w):
        mass[row] = mass.get(row, 0.0) + wi
    assert len(mass) == 6 and np.allclose(list(mass.values()), 1 / 6, atol=1e-6)


def test_permutations_alias_warns_and_reexports_the_shapley_family():
    """hitml.kernels.permutations (0.1.0) still imports, warns, and hands out the objects of hitml.kernels.shapley."""
    import importlib
    import sys

    sys.modules.pop("hitml.kernels.permutations", None)
    with pytest.warns(DeprecationWarning, match="hitml.kernels.shapley"):
        alias = importlib.import_module("hitml.kernels.permutations")
    assert set(alias.__all__) <= set(kp.__all__)
    assert all(getattr(alias, name) is getattr(kp, name) for name in alias.__all__)
