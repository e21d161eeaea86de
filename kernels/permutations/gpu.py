"""GPU (CuPy) twin of cpu.py: same names, same samples for a seed; kernel matrices, QR and argsort on the device."""
from __future__ import annotations

from hitml.kernels.device import cupy_module

from ._api import NAMES, bind

globals().update(bind(cupy_module(), "gpu"))
__all__ = list(NAMES)
