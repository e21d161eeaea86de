"""polars DataFrames and pyarrow Tables, read as each library's own predict reads them (issue #39 item 5).

References are the libraries' own outputs on the SAME polars/Arrow object (XGBoost ``pred_contribs`` /
``pred_interactions``, LightGBM ``pred_contrib``, CatBoost ``ShapValues``, scikit-learn's ``predict``), exact
interventional values by enumeration over the library's predictions, and the library's own exception type where it
refuses an input. A type the library's predict does not take raises TypeError naming the accepted types.
"""
from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings

import numpy as np
import pandas as pd
import pytest

from _frames import close, ours
from _differential import brute_force_interventional

pl = pytest.importorskip("polars")

TRAIN = ["red", "green", "blue", "amber"]      # the training categories
SHUFFLED = ["amber", "blue", "red", "green"]   # the same labels in another order (codes differ from training)
UNSEEN = ["teal", "amber", "blue", "red", "green"]  # with a label training never saw




def library_error(call):
    """The exception type the library itself raises for ``call`` (a test that expects none fails)."""
    try:
        call()
    except Exception as exc:  # the library's own type is the reference
        return type(exc)
    pytest.fail("the library accepted the input")


def numbers(rng, n, nulls=True):
    """Columns x (Float64), i (Int32), b (Boolean), f (Float32) with nulls, as a dict of NumPy float arrays (NaN =
    null) and as the polars frame built from them."""
    cols = {"x": rng.normal(size=n), "i": rng.integers(-3, 9, n).astype(np.float64),
            "b": rng.integers(0, 2, n).astype(np.float64), "f": rng.normal(size=n).astype(np.float32).astype(float)}
    if nulls:
        for v in cols.values():
            v[rng.random(n) < 0.2] = np.nan
    return cols


def polars_frame(cols: dict, cats: dict | None = None):
    """A polars frame: x Float64, i Int32, b Boolean, f Float32, k Int64 (if given); NaN becomes null. ``cats``:
    ``{name: (codes, labels)}`` Enum columns (code NaN = null)."""
    types = {"x": pl.Float64, "i": pl.Int32, "b": pl.Boolean, "f": pl.Float32, "k": pl.Int64}
    series = [pl.Series(k, v, dtype=pl.Float64, nan_to_null=True).cast(types[k]) for k, v in cols.items()]
    for name, (codes, labels) in (cats or {}).items():
        series.append(pl.Series(name, [None if np.isnan(c) else labels[int(c)] for c in codes], dtype=pl.Enum(labels)))
    return pl.DataFrame(series)


def pandas_train(cols: dict, codes=None):
    """The training frame: the same columns as pandas dtypes (nulls as NaN; b as float where it holds NaN)."""
    df = pd.DataFrame({k: v for k, v in cols.items()})
    df["i"] = df["i"].fillna(0).astype(np.int32)
    df["f"] = df["f"].astype(np.float32)
    if codes is not None:
        df["c"] = pd.Categorical.from_codes(codes, categories=TRAIN)
    return df


def target(df: pd.DataFrame, rng) -> np.ndarray:
    y = df["x"].fillna(0.5) * 2 + df["i"] * 0.3 - df["b"].fillna(0.3) + df["f"].fillna(0)
    if "c" in df:
        y = y + (df["c"] == "green") * 2 - (df["c"] == "amber") * 1.5
    return y.to_numpy(dtype=np.float64) + 0.05 * rng.normal(size=len(df))


