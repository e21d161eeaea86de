"""XGBoost category features: a frame's category columns are re-coded by label against the categories stored in the
model, as XGBoost's own predict re-codes them, whatever optional packages are installed (hitml issue #39, class 1:
without pyarrow the stored categories were not read and codes were taken as they are, silently wrong).

References are XGBoost's own ``predict(DMatrix(X, enable_categorical=True), pred_contribs=True / output_margin=True)``
and, where pyarrow is installed, XGBoost's own export of the stored categories (``Booster.get_categories``)."""
from __future__ import annotations

import json
import sys

import numpy as np
import pandas as pd
import pytest

from hitml import shap_ext
from hitml.shap_ext._inputs import InputReader

xgb = pytest.importorskip("xgboost")


def ours(model, **kw):
    return shap_ext.TreeExplainer(model, backend="cpu", **kw)


def booster_of(model):
    return model.get_booster() if hasattr(model, "get_booster") else model


def native(model, X):
    """XGBoost's own contributions ``(n, M)`` (``(n, M, K)`` for K outputs, shap's layout) and margins."""
    b = booster_of(model)
    contribs = b.predict(xgb.DMatrix(X, enable_categorical=True), pred_contribs=True)
    margin = b.predict(xgb.DMatrix(X, enable_categorical=True), output_margin=True)
    phi = contribs[..., :-1]
    if phi.ndim == 3:
        phi = np.moveaxis(phi, 1, 2)
    return phi, margin


def check_against_xgboost(model, X, atol=2e-5):
    ref, margin = native(model, X)
    ex = ours(model)
    phi = np.asarray(ex.shap_values(X, check_additivity=False))
    scale = max(1.0, float(np.abs(ref).max()))
    np.testing.assert_allclose(phi, ref, rtol=0, atol=atol * scale)
    total = phi.sum(1) + np.asarray(ex.expected_value)
    np.testing.assert_allclose(total, margin.reshape(total.shape), rtol=0, atol=atol * max(1.0, np.abs(margin).max()))
    return phi


# --- the issue's example --------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def issue_model():
    rng = np.random.default_rng(0)
    n = 400
    df = pd.DataFrame({"a": rng.normal(size=n), "c": pd.Categorical(rng.choice(list("abcd"), n)),
                       "b": rng.normal(size=n)})
    y = (df.a + (df.c == "b") * 2 - (df.c == "d") * 1.5).to_numpy() + 0.1 * rng.normal(size=n)
    model = xgb.XGBRegressor(n_estimators=10, enable_categorical=True, tree_method="hist").fit(df, y)
    # the explained frame's categories are inferred from its own rows: b, c, d get the codes 0, 1, 2
    X = pd.DataFrame({"a": [0.1, 0.2, 0.3, 0.4], "c": pd.Categorical(["d", "b", "d", "c"]), "b": [0.0, 0.1, 0, 0]})
    return model, X


def test_issue_example(issue_model):
    model, X = issue_model
    phi = check_against_xgboost(model, X)
    ref, _ = native(model, X)
    ex = ours(model)
    np.testing.assert_allclose(ex(X).values, ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))
    np.testing.assert_allclose(ex.shap_values(X.iloc[1]), ref[1], rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))
    # the codes as they are (what the explainer computed without pyarrow) are far off: the test can fail
    as_codes = X.assign(c=pd.Categorical.from_codes(X.c.cat.codes, categories=list("abcd")))
    assert np.abs(native(model, as_codes)[0] - phi).max() > 0.5


def hide_pyarrow(monkeypatch):
    """pyarrow as if not installed: ``import pyarrow`` raises ImportError and XGBoost finds no pyarrow."""
    import xgboost.compat
    import xgboost.core
    import xgboost.data

    for mod in list(sys.modules):
        if mod == "pyarrow" or mod.startswith("pyarrow."):
            monkeypatch.delitem(sys.modules, mod)
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    for mod in (xgboost.compat, xgboost.core, xgboost.data):
        if hasattr(mod, "is_pyarrow_available"):
            monkeypatch.setattr(mod, "is_pyarrow_available", lambda: False)


