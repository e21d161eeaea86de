"""Backend resolution ("cpu" | "gpu" | "auto"), the array module, and GPU memory budgets.

This is the one place that imports CuPy; every adapter and kernel asks here.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any

import numpy as np

BACKENDS = ("cpu", "gpu", "auto")


class GPUUnavailableError(RuntimeError):
    """backend="gpu" was asked for but CuPy sees no usable CUDA device."""


@functools.lru_cache(maxsize=1)
def _cupy_or_reason() -> tuple[Any, str]:
    try:
        import cupy  # noqa: PLC0415
    except Exception as exc:  # ImportError, or a broken CUDA install
        return None, f"CuPy is not importable ({type(exc).__name__}: {exc}); install hitml[cuda12] or hitml[cuda13]"
    try:
        n = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        return None, f"CuPy cannot query CUDA devices ({type(exc).__name__}: {exc})"
    if n < 1:
        return None, "CuPy sees no CUDA device"
    return cupy, ""


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    return _cupy_or_reason()[0] is not None


def cupy_module():
    """Return the cupy module, or raise GPUUnavailableError saying why not."""
    cp, why = _cupy_or_reason()
    if cp is None:
        raise GPUUnavailableError(f'backend="gpu" needs a CUDA GPU: {why}')
    return cp


_warned_fallback = False


def resolve_backend(backend: str | None = "auto", data: Any = None) -> str:
    """Map "cpu" | "gpu" | "auto" (None means "auto") to "cpu" or "gpu".

    "gpu" raises GPUUnavailableError without a usable device. "auto" picks the GPU when CuPy sees one
    (or when ``data`` already lives on the GPU) and otherwise falls back to the CPU, warning once per process.
    """
    global _warned_fallback
    if backend is None:
        backend = "auto"
    if not isinstance(backend, str) or backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "cpu":
        return "cpu"
    if backend == "gpu":
        cupy_module()
        return "gpu"
    if is_cupy_array(data) or gpu_available():
        return "gpu"
    if not _warned_fallback:
        _warned_fallback = True
        warnings.warn(
            f'backend="auto": no usable GPU ({_cupy_or_reason()[1]}); using the CPU backend',
            RuntimeWarning,
            stacklevel=2,
        )
    return "cpu"


def is_cupy_array(x: Any) -> bool:
    """True for a cupy.ndarray, without importing CuPy when it is not loaded already."""
    mod = type(x).__module__
    return mod.startswith("cupy") and hasattr(x, "__cuda_array_interface__")


def array_module(backend_or_array: Any):
    """numpy for "cpu" or a host array; cupy for "gpu" or a CuPy array."""
    if isinstance(backend_or_array, str):
        return cupy_module() if resolve_backend(backend_or_array) == "gpu" else np
    return cupy_module() if is_cupy_array(backend_or_array) else np


def to_numpy(x: Any) -> np.ndarray:
    """Bring an array to the host (no copy for NumPy input)."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)


def free_gpu_bytes(fraction: float = 0.5) -> int:
    """A memory budget: ``fraction`` of the currently free device memory plus what CuPy's pool holds free."""
    cp = cupy_module()
    free, _total = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    return int(fraction * (free + pool.free_bytes()))


def device_name() -> str:
    """Human-readable name of the current CUDA device, or "cpu"."""
    if not gpu_available():
        return "cpu"
    cp = cupy_module()
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    name = props["name"]
    return name.decode() if isinstance(name, bytes) else str(name)
