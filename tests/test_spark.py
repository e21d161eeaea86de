"""Spark DataFrames in, Spark DataFrames out (shap_ext._spark) and Spark ML's own tree models (shap_ext._sparkml).

References: the in-process engine on the same rows (byte for byte), Spark's own ``model.transform`` predictions,
brute-force interventional Shapley values over Spark's predictions of hybrid rows, and shap's own parser and
TreeSHAP for Spark models without categorical splits. Spark runs in local mode (Java 17).
"""
from __future__ import annotations

import os
import pickle
import sys
import textwrap

import numpy as np
import pandas as pd
import pytest

pyspark = pytest.importorskip("pyspark")
pytest.importorskip("pyarrow")
if not (os.environ.get("JAVA_HOME") or __import__("shutil").which("java")):   # Spark runs on a JVM
    pytest.skip("Spark needs Java (no JAVA_HOME and no java on PATH)", allow_module_level=True)
import shap  # noqa: E402 - after the pytest.importorskip above
import xgboost as xgb  # noqa: E402 - after the pytest.importorskip above
from pyspark.errors import AnalysisException  # noqa: E402 - after the pytest.importorskip above
from pyspark.ml.feature import VectorAssembler, VectorIndexer  # noqa: E402 - after the pytest.importorskip above
from pyspark.ml.functions import vector_to_array  # noqa: E402 - after the pytest.importorskip above
from pyspark.ml.linalg import Vectors  # noqa: E402 - after the pytest.importorskip above

from hitml import shap_ext  # noqa: E402 - after the pytest.importorskip above
from hitml.kernels.device import GPUUnavailableError  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext import _spark  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._explainer import _ShapTreeExplainer  # noqa: E402 - after the pytest.importorskip above
from tests._shapley import exact_shapley  # noqa: E402 - after the pytest.importorskip above