# -- XGBoost --------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("missing", [np.nan, -999.0])
def test_xgboost_polars_and_arrow_match_pred_contribs(seed, missing):
    pytest.importorskip("pyarrow")  # XGBoost reads a polars frame through pyarrow (xgboost.data._transform_polars_df)
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(seed)
    train = pandas_train(numbers(rng, 400), rng.integers(0, 4, 400))
    model = xgb.XGBRegressor(n_estimators=12, max_depth=4, enable_categorical=True, max_cat_to_onehot=1,
                             missing=missing).fit(train, target(train, rng))
    cols = numbers(rng, 25)
    if not np.isnan(missing):
        cols["x"][:3] = missing  # the model's missing value, read as missing
    frame = polars_frame(cols, {"c": (np.where(rng.random(25) < 0.2, np.nan, rng.integers(0, 4, 25)), SHUFFLED)})
    booster = model.get_booster()
    for X in (frame, frame.to_arrow()):
        dm = xgb.DMatrix(X, enable_categorical=True, missing=missing)
        ex = ours(model)
        close(ex.shap_values(X), booster.predict(dm, pred_contribs=True)[:, :-1], 2e-5)
        close(ex.shap_interaction_values(X), booster.predict(dm, pred_interactions=True)[:, :-1, :-1], 2e-5)
        exp = ex(X)
        assert exp.feature_names == ["x", "i", "b", "f", "c"]
        assert exp.data.shape == (25, 5)


def test_xgboost_refusals_are_xgboosts():
    pytest.importorskip("pyarrow")
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(2)
    train = pandas_train(numbers(rng, 300), rng.integers(0, 4, 300))
    model = xgb.XGBRegressor(n_estimators=4, enable_categorical=True).fit(train, target(train, rng))
    booster = model.get_booster()
    cols = numbers(rng, 6)
    codes = rng.integers(0, 4, 6).astype(float)
    good = polars_frame(cols, {"c": (codes, SHUFFLED)})
    cases = {
        "unseen category": polars_frame(cols, {"c": (codes, UNSEEN)}),  # in the dictionary, even unused
        "polars.Categorical": good.with_columns(pl.col("c").cast(pl.String).cast(pl.Categorical)),
        "string column": good.with_columns(pl.col("c").cast(pl.String)),
        "reordered columns": good.select(["i", "x", "b", "f", "c"]),
    }
    for name, X in cases.items():
        for obj in (X, X.to_arrow()) if name != "polars.Categorical" else (X,):
            # Booster.predict on a DMatrix, the route of pred_contribs: it checks the names (XGBModel.predict's
            # inplace_predict reads an Arrow table by position without checking them)
            expected = library_error(lambda: booster.predict(xgb.DMatrix(obj, enable_categorical=True)))
            with pytest.raises(expected):
                ours(model).shap_values(obj)
    # a polars.Categorical column as Arrow (a dictionary of its global codes) is XGBoost's to take, by label
    table = cases["polars.Categorical"].to_arrow()
    close(ours(model).shap_values(table),
          booster.predict(xgb.DMatrix(table, enable_categorical=True), pred_contribs=True)[:, :-1], 2e-5)


# -- LightGBM -------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("seed", [0, 1])
def test_lightgbm_polars_and_arrow_match_pred_contrib(seed):
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(seed)
    cols = numbers(rng, 500)
    cols["k"] = rng.integers(0, 5, 500).astype(np.float64)  # a categorical feature given as integer codes
    train = pandas_train(cols)
    model = lgb.LGBMRegressor(n_estimators=12, num_leaves=8, min_child_samples=5, verbose=-1).fit(
        train, target(train, rng) + (train["k"] == 3) * 2, categorical_feature=["k"])
    test = numbers(rng, 30)
    test["k"] = np.where(rng.random(30) < 0.2, np.nan, rng.integers(0, 7, 30))  # nulls and codes unseen in training
    test["x"][:2] = [1e-40, -0.0]  # near zero: LightGBM's Arrow reader keeps them; its splits give the same sides
    frame = polars_frame(test)
    targets = [frame]
    if importlib.util.find_spec("pyarrow") is not None:
        targets.append(frame.to_arrow())
    for X in targets:
        ex = ours(model)
        close(ex.shap_values(X), model.predict(X, pred_contrib=True)[:, :-1])
        close(ours(model.booster_).shap_values(X), model.booster_.predict(X, pred_contrib=True)[:, :-1])
        assert ex(X).feature_names == ["x", "i", "b", "f", "k"]


