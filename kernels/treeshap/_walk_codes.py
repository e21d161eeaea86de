"""The codes of the per-tree walk program (``paths.walk_program``; the GPU's per-tree linear kernel, linear.cu, and
the CPU engine's program kernel run it): its event kinds and limits. Numba-free, so that every module reads them
from here."""
from __future__ import annotations

__all__ = ["EV_DOWN", "EV_EDGE_LEAF", "EV_LEAF", "EV_UP", "PROGRAM_MAX_LEVELS", "PROGRAM_MAX_Q", "PROGRAM_MIN_REACH"]

EV_DOWN, EV_LEAF, EV_UP, EV_EDGE_LEAF = 0, 1, 2, 3
PROGRAM_MAX_LEVELS = 64      # levels 0..63: the kernel keeps each level's one fraction in a 64-bit mask
PROGRAM_MAX_Q = 32           # Gauss-Legendre nodes of the kernel's rules (a warp's lanes)
PROGRAM_MIN_REACH = 1e-200   # smallest nonzero product of zero fractions on a path: the products of the factors
#                              at the Gauss nodes then stay far from the subnormal range