@pytest.fixture(scope="session")
def spark():
    os.environ["PYSPARK_PYTHON"] = sys.executable  # executors run this interpreter (hitml, the model libraries)
    from pyspark.sql import SparkSession

    session = (SparkSession.builder.master("local[2]").appName("hitml-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.execution.arrow.maxRecordsPerBatch", "300")   # several batches per partition
               .config("spark.driver.memory", "1g")
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


pytestmark = [pytest.mark.filterwarnings("ignore:PySpark does not yet fully support pandas:FutureWarning"),
              pytest.mark.filterwarnings("ignore:The copy keyword is deprecated")]   # PySpark under pandas 3


def _rows(frame: pd.DataFrame, column: str) -> np.ndarray:
    return np.stack([np.asarray(v, dtype=np.float64) for v in frame[column]])


def _nested(frame: pd.DataFrame, column: str) -> np.ndarray:
    def deep(v):
        return np.stack([deep(u) for u in v]) if len(v) and not np.isscalar(v[0]) else np.asarray(v, dtype=float)

    return np.stack([deep(v) for v in frame[column]])


# -- XGBoost / LightGBM through a Spark DataFrame: byte for byte the in-process values --------------------------------
@pytest.fixture(scope="module")
def xgb_data(spark):
    rng = np.random.default_rng(0)
    n, M = 1500, 5
    X = rng.normal(size=(n, M))
    X[rng.random(X.shape) < 0.03] = np.nan
    y = np.nan_to_num(X[:, 0]) * np.nan_to_num(X[:, 1]) + np.nan_to_num(X[:, 2]) ** 2
    pdf = pd.DataFrame(X, columns=[f"x{j}" for j in range(M)])
    model = xgb.XGBRegressor(n_estimators=20, max_depth=4).fit(pdf, y)
    pdf["id"] = np.arange(n)
    pdf["y"] = (y > np.nanmedian(y)).astype(float)
    sdf = spark.createDataFrame(pdf).repartition(3)
    return model, pdf, sdf


def test_background_dataframe_counted_on_the_executors(xgb_data, spark):
    """``TreeExplainer(model, data=spark_df)``: each partition is counted on its executor and only the summed
    counts reach the driver; the expected value and the values equal an explainer over the same rows in memory."""
    from pyspark.ml.feature import VectorAssembler

    model, pdf, sdf = xgb_data
    names = [f"x{j}" for j in range(5)]
    bg = sdf.filter("id < 1000")
    ex = shap.TreeExplainer(model, data=bg, backend="cpu")
    rows = pdf.loc[pdf["id"] < 1000, names]
    ref = shap.TreeExplainer(model, shap.maskers.Independent(rows, max_samples=len(rows)), backend="cpu")
    assert ex.background_summary.n_rows == 1000 and ex.data is bg
    assert ex.expected_value == ref.expected_value
    Xe = pdf.loc[pdf["id"] >= 1000, names]
    assert ex.shap_values(Xe).tobytes() == ref.shap_values(Xe).tobytes()
    assert ex.banzhaf_values(Xe[:20]).tobytes() == ref.banzhaf_values(Xe[:20]).tobytes()
    out = ex.shap_values(sdf.filter("id >= 1000")).toPandas().sort_values("id")
    np.testing.assert_array_equal(_rows(out, "shap_values")[:, :5],
                                  ref.shap_values(pdf.loc[out["id"].to_numpy(), names]))
    vec = VectorAssembler(inputCols=names, outputCol="features", handleInvalid="keep").transform(
        spark.createDataFrame(rows.reset_index(drop=True)))
    booster = model.get_booster()
    ex_vec = shap.TreeExplainer(booster, data=vec.select("features"), backend="cpu")   # a vector column
    assert ex_vec.expected_value == ref.expected_value
    with pytest.raises(NotImplementedError, match="Spark background"):
        shap.TreeExplainer(model, data=bg, model_output="log_loss", backend="cpu")


def test_global_summaries_of_a_dataframe(xgb_data):
    """global_shap_values / global_interaction_values of a Spark DataFrame: sums on the executors, added on the
    driver; equal to the in-process means over the same rows (the sums' order differs: 1e-12), the same bytes on
    a second call."""
    model, pdf, sdf = xgb_data
    names = [f"x{j}" for j in range(5)]
    ex = shap.TreeExplainer(model, backend="cpu")
    g = ex.global_shap_values(sdf)
    want = np.abs(ex.shap_values(pdf[names])).mean(0)
    np.testing.assert_allclose(g.values, want, rtol=1e-12, atol=1e-15)
    assert g.feature_names == names and g.n_rows == len(pdf)
    assert ex.global_shap_values(sdf).values.tobytes() == g.values.tobytes()
    sub = sdf.filter("id < 200")
    gi = ex.global_interaction_values(sub, interaction_features=["x3", "x0"], top_k=1)
    full = np.abs(ex.shap_interaction_values(pdf.loc[pdf["id"] < 200, names])).mean(0)
    np.testing.assert_allclose(gi.values, full[np.ix_([3, 0], [3, 0])], rtol=1e-12, atol=1e-15)
    assert gi.feature_names == ["x3", "x0"] and len(gi.top_interactions) == 1
    with pytest.raises(NotImplementedError, match="Spark DataFrame"):
        ex.shap_values(sdf, dtype=np.float32)


def test_values_and_interactions_equal_in_process(xgb_data):
    model, pdf, sdf = xgb_data
    names = [f"x{j}" for j in range(5)]
    ex = shap.TreeExplainer(model, backend="cpu")
    out = ex.shap_values(sdf)                       # by the model's feature names; id and y kept
    assert out.columns == ["id", "y", "shap_values", "base_value"]
    assert out.schema["shap_values"].dataType.simpleString() == "array<double>"
    res = out.toPandas().sort_values("id")
    got = _rows(res, "shap_values")
    rows = pdf.loc[res["id"].to_numpy(), names]
    want = ex.shap_values(rows.to_numpy())
    assert got.shape == (len(pdf), 6)
    np.testing.assert_array_equal(got[:, :5], want)                     # byte for byte
    np.testing.assert_array_equal(got[:, :5], ex.shap_values(rows))     # and the pandas reading
    assert np.all(got[:, 5] == ex.expected_value) and np.all(res["base_value"] == ex.expected_value)
    margin = model.predict(rows, output_margin=True)
    np.testing.assert_allclose(got.sum(1), margin, rtol=1e-5, atol=1e-5)   # XGBoost's pred_contribs convention
    sub = sdf.filter("id < 60")
    inter = ex.shap_interaction_values(sub).toPandas().sort_values("id")
    I = _nested(inter, "shap_interaction_values")
    assert I.shape == (60, 6, 6)
    np.testing.assert_array_equal(I[:, :5, :5], ex.shap_interaction_values(pdf.loc[inter["id"], names].to_numpy()))
    assert np.all(I[:, 5, 5] == ex.expected_value) and not I[:, 5, :5].any() and not I[:, :5, 5].any()


def test_vector_and_array_features_keep_columns_and_tree_limit(xgb_data):
    model, pdf, sdf = xgb_data
    names = [f"x{j}" for j in range(5)]
    ex = shap.TreeExplainer(model, backend="cpu")
    vec = VectorAssembler(inputCols=names, outputCol="features", handleInvalid="keep").transform(sdf)
    arr = vec.withColumn("arr", vector_to_array("features", "float32"))
    want_all = ex.shap_values(pdf[names].to_numpy(), tree_limit=7)
    for frame, col in ((vec, "features"), (arr, "arr")):
        out = shap_ext.spark_shap_values(ex, frame, features_col=col, keep_columns=["id"], values_col="phi",
                                         base_value_col="bias", tree_limit=7)
        assert out.columns == ["id", "phi", "bias"]
        res = out.toPandas().sort_values("id")
        got = _rows(res, "phi")
        X = pdf.loc[res["id"], names].to_numpy()
        if col == "arr":   # the float32 array column: the in-process call on the same float32 values
            X = X.astype(np.float32)
        np.testing.assert_array_equal(got[:, :5], ex.shap_values(X, tree_limit=7))
        if col == "features":
            np.testing.assert_array_equal(got[:, :5], want_all[res["id"]])
        np.testing.assert_array_equal(got[:, 5], res["bias"].to_numpy())
    # a list of numeric columns in another order than the frame's, nothing kept
    out = shap_ext.spark_shap_values(ex, sdf.select("y", *reversed(names), "id"), features_col=names,
                                     keep_columns=[])
    assert out.columns == ["shap_values", "base_value"]
    assert out.count() == len(pdf)


def test_feature_names_from_the_explainer(xgb_data):
    _, pdf, sdf = xgb_data
    names = ["x3", "x1", "x0"]
    model = xgb.XGBRegressor(n_estimators=3, max_depth=3).fit(pdf[names].to_numpy(), pdf["y"])   # no names
    ex = shap.TreeExplainer(model, feature_names=names, backend="cpu")
    res = ex.shap_values(sdf.filter("id < 300")).toPandas().sort_values("id")
    assert "x2" in res.columns and "x0" not in res.columns
    np.testing.assert_array_equal(_rows(res, "shap_values")[:, :3],
                                  ex.shap_values(pdf.loc[res["id"], names].to_numpy()))
    with pytest.raises(ValueError, match="features_col"):   # no names anywhere and no 'features' column
        shap.TreeExplainer(model, backend="cpu").shap_values(sdf)


def test_multiclass_layout_and_interventional_background(spark):
    rng = np.random.default_rng(1)
    X = rng.normal(size=(900, 4))
    y = np.digitize(X[:, 0] + X[:, 1] * X[:, 2], [-0.5, 0.5])
    names = ["a", "b", "c", "d"]
    pdf = pd.DataFrame(X, columns=names)
    model = xgb.XGBClassifier(n_estimators=6, max_depth=3).fit(pdf, y)
    pdf["id"] = np.arange(len(pdf))
    sdf = spark.createDataFrame(pdf).repartition(2)
    bg_all = shap_ext.spark_background(sdf, names)
    assert isinstance(bg_all, pd.DataFrame) and list(bg_all.columns) == names and len(bg_all) == len(pdf)
    np.testing.assert_array_equal(np.sort(bg_all.to_numpy(), axis=0), np.sort(pdf[names].to_numpy(), axis=0))
    bg = shap_ext.spark_background(sdf, names, sample=0.2, limit=100, seed=3)
    assert 0 < len(bg) <= 100
    vec = VectorAssembler(inputCols=names, outputCol="features").transform(sdf)
    bg_vec = shap_ext.spark_background(vec, "features", limit=50)
    assert bg_vec.shape == (50, 4)
    ex = shap.TreeExplainer(model, bg, feature_perturbation="interventional", backend="cpu")
    res = ex.shap_values(sdf).toPandas().sort_values("id")
    assert ex.shap_values(sdf).schema["shap_values"].dataType.simpleString() == "array<array<double>>"
    got = _nested(res, "shap_values")                         # (n, K, M + 1): outputs first, as strict_shape
    want = ex.shap_values(pdf.loc[res["id"], names].to_numpy())   # (n, M, K)
    assert got.shape == (len(pdf), 3, 5)
    np.testing.assert_array_equal(got[:, :, :4], np.moveaxis(want, -1, 1))
    np.testing.assert_array_equal(got[:, :, 4], np.broadcast_to(ex.expected_value, (len(pdf), 3)))
    np.testing.assert_array_equal(_rows(res, "base_value"), got[:, :, 4])
    np.testing.assert_allclose(got.sum(-1), model.predict(pdf.loc[res["id"], names], output_margin=True),
                               rtol=1e-5, atol=1e-5)


def test_log_loss_labels_from_a_column(xgb_data, spark):
    _, pdf, sdf = xgb_data
    names = [f"x{j}" for j in range(5)]
    clf = xgb.XGBClassifier(n_estimators=5, max_depth=3).fit(pdf[names], pdf["y"])
    ex = shap.TreeExplainer(clf, pdf[names].iloc[:50], model_output="log_loss",
                            feature_perturbation="interventional", backend="cpu")
    res = ex.shap_values(sdf.filter("id < 200"), "y").toPandas().sort_values("id")
    got = _rows(res, "shap_values")
    rows = pdf.loc[res["id"]]
    np.testing.assert_array_equal(got[:, :5], ex.shap_values(rows[names].to_numpy(), rows["y"].to_numpy()))
    for label in (0.0, 1.0):   # shap's log_loss expected value depends on the label
        at = rows["y"].to_numpy() == label
        np.testing.assert_array_equal(res["base_value"].to_numpy()[at], ex.expected_value(label))
    with pytest.raises(TypeError, match="label column"):
        ex.shap_values(sdf, rows["y"].to_numpy())


# -- the explainer reaches each Python worker once; the backend per task ---------------------------------------------
def test_broadcast_is_unpickled_once_per_worker(xgb_data, spark):
    model, pdf, sdf = xgb_data
    ex = shap.TreeExplainer(model, backend="cpu")
    many = sdf.repartition(8)
    bc = shap_ext.broadcast_explainer(ex, spark)
    assert shap_ext.spark_shap_values(ex, many, broadcast=bc).count() == len(pdf)
    assert shap_ext.spark_shap_values(ex, many, broadcast=bc).count() == len(pdf)   # reused, not sent again

    token = bc.value.token

    def probe(batches):
        import os as _os

        import pyarrow as pa

        from hitml.shap_ext import _spark as sp

        for _ in batches:
            pass
        yield pa.RecordBatch.from_pydict({"pid": [_os.getpid()], "loads": [sp._LOADS.get(token, 0)]})

    loads = many.mapInArrow(probe, "pid long, loads long").toPandas().groupby("pid")["loads"].max()
    # 16 tasks ran over (at most a handful of) reused Python workers; each loaded this broadcast at most once
    assert loads.max() == 1, loads


class _Info:
    def __init__(self, addresses):
        self.name, self.addresses = "gpu", addresses


class _Context:
    def __init__(self, gpus=None, partition=0):
        self._res = {} if gpus is None else {"gpu": _Info(gpus)}
        self._partition = partition

    def resources(self):
        return self._res

    def partitionId(self):
        return self._partition


def test_executor_backend_resolution(monkeypatch):
    from hitml.kernels import device

    assert _spark.executor_backend("cpu", _Context(["0"]), False) == ("cpu", None)
    assert _spark.executor_backend("auto", _Context(), False) == ("cpu", None)
    assert _spark.executor_backend("auto", None, True) == ("cpu", None)
    with pytest.raises(GPUUnavailableError, match="spark.task.resource.gpu.amount"):
        _spark.executor_backend("gpu", _Context(), False)
    if not device.gpu_available():   # this machine: a task given a GPU that CuPy cannot use
        monkeypatch.setattr(device, "_warned_fallback", False)   # the fallback warns once per process
        with pytest.warns(RuntimeWarning):
            assert _spark.executor_backend("auto", _Context(["0"]), False) == ("cpu", None)
        with pytest.raises(GPUUnavailableError):
            _spark.executor_backend("gpu", _Context(["0"]), False)
    # where CuPy can use it: the task's first GPU address is the device
    monkeypatch.setattr(device, "resolve_backend", lambda backend, data=None: "gpu")
    assert _spark.executor_backend("auto", _Context([" 1", "2"]), False) == ("gpu", 1)
    assert _spark.executor_backend("gpu", _Context(["3"]), False) == ("gpu", 3)
    assert _spark.executor_backend("cpu", _Context(["3"]), False) == ("cpu", None)


# -- errors are Spark's own, and jobs fail loudly ----------------------------------------------------------------------
def test_errors(xgb_data, spark, tmp_path, monkeypatch):
    model, pdf, sdf = xgb_data
    names = [f"x{j}" for j in range(5)]
    ex = shap.TreeExplainer(model, backend="cpu")
    with pytest.raises(AnalysisException, match="x4") as info:       # a feature column the frame lacks
        ex.shap_values(sdf.drop("x4"))
    assert any("feature names" in note for note in getattr(info.value, "__notes__", []))
    with pytest.raises(AnalysisException, match="nope"):
        shap_ext.spark_shap_values(ex, sdf, keep_columns=["nope"]).count()
    with pytest.raises(ValueError, match="4 feature columns.*5 features"):
        shap_ext.spark_shap_values(ex, sdf, features_col=names[:4])
    with pytest.raises(TypeError, match="numeric"):
        shap_ext.spark_shap_values(ex, sdf.withColumn("x0", sdf["x0"].cast("string")))
    with pytest.raises(ValueError, match="clash"):
        shap_ext.spark_shap_values(ex, sdf.withColumnRenamed("y", "base_value"))
    # vectors of another length than the model's features: the job fails, naming the column
    short = VectorAssembler(inputCols=names[:4], outputCol="features", handleInvalid="keep").transform(sdf)
    with pytest.raises(pyspark.errors.PythonException, match="'features' holds vectors of 4 elements.*5 features"):
        shap_ext.spark_shap_values(ex, short, features_col="features", keep_columns=["id"]).collect()
    # an executor without the model's library: a module only the driver can import, carried by the explainer
    (tmp_path / "hitml_driver_only_lib.py").write_text(textwrap.dedent("""
        class Thing:
            pass
    """))
    monkeypatch.syspath_prepend(str(tmp_path))
    import hitml_driver_only_lib

    ex._driver_only = hitml_driver_only_lib.Thing()
    with pytest.raises(pyspark.errors.PythonException, match="hitml_driver_only_lib.*installed on every executor"):
        ex.shap_values(sdf).collect()


# -- Spark ML's own tree models ------------------------------------------------------------------------------------------
_CATS = (6, 3)   # categories of features 1 and 2


@pytest.fixture(scope="module")
def spark_ml_data(spark):
    rng = np.random.default_rng(7)
    n = 400
    X = np.column_stack([rng.normal(size=n), rng.integers(0, _CATS[0], n), rng.integers(0, _CATS[1], n)])
    y = X[:, 0] + 1.5 * np.isin(X[:, 1], [1, 4]) - X[:, 2] + 0.3 * rng.normal(size=n)
    cls = (y > np.median(y)).astype(float)
    multi = np.digitize(y, np.quantile(y, [0.33, 0.66])).astype(float)
    rows = [(Vectors.dense(r), float(a), float(b), float(c)) for r, a, b, c in zip(X, y, cls, multi)]
    df = spark.createDataFrame(rows, ["raw", "label", "cls", "multi"])
    df = VectorIndexer(inputCol="raw", outputCol="features", maxCategories=6).fit(df).transform(df).cache()
    # rows Spark's own transform routes, with values that are no category code and missing values
    odd = np.array([[0.1, 2.5, 1.0], [np.nan, 4.0, 2.0], [-0.3, 7.0, 0.0], [0.4, 1.0, -1.0], [1.2, np.nan, 5.0],
                    [np.inf, 0.0, 1.5], [-np.inf, 3.0, np.nan], [0.0, 1.0000001, 2.0]])
    return df, X, odd


def _fit(kind: str, df):
    from pyspark.ml import classification as C
    from pyspark.ml import regression as R

    est = {
        "DecisionTreeRegressor": lambda: R.DecisionTreeRegressor(maxDepth=4),
        "RandomForestRegressor": lambda: R.RandomForestRegressor(numTrees=4, maxDepth=4, seed=1),
        "GBTRegressor": lambda: R.GBTRegressor(maxIter=4, maxDepth=3, seed=1),
        "DecisionTreeClassifier": lambda: C.DecisionTreeClassifier(maxDepth=4, labelCol="cls"),
        "RandomForestClassifier": lambda: C.RandomForestClassifier(numTrees=4, maxDepth=4, labelCol="multi",
                                                                   seed=1),
        "GBTClassifier": lambda: C.GBTClassifier(maxIter=4, maxDepth=3, labelCol="cls", seed=1),
    }[kind]()
    return est.fit(df)


def _spark_output(model, spark, X: np.ndarray) -> np.ndarray:
    """Spark's own prediction of rows ``X`` in the units hitml explains (see SparkMLModel)."""
    frame = spark.createDataFrame([(i, Vectors.dense(r)) for i, r in enumerate(X)], ["i", "features"])
    res = model.transform(frame).orderBy("i").toPandas()
    name = type(model).__name__
    if name == "GBTClassificationModel":   # rawPrediction = [-m, m]; probability[1] = 1 / (1 + exp(-2 m))
        raw = np.stack([v.toArray() for v in res["rawPrediction"]])
        prob = np.stack([v.toArray() for v in res["probability"]])
        np.testing.assert_allclose(prob[:, 1], 1.0 / (1.0 + np.exp(-2.0 * raw[:, 1])), rtol=1e-12)
        return raw[:, 1]
    if "Classification" in name:
        return np.stack([v.toArray() for v in res["probability"]])
    return res["prediction"].to_numpy()


SPARK_ML = ["DecisionTreeRegressor", "RandomForestRegressor", "GBTRegressor", "DecisionTreeClassifier",
            "RandomForestClassifier", "GBTClassifier"]


@pytest.mark.parametrize("kind", SPARK_ML)
def test_spark_ml_models_against_spark_and_brute_force(kind, spark_ml_data, spark):
    df, X, odd = spark_ml_data
    model = _fit(kind, df)
    ex = shap.TreeExplainer(model, backend="cpu")
    conv = ex.model.original_model
    assert ex.route == "spark-ml" and list(conv.cat_features) == [1, 2] and conv.categories
    rows = np.vstack([X[:40], odd])
    want = _spark_output(model, spark, rows)
    np.testing.assert_allclose(conv.predict_margin(rows), want, rtol=1e-12, atol=1e-12)   # our walk = Spark's
    sv = ex.shap_values(rows)              # path-dependent; the additivity check ran against Spark's own walk
    total = sv.sum(1) + np.asarray(ex.expected_value)
    np.testing.assert_allclose(total, want, rtol=1e-10, atol=1e-10)
    # interventional values against brute force over Spark's predictions of hybrid rows
    bg = np.vstack([X[100:106], odd[[0, 2]]])
    exi = shap.TreeExplainer(model, bg, feature_perturbation="interventional", backend="cpu")
    x = np.vstack([X[:2], odd[[0, 1, 4]]])
    masks = [frozenset(s) for s in range(8) for s in [{j for j in range(3) if s >> j & 1}]]
    hybrid = np.vstack([np.where(np.isin(np.arange(3), list(S)), xi, bg) for xi in x for S in masks])
    pred = _spark_output(model, spark, hybrid).reshape((len(x), len(masks), len(bg)) + want.shape[1:]).mean(2)
    got = exi.shap_values(x)
    for r in range(len(x)):
        brute = exact_shapley(lambda S: pred[r, masks.index(S)], 3)
        np.testing.assert_allclose(got[r], brute, rtol=1e-10, atol=1e-12)
    # through a Spark DataFrame: the model's featuresCol by default, values byte for byte the in-process ones
    res = ex.shap_values(df.limit(120)).toPandas()
    assert "features" not in res.columns and "raw" in res.columns
    got = _rows(res, "shap_values") if sv.ndim == 2 else _nested(res, "shap_values")
    Xs = np.stack([v.toArray() for v in res["raw"]])
    want_sv = ex.shap_values(Xs)
    if sv.ndim == 2:
        np.testing.assert_array_equal(got[:, :3], want_sv)
    else:
        np.testing.assert_array_equal(got[:, :, :3], np.moveaxis(want_sv, -1, 1))


@pytest.mark.parametrize("kind", ["RandomForestRegressor", "GBTClassifier", "RandomForestClassifier"])
def test_spark_ml_without_categories_matches_shap(kind, spark):
    """shap's own parser and TreeSHAP (it refuses categorical splits); the GBT classifier in units of
    rawPrediction[1] in both."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(300, 4))
    y = X[:, 0] * X[:, 1] + X[:, 2]
    df = spark.createDataFrame([(Vectors.dense(r), float(t), float(t > 0), float(np.digitize(t, [-1, 1])))
                                for r, t in zip(X, y)], ["features", "label", "cls", "multi"])
    model = _fit(kind, df)
    ours = shap.TreeExplainer(model, backend="cpu").shap_values(X[:50])
    ex = shap.TreeExplainer(model, backend="cpu")
    pickle.loads(pickle.dumps(ex))   # as shap's own test of these models asks
    theirs = _ShapTreeExplainer(model).shap_values(X[:50], check_additivity=False)
    np.testing.assert_allclose(ours, np.asarray(theirs), rtol=1e-9, atol=1e-9)


def test_shap_refuses_categorical_splits_and_we_do_not(spark_ml_data):
    df, X, _ = spark_ml_data
    model = _fit("GBTRegressor", df)
    with pytest.raises(NotImplementedError, match="CategoricalSplit"):
        _ShapTreeExplainer(model)
    assert shap.TreeExplainer(model, backend="cpu").shap_values(X[:3]).shape == (3, 3)