def test_lightgbm_interventional_background_polars():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(3)
    cols = numbers(rng, 400)
    train = pandas_train(cols)
    model = lgb.LGBMRegressor(n_estimators=6, num_leaves=6, min_child_samples=5, verbose=-1).fit(
        train, target(train, rng))
    X, bg = numbers(rng, 4), numbers(rng, 6)
    mat = np.column_stack(list(X.values()))
    bmat = np.column_stack(list(bg.values()))
    ref, ev = brute_force_interventional(lambda r: model.booster_.predict(r, raw_score=True), mat, bmat)
    ex = ours(model, polars_frame(bg))
    close(ex.shap_values(polars_frame(X)), ref[..., 0])
    close(ex.expected_value, ev[0])


def test_lightgbm_refusals_are_lightgbms():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(4)
    train = pandas_train(numbers(rng, 300), rng.integers(0, 4, 300))
    model = lgb.LGBMRegressor(n_estimators=4, verbose=-1).fit(train, target(train, rng))
    frame = polars_frame(numbers(rng, 5), {"c": (rng.integers(0, 4, 5).astype(float), SHUFFLED)})
    for X in (frame, frame.with_columns(pl.col("c").cast(pl.String))):  # dictionary and string columns
        expected = library_error(lambda: model.predict(X))
        with pytest.raises(expected, match="Unsupported Arrow type"):
            ours(model).shap_values(X)


def test_lightgbm_minus_zero_threshold_raises():
    """-kZeroThreshold is the one value LightGBM's Arrow and NumPy readers send down different sides."""
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(5)
    x = rng.choice([-1.0, 0.0, 1.0], 600) * rng.uniform(0.5, 1, 600)
    train = pd.DataFrame({"a": x, "b": rng.normal(size=600)})
    model = lgb.LGBMRegressor(n_estimators=5, min_child_samples=5, verbose=-1).fit(train, (x < 0) * 3.0 + (x > 0))
    kz = float(np.float32(1e-35))
    X = pl.DataFrame({"a": [-kz, 0.5], "b": [0.0, 0.0]})
    arrow_side = model.predict(X, raw_score=True)[0]
    numpy_side = model.booster_.predict(X.to_numpy(), raw_score=True)[0]
    assert arrow_side != numpy_side  # the two readers disagree on this model
    with pytest.raises(ValueError, match="kZeroThreshold"):
        ours(model).shap_values(X)


def test_lightgbm_misplaced_names_warn():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(6)
    train = pandas_train(numbers(rng, 300))
    model = lgb.LGBMRegressor(n_estimators=4, verbose=-1).fit(train, target(train, rng))
    X = polars_frame(numbers(rng, 5)).select(["i", "x", "b", "f"])
    with pytest.warns(UserWarning, match="by position"):
        out = ours(model).shap_values(X)
    close(out, model.predict(X, pred_contrib=True)[:, :-1])  # by position, as LightGBM reads it


# -- scikit-learn ---------------------------------------------------------------------------------------------------
def hgb_frame(rows: np.ndarray, labels: list):
    return polars_frame({k: rows[:, j] for j, k in enumerate("xibf")}, {"c": (rows[:, 4], labels)})