def test_values_do_not_depend_on_pyarrow(issue_model, monkeypatch):
    model, X = issue_model
    with_env = np.asarray(ours(model).shap_values(X, check_additivity=False))
    row_env = np.asarray(ours(model).shap_values(X.iloc[2], check_additivity=False))
    with monkeypatch.context() as m:
        hide_pyarrow(m)
        with pytest.raises(ImportError):
            import pyarrow  # noqa: F401 - the simulation holds: pyarrow cannot be imported
        with pytest.raises(ImportError):  # the route the explainer took before (issue #39, class 1) needs pyarrow
            booster_of(model).get_categories(export_to_arrow=True)
        without = np.asarray(ours(model).shap_values(X, check_additivity=False))
        row_without = np.asarray(ours(model).shap_values(X.iloc[2], check_additivity=False))
        ref, _ = native(model, X)
    assert with_env.tobytes() == without.tobytes()
    assert row_env.tobytes() == row_without.tobytes()
    np.testing.assert_allclose(without, ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))


# --- randomised variants ----------------------------------------------------------------------------------------------

INT_DTYPES = [np.int8, np.uint8, np.int16, np.uint16, np.int32, np.uint32, np.int64]
WORDS = ["a", "b", "zz", "é", "日本", "x y", "", "0", "1.5", "NaNish", "ß\u00e4", "-"]


def random_labels(rng, kind, k):
    if kind == "str":
        return list(rng.choice(WORDS, size=k, replace=False))
    dtype = INT_DTYPES[rng.integers(len(INT_DTYPES))]
    lo = 0 if np.issubdtype(dtype, np.unsignedinteger) else -100
    return np.asarray(rng.choice(np.arange(lo, 100), size=k, replace=False), dtype=dtype)


def random_case(seed):
    """A model on 1-3 category columns (string or integer labels, categories in a random order) among numeric ones,
    and a frame to explain whose categories are inferred from its own rows, reordered, or a subset, with NaNs."""
    rng = np.random.default_rng(seed)
    n = 300
    n_cat = int(rng.integers(1, 4))
    cols, y = {}, np.zeros(n)
    labels = {}
    for j in range(n_cat):
        kind = ["str", "int"][int(rng.integers(2))]
        lab = random_labels(rng, kind, int(rng.integers(2, 9)))
        order = rng.permutation(len(lab))  # the training frame's category order: not sorted
        cats = pd.Index(lab[order] if isinstance(lab, np.ndarray) else [lab[i] for i in order])
        codes = rng.integers(0, len(cats), n)
        codes[rng.random(n) < 0.05] = -1  # missing in training
        cols[f"c{j}"] = pd.Categorical.from_codes(codes, categories=cats)
        effect = rng.normal(size=len(cats)) * 2
        y += np.where(codes >= 0, effect[codes], 0.5)
        labels[f"c{j}"] = cats
    for j in range(int(rng.integers(1, 3))):
        x = rng.normal(size=n)
        cols[f"x{j}"] = x
        y += x
    names = list(cols)
    rng.shuffle(names)
    df = pd.DataFrame({k: cols[k] for k in names})
    y += 0.1 * rng.normal(size=n)
    params = dict(n_estimators=int(rng.integers(3, 15)), max_depth=int(rng.integers(2, 6)), enable_categorical=True,
                  tree_method="hist", max_cat_to_onehot=int(rng.choice([1, 4, 64])), n_jobs=1)
    task = rng.choice(["reg", "bin", "multi"])
    if task == "reg":
        model = xgb.XGBRegressor(**params).fit(df, y)
    elif task == "bin":
        model = xgb.XGBClassifier(**params).fit(df, (y > np.median(y)).astype(int))
    else:
        model = xgb.XGBClassifier(**params).fit(df, np.digitize(y, np.quantile(y, [0.33, 0.66])))

    m = 40
    X = {}
    for name in names:
        if name not in labels:
            X[name] = rng.normal(size=m)
            continue
        cats = labels[name]
        values = cats[rng.integers(0, len(cats), m)].to_numpy()
        nan = rng.random(m) < 0.15
        how = rng.choice(["inferred", "reordered", "subset"])
        if how == "inferred":  # the categories pandas infers from these rows
            own = pd.Index(values).unique().sort_values()
        elif how == "reordered":
            own = cats[rng.permutation(len(cats))]
        else:  # a subset: labels outside it become NaN
            own = cats[rng.permutation(len(cats))[: max(1, len(cats) - 1)]]
        codes = own.get_indexer(values)
        codes[nan] = -1
        X[name] = pd.Categorical.from_codes(codes, categories=own)
    return model, pd.DataFrame(X), labels


