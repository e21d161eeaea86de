"""Shapley value estimation, one kernel family: permutation samplers and their kernels (Kendall, Mallows, Spearman)
and discrepancy, paired size-stratified coalition designs with kriging or kernel-weighted regression fits, batched
coalition evaluation, the stopping rule (``tol``) and the per-row loop (:func:`shapley_rows`) that adapters call.
"""
from __future__ import annotations

from ._coalitions import estimate_shapley, evaluations_per_row, samples_for_budget
from ._design import ALLOCATIONS, coalition_design, size_mass
from ._family import FAMILY_NUGGETS, FAMILY_RHOS
from ._kriging import HEREDITY_PRIORS, KRIGING_RHO, heredity_kriging, kriging_operator
from ._permutation_kernels import (
    KERNELS,
    discordant_pairs,
    kendall_features,
    kernel_expectation,
    kernel_matrix_ranks,
    kernel_pair,
    mallows_expectation,
    rank_vectors,
)
from ._regression import RegressionPlan, auto_fit, n_terms, shapley_operator, wls_order
from ._rows import PermutationDesign, SequentialDesign, shapley_rows, varying_features
from ._samplers import MASK_METHODS, METHODS, PAIRED_METHODS, PERMUTATION_METHODS
from ._sequential import Z95, interval_width, shapley_until
from ._api import backend_module, discrepancy, kernel_matrix, sample

__all__ = [
    "ALLOCATIONS", "FAMILY_NUGGETS", "FAMILY_RHOS", "HEREDITY_PRIORS", "KERNELS", "KRIGING_RHO", "MASK_METHODS",
    "METHODS", "PAIRED_METHODS", "PERMUTATION_METHODS", "PermutationDesign", "RegressionPlan", "SequentialDesign",
    "Z95", "auto_fit", "backend_module", "coalition_design", "discordant_pairs", "discrepancy", "estimate_shapley",
    "evaluations_per_row", "heredity_kriging", "interval_width", "kendall_features", "kernel_expectation",
    "kernel_matrix", "kernel_matrix_ranks", "kernel_pair", "kriging_operator", "mallows_expectation", "n_terms",
    "rank_vectors", "sample", "samples_for_budget", "shapley_operator", "shapley_rows", "shapley_until", "size_mass",
    "varying_features", "wls_order",
]