@pytest.mark.parametrize("seed", [0, 1])
def test_histgradientboosting_enum_from_dtype(seed):
    from sklearn.ensemble import HistGradientBoostingRegressor

    rng = np.random.default_rng(seed)
    cols = numbers(rng, 400)
    codes = np.where(rng.random(400) < 0.1, np.nan, rng.integers(0, 4, 400))
    train = polars_frame(cols, {"c": (codes, TRAIN)})
    y = target(pandas_train(cols), rng) + (np.nan_to_num(codes, nan=-1) == 1) * 2
    model = HistGradientBoostingRegressor(max_iter=8, max_depth=3, categorical_features="from_dtype",
                                          random_state=0).fit(train, y)
    assert model.is_categorical_.tolist() == [False, False, False, False, True]
    # explained rows: another category order, an unseen label (sklearn: the missing side) and nulls
    X = np.column_stack(list(numbers(rng, 4).values()) + [np.array([0.0, 1.0, np.nan, 4.0])])
    bg = np.column_stack(list(numbers(rng, 5).values()) + [rng.integers(0, 5, 5).astype(float)])
    # scikit-learn reads a null of a polars Enum as the category None (one it learned from the polars training
    # nulls) and a null of an Arrow dictionary as missing: each type against its own predictions
    kinds = [lambda f: f]
    if importlib.util.find_spec("pyarrow") is not None:
        kinds.append(lambda f: f.to_arrow())
    for kind in kinds:
        ref, ev = brute_force_interventional(lambda r: model.predict(kind(hgb_frame(r, UNSEEN))), X, bg)
        rows = kind(hgb_frame(X, UNSEEN))
        path = ours(model)
        close(path.shap_values(rows).sum(1) + path.expected_value, model.predict(rows))
        inter = ours(model, kind(hgb_frame(bg, UNSEEN)), feature_perturbation="interventional")
        close(inter.shap_values(rows), ref[..., 0])
        close(inter.expected_value, ev[0])


def test_random_forest_polars_and_arrow():
    from sklearn.ensemble import RandomForestRegressor

    rng = np.random.default_rng(7)
    train = pandas_train(numbers(rng, 300))
    model = RandomForestRegressor(n_estimators=5, max_depth=5, random_state=0).fit(train, target(train, rng))
    X, bg = numbers(rng, 4), numbers(rng, 5)
    ref, ev = brute_force_interventional(
        lambda r: model.predict(polars_frame({k: r[:, j] for j, k in enumerate("xibf")})),
        np.column_stack(list(X.values())), np.column_stack(list(bg.values())))
    frame = polars_frame(X)
    targets = [frame]
    if importlib.util.find_spec("pyarrow") is not None:
        targets.append(frame.to_arrow())
    for rows in targets:
        path = ours(model)
        close(path.shap_values(rows).sum(1) + path.expected_value, model.predict(rows))
        close(ours(model, polars_frame(bg)).shap_values(rows), ref[..., 0])
    # what scikit-learn refuses: other names or their order, a category column where it wants numbers
    for bad in (frame.select(["i", "x", "b", "f"]), frame.rename({"x": "zz"}),
                frame.with_columns(pl.Series("f", ["a", "b", "a", "b"], dtype=pl.Enum(["a", "b"])))):
        expected = library_error(lambda: model.predict(bad))
        with pytest.raises(expected):
            ours(model).shap_values(bad)


# -- CatBoost -------------------------------------------------------------------------------------------------------
def test_catboost_polars_by_name_and_arrow_refused():
    cb = pytest.importorskip("catboost")
    rng = np.random.default_rng(8)
    train = pandas_train(numbers(rng, 300))
    model = cb.CatBoostRegressor(iterations=8, depth=4, verbose=0, random_seed=0).fit(train, target(train, rng))
    frame = polars_frame(numbers(rng, 10))
    for X in (frame, frame.select(["b", "x", "f", "i"])):  # CatBoost reads a frame by name
        native = model.get_feature_importance(type="ShapValues", data=cb.Pool(X))
        order = [list(model.feature_names_).index(c) for c in X.columns]
        ex = ours(model)
        close(ex.shap_values(X), native[:, order])  # values in the frame's column order, as for pandas
        exp = ex(X)
        assert exp.feature_names == X.columns
        close(exp.values, native[:, order])
    with pytest.raises(library_error(lambda: model.predict(frame.rename({"x": "zz"})))):
        ours(model).shap_values(frame.rename({"x": "zz"}))
    if importlib.util.find_spec("pyarrow") is not None:  # CatBoost's own predict refuses a pyarrow Table
        library_error(lambda: model.predict(frame.to_arrow()))
        with pytest.raises(TypeError, match="a polars DataFrame"):
            ours(model).shap_values(frame.to_arrow())
        with pytest.raises(TypeError, match="a polars DataFrame"):
            ours(model, frame.to_arrow())


