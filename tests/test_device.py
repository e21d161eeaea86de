"""Backend resolution behaves as documented."""
import warnings

import numpy as np
import pytest

import hitml.kernels.device as dev


def test_cpu_is_cpu():
    assert dev.resolve_backend("cpu") == "cpu"
    assert dev.array_module("cpu") is np


def test_bad_backend_name():
    with pytest.raises(ValueError, match="backend must be one of"):
        dev.resolve_backend("tpu")


def test_gpu_without_device_raises(monkeypatch):
    monkeypatch.setattr(dev, "_cupy_or_reason", lambda: (None, "CuPy sees no CUDA device"))
    with pytest.raises(dev.GPUUnavailableError, match="needs a CUDA GPU"):
        dev.resolve_backend("gpu")


def test_auto_falls_back_and_warns_once(monkeypatch):
    monkeypatch.setattr(dev, "_cupy_or_reason", lambda: (None, "CuPy sees no CUDA device"))
    monkeypatch.setattr(dev, "_warned_fallback", False)
    with pytest.warns(RuntimeWarning, match="using the CPU backend"):
        assert dev.resolve_backend("auto") == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert dev.resolve_backend("auto") == "cpu"


def test_to_numpy_passthrough():
    a = np.arange(3)
    assert dev.to_numpy(a) is a


@pytest.mark.gpu
def test_gpu_module_is_cupy():
    import cupy

    assert dev.resolve_backend("gpu") == "gpu"
    assert dev.array_module("gpu") is cupy
    assert dev.array_module(cupy.zeros(2)) is cupy


@pytest.mark.gpu
@pytest.mark.parametrize("shape,dtype", [((3, 5), np.float64), ((1_000_003,), np.float64),
                                         ((9_000_001, 3), np.float64), ((40_000_000,), np.float32),
                                         ((2_000, 785, 11), np.float64)])
def test_download_equals_plain_copy(shape, dtype):
    """The pinned, double-buffered download gives the same bytes as CuPy's own .get(), across staging slices."""
    import cupy as cp
    src = cp.random.default_rng(0).standard_normal(shape, dtype=dtype)
    ref = src.get()
    out = dev.download(src)
    assert out.shape == ref.shape and out.dtype == ref.dtype
    np.testing.assert_array_equal(out, ref)
    # into a slice of a larger array, after more work queued on the current stream
    big = np.full((2,) + shape, np.nan, dtype=dtype)
    src *= 2
    dev.download(src, big[1])
    np.testing.assert_array_equal(big[1], 2 * ref)
    assert np.isnan(big[0]).all()
