"""Backend resolution behaves as documented."""
import warnings

import numpy as np
import pytest

import kernels.device as dev


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
