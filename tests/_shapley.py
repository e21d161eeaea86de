"""Brute-force Shapley values, the independent reference the TreeSHAP and sampler tests share."""
import itertools
import math

import numpy as np


def exact_shapley(value, M: int) -> np.ndarray:
    """phi_i = sum over S of N minus i of |S|! (M - |S| - 1)! / M! (v(S u i) - v(S)), for the set function
    ``value(frozenset) -> float or array``; returns (M,) or (M,) + value's shape."""
    phi = [0.0] * M
    for i in range(M):
        others = [j for j in range(M) if j != i]
        for r in range(M):
            wgt = math.factorial(r) * math.factorial(M - r - 1) / math.factorial(M)
            for S in itertools.combinations(others, r):
                S = frozenset(S)
                phi[i] = phi[i] + wgt * (np.asarray(value(S | {i})) - np.asarray(value(S)))
    return np.array(phi, dtype=np.float64)
