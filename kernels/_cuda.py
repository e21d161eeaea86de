"""Load the package's .cu sources with cupy.RawModule; each module compiles once per process (CuPy caches on disk)."""
from __future__ import annotations

import functools
from pathlib import Path

from .device import cupy_module

_ROOT = Path(__file__).resolve().parent


@functools.lru_cache(maxsize=None)
def load_module(relpath: str, options: tuple[str, ...] = (), name_expressions: tuple[str, ...] | None = None):
    """Compile ``kernels/<relpath>`` (a .cu file) once and return the cupy.RawModule.

    ``options`` are NVRTC flags; ``name_expressions`` lists template instantiations to look up with get_function.
    """
    cp = cupy_module()
    src = (_ROOT / relpath).read_text()
    opts = ("--std=c++17",) + tuple(options)
    if name_expressions:
        return cp.RawModule(code=src, options=opts, name_expressions=list(name_expressions))
    return cp.RawModule(code=src, options=opts)


_KERNELS: dict = {}


def get_kernel(relpath: str, name: str, options: tuple[str, ...] = (), name_expressions: tuple[str, ...] | None = None):
    """A compiled kernel function from a .cu file (looked up once per device: the lookup costs more than a small
    kernel's launch)."""
    key = (cupy_module().cuda.runtime.getDevice(), relpath, name, options, name_expressions)
    fn = _KERNELS.get(key)
    if fn is None:
        fn = _KERNELS[key] = load_module(relpath, options, name_expressions).get_function(name)
    return fn
