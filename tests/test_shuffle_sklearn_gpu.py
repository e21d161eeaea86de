"""sklearn_ext drop-ins on CuPy input: outputs stay on the GPU and equal the CPU path for the same seed."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.base import BaseEstimator, RegressorMixin

from hitml.sklearn_ext import KFold, ShuffleSplit, permutation_importance, shuffle, train_test_split

pytestmark = pytest.mark.gpu


class _XpLinear(RegressorMixin, BaseEstimator):
    """A linear model that predicts on whichever device its input lives (NumPy or CuPy)."""

    def fit(self, X, y):
        self.coef_ = np.linalg.lstsq(np.asarray(X), np.asarray(y), rcond=None)[0]
        return self

    def predict(self, X):
        import cupy as cp

        return X @ (cp.asarray(self.coef_) if isinstance(X, cp.ndarray) else self.coef_)


def test_shuffle_and_split_cupy():
    import cupy as cp

    X = np.random.default_rng(0).normal(size=(5001, 3)).astype(np.float32)
    y = np.arange(5001)
    Xg, yg = shuffle(cp.asarray(X), cp.asarray(y), random_state=4)
    Xc, yc = shuffle(X, y, random_state=4)
    assert isinstance(Xg, cp.ndarray) and np.array_equal(Xg.get(), Xc) and np.array_equal(yg.get(), yc)
    parts = train_test_split(cp.asarray(X), cp.asarray(y), random_state=1, test_size=0.2)
    ref = train_test_split(X, y, random_state=1, test_size=0.2)
    assert all(isinstance(p, cp.ndarray) and np.array_equal(p.get(), r) for p, r in zip(parts, ref))
    a = [te for _, te in KFold(4, shuffle=True, random_state=2).split(cp.asarray(X))]
    b = [te for _, te in KFold(4, shuffle=True, random_state=2).split(X)]
    assert all(np.array_equal(u, v) for u, v in zip(a, b))
    a = next(ShuffleSplit(1, random_state=3, backend="gpu").split(X))
    b = next(ShuffleSplit(1, random_state=3, backend="cpu").split(X))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])


@pytest.mark.parametrize("n, kw", [(3000, dict()), (20_000, dict(max_samples=0.5)), (500, dict(scoring="neg_mean_squared_error"))])
def test_permutation_importance_gpu_equals_cpu(n, kw):
    import cupy as cp

    rng = np.random.default_rng(1)
    X = rng.normal(size=(n, 4))
    y = X @ np.array([2.0, 1.0, 0.0, -1.0]) + rng.normal(size=n) * 0.1
    m = _XpLinear().fit(X, y)
    g = permutation_importance(m, cp.asarray(X), cp.asarray(y), n_repeats=6, random_state=0, **kw)
    c = permutation_importance(m, X, y, n_repeats=6, random_state=0, **kw)
    assert isinstance(g.importances, np.ndarray)
    np.testing.assert_allclose(g.importances, c.importances, rtol=1e-9, atol=1e-12)


def test_permutation_importance_xgboost_cupy():
    xgb = pytest.importorskip("xgboost")
    import cupy as cp

    rng = np.random.default_rng(2)
    X = rng.normal(size=(20_000, 5)).astype(np.float32)
    y = (2 * X[:, 0] + X[:, 1] ** 2 + 0.1 * rng.normal(size=20_000)).astype(np.float32)
    m = xgb.XGBRegressor(n_estimators=30, max_depth=4, device="cuda").fit(cp.asarray(X), cp.asarray(y))
    g = permutation_importance(m, cp.asarray(X), cp.asarray(y), n_repeats=5, random_state=0)
    c = permutation_importance(m, X, y, n_repeats=5, random_state=0)
    np.testing.assert_allclose(g.importances, c.importances, rtol=1e-3, atol=1e-4)
    assert g.importances_mean[0] > g.importances_mean[2]
