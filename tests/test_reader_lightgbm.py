"""LightGBM's exact reading of rows and of its model, on both engines (issue #39, classes 2 and 3).

Rows: LightGBM's dense-row reader (``RowPairFunctionFromDenseMatrix``, src/c_api.cpp) keeps a value only where
``|x| > kZeroThreshold`` (the float 1e-35, include/LightGBM/meta.h) or x is NaN; the predictor reads the others as
0.0, on every feature and missing type. Model: split thresholds as LightGBM stores them (``model_to_string``:
``inf`` for a NaN-versus-numbers split, -DBL_MAX next to -inf, values beyond 1e300), which ``dump_model()`` caps at
+-1e300. The models here are trained so that splits provably land at +-kZeroThreshold, +inf, -DBL_MAX and beyond
1e300 (asserted on the model string), and rows sit at and one ulp either side of every threshold.

References are LightGBM's own ``predict(pred_contrib=True)`` / ``predict(raw_score=True)``, brute force over all
feature subsets with LightGBM's own predictions (interventional), and a brute-force path-dependent reference written
here from LightGBM's ``Tree::NumericalDecision`` / ``CategoricalDecision`` (include/LightGBM/tree.h) on the model
string, itself checked against LightGBM's predictions and contributions first.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
import pytest

from hitml import shap_ext
from _differential import brute_force_interventional
from _shapley import exact_shapley

lgb = pytest.importorskip("lightgbm")

KZ = float(np.float32(1e-35))                    # kZeroThreshold = 1.0000000180025095e-35
MAX = float(np.finfo(np.float64).max)
F32_SUB = float(np.finfo(np.float32).smallest_subnormal)
F32_SUB_MAX = float(np.nextafter(np.finfo(np.float32).smallest_normal, np.float32(0)))
F64_SUB_MAX = float(np.nextafter(np.finfo(np.float64).smallest_normal, 0.0))
# values around zero: exact zeros, -0.0, +-kZeroThreshold and its neighbours, +-1e-35 as float64 (below it) and its
# neighbours, float64 and float32 subnormals
TINY = [0.0, -0.0, 5e-324, -5e-324, F64_SUB_MAX, -F64_SUB_MAX, F32_SUB, -F32_SUB, F32_SUB_MAX, -F32_SUB_MAX]
for _z in (KZ, 1e-35):
    TINY += [_z, -_z, float(np.nextafter(_z, 1.0)), float(np.nextafter(_z, 0.0)), -float(np.nextafter(_z, 1.0)),
             -float(np.nextafter(_z, 0.0))]
HUGE = [1e300, 1.5e300, 2e300, -1e300, -1.5e300, np.inf, MAX, -MAX]
# what explained rows hold besides: NaN, -inf, negatives, category-like values (-0.7 reads as category 0, 2.7 as
# 2, 3e9 and inf as no category)
OTHER = [np.nan, -np.inf, -3.0, -1.0, -0.7, 0.5, 1.0, 2.7, 3e9]
POOL = np.asarray(TINY + HUGE + OTHER)
M = 5
CONFIGS = [(seed, ("regression", "binary", "multiclass")[seed % 3], ("nan", "zero", "none")[(seed // 3) % 3],
            seed % 2 == 1) for seed in range(20)]


def close(actual, expected, rtol=1e-9):
    actual, expected = np.asarray(actual, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = max(1.0, float(np.abs(expected).max())) if expected.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=0, atol=rtol * scale)


# -- models --------------------------------------------------------------------------------------------------------
@dataclass
class Fitted:
    booster: lgb.Booster
    X: np.ndarray            # training rows
    K: int
    missing: str
    categorical: bool


def _train(seed: int, objective: str, missing: str, categorical: bool, rounds: int = 8) -> Fitted:
    """Feature 0: {-1, 1} and NaN, NaN carrying the target (a NaN-versus-numbers split, threshold inf, with missing
    type NaN); 1: near-zero values carrying the target (splits at +-kZeroThreshold); 2: values beyond 1e300
    (thresholds beyond 1e300 and -DBL_MAX); 3: -inf carrying the target (threshold -DBL_MAX); 4: categories or
    noise. Missing type NaN (default), Zero (``zero_as_missing``) or None (``use_missing=False``)."""
    rng = np.random.default_rng(seed)
    n = 600
    X = rng.normal(size=(n, M))
    X[:, 0] = rng.choice([-1.0, 1.0], size=n)
    nan0 = rng.random(n) < 0.2
    X[nan0, 0] = np.nan
    tiny = rng.random(n) < 0.4
    X[tiny, 1] = rng.choice(TINY, size=tiny.sum())
    X[:, 2] = np.round(X[:, 2], 1)   # few distinct values: every bin bound is a midpoint (bin.cpp, GreedyFindBin)
    huge = rng.random(n) < 0.4
    X[huge, 2] = rng.choice(HUGE, size=huge.sum())
    X[:, 3] = rng.choice([-np.inf, -2.0, -0.5, 0.5, 3.0], size=n)
    if categorical:
        X[:, 4] = rng.integers(0, 7, size=n).astype(float)
        X[rng.random(n) < 0.05, 4] = np.nan
    y = (4.0 * nan0 + 0.7 * (X[:, 0] > 0) + 3.0 * (np.abs(X[:, 1]) <= KZ) - 1.5 * (X[:, 1] < -KZ)
         + 2.0 * (X[:, 2] >= 1.2e300) + 1.5 * (X[:, 2] <= -1.2e300) - 3.0 * (X[:, 3] == -np.inf)
         + 0.5 * (X[:, 3] > 0) + 0.3 * rng.normal(size=n))
    if categorical:
        y = y + 2.0 * np.isin(X[:, 4], [1, 4, 5])
    params = dict(objective=objective, num_leaves=8, learning_rate=0.3, min_data_in_leaf=5, min_data_in_bin=1,
                  verbose=-1, num_threads=1, seed=seed, deterministic=True)
    if missing == "zero":
        params["zero_as_missing"] = True
    elif missing == "none":
        params["use_missing"] = False
    K = 1
    if objective == "binary":
        y = (y > np.median(y)).astype(float)
    elif objective == "multiclass":
        y = np.digitize(y, np.quantile(y, [1 / 3, 2 / 3])).astype(float)
        params["num_class"] = K = 3
    ds = lgb.Dataset(X, y, categorical_feature=[4] if categorical else "auto")
    return Fitted(lgb.train(params, ds, num_boost_round=rounds), X, K, missing, categorical)


# -- the model as LightGBM stores it, and LightGBM's decisions (the test's own reading) ----------------------------
def _trees(booster: lgb.Booster) -> list[dict[str, np.ndarray]]:
    """Each tree's arrays from ``model_to_string()`` (``Tree::ToString``), parsed here independently of hitml."""
    trees, cur = [], None
    ints = ("split_feature", "decision_type", "left_child", "right_child", "internal_count", "leaf_count",
            "cat_boundaries", "cat_threshold", "num_leaves")
    for line in booster.model_to_string().split("\n"):
        if line.startswith("end of trees"):
            break
        key, _, value = line.partition("=")
        if key == "Tree":
            cur = {}
            trees.append(cur)
        elif cur is not None and key in ints + ("threshold", "leaf_value"):
            cur[key] = np.asarray(value.split(), dtype=np.int64 if key in ints else np.float64)
    return trees