@pytest.mark.parametrize("seed", range(16))
def test_random_frames_match_xgboost(seed):
    model, X, _ = random_case(seed)
    check_against_xgboost(model, X)


@pytest.mark.parametrize("seed", range(6))
def test_random_rows_match_xgboost(seed):
    model, X, _ = random_case(100 + seed)
    ref, _ = native(model, X)
    ex = ours(model)
    for i in (0, 7):  # one row of mixed labels (df.iloc[i]): categories rebuilt from the model's, with their type
        np.testing.assert_allclose(ex.shap_values(X.iloc[i], check_additivity=False), ref[i], rtol=0,
                                   atol=2e-5 * max(1.0, np.abs(ref).max()))


@pytest.mark.parametrize("seed", range(4))
def test_random_frames_match_xgboost_without_pyarrow(seed, monkeypatch):
    model, X, _ = random_case(200 + seed)
    before = np.asarray(ours(model).shap_values(X, check_additivity=False))
    hide_pyarrow(monkeypatch)
    after = check_against_xgboost(model, X)
    assert before.tobytes() == after.tobytes()


@pytest.mark.parametrize("seed", range(6))
def test_stored_categories_equal_xgboost_export(seed):
    """The categories read from the model JSON are XGBoost's own export (labels, order and index type)."""
    pytest.importorskip("pyarrow", reason="XGBoost exports its stored categories through pyarrow")
    model, _, labels = random_case(300 + seed)
    booster = booster_of(model)
    exported = booster.get_categories(export_to_arrow=True).to_arrow()
    got = InputReader(model).stored_categories()
    assert sorted(got) == [j for j, (_, arr) in enumerate(exported) if arr is not None]
    for j, (name, arr) in enumerate(exported):
        if arr is None:
            continue
        assert list(got[j]) == arr.to_pylist() == list(labels[name])
        if got[j].dtype.kind in "iu":
            assert got[j].dtype == np.dtype(arr.type.to_pandas_dtype()) == labels[name].dtype


def test_unseen_categories_raise_xgboosts_error(issue_model):
    model, X = issue_model
    unseen = X.assign(c=pd.Categorical(["d", "z", "d", "c"]))
    with pytest.raises(xgb.core.XGBoostError):
        booster_of(model).predict(xgb.DMatrix(unseen, enable_categorical=True))
    with pytest.raises(xgb.core.XGBoostError):
        ours(model).shap_values(unseen)


def test_bytes_labels_compare_as_utf8():
    """Labels given as bytes (XGBoost accepts them) match the stored UTF-8 bytes, even bytes that are not UTF-8."""
    rng = np.random.default_rng(5)
    n = 300
    cats = np.array([b"a", b"b\xff", "é".encode(), b""], dtype=object)
    df = pd.DataFrame({"s": pd.Categorical(rng.choice(cats, n)), "x": rng.normal(size=n)})
    y = rng.normal(size=n) + (df.s == b"b\xff") * 2 + (df.s == "é".encode())
    model = xgb.XGBRegressor(n_estimators=6, enable_categorical=True, max_cat_to_onehot=1).fit(df, y)
    # the frame's own categories (no b""): every code differs from the model's
    X = pd.DataFrame({"s": pd.Categorical([b"b\xff", "é".encode(), b"a", b"a", None]), "x": [0.0, 1, 2, 3, 4]})
    check_against_xgboost(model, X)