# -- types no library takes, zero rows ------------------------------------------------------------------------------
def test_other_polars_and_arrow_objects_raise_type_error():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(9)
    train = pandas_train(numbers(rng, 200))
    model = lgb.LGBMRegressor(n_estimators=3, verbose=-1).fit(train, target(train, rng))
    frame = polars_frame(numbers(rng, 3))
    others = [frame.lazy(), frame["x"]]
    if importlib.util.find_spec("pyarrow") is not None:
        others += [frame.to_arrow().to_batches()[0], frame.to_arrow().column(0)]
    for obj in others:
        with pytest.raises(TypeError, match="a polars DataFrame, a pyarrow Table"):
            ours(model).shap_values(obj)


def test_zero_rows():
    lgb = pytest.importorskip("lightgbm")
    rng = np.random.default_rng(10)
    train = pandas_train(numbers(rng, 200))
    model = lgb.LGBMRegressor(n_estimators=3, verbose=-1).fit(train, target(train, rng))
    assert ours(model).shap_values(polars_frame(numbers(rng, 3)).head(0)).shape == (0, 4)


# -- polars without pyarrow -----------------------------------------------------------------------------------------
class _NoPyarrow(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "pyarrow" or name.startswith("pyarrow."):
            raise ModuleNotFoundError(f"No module named {name!r}")
        return None


def test_polars_without_pyarrow_same_bytes(monkeypatch):
    """Where the library reads a polars frame without pyarrow, so does hitml, to the same values; XGBoost needs
    pyarrow for polars and says so itself."""
    lgb = pytest.importorskip("lightgbm")
    from sklearn.ensemble import HistGradientBoostingRegressor, RandomForestRegressor

    rng = np.random.default_rng(11)
    cols = numbers(rng, 300)
    codes = rng.integers(0, 4, 300).astype(float)
    train = pandas_train(cols)
    y = target(train, rng)
    models = [lgb.LGBMRegressor(n_estimators=4, verbose=-1).fit(train, y),
              RandomForestRegressor(n_estimators=3, max_depth=4, random_state=0).fit(train, y),
              HistGradientBoostingRegressor(max_iter=4, categorical_features="from_dtype").fit(
                  polars_frame(cols, {"c": (codes, TRAIN)}), y)]
    X = polars_frame(numbers(rng, 8))
    Xc = polars_frame(numbers(rng, 8), {"c": (np.array([0, 1, 2, np.nan, 4, 3, 2, 1.0]), UNSEEN)})
    inputs = [X, X, Xc]
    try:
        cb = importlib.import_module("catboost")
        models.append(cb.CatBoostRegressor(iterations=4, verbose=0).fit(train, y))
        inputs.append(X)
    except ImportError:
        pass
    xgb = importlib.util.find_spec("xgboost") and importlib.import_module("xgboost")
    if xgb:
        xmodel = xgb.XGBRegressor(n_estimators=3).fit(train, y)
    with_pyarrow = [ours(m).shap_values(x) for m, x in zip(models, inputs)]

    for name in [k for k in sys.modules if k == "pyarrow" or k.startswith("pyarrow.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setattr(sys, "meta_path", [_NoPyarrow(), *sys.meta_path])
    with pytest.raises(ImportError):
        import pyarrow  # noqa: F401 - the block holds
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing falls back with a warning
        without = [ours(m).shap_values(x) for m, x in zip(models, inputs)]
    for a, b in zip(with_pyarrow, without):
        assert a.tobytes() == b.tobytes()
    if xgb:
        with pytest.raises(ImportError):
            ours(xmodel).shap_values(X)