def _numerical_splits(trees) -> list[tuple[int, float, int]]:
    """(feature, threshold, missing type) of every numerical split."""
    out = []
    for tr in trees:
        if tr["num_leaves"][0] <= 1:
            continue
        for f, t, d in zip(tr["split_feature"], tr["threshold"], tr["decision_type"]):
            if not d & 1:
                out.append((int(f), float(t), int(d) >> 2 & 3))
    return out


def _read_row(x: np.ndarray) -> np.ndarray:
    """LightGBM's dense-row reader: values with |x| <= kZeroThreshold are not stored, the predictor reads 0.0."""
    return np.where((np.abs(x) > KZ) | np.isnan(x), x, 0.0)


def _child(tr, node: int, fval: float) -> int:
    """``Tree::Decision``: CategoricalDecision or NumericalDecision (include/LightGBM/tree.h)."""
    d = int(tr["decision_type"][node])
    left, right = int(tr["left_child"][node]), int(tr["right_child"][node])
    if d & 1:
        if np.isnan(fval):
            return right
        # static_cast<int>: truncation; out of int range x86 gives INT_MIN (negative: right)
        c = int(fval) if abs(fval) < 2 ** 31 else -1
        if c < 0:
            return right
        k = int(tr["threshold"][node])
        lo, hi = tr["cat_boundaries"][k], tr["cat_boundaries"][k + 1]
        words = tr["cat_threshold"][lo:hi]
        return left if c // 32 < len(words) and int(words[c // 32]) >> (c % 32) & 1 else right
    missing = d >> 2 & 3
    if np.isnan(fval) and missing != 2:
        fval = 0.0
    if (missing == 1 and -KZ <= fval <= KZ) or (missing == 2 and np.isnan(fval)):
        return left if d & 2 else right
    return left if fval <= tr["threshold"][node] else right


