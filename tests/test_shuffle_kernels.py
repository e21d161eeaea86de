"""CPU tests of kernels.shuffle: bijections, the bijective shuffle, batched permutations (vs a NumPy reference)."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels import shuffle as sh

M0 = 0xD2B74407B1CE6E93


def ref_vphilox(x: np.ndarray, b: int, keys: np.ndarray) -> np.ndarray:
    """VariablePhilox written from the paper's listing (Fig. 5), vectorised in NumPy with Python-int constants."""
    lb, rb = b // 2, b - b // 2
    lmask, rmask = np.uint64((1 << lb) - 1), np.uint64((1 << rb) - 1)
    L = x.astype(np.uint64) >> np.uint64(rb)
    R = x.astype(np.uint64) & rmask
    with np.errstate(over="ignore"):
        for k in keys:
            p = np.uint64(M0) * L
            hi, lo = p >> np.uint64(32), p & np.uint64(0xFFFFFFFF)
            lo = ((lo << np.uint64(rb - lb)) & np.uint64(0xFFFFFFFF)) | (R >> np.uint64(lb))
            L = (hi ^ np.uint64(int(k)) ^ R) & lmask
            R = lo & rmask
    return (L << np.uint64(rb)) | R


def ref_shuffle(m: int, keys: np.ndarray) -> np.ndarray:
    """Algorithm 1, unfused: W = f(0..n-1), keep the images below m in order of i."""
    b = max(4, (m - 1).bit_length())
    w = ref_vphilox(np.arange(1 << b, dtype=np.uint64), b, keys)
    return w[w < m].astype(np.int64)


