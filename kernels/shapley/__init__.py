"""Regression Shapley estimators: paired, size-stratified coalition designs and kernel-weighted polynomial or kriging fits."""
from __future__ import annotations

from ._design import ALLOCATIONS, coalition_design, size_mass
from ._regression import (KRIGING_RHO, RegressionPlan, auto_fit, kriging_operator, n_terms, shapley_operator,
                          wls_order)

__all__ = ["ALLOCATIONS", "KRIGING_RHO", "RegressionPlan", "auto_fit", "coalition_design", "kriging_operator", "n_terms",
           "shapley_operator", "size_mass", "wls_order"]
