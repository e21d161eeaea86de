"""The TreeSHAP benchmarks' grid: datasets, model training, timers and library versions."""
from __future__ import annotations

import os
import platform
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

SIZES = {"small": (10, 3), "medium": (100, 8), "large": (1000, 16)}
DATASETS = ("covtype", "cal_housing", "adult", "fashion_mnist")
MODEL_DIR = Path(os.environ.get("HITML_BENCH_MODELS", "/tmp/hitml_bench_models"))


# ---------------------------------------------------------------------------------------------------------- data
def load_dataset(name: str, train_rows: int, seed: int = 0):
    """(X float32, y, objective, num_class, source) for one dataset of the grid."""
    import pandas as pd
    rng = np.random.default_rng(seed)
    if name == "cal_housing":
        df = pd.read_csv(ROOT / "data" / "cal_housing.csv.gz")
        y = df.pop("median_house_value").to_numpy(np.float64) / 1e5
        return df.to_numpy(np.float32), y, "reg:squarederror", 1, "data/cal_housing.csv.gz (real)"
    if name == "adult":
        df = pd.read_csv(ROOT / "data" / "adult.csv.gz", skipinitialspace=True)
        y = (df.pop("income").astype(str).str.strip() != "<=50K").to_numpy(np.float64)
        for c in df.columns:
            if not pd.api.types.is_numeric_dtype(df[c]):
                df[c] = df[c].astype("category").cat.codes
        return df.to_numpy(np.float32), y, "binary:logistic", 1, "data/adult.csv.gz (real, categories as codes)"
    if name == "covtype":       # 581,012 x 54, 7 classes: 10 numeric + 44 binary columns
        n, k = min(train_rows, 581_012), 7
        num = rng.normal(size=(n, 10))
        binary = (rng.random((n, 44)) < 0.1).astype(np.float64)
        X = np.hstack([num, binary]).astype(np.float32)
        score = num[:, :7] + 0.5 * binary[:, :7] + 0.3 * np.sin(3 * num[:, 7:8]) * num[:, 8:9]
        y = np.argmax(score + rng.gumbel(size=(n, k)), axis=1).astype(np.float64)
        return X, y, "multi:softprob", k, f"synthetic covtype shape ({n} x 54, 7 classes)"
    if name == "fashion_mnist":  # 70,000 x 784 pixels, 10 classes
        n, k = min(train_rows, 70_000), 10
        proto = rng.random((k, 784))
        y = rng.integers(0, k, size=n)
        X = np.clip(proto[y] + rng.normal(scale=0.35, size=(n, 784)), 0, 1)
        X = (np.round(X * 255)).astype(np.float32)
        return X, y.astype(np.float64), "multi:softprob", k, f"synthetic fashion_mnist shape ({n} x 784, 10 classes)"
    raise ValueError(name)


def train_model(name: str, size: str, X, y, objective: str, num_class: int, device: str):
    import xgboost as xgb
    rounds, depth = SIZES[size]
    MODEL_DIR.mkdir(parents=True, exist_ok=True)
    path = MODEL_DIR / f"{name}-{size}-{len(X)}.ubj"
    params = {"eta": 0.01, "max_depth": depth, "objective": objective, "tree_method": "hist", "device": device}
    if num_class > 1:
        params["num_class"] = num_class
    bst = xgb.Booster()
    if path.exists():
        bst.load_model(path)
        return bst, 0.0
    t = time.perf_counter()
    bst = xgb.train(params, xgb.DMatrix(X, label=y), num_boost_round=rounds)
    elapsed = time.perf_counter() - t
    bst.save_model(path)
    return bst, elapsed


# ------------------------------------------------------------------------------------------------------ timing
def timed(fn, repeats: int = 3, sync=None):
    """Median wall time of fn() over repeats, after one warm-up call."""
    fn()
    if sync:
        sync()
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        if sync:
            sync()
        times.append(time.perf_counter() - t)
    return float(np.median(times))


def timed_rows(fn, X, max_rows: int, budget_s: float, repeats: int = 3, sync=None, start: int | None = None):
    """Time fn(X[:n]) growing n up to max_rows while the predicted time stays within budget; (rows, seconds). The
    growth is predicted from a second call: a first call's one-off costs (a GPU library uploading a 10,000-tree
    model) would stop the growth at the first row count."""
    n = min(max_rows, start or (100 if max_rows > 200 else 10))
    for _ in range(2):
        t0 = time.perf_counter()
        fn(X[:n])
        if sync:
            sync()
        first = time.perf_counter() - t0
    while n < max_rows:
        per_row = max(first, 1e-4) / n
        nxt = min(max_rows, n * 10)
        if per_row * nxt * (repeats + 1) > budget_s:
            break
        n = nxt
        t0 = time.perf_counter()
        fn(X[:n])
        if sync:
            sync()
        first = time.perf_counter() - t0
    reps = repeats if first * repeats < budget_s else 1
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn(X[:n])
        if sync:
            sync()
        times.append(time.perf_counter() - t)
    return n, float(np.median(times))


def xgb_contribs(bst, device, nthread, interactions=False):
    """XGBoost's own ``pred_contribs`` (or ``pred_interactions``) on ``device``, as its users call it: a function of
    NumPy rows that makes their DMatrix and predicts."""
    import xgboost as xgb
    b = bst.copy()
    b.set_param({"device": device, "nthread": nthread})

    def run(X):
        return b.predict(xgb.DMatrix(X, nthread=nthread), pred_contribs=not interactions,
                         pred_interactions=interactions)
    return run


def versions(mods: tuple[str, ...] = ("numpy", "xgboost", "shap", "shap_cuda", "cupy", "numba")) -> dict:
    """Python's version and each of ``mods``' (None where it does not import)."""
    out = {"python": platform.python_version()}
    for mod in mods:
        try:
            out[mod] = __import__(mod).__version__
        except Exception:
            out[mod] = None
    return out


def shap_cext(ens, X, interactions=False):
    """shap's own C++ TreeExplainer algorithm on the TreeEnsemble (not XGBoost's short-circuit)."""
    from shap import _cext
    vals = ens._bench_vals if hasattr(ens, "_bench_vals") else None
    if vals is None:
        vals = ens.values.copy()
        for t in range(vals.shape[0]):
            _cext.compute_expectations(ens.children_left[t], ens.children_right[t], ens.node_sample_weight[t],
                                       vals[t])
        ens._bench_vals = vals
    X = np.ascontiguousarray(X, dtype=np.float64)
    n, M = X.shape
    K = vals.shape[2]
    phi = np.zeros((n, M + 1, M + 1, K) if interactions else (n, M + 1, K))
    _cext.dense_tree_shap(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                          ens.threshold_types, vals, ens.node_sample_weight, ens.max_depth, X, np.isnan(X), None,
                          None, None, vals.shape[0], ens.base_offset, phi, 1, 0, interactions)
    return phi
