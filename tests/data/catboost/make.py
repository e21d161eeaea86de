"""Build the CatBoost models the GPU tests read without catboost (run here, where catboost is installed):
``python tests/data/catboost/make.py``. Each model is saved as CatBoost's JSON (``<name>.json``) with an ``.npz`` of
rows and CatBoost's own references for them: ``X`` (float64 rows as given to CatBoost), ``raw``
(``predict(prediction_type="RawFormulaVal")``), ``shap`` (``get_feature_importance(type="ShapValues")``, (n, M+1)
or (n, K, M+1)) and, where CatBoost computes them, ``inter`` (``ShapInteractionValues``)."""
from __future__ import annotations

from pathlib import Path

import catboost
import numpy as np

HERE = Path(__file__).resolve().parent
F32MAX = float(np.finfo(np.float32).max)
TINY = float(np.float32(1.4e-45))   # the smallest float32 subnormal


def _data(rng: np.random.Generator, n: int, nan_share: float) -> np.ndarray:
    """Four features: 0 with NaN, 1 normal, 2 spread over float32 subnormals (and +-0.0), 3 huge (near FLT_MAX)."""
    X = np.empty((n, 4))
    X[:, 0] = rng.normal(size=n)
    X[rng.random(n) < nan_share, 0] = np.nan
    X[:, 1] = rng.normal(size=n)
    X[:, 2] = rng.integers(-40, 41, size=n) * TINY
    X[:, 3] = rng.choice([-F32MAX, -1e38, 0.0, 1e38, F32MAX], size=n)
    return X


def _target(X: np.ndarray) -> np.ndarray:
    nan = np.isnan(X[:, 0])
    return (np.where(nan, 4.0, X[:, 0]) + X[:, 1] + 2.0 * (X[:, 2] > 10 * TINY) - 1.5 * (X[:, 2] < -5 * TINY)
            + np.sign(X[:, 3]) * (np.abs(X[:, 3]) > 2e38))


def _special_rows(M: int) -> np.ndarray:
    """Rows of edge values on every feature: NaN, +-inf, +-1e300 (inf in float32), +-FLT_MAX and its float32
    neighbours (one ulp below; float64 values that round to FLT_MAX or overflow to inf), the smallest subnormal,
    subnormals either side of the training values, +-0.0."""
    below = float(np.nextafter(np.float32(F32MAX), np.float32(0)))
    half_ulp = (F32MAX - below) / 2
    vals = [np.nan, np.inf, -np.inf, 1e300, -1e300, F32MAX, -F32MAX, below, -below,
            F32MAX + half_ulp * 0.99, F32MAX + half_ulp, -(F32MAX + half_ulp), TINY, -TINY, 0.0, -0.0,
            10.5 * TINY, 11 * TINY, -5 * TINY, -5.5 * TINY, 3.9e-39, 2e38]
    return np.asarray([[v] * M for v in vals], dtype=np.float64)


def _mixed_rows(rng: np.random.Generator, M: int, n: int) -> np.ndarray:
    """Random rows mixing edge values across features."""
    pool = _special_rows(1)[:, 0]
    X = rng.normal(size=(n, M))
    mask = rng.random((n, M)) < 0.5
    X[mask] = rng.choice(pool, size=int(mask.sum()))
    return X


MODELS = {
    "symmetric_rmse_max": dict(loss_function="RMSE", nan_mode="Max", grow_policy="SymmetricTree", depth=4),
    "symmetric_logloss_min": dict(loss_function="Logloss", nan_mode="Min", grow_policy="SymmetricTree", depth=4),
    "symmetric_multiclass_max": dict(loss_function="MultiClass", nan_mode="Max", grow_policy="SymmetricTree",
                                     depth=3),
    "depthwise_rmse_max": dict(loss_function="RMSE", nan_mode="Max", grow_policy="Depthwise", depth=4),
    "lossguide_logloss_min": dict(loss_function="Logloss", nan_mode="Min", grow_policy="Lossguide", max_leaves=12),
    "depthwise_multiclass_min": dict(loss_function="MultiClass", nan_mode="Min", grow_policy="Depthwise", depth=3),
}


def main() -> None:
    for i, (name, params) in enumerate(MODELS.items()):
        rng = np.random.default_rng(100 + i)
        X = _data(rng, 600, 0.2)
        y = _target(X)
        if params["loss_function"] == "Logloss":
            y = (y > np.median(y)).astype(int)
        elif params["loss_function"] == "MultiClass":
            y = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3]))
        model = catboost.CatBoost(dict(iterations=12, learning_rate=0.3, border_count=16, random_seed=i,
                                       thread_count=1, verbose=0, allow_writing_files=False, **params))
        model.fit(X, y)
        model.save_model(str(HERE / f"{name}.json"), format="json")
        rows = np.vstack([_special_rows(X.shape[1]), _mixed_rows(rng, X.shape[1], 40), X[:20]])
        pool = catboost.Pool(rows)
        refs = {"X": rows, "raw": np.asarray(model.predict(pool, prediction_type="RawFormulaVal")),
                "shap": np.asarray(model.get_feature_importance(pool, type="ShapValues"))}
        if params["grow_policy"] == "SymmetricTree":
            refs["inter"] = np.asarray(model.get_feature_importance(pool, type="ShapInteractionValues"))
        np.savez_compressed(HERE / f"{name}.npz", **refs)


if __name__ == "__main__":
    main()