@pytest.mark.parametrize("booster", ["dart", "gbtree"])
def test_learning_api_and_dart(booster):
    """A Booster from xgboost.train (dart stores its trees under another JSON layout in older XGBoost)."""
    model, X, _ = random_case(400)
    df = X.copy()
    rng = np.random.default_rng(1)
    y = rng.normal(size=len(df))
    params = {"booster": booster, "tree_method": "hist", "max_depth": 3, "rate_drop": 0.3}
    bst = xgb.train(params, xgb.DMatrix(df, y, enable_categorical=True), num_boost_round=8)
    for c in X.columns:  # the same labels, the categories in the reverse order: other codes
        if isinstance(X[c].dtype, pd.CategoricalDtype):
            X[c] = X[c].cat.reorder_categories(X[c].cat.categories[::-1])
    check_against_xgboost(bst, X)


def test_model_without_stored_categories_reads_codes():
    """A model that stores no categories (as XGBoost < 3.1 saved them): XGBoost reads a frame's codes as they are,
    and so does the explainer."""
    model, X, _ = random_case(500)
    raw = json.loads(booster_of(model).save_raw(raw_format="json"))
    del raw["learner"]["gradient_booster"]["model"]["cats"]
    old = xgb.Booster()
    old.load_model(bytearray(json.dumps(raw).encode()))
    assert InputReader(old).stored_categories() == {}
    check_against_xgboost(old, X)
    # and the frame's codes are not what the model with categories reads: the test can fail
    assert np.abs(native(old, X)[0] - native(model, X)[0]).max() > 1e-3


# --- a DMatrix built from a frame: its own categories, re-coded by label ---------------------------------------------

@pytest.mark.parametrize("seed", range(4))
def test_dmatrix_with_its_own_categories(seed):
    """XGBoost re-codes a DMatrix's stored categories to the model's at prediction; the DMatrix's codes as they are
    would be other categories (the issue's example was off by 2)."""
    pytest.importorskip("pyarrow")
    if seed:
        model, X, _ = random_case(300 + seed)
    else:
        rng = np.random.default_rng(0)
        n = 400
        df = pd.DataFrame({"a": rng.normal(size=n), "c": pd.Categorical(rng.choice(list("abcd"), n))})
        model = xgb.XGBRegressor(n_estimators=10, enable_categorical=True).fit(
            df, df.a + (df.c == "b") * 2 - (df.c == "d") * 1.5)
        X = pd.DataFrame({"a": [0.1, 0.2, 0.3, np.nan], "c": pd.Categorical(["d", "b", None, "c"])})
    dm = xgb.DMatrix(X, enable_categorical=True)
    contribs = booster_of(model).predict(dm, pred_contribs=True)
    ref = contribs[..., :-1] if contribs.ndim == 2 else np.moveaxis(contribs[..., :-1], 1, 2)
    phi = np.asarray(ours(model).shap_values(dm))
    np.testing.assert_allclose(phi, ref, rtol=0, atol=2e-5 * max(1.0, np.abs(ref).max()))


def test_dmatrix_with_categories_without_pyarrow_raises(issue_model, monkeypatch):
    model, X = issue_model
    dm = xgb.DMatrix(X, enable_categorical=True)
    hide_pyarrow(monkeypatch)
    with pytest.raises(ImportError, match="pyarrow"):
        ours(model).shap_values(dm)


# --- hostile values on category features, as each library tests them --------------------------------------------------

HOSTILE_CATS = [np.nan, -np.inf, -1.0, -0.9999, -0.5, -1e-45, -0.0, 0.0, 1e-45, 5e-324, 0.5, 0.99999, 1.0, 2.5, 11.0,
                11.5, 12.0, 31.0, 32.0, 33.0, 63.0, 64.0, 1e9, 2.0 ** 31, 2.0 ** 32, 16777216.0, 1e300, np.inf,
                -2.0 ** 31, -3e38]


