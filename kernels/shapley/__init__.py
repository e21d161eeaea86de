"""Regression Shapley estimators: paired, size-stratified coalition designs and kernel-weighted polynomial fits."""
from __future__ import annotations

from ._design import ALLOCATIONS, coalition_design, size_mass
from ._regression import RegressionPlan, auto_order, n_terms, order3_weight, shapley_operator

__all__ = ["ALLOCATIONS", "RegressionPlan", "auto_order", "coalition_design", "n_terms", "order3_weight", "shapley_operator",
           "size_mass"]
