"""Deprecated alias of :mod:`hitml.kernels.shapley`, where the permutation samplers, their kernels and the
coalition evaluation now live beside the regression estimators; importing it warns (DeprecationWarning)."""
from __future__ import annotations

import warnings

from hitml.kernels.shapley import (
    KERNELS,
    MASK_METHODS,
    METHODS,
    PAIRED_METHODS,
    PERMUTATION_METHODS,
    backend_module,
    discordant_pairs,
    discrepancy,
    estimate_shapley,
    evaluations_per_row,
    kendall_features,
    kernel_expectation,
    kernel_matrix,
    kernel_matrix_ranks,
    kernel_pair,
    mallows_expectation,
    rank_vectors,
    sample,
    samples_for_budget,
)

warnings.warn("hitml.kernels.permutations is deprecated: import these names from hitml.kernels.shapley",
              DeprecationWarning, stacklevel=2)

__all__ = [
    "KERNELS", "MASK_METHODS", "METHODS", "PAIRED_METHODS", "PERMUTATION_METHODS", "backend_module", "discordant_pairs",
    "discrepancy", "estimate_shapley", "evaluations_per_row", "kendall_features", "kernel_expectation", "kernel_matrix",
    "kernel_matrix_ranks", "kernel_pair", "mallows_expectation", "rank_vectors", "sample", "samples_for_budget",
]
