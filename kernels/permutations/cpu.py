"""CPU (NumPy/Numba) permutation samplers, kernel matrices and discrepancy (names in _api.NAMES)."""
from __future__ import annotations

import numpy as np

from ._api import NAMES, bind

globals().update(bind(np, "cpu"))  # monte_carlo, antithetic, stratified, owen_masks, herding, sbq, orthogonal, ...
__all__ = list(NAMES)
