"""Regression Shapley estimators: paired, size-stratified coalition designs; kriging or kernel-weighted fits."""
from __future__ import annotations

from ._design import ALLOCATIONS, coalition_design, size_mass
from ._family import FAMILY_NUGGETS, FAMILY_RHOS
from ._kriging import HEREDITY_PRIORS, KRIGING_RHO, heredity_kriging, kriging_operator
from ._regression import RegressionPlan, auto_fit, n_terms, shapley_operator, wls_order
from ._sequential import interval_width, shapley_until

__all__ = ["ALLOCATIONS", "FAMILY_NUGGETS", "FAMILY_RHOS", "HEREDITY_PRIORS", "KRIGING_RHO",
           "RegressionPlan", "auto_fit", "coalition_design",
           "heredity_kriging", "interval_width", "kriging_operator", "n_terms", "shapley_operator",
           "shapley_until", "size_mass", "wls_order"]