def _expect(tr, x: np.ndarray, S: frozenset, node: int = 0) -> float:
    """E[tree(x) | x_S], path-dependent: the unknown features follow the children's counts (internal_count,
    leaf_count), as LightGBM's own TreeSHAP weighs them (``Tree::TreeSHAP``, data_count)."""
    if tr["num_leaves"][0] <= 1:
        return float(tr["leaf_value"][0])
    if node < 0:
        return float(tr["leaf_value"][~node])
    if int(tr["split_feature"][node]) in S:
        return _expect(tr, x, S, _child(tr, node, x[int(tr["split_feature"][node])]))
    kids = int(tr["left_child"][node]), int(tr["right_child"][node])
    count = [tr["internal_count"][c] if c >= 0 else tr["leaf_count"][~c] for c in kids]
    return sum(w * _expect(tr, x, S, c) for w, c in zip(count, kids)) / sum(count)


def _game(trees, K: int, x: np.ndarray) -> dict[frozenset, np.ndarray]:
    """v(S) per output for every subset S of the M features, on the row as LightGBM reads it."""
    x = _read_row(x)
    v = {}
    for r in range(M + 1):
        for S in itertools.combinations(range(M), r):
            S = frozenset(S)
            out = np.zeros(K)
            for t, tr in enumerate(trees):
                out[t % K] += _expect(tr, x, S)
            v[S] = out
    return v


def _interactions(v: dict[frozenset, np.ndarray], n: int) -> np.ndarray:
    """Shapley interaction values (shap's convention: off-diagonal halves, the diagonal the rest of phi_i), with
    v(empty) at [n, n]: shape (n + 1, n + 1, K)."""
    phi = exact_shapley(v.__getitem__, n)
    out = np.zeros((n + 1, n + 1) + phi.shape[1:])
    for i, j in itertools.permutations(range(n), 2):
        others = [k for k in range(n) if k not in (i, j)]
        for r in range(n - 1):
            w = math.factorial(r) * math.factorial(n - r - 2) / (2 * math.factorial(n - 1))
            for S in itertools.combinations(others, r):
                S = frozenset(S)
                out[i, j] += w * (v[S | {i, j}] - v[S | {i}] - v[S | {j}] + v[S])
    for i in range(n):
        out[i, i] = phi[i] - out[i, :n].sum(0) + out[i, i]
    out[n, n] = v[frozenset()]
    return out


# -- rows --------------------------------------------------------------------------------------------------------
def _rows(fit: Fitted, rng: np.random.Generator, n_random: int = 40) -> np.ndarray:
    """Training rows with pool values swapped in, and one row per numerical threshold t and value
    {t, 1 ulp below, 1 ulp above} at its feature."""
    base = fit.X[rng.choice(len(fit.X), n_random)]
    swap = rng.random(base.shape) < 0.5
    rows = [np.where(swap, rng.choice(POOL, size=base.shape), base)]
    probes = []
    for f, t, _ in sorted(set(_numerical_splits(_trees(fit.booster)))):
        with np.errstate(over="ignore"):   # the neighbours of +-DBL_MAX are +-inf
            around = (t, np.nextafter(t, -np.inf), np.nextafter(t, np.inf))
        for value in around:
            row = fit.X[rng.integers(len(fit.X))].copy()
            row[f] = value
            probes.append(row)
    for value in POOL:   # every pool value on every feature
        row = fit.X[rng.integers(len(fit.X))].copy()
        row[rng.integers(M)] = value
        probes.append(row)
    return np.vstack(rows + [np.asarray(probes)])


def _contrib(fit: Fitted, X, **kw) -> np.ndarray:
    """LightGBM's pred_contrib as (n, M + 1, K), bias last."""
    c = np.asarray(fit.booster.predict(X, pred_contrib=True, **kw))
    return c.reshape(len(c), fit.K, M + 1).transpose(0, 2, 1)