def _category_models():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(7)
    n = 600
    X = np.c_[rng.integers(0, 12, n).astype(float), rng.normal(size=n), rng.integers(0, 5, n).astype(float)]
    X[rng.random(n) < 0.1, 0] = np.nan
    y = np.sin(np.nan_to_num(X[:, 0])) * 2 + X[:, 1] + (X[:, 2] == 3)
    types = ["c", "q", "c"]
    models = {
        "xgb-partition": xgb.XGBRegressor(n_estimators=8, max_depth=4, enable_categorical=True, max_cat_to_onehot=1,
                                          feature_types=types).fit(X, y),
        "xgb-onehot": xgb.XGBRegressor(n_estimators=8, max_depth=4, enable_categorical=True, max_cat_to_onehot=64,
                                       feature_types=types).fit(X, y),
        "lightgbm": lgb.LGBMRegressor(n_estimators=8, num_leaves=8, verbose=-1, min_child_samples=5, cat_smooth=1,
                                      min_data_per_group=5).fit(X, y, categorical_feature=[0, 2]),
    }
    assert "cat_threshold=" in models["lightgbm"].booster_.model_to_string()  # it has category splits
    rows = np.array([[v, 0.3, w] for v in HOSTILE_CATS for w in (0.0, 3.0, -0.5, -1e-45)])
    return models, rows, X


def _finite32(rows):
    with np.errstate(over="ignore"):  # XGBoost's DMatrix refuses values whose float32 cast is inf
        return rows[(np.isfinite(rows.astype(np.float32)) | np.isnan(rows)).all(1)]


def _library_reads(name, model, R):
    """The library's own contributions, interactions (XGBoost) and prediction function of rows ``R``."""
    if name.startswith("xgb"):
        b = model.get_booster()

        def dm(A):
            return xgb.DMatrix(A, feature_types=["c", "q", "c"], enable_categorical=True)
        return (b.predict(dm(R), pred_contribs=True), b.predict(dm(R), pred_interactions=True),
                lambda A: b.predict(dm(A), output_margin=True))
    return model.predict(R, pred_contrib=True), None, lambda A: model.predict(A, raw_score=True)


@pytest.mark.parametrize("name", ["xgb-partition", "xgb-onehot", "lightgbm"])
def test_hostile_category_values(name):
    """XGBoost tests the float before it truncates it (common::InvalidCat: x < 0, so -1e-45 and -0.5, is no category;
    -0.0 is category 0); LightGBM truncates first (Tree::CategoricalDecision: (-1, 0) is category 0). Values,
    interactions and interventional values against the library's own numbers and brute force over its predict."""
    from _differential import brute_force_interventional

    models, rows, X = _category_models()
    model = models[name]
    with np.errstate(over="ignore"):
        forms = (rows, rows.astype(np.float32))
    for form in forms:
        R = _finite32(form) if name.startswith("xgb") else form
        ref, ref_inter, f = _library_reads(name, model, R)
        ex = ours(model)
        np.testing.assert_allclose(ex.shap_values(R), ref[:, :-1], rtol=0, atol=1e-5)
        if ref_inter is not None:
            np.testing.assert_allclose(ex.shap_interaction_values(R), ref_inter[:, :-1, :-1], rtol=0, atol=1e-5)
        bg = np.vstack([X[:4], R[::17][:4]])
        inter = ours(model, data=bg, feature_perturbation="interventional")
        phi_ref, _ = brute_force_interventional(f, R[::5].astype(np.float64), bg)
        np.testing.assert_allclose(inter.shap_values(R[::5]), phi_ref[..., 0], rtol=0, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["xgb-partition", "xgb-onehot", "lightgbm"])
def test_hostile_category_values_gpu(name):
    models, rows, X = _category_models()
    model = models[name]
    R = _finite32(rows) if name.startswith("xgb") else rows
    ref = _library_reads(name, model, R)[0]
    gpu = shap_ext.TreeExplainer(model, backend="gpu")
    np.testing.assert_allclose(gpu.shap_values(R), ref[:, :-1], rtol=0, atol=1e-5)
    np.testing.assert_allclose(gpu.shap_values(R), ours(model).shap_values(R), rtol=1e-12, atol=1e-12)
    bg = np.vstack([X[:4], R[::17][:4]])
    kw = dict(data=bg, feature_perturbation="interventional")
    np.testing.assert_allclose(shap_ext.TreeExplainer(model, backend="gpu", **kw).shap_values(R),
                               ours(model, **kw).shap_values(R), rtol=1e-12, atol=1e-12)
