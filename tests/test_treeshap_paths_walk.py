"""The two path walks: Numba's depth-first walk (``_path_walk.walk``) and NumPy's level-by-level one
(``paths._walk_numpy``, taken by a process that has not imported Numba, such as a GPU user's, for ensembles of at
most ``paths.NUMPY_WALK_NODES`` dense nodes). Each is written from the rules in ``extract_paths``'s docstring in its
own way; they must give the same arrays on hostile trees (categories, NaN and infinite thresholds, zero, NaN,
infinite and subnormal covers, odd default children, paths deeper than 64 levels) and on the trees of real models.
The GPU interventional build then imports no Numba at all."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from hitml.kernels.treeshap import _path_walk, paths

ROOT = Path(__file__).resolve().parents[1]
FIELDS = ("path_ptr", "feature", "lower", "upper", "missing_ok", "cat_ptr", "cat_nwords", "cat_words",
          "cat_outside_ok", "zero_fraction", "leaf_node", "tree")


def _assert_same(a, b):
    """Equal arrays: dtype, shape and bytes, NaN matching NaN (which NaN a product of NaNs keeps is the compiler's
    choice, not the rule's)."""
    assert b is not None
    for name, x, y in zip(FIELDS, a, b):
        assert x.dtype == y.dtype and x.shape == y.shape, (name, x.dtype, y.dtype, x.shape, y.shape)
        if x.dtype.kind == "f":
            np.testing.assert_array_equal(np.isnan(x), np.isnan(y), err_msg=name)
            x, y = np.where(np.isnan(x), 0.0, x), np.where(np.isnan(y), 0.0, y)
        assert x.tobytes() == y.tobytes(), (name, x[:20], y[:20])


def _random_forest(rng, n_trees, max_depth, n_features):
    """Dense node arrays in ``_walk``'s types, built depth-first with hostile values; children are placed at
    shuffled slots, so node order differs from depth-first order."""
    N = 2 ** (max_depth + 1)
    cl, cr, cd, ft = (np.full((n_trees, N), -1, np.int64) for _ in range(4))
    th, cov = np.zeros((n_trees, N)), np.zeros((n_trees, N))
    is_cat = np.zeros((n_trees, N), bool)
    ncp, ncn = np.full((n_trees, N), -1, np.int64), np.zeros((n_trees, N), np.int64)
    words: list[int] = []
    odd = [0.0, np.nan, 1e-310, np.inf, -np.inf, 5e-324]
    for t in range(n_trees):
        nxt, stack = 1, [(0, 0)]
        cov[t, 0] = rng.choice(odd) if rng.random() < 0.1 else rng.uniform(1, 100)
        while stack:
            n, d = stack.pop()
            if d >= max_depth or rng.random() > 0.8:
                continue
            a, b = (nxt, nxt + 1) if rng.random() < 0.7 else (nxt + 1, nxt)
            nxt += 2
            cl[t, n], cr[t, n] = a, b
            cd[t, n] = rng.choice([a, b, a, b, n, -1])        # a default child that is neither child: NaN reaches none
            ft[t, n] = rng.integers(0, n_features)
            r = rng.random()
            th[t, n] = (np.nan if r < 0.05 else -np.inf if r < 0.1 else np.inf if r < 0.15
                        else rng.choice([rng.normal(), 5e-324, -0.0, 0.0, 1e-40]))
            if rng.random() < 0.2:
                is_cat[t, n] = True
                k = int(rng.integers(0, 4))
                ncp[t, n], ncn[t, n] = len(words), k
                words.extend(int(w) for w in rng.integers(0, 2 ** 32, size=k, dtype=np.uint64))
            cov[t, a] = cov[t, n] * rng.uniform(0, 1) if rng.random() > 0.1 else rng.choice(odd)
            cov[t, b] = rng.uniform(0, 1) * abs(cov[t, n]) if rng.random() > 0.1 else rng.choice(odd)
            stack += [(a, d + 1), (b, d + 1)]
    return cl, cr, cd, ft, th, cov, is_cat, ncp, ncn, np.array(words, np.uint32)


@pytest.mark.parametrize("seed", range(4))
def test_numpy_walk_equals_numba_walk_on_hostile_forests(seed):
    rng = np.random.default_rng(seed)
    with np.errstate(all="ignore"):
        for _ in range(60):
            arrays = _random_forest(rng, int(rng.integers(1, 6)), int(rng.integers(0, 9)), int(rng.integers(1, 6)))
            _assert_same(_path_walk.walk(*arrays), paths._walk_numpy(*arrays))


def _chain(rng, depth, n_features, n_trees=3):
    """Trees that are one long path with a leaf off every split: depth-first ranks need more than one 64-bit
    word past 64 levels."""
    N = 2 * depth + 1
    cl, cr = np.full((n_trees, N), -1, np.int64), np.full((n_trees, N), -1, np.int64)
    ft, th, cov = np.zeros((n_trees, N), np.int64), np.zeros((n_trees, N)), np.ones((n_trees, N))
    for t in range(n_trees):
        cur = 0
        for d in range(depth):
            a, b = 2 * d + 1, 2 * d + 2
            cl[t, cur], cr[t, cur] = a, b
            ft[t, cur], th[t, cur] = rng.integers(0, n_features), rng.normal()
            cov[t, a], cov[t, b] = rng.uniform(0, 1, 2)
            cur = a if rng.random() < 0.5 else b
    no = np.zeros((n_trees, N), np.int64)
    return cl, cr, cl.copy(), ft, th, cov, np.zeros((n_trees, N), bool), no - 1, no, np.zeros(0, np.uint32)


@pytest.mark.parametrize("depth", [1, 63, 64, 65, 130])
def test_numpy_walk_on_paths_past_64_levels(depth):
    arrays = _chain(np.random.default_rng(depth), depth, 7)
    _assert_same(_path_walk.walk(*arrays), paths._walk_numpy(*arrays))


def _one_tree(cl, cr):
    cl, cr = np.array([cl], np.int64), np.array([cr], np.int64)
    z = np.zeros(cl.shape, np.int64)
    return cl, cr, cl.copy(), z, np.zeros(cl.shape), np.ones(cl.shape), z.astype(bool), z, z, np.zeros(0, np.uint32)


def test_a_cycle_is_left_to_the_numba_walk_which_names_it():
    arrays = _one_tree([1, 0, -1], [2, 2, -1])           # node 1's left child is the root
    assert paths._walk_numpy(*arrays) is None
    with pytest.raises(ValueError, match="cycle"):
        paths.extract_paths(arrays[0], arrays[1], arrays[2], arrays[3], arrays[4], np.zeros((1, 3, 1)), arrays[5],
                            0.0, n_features=1)


def test_a_node_with_two_parents_is_walked_twice_by_both():
    arrays = _one_tree([1, 2, -1], [2, 2, -1])
    _assert_same(_path_walk.walk(*arrays), paths._walk_numpy(*arrays))


def _model_arrays(explainer):
    """``_walk``'s arguments for the trees of a hitml explainer, as ``extract_paths`` makes them."""
    ens = explainer.model
    cl, cr = explainer._cats.children(ens.children_left, ens.children_right)
    c, r, d, f, th, cov, _v = paths.tree_arrays(cl, cr, ens.children_default, ens.features, ens.thresholds,
                                                ens.values, ens.node_sample_weight)
    if explainer._cats:
        is_cat, ncp, ncn, words = explainer._cats.engine_arrays()
        cats = (np.asarray(is_cat, bool), np.asarray(ncp, np.int64), np.asarray(ncn, np.int64),
                np.asarray(words, np.uint32))
    else:
        z = np.zeros(c.shape, np.int64)
        cats = (z.astype(bool), z, z, np.zeros(0, np.uint32))
    return (c, r, d, f, th, cov) + cats


def test_numpy_walk_equals_numba_walk_on_real_models():
    shap = pytest.importorskip("shap")
    xgb = pytest.importorskip("xgboost")
    lgb = pytest.importorskip("lightgbm")
    import pandas as pd
    from sklearn.ensemble import ExtraTreesClassifier

    import hitml.shap_ext  # noqa: F401 -- registers the backend

    rng = np.random.default_rng(0)
    X = rng.standard_normal((3000, 6)).astype(np.float32)
    X[rng.random(X.shape) < 0.1] = np.nan
    y = np.nan_to_num(X[:, 0]) + np.nan_to_num(X[:, 1]) * np.nan_to_num(X[:, 2]) + rng.normal(size=3000)
    frame = pd.DataFrame(X, columns=list("abcdef"))
    frame["g"] = pd.Categorical(rng.integers(0, 40, 3000))
    models = [
        xgb.XGBRegressor(n_estimators=30, max_depth=6, n_jobs=1).fit(X, y),
        xgb.XGBRegressor(n_estimators=20, max_depth=5, enable_categorical=True, tree_method="hist",
                         max_cat_to_onehot=1, n_jobs=1).fit(frame, y + frame["g"].cat.codes % 3),
        lgb.LGBMRegressor(n_estimators=30, num_leaves=63, verbose=-1, n_jobs=1).fit(frame, y + frame["g"].cat.codes % 3),
        ExtraTreesClassifier(n_estimators=5, random_state=0, n_jobs=1).fit(np.nan_to_num(X), y > 0),
    ]
    for m in models:
        arrays = _model_arrays(shap.TreeExplainer(m, backend="cpu"))
        _assert_same(_path_walk.walk(*arrays), paths._walk_numpy(*arrays))


_NO_NUMBA = r"""
import json, sys
import numpy as np
from hitml.kernels.treeshap import extract_paths
import hitml.kernels.treeshap.gpu, hitml.kernels.treeshap._gpu_interventional, hitml.kernels.treeshap._gpu_patterns
rng = np.random.default_rng(1)
T, N = 40, 63
cl = np.full((T, N), -1); cr = np.full((T, N), -1)
for t in range(T):
    for n in range(31):
        cl[t, n], cr[t, n] = 2 * n + 1, 2 * n + 2
ps = extract_paths(cl, cr, cl, rng.integers(0, 5, (T, N)), rng.normal(size=(T, N)), rng.normal(size=(T, N, 1)),
                   rng.uniform(1, 2, (T, N)), 0.0, n_features=5)
print(json.dumps({"numba": "numba" in sys.modules, "paths": ps.n_paths}))
"""


def test_path_extraction_and_the_gpu_engine_modules_import_no_numba():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT / "tests"),
                                                                     os.environ.get("PYTHONPATH")])))
    r = subprocess.run([sys.executable, "-c", _NO_NUMBA], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       env=env, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"numba": False, "paths": 40 * 32}


