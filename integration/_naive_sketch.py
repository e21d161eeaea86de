"""The seed's "naive" baseline: raw power sums turned into central sums. It cancels catastrophically on offset data
(N(1000, 1)); the accuracy benchmark and tests keep it only to show what central sums avoid."""
from __future__ import annotations

import numpy as np
from scipy.special import comb

from hitml.kernels.sketch.state import MomentSketch


def naive_from_power_sums(S: np.ndarray, vmin: float, vmax: float) -> MomentSketch:
    """One-feature sketch from raw power sums S_0..S_l (S_0 = count); no distinct values."""
    mu = S[1] / S[0]
    M = [sum(comb(k, i) * S[i] * (-mu) ** (k - i) for i in range(k + 1)) for k in range(2, len(S))]
    return MomentSketch(np.array([float(S[0])]), np.array([mu]), np.array([M]), np.array([vmin]),
                        np.array([vmax]), np.full((1, 1), np.nan), np.array([-1]))


def naive_sketch(x: np.ndarray, l: int) -> MomentSketch:
    """One-feature sketch of ``x`` from its raw power sums up to order l."""
    return naive_from_power_sums(np.array([np.sum(x**k) for k in range(l + 1)]), x.min(), x.max())