@pytest.mark.parametrize("b", range(1, 41))
def test_bijection_and_inverse(b):
    keys = sh.philox_round_keys(b)
    if b <= 20:
        x = np.arange(1 << b, dtype=np.uint64)
        y = sh.variable_philox(x, b, keys)
        assert np.array_equal(np.sort(y), x)  # exhaustive: a permutation of [0, 2^b)
    else:
        x = np.unique(np.random.default_rng(b).integers(0, 1 << b, size=200_000, dtype=np.uint64))
        y = sh.variable_philox(x, b, keys)
        assert y.max() < (1 << b) and np.unique(y).size == x.size  # sampled: injective on the sample
    assert np.array_equal(sh.variable_philox_inverse(y, b, keys), x)
    xs = x[:: max(1, x.size // 4096)]
    assert np.array_equal(sh.variable_philox(xs, b, keys), ref_vphilox(xs, b, keys))


def test_bijection_changes_with_keys_and_is_not_identity():
    x = np.arange(1 << 12, dtype=np.uint64)
    a = sh.variable_philox(x, 12, sh.philox_round_keys(1))
    b = sh.variable_philox(x, 12, sh.philox_round_keys(2))
    assert not np.array_equal(a, x) and not np.array_equal(a, b)


def test_lcg_is_bijection():
    a, c = sh.lcg_params(3, 10)
    assert a % 2 == 1
    y = sh.lcg(np.arange(1024), 10, a, c)
    assert np.array_equal(np.sort(y), np.arange(1024))
    with pytest.raises(ValueError, match="odd"):
        sh.lcg(np.arange(4), 2, 2, 1)


SIZES = [0, 1, 2, 3, 5, 7, 13, 15, 16, 17, 31, 32, 33, 97, 255, 256, 257, 1023, 1024, 1025, 65535, 65537, 99991]


@pytest.mark.parametrize("m", SIZES)
def test_permutation_is_permutation_and_matches_algorithm1(m):
    p = sh.permutation(m, 7)
    assert p.dtype == np.int64 and p.shape == (m,)
    assert np.array_equal(np.sort(p), np.arange(m))
    assert np.array_equal(p, ref_shuffle(m, sh.philox_round_keys(7)))


def test_permutation_large_and_deterministic():
    m = (1 << 20) + 1
    p = sh.permutation(m, 11)
    assert np.array_equal(np.bincount(p, minlength=m), np.ones(m))
    assert np.array_equal(p, sh.permutation(m, 11))
    assert not np.array_equal(p, sh.permutation(m, 12))
    g1, g2 = np.random.default_rng(5), np.random.default_rng(5)
    assert np.array_equal(sh.permutation(1000, g1), sh.permutation(1000, g2))
    assert not np.array_equal(sh.permutation(1000, g1), sh.permutation(1000, np.random.default_rng(5)))


def test_lcg_permutation_matches_algorithm1():
    m = 1000
    p = sh.permutation(m, 4, bijection="lcg")
    a, c = sh.lcg_params(4, 10)
    w = sh.lcg(np.arange(1024), 10, a, c)
    assert np.array_equal(p, w[w < m])


def test_batched_rows_are_keyed_shuffles():
    k, d = 50, 100
    P = sh.batched_permutations(k, d, 3)
    assert P.shape == (k, d) and P.dtype == np.int64
    assert np.array_equal(np.sort(P, axis=1), np.broadcast_to(np.arange(d), (k, d)))
    keys = sh.batch_round_keys(sh.base_key(3), np.arange(k))
    for i in (0, 17, 49):
        assert np.array_equal(P[i], ref_shuffle(d, keys[i]))
    assert np.array_equal(sh.batched_permutations(10, d, 3, start=20), P[20:30])
    assert len({tuple(r) for r in P}) == k  # independent rows
    assert sh.batched_permutations(0, 5, 1).shape == (0, 5)
    assert sh.batched_permutations(4, 0, 1).shape == (4, 0)
    assert np.array_equal(sh.batched_permutations(3, 1, 1), np.zeros((3, 1)))


def test_shuffle_rows_and_pairs():
    X = np.arange(60, dtype=np.float32).reshape(20, 3)
    Y = sh.shuffle_rows(X, 5, backend="cpu")
    p = sh.permutation(20, 5)
    assert np.array_equal(Y, X[p])
    k, v = sh.shuffle_pairs(np.arange(20), np.arange(20) * 10, 5, backend="cpu")
    assert np.array_equal(k, p) and np.array_equal(v, p * 10)
    with pytest.raises(ValueError, match="same length"):
        sh.shuffle_pairs(np.arange(3), np.arange(4), 1, backend="cpu")


@pytest.mark.parametrize("bad, exc", [(-1, ValueError), (2.5, TypeError), ("3", TypeError), (True, TypeError)])
def test_bad_sizes(bad, exc):
    with pytest.raises(exc, match="m must be a non-negative integer"):
        sh.permutation(bad, 0)
    with pytest.raises(exc, match="must be a non-negative integer"):
        sh.batched_permutations(bad, 3, 0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="rounds"):
        sh.permutation(5, 0, rounds=0)
    with pytest.raises(ValueError, match="bijection"):
        sh.permutation(5, 0, bijection="xor")
    with pytest.raises(ValueError, match="seed"):
        sh.permutation(5, -3)
    with pytest.raises(ValueError, match="n_bits"):
        sh.variable_philox(np.arange(4), 0, sh.philox_round_keys(0))
    with pytest.raises(ValueError, match=r"\[0, 2\^3\)"):
        sh.variable_philox(np.arange(9), 3, sh.philox_round_keys(0))
    with pytest.raises(ValueError, match="backend"):
        sh.permutation(5, 0, backend="tpu")


# Definitions the Shapley family (moved by another change) still holds; each must stay true until it imports
# hitml.kernels._rng.as_generator, then goes from this list.
_AS_GENERATOR_PENDING: set[str] = set()


def test_one_as_generator():
    """Every kernel family reads seeds through hitml.kernels._rng.as_generator; no package module defines another."""
    import ast
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    defs = {p.relative_to(root).as_posix()
            for pkg in ("kernels", "shap_ext", "xgboost_ext", "sklearn_ext") for p in (root / pkg).rglob("*.py")
            if any(isinstance(n, ast.FunctionDef) and n.name == "as_generator" for n in ast.walk(ast.parse(p.read_text())))}
    pending = {p for p in _AS_GENERATOR_PENDING if (root / p).exists()}
    assert defs - pending == {"kernels/_rng.py"}, sorted(defs)
    assert pending <= defs, f"{sorted(pending - defs)} no longer define as_generator: drop them from the list"
    assert sh.as_generator is __import__("hitml.kernels._rng", fromlist=["as_generator"]).as_generator


@pytest.mark.parametrize("seed", [0, 7, np.int64(2**40), 2**63])
def test_as_generator_int_seed_is_numpys_stream(seed):
    """An int seeds NumPy's default_rng as it is, so a family switching to the shared reader keeps its int streams."""
    np.testing.assert_array_equal(sh.as_generator(seed).integers(0, 2**62, 16),
                                  np.random.default_rng(int(seed)).integers(0, 2**62, 16))
    g = np.random.default_rng(seed)
    assert sh.as_generator(g) is g


@pytest.mark.parametrize("seed", [-1, True, 1.5, "3", [1, 2]])
def test_as_generator_refuses_what_numpy_would_read_otherwise(seed):
    with pytest.raises(ValueError, match="seed"):
        sh.as_generator(seed)
