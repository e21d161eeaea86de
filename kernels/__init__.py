"""hitml compute kernels: one subpackage per algorithm, each with a CPU twin (NumPy/Numba) and a GPU twin (CuPy)."""
from .device import (
    GPUUnavailableError,
    array_module,
    check_backend,
    check_resolved,
    gpu_available,
    is_cupy_array,
    resolve_backend,
    to_numpy,
)

__all__ = [
    "GPUUnavailableError",
    "array_module",
    "check_backend",
    "check_resolved",
    "gpu_available",
    "is_cupy_array",
    "resolve_backend",
    "to_numpy",
]