_GPU_BUILD = r"""
import importlib.abc, json, sys, traceback
by = []
class Watch(importlib.abc.MetaPathFinder):     # where Numba is first imported, if it is
    def find_spec(self, name, path=None, target=None):
        if name == "numba" and not by:
            by.append([f"{f.filename}:{f.lineno}" for f in traceback.extract_stack()][-8:])
sys.meta_path.insert(0, Watch())
import numpy as np, xgboost as xgb, shap
import hitml.shap_ext
rng = np.random.default_rng(2)
X = rng.standard_normal((4000, 12)).astype(np.float32)
y = X[:, 0] + X[:, 1] * X[:, 2] + rng.normal(size=4000)
model = xgb.XGBRegressor(n_estimators=40, max_depth=6, n_jobs=1).fit(X, y)
bg = X[:3000]
ex = shap.TreeExplainer(model, data=shap.maskers.Independent(bg, max_samples=len(bg)),
                        feature_perturbation="interventional", backend="gpu")
mean = float(model.predict(bg, output_margin=True).astype(np.float64).mean())
print(json.dumps({"numba": by, "expected": float(ex.expected_value), "mean": mean}))
"""


@pytest.mark.gpu
def test_the_gpu_interventional_build_imports_no_numba():
    """A fresh process builds a GPU interventional explainer and ends before any call: it imports no Numba, its
    expected value is XGBoost's mean margin, and it exits cleanly (the call's kernels, still loading in their
    thread when the script ends, are waited for at exit instead of aborting the process)."""
    pytest.importorskip("xgboost")
    pytest.importorskip("shap")
    r = subprocess.run([sys.executable, "-c", _GPU_BUILD], capture_output=True, text=True, timeout=600, cwd=ROOT,
                       check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert not got["numba"], f"the GPU build imported Numba: {got['numba']}"
    assert got["expected"] == pytest.approx(got["mean"], rel=1e-6, abs=1e-6)   # XGBoost's own mean margin
