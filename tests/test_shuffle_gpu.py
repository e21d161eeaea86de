"""GPU twin of kernels.shuffle equals the CPU twin bit for bit, for every form (skipped without a GPU)."""
from __future__ import annotations

import numpy as np
import pytest

from hitml.kernels import shuffle as sh

pytestmark = pytest.mark.gpu

SIZES = [0, 1, 2, 3, 5, 16, 17, 255, 4095, 4096, 4097, 65537, 1 << 20, (1 << 20) + 1, 3_000_017]


@pytest.mark.parametrize("m", SIZES)
def test_permutation_gpu_equals_cpu(m):
    g = sh.permutation(m, 42, backend="gpu")
    c = sh.permutation(m, 42, backend="cpu")
    assert np.array_equal(g.get(), c)


@pytest.mark.parametrize("m", [5, 1000, (1 << 18) + 3])
def test_lcg_gpu_equals_cpu(m):
    assert np.array_equal(sh.permutation(m, 3, backend="gpu", bijection="lcg").get(),
                          sh.permutation(m, 3, backend="cpu", bijection="lcg"))


@pytest.mark.parametrize("rounds", [1, 8, 24, 40])
def test_rounds_gpu_equals_cpu(rounds):
    assert np.array_equal(sh.permutation(70_001, 9, backend="gpu", rounds=rounds).get(),
                          sh.permutation(70_001, 9, backend="cpu", rounds=rounds))


@pytest.mark.parametrize("k, d", [(1, 1), (3, 5), (1000, 100), (37, 33), (5, 3000), (100_000, 16)])
def test_batched_gpu_equals_cpu(k, d):
    g = sh.batched_permutations(k, d, 8, backend="gpu", start=11)
    assert np.array_equal(g.get(), sh.batched_permutations(k, d, 8, backend="cpu", start=11))


@pytest.mark.parametrize("dtype, shape", [(np.uint32, (100_003,)), (np.uint64, (100_003,)), (np.int8, (4099,)),
                                          (np.float32, (20_011, 16)), (np.float32, (3001, 256)),
                                          (np.float64, (2049, 3)), (np.int16, (999, 5)),
                                          (np.float32, ((1 << 22) + 3, 16)), (np.uint8, ((1 << 22) + 5, 3))])
def test_shuffle_rows_gpu_equals_cpu(dtype, shape):
    import cupy as cp

    rng = np.random.default_rng(0)
    X = (rng.random(shape) * 100).astype(dtype)
    out = sh.shuffle_rows(cp.asarray(X), 5)
    assert isinstance(out, cp.ndarray) and out.dtype == X.dtype and out.shape == X.shape
    assert np.array_equal(out.get(), sh.shuffle_rows(X, 5, backend="cpu"))


def test_shuffle_pairs_and_views():
    import cupy as cp

    k = cp.arange(50_001, dtype=cp.uint64) * 3
    v = cp.arange(50_001 * 2, dtype=cp.float32).reshape(-1, 2)
    ko, vo = sh.shuffle_pairs(k, v, 1)
    kc, vc = sh.shuffle_pairs(k.get(), v.get(), 1, backend="cpu")
    assert np.array_equal(ko.get(), kc) and np.array_equal(vo.get(), vc)
    base = cp.arange(3 * 1001, dtype=cp.int32).reshape(1001, 3)
    view = base[:, 1:]  # non-contiguous
    assert np.array_equal(sh.shuffle_rows(view, 2).get(), sh.shuffle_rows(view.get(), 2, backend="cpu"))


def test_repeated_launches_are_deterministic():
    a = sh.permutation((1 << 22) + 1, 123, backend="gpu")
    for _ in range(3):
        assert bool((sh.permutation((1 << 22) + 1, 123, backend="gpu") == a).all())


def test_workspace_reuse_and_tag_wrap(monkeypatch):
    """Each cached launch plan reuses its look-back workspace without clearing (per-launch tags): sizes in turn, and a
    tag wrap (forced after 3 launches) that clears it, still give the CPU twin's permutation."""
    from hitml.kernels.shuffle import gpu

    monkeypatch.setattr(gpu, "_TAG_LIMIT", 3)
    for m in [(1 << 21) + 7, 5000, (1 << 22) + 1, 1 << 20, (1 << 21) + 7, 3, (1 << 22) + 1]:
        assert np.array_equal(sh.permutation(m, 77, backend="gpu").get(), sh.permutation(m, 77, backend="cpu"))


def test_generator_seed_gpu_equals_cpu():
    a = sh.permutation(100_001, np.random.default_rng(5), backend="gpu").get()
    assert np.array_equal(a, sh.permutation(100_001, np.random.default_rng(5), backend="cpu"))


@pytest.mark.parametrize("m", [(1 << 21) + 1, (1 << 22) + 1])  # even and odd b on the large-domain geometry
@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])
def test_keys_large_domain_gpu_equals_cpu(m, dtype):
    import cupy as cp

    x = (np.arange(m, dtype=np.uint64) * 2654435761 % (1 << 32)).astype(dtype)
    assert np.array_equal(sh.shuffle_rows(cp.asarray(x), 11).get(), sh.shuffle_rows(x, 11, backend="cpu"))


@pytest.mark.parametrize("split", [False, True])
def test_shuffle_pairs_fused_and_split(monkeypatch, split):
    """Key-value pairs go through the fused pass, or as two single-array passes when both sources together overflow
    the L2 while each alone fits it about (forced here with a 16 MiB L2): the same pairs as the CPU twin either way."""
    import cupy as cp

    from hitml.kernels.shuffle import gpu

    monkeypatch.setattr(gpu, "_PLANS", type(gpu._PLANS)())
    monkeypatch.setattr(gpu, "_l2_bytes", lambda dev: 1 << 24 if split else 1 << 40)
    m = (1 << 21) + 5
    k = np.arange(m, dtype=np.uint64) * 3
    v = np.arange(m, dtype=np.uint64) ^ 0x5555
    kg, vg = cp.asarray(k), cp.asarray(v)
    assert gpu._plan(cp, m, (kg, vg), 24).split is split
    ko, vo = sh.shuffle_pairs(kg, vg, 6)
    kc, vc = sh.shuffle_pairs(k, v, 6, backend="cpu")
    assert np.array_equal(ko.get(), kc) and np.array_equal(vo.get(), vc)


@pytest.mark.parametrize("dtype", [np.uint32, np.uint64])  # one tile per block, and the control-warp kernel
def test_rawkernel_launch_equals_driver_launch(monkeypatch, dtype):
    """The RawKernel launch (the fallback where CuPy has no driver launchKernel) and the driver launch with the
    prepacked parameter block give the same shuffle, equal to the CPU twin."""
    import cupy as cp

    from hitml.kernels.shuffle import gpu

    m = (1 << 21) + 3
    x = (np.arange(m, dtype=np.uint64) * 7919 % (1 << 32)).astype(dtype)
    xg = cp.asarray(x)
    monkeypatch.setattr(gpu, "_PLANS", type(gpu._PLANS)())
    a = sh.shuffle_rows(xg, 4).get()
    gpu._plan(cp, m, (xg,), 24).fptr = None
    b = sh.shuffle_rows(xg, 4).get()
    assert np.array_equal(a, b) and np.array_equal(a, sh.shuffle_rows(x, 4, backend="cpu"))