def _as_k(values, K: int) -> np.ndarray:
    values = np.asarray(values, dtype=np.float64)
    return values[..., None] if K == 1 else values


def _raw(fit: Fitted, X, **kw) -> np.ndarray:
    return np.asarray(fit.booster.predict(X, raw_score=True, **kw), dtype=np.float64).reshape(len(X), fit.K)


_FITS: dict[int, Fitted] = {}


def _fit(seed: int, objective: str, missing: str, categorical: bool) -> Fitted:
    if seed not in _FITS:
        _FITS[seed] = _train(seed, objective, missing, categorical)
    return _FITS[seed]


# -- tests -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed,objective,missing,categorical", CONFIGS)
def test_models_split_where_lightgbm_reads_differently(seed, objective, missing, categorical):
    """The recipe provably produces the splits the other tests need (else they would silently stop covering
    them): +-kZeroThreshold, -DBL_MAX, finite thresholds beyond 1e300 (all capped by dump_model), +inf with
    missing type NaN, Zero-type splits with zero_as_missing, only None with use_missing=False, categories."""
    fit = _fit(seed, objective, missing, categorical)
    splits = _numerical_splits(_trees(fit.booster))
    thresholds = {t for _, t, _ in splits}
    types = {m for _, _, m in splits}
    assert KZ in thresholds and -KZ in thresholds
    assert -MAX in thresholds
    assert any(1e300 < abs(t) < np.inf for t in thresholds)
    if missing == "nan":
        assert np.inf in thresholds and 2 in types
    assert types <= {"nan": {0, 2}, "zero": {1}, "none": {0}}[missing]
    if missing == "zero":
        assert types == {1}
    cats = [d & 1 for tr in _trees(fit.booster) for d in tr.get("decision_type", [])]
    assert any(cats) == categorical
    # dump_model, which shap parses, holds the same thresholds below 1e300 (17 significant digits: exact) and caps
    # the others (Common::AvoidInf), so these models do exercise the model-string read
    dumped = []

    def walk(node):
        if "split_index" in node:
            if node["decision_type"] == "<=":
                dumped.append(node["threshold"])
            walk(node["left_child"])
            walk(node["right_child"])
    for tree in fit.booster.dump_model()["tree_info"]:
        walk(tree["tree_structure"])
    stored = sorted(t for _, t, _ in splits)
    capped = sorted(float(np.clip(t, -1e300, 1e300)) for t in stored)
    assert sorted(dumped) == capped and capped != stored


@pytest.mark.parametrize("seed,objective,missing,categorical", CONFIGS)
def test_hostile_rows_match_lightgbm(seed, objective, missing, categorical):
    fit = _fit(seed, objective, missing, categorical)
    rng = np.random.default_rng(1000 + seed)
    X = _rows(fit, rng)
    X_before = X.copy()
    K = fit.K
    native = _contrib(fit, X)
    ex = shap_ext.TreeExplainer(fit.booster, backend="cpu")
    sv = _as_k(ex.shap_values(X), K)      # additivity checked against LightGBM's raw_score inside
    np.testing.assert_array_equal(X, X_before)   # the caller's rows are not rewritten
    close(sv, native[:, :-1, :])
    close(np.ravel(ex.expected_value), native[0, -1, :])
    close(sv.sum(1) + np.ravel(ex.expected_value), _raw(fit, X))

    # the same rows as float32 (LightGBM reads a float32 array as it is, widened) and as a DataFrame
    with np.errstate(over="ignore"):   # values beyond float32's range become +-inf, as the user's cast makes them
        X32 = X.astype(np.float32)
    close(_as_k(ex.shap_values(X32), K), _contrib(fit, X32)[:, :-1, :])
    df = pd.DataFrame(X, columns=fit.booster.feature_name())
    close(_as_k(ex.shap_values(df), K), native[:, :-1, :])

    # interactions against brute force with LightGBM's own decisions, validated first against LightGBM itself
    trees = _trees(fit.booster)
    pick = np.concatenate([np.arange(8), rng.choice(np.arange(8, len(X)), 16, replace=False)])
    inter = _as_k(ex.shap_interaction_values(X[pick]), K) if K == 1 else ex.shap_interaction_values(X[pick])
    if K == 1:
        inter = inter.reshape(len(pick), M, M, 1)
    for r, i in enumerate(pick):
        v = _game(trees, K, X[i])
        close(v[frozenset(range(M))], _raw(fit, X[i:i + 1])[0])
        ref = _interactions(v, M)
        close(ref[:M, :M].sum(1), native[i, :-1, :])   # the reference's Shapley values are LightGBM's
        close(inter[r], ref[:M, :M])


