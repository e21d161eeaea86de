"""Deep tree models shared by the per-tree kernel's tests (synthetic data, 6 features)."""
from __future__ import annotations

import numpy as np


def deep_xgboost(rng: np.random.Generator, n_estimators: int):
    """An XGBoost regressor of depth 16 with zero-cover children allowed (min_child_weight=0), trained on 3,000
    float32 rows with 10% NaN."""
    import xgboost as xgb
    X = rng.normal(size=(3000, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    Z = np.nan_to_num(X)
    y = Z[:, 0] * Z[:, 1] + Z[:, 2] + rng.normal(size=len(X))
    return xgb.XGBRegressor(n_estimators=n_estimators, max_depth=16, learning_rate=0.3, min_child_weight=0).fit(X, y)