@pytest.mark.parametrize("seed,objective,missing,categorical", CONFIGS)
def test_interventional_hostile_rows_and_background(seed, objective, missing, categorical):
    """Interventional values and interactions against brute force over all subsets on LightGBM's own raw_score of
    the hybrid rows (x_S, b_rest); the background holds the hostile values too (it is read as rows are)."""
    fit = _fit(seed, objective, missing, categorical)
    rng = np.random.default_rng(2000 + seed)
    X = _rows(fit, rng, n_random=8)
    X = X[np.concatenate([np.arange(8), rng.choice(np.arange(8, len(X)), 8, replace=False)])]
    bg = np.vstack([fit.X[rng.choice(len(fit.X), 3)], np.where(rng.random((4, M)) < 0.6,
                                                             rng.choice(POOL, size=(4, M)), fit.X[:4])])
    bg[0, :] = [KZ, -KZ, -0.0, 5e-324, F32_SUB]
    bg[1, :] = [np.inf, -np.inf, 1.5e300, -MAX, np.nan]
    K = fit.K
    ex = shap_ext.TreeExplainer(fit.booster, bg, feature_perturbation="interventional", backend="cpu")
    phi_ref, e_ref = brute_force_interventional(lambda A: _raw(fit, A), X, bg)
    close(_as_k(ex.shap_values(X), K), phi_ref)
    close(np.ravel(ex.expected_value), e_ref)
    framed = shap_ext.TreeExplainer(fit.booster, pd.DataFrame(bg, columns=fit.booster.feature_name()),
                                    feature_perturbation="interventional", backend="cpu")
    close(_as_k(framed.shap_values(X), K), phi_ref)
    # interactions of the averaged game v(S) = mean_b f(x_S, b_rest), from the same LightGBM predictions
    subsets = list(itertools.product([0, 1], repeat=M))
    hybrid = np.array([[np.where(s, x, b) for s in subsets] for x in X for b in bg]).reshape(-1, M)
    v_all = _raw(fit, hybrid).reshape(len(X), len(bg), len(subsets), K).mean(1)
    inter = ex.shap_interaction_values(X)
    inter = inter[..., None] if K == 1 else inter
    for r in range(len(X)):
        v = {frozenset(j for j in range(M) if s[j]): v_all[r, k] for k, s in enumerate(subsets)}
        close(inter[r], _interactions(v, M)[:M, :M])


@pytest.mark.parametrize("seed", [2, 9, 13, 17])
def test_tree_limit_loaded_booster_and_best_iteration(seed):
    """``tree_limit`` (LightGBM's num_iteration), a Booster loaded with ``model_str`` and one that stopped early
    (``dump_model()`` and ``model_to_string()`` both stop at best_iteration) read their thresholds as stored."""
    _, objective, missing, categorical = CONFIGS[seed]
    fit = _fit(seed, objective, missing, categorical)
    X = _rows(fit, np.random.default_rng(3000 + seed))
    K = fit.K
    ex = shap_ext.TreeExplainer(fit.booster, backend="cpu")
    for it in (1, 3, 5):
        close(_as_k(ex.shap_values(X, tree_limit=it * K), K), _contrib(fit, X, num_iteration=it)[:, :-1, :])
    loaded = lgb.Booster(model_str=fit.booster.model_to_string())
    close(_as_k(shap_ext.TreeExplainer(loaded, backend="cpu").shap_values(X), K), _contrib(fit, X)[:, :-1, :])
    loaded.best_iteration = 4
    ex4 = shap_ext.TreeExplainer(loaded, backend="cpu")
    assert ex4.model.values.shape[0] == 4 * K
    close(_as_k(ex4.shap_values(X), K), _contrib(fit, X, num_iteration=4)[:, :-1, :])


def test_each_model_form_is_read_once(monkeypatch):
    """shap parses ``dump_model()`` once; hitml reads the thresholds from one ``model_to_string()`` call (and no
    second dump) for a model without category features."""
    fit = _fit(*CONFIGS[0])
    calls = {"dump_model": 0, "model_to_string": 0}
    for name in calls:
        original = getattr(lgb.Booster, name)

        def counted(self, *a, _name=name, _original=original, **kw):
            calls[_name] += 1
            return _original(self, *a, **kw)
        monkeypatch.setattr(lgb.Booster, name, counted)
    shap_ext.TreeExplainer(fit.booster, backend="cpu")
    assert calls == {"dump_model": 1, "model_to_string": 1}


def test_integer_arrays_are_read_as_float32():
    """``lightgbm.basic._np2d_to_np1d`` casts arrays of dtypes other than float32/float64 (and lists of ints) to
    float32: 16777219 reads as 16777220, across a split at 16777219.5."""
    rng = np.random.default_rng(0)
    X = rng.integers(16777200, 16777240, size=(500, 2)).astype(np.float64)
    y = (X[:, 0] > 16777219.5) + 0.01 * rng.normal(size=500)
    booster = lgb.train(dict(objective="regression", verbose=-1, min_data_in_leaf=2, min_data_in_bin=1,
                             num_leaves=4, num_threads=1), lgb.Dataset(X, y), 3)
    assert 16777219.5 < min(t for _, t, _ in _numerical_splits(_trees(booster)) if t > 16777219) < 16777220
    Xi = np.array([[16777219, 0], [16777217, 5], [16777221, 16777219]], dtype=np.int64)
    ex = shap_ext.TreeExplainer(booster, backend="cpu")
    for rows in (Xi, Xi.tolist(), Xi.astype(np.uint32)):
        native = np.asarray(booster.predict(rows, pred_contrib=True))
        close(ex.shap_values(rows), native[:, :-1])
    assert not np.allclose(booster.predict(Xi, pred_contrib=True), booster.predict(Xi.astype(float), pred_contrib=True))


@pytest.mark.gpu
@pytest.mark.parametrize("seed", [0, 5, 11, 17])
def test_gpu_reads_hostile_rows_as_cpu(seed):
    """backend="gpu" on NumPy and CuPy rows (missing_rules on CuPy arrays) gives the CPU engine's values,
    interactions and interventional values on the hostile rows and background."""
    import cupy as cp

    fit = _fit(*CONFIGS[seed])
    rng = np.random.default_rng(4000 + seed)
    X = _rows(fit, rng)
    bg = np.vstack([fit.X[:3], [[KZ, -KZ, -0.0, 5e-324, F32_SUB], [np.inf, -np.inf, 1.5e300, -MAX, np.nan]]])
    for data in (None, bg):
        kw = {} if data is None else dict(feature_perturbation="interventional")
        cpu = shap_ext.TreeExplainer(fit.booster, data, backend="cpu", **kw)
        gpu = shap_ext.TreeExplainer(fit.booster, data, backend="gpu", **kw)
        ref = cpu.shap_values(X)
        ref_inter = cpu.shap_interaction_values(X[:32])
        close(gpu.shap_values(X), ref)
        close(cp.asnumpy(gpu.shap_values(cp.asarray(X))), ref)
        close(gpu.shap_interaction_values(X[:32]), ref_inter)
        close(cp.asnumpy(gpu.shap_interaction_values(cp.asarray(X[:32]))), ref_inter)
        close(np.ravel(gpu.expected_value), np.ravel(cpu.expected_value))
        if data is None:
            close(_as_k(ref, fit.K), _contrib(fit, X)[:, :-1, :])


def test_object_arrays_read_as_each_interface_reads_them():
    """A lightgbm.Booster casts an object array to float32 (lightgbm.basic._np2d_to_np1d); LGBMRegressor validates
    it to float64 first (scikit-learn's check_array). The split lies between 16777219 and its float32, 16777220."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 2))
    X[:200, 0] = 16777218.0
    X[200:, 0] = 16777220.0
    y = (X[:, 0] > 16777219.0) * 3.0 + X[:, 1]
    model = lgb.LGBMRegressor(n_estimators=3, num_leaves=4, min_child_samples=5, verbose=-1).fit(X, y)
    rows = np.array([[16777219.0, 0.5], [16777217.0, -0.5]], dtype=object)
    for m in (model, model.booster_):
        ref = m.predict(rows, pred_contrib=True)
        phi = shap_ext.TreeExplainer(m, backend="cpu").shap_values(rows)
        np.testing.assert_allclose(phi, ref[:, :-1], rtol=1e-9, atol=1e-12)
    assert abs(model.predict(rows)[0] - model.booster_.predict(rows)[0]) > 0.5  # the two readings part
