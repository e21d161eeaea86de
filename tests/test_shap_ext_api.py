"""shap_ext's shap-facing behaviour: Explanation objects, additivity, the backend= hook, the entry point,
``python -m shap_ext``, errors, and the GPU backend (device only)."""
from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import shap
import xgboost as xgb
from shap.utils._exceptions import ExplainerError, InvalidModelError
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LinearRegression

import hitml.kernels.device
import hitml.kernels.treeshap
from hitml import shap_ext
from hitml.kernels.device import GPUUnavailableError

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(0)
    X = pd.DataFrame(rng.normal(size=(150, 4)), columns=["age", "income", "score", "noise"])
    y = X.age + X.income * X.score + 0.1 * rng.normal(size=150)
    return X, y.to_numpy()


@pytest.fixture(scope="module")
def xgb_reg(frame):
    X, y = frame
    return xgb.XGBRegressor(n_estimators=10, max_depth=3, n_jobs=1).fit(X, y)


def test_explanation_object(frame, xgb_reg):
    X, _ = frame
    ex = shap_ext.TreeExplainer(xgb_reg, backend="cpu")
    exp = ex(X.iloc[:20])
    assert isinstance(exp, shap.Explanation)
    assert exp.values.shape == (20, 4)
    assert exp.feature_names == list(X.columns)
    np.testing.assert_array_equal(exp.data, X.iloc[:20].to_numpy())
    np.testing.assert_allclose(exp.base_values, np.full(20, float(np.ravel(ex.expected_value)[0])))
    margin = xgb_reg.predict(X.iloc[:20], output_margin=True)
    np.testing.assert_allclose(exp.values.sum(1) + exp.base_values, margin, rtol=1e-5, atol=1e-5)
    inter = ex(X.iloc[:5], interactions=True)
    assert inter.values.shape == (5, 4, 4)
    np.testing.assert_allclose(inter.values.sum(2), exp.values[:5], rtol=1e-6, atol=1e-6)  # rows sum to SHAP
    np.testing.assert_allclose(inter.values, np.swapaxes(inter.values, 1, 2), atol=1e-10)  # symmetric


def test_single_row_and_multioutput_shapes(frame):
    X, y = frame
    clf = xgb.XGBClassifier(n_estimators=5, max_depth=3, n_jobs=1).fit(X, np.digitize(y, [-0.5, 0.5]))
    ex = shap_ext.TreeExplainer(clf, backend="cpu")
    assert ex.shap_values(X.iloc[:7]).shape == (7, 4, 3)
    assert ex.shap_values(X.iloc[0]).shape == (4, 3)  # a pandas Series is one row
    assert ex.shap_interaction_values(X.iloc[:3]).shape == (3, 4, 4, 3)
    assert len(ex.expected_value) == 3
    exp = ex(X.iloc[:6])
    assert exp.values.shape == (6, 4, 3) and exp.base_values.shape == (6, 3)


def test_check_additivity_raises_on_tampered_output(frame, xgb_reg, monkeypatch):
    X, _ = frame
    ex = shap_ext.TreeExplainer(xgb_reg, backend="cpu")
    real = hitml.kernels.treeshap.shap_values

    def tampered(*args, **kw):
        phi = real(*args, **kw)
        phi[:, 0] += 0.5
        return phi

    monkeypatch.setattr(hitml.kernels.treeshap, "shap_values", tampered)
    with pytest.raises(ExplainerError, match="Additivity check failed"):
        ex.shap_values(X.iloc[:10])
    ex.shap_values(X.iloc[:10], check_additivity=False)  # switched off: no error


def test_hook_with_and_without_backend(frame, xgb_reg):
    X, _ = frame
    plain = shap.TreeExplainer(xgb_reg)
    assert type(plain) is shap.explainers.TreeExplainer  # shap unchanged without backend
    ours = shap.TreeExplainer(xgb_reg, backend="cpu")
    assert type(ours) is shap_ext.TreeExplainer and isinstance(ours, shap.TreeExplainer)
    np.testing.assert_allclose(ours.shap_values(X), plain.shap_values(X), rtol=1e-5, atol=1e-5)
    shap_ext.install()  # idempotent
    shap_ext.install()
    assert type(shap.TreeExplainer(xgb_reg)) is shap.explainers.TreeExplainer
    via = shap.Explainer(xgb_reg, algorithm="tree", backend="cpu")
    assert type(via) is shap_ext.TreeExplainer and via.backend == "cpu"
    assert type(shap.Explainer(xgb_reg, backend="cpu")) is shap_ext.TreeExplainer  # "auto" picks tree
    assert type(shap.Explainer(xgb_reg)) is shap.explainers.TreeExplainer


def test_enable_makes_default_ours(xgb_reg):
    try:
        shap_ext.enable("cpu")
        ex = shap.TreeExplainer(xgb_reg)
        assert type(ex) is shap_ext.TreeExplainer and ex.backend == "cpu"
    finally:
        shap_ext.disable()
    assert type(shap.TreeExplainer(xgb_reg)) is shap.explainers.TreeExplainer


def _run(args, **env):
    full_env = {**os.environ, "HITML_PROGRESS": "0", "PYTHONWARNINGS": "ignore", **env}
    full_env["PYTHONPATH"] = os.pathsep.join([str(ROOT), full_env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=full_env, cwd=ROOT,
                          timeout=300)


def test_entry_point_resolves_without_import():
    code = ("import sys, shap; cls = shap.GPUTreeExplainer; "
            "print(cls.__module__, cls.__name__, issubclass(cls, shap.TreeExplainer))")
    res = _run(["-c", code])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["hitml.shap_ext._explainer", "GPUTreeExplainer", "True"]


def test_python_m_shap_ext_runs_unmodified_script(tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np, shap, xgboost as xgb
        rng = np.random.default_rng(0)
        X = rng.normal(size=(60, 3)); y = X[:, 0] - X[:, 1]
        model = xgb.XGBRegressor(n_estimators=3, max_depth=2, n_jobs=1).fit(X, y)
        ex = shap.TreeExplainer(model)
        sv = ex.shap_values(X)
        print(type(ex).__module__, ex.backend, sv.shape, sys.argv[1:])
    """))
    res = _run(["-m", "hitml.shap_ext", str(script), "a1", "--flag"], HITML_SHAP_BACKEND="cpu")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == "hitml.shap_ext._explainer cpu (60, 3) ['a1', '--flag']"
    res = _run(["-m", "hitml.shap_ext", "--backend", "bogus", str(script)])
    assert res.returncode == 2 and "backend must be one of" in res.stderr


def test_bad_inputs(frame, xgb_reg):
    X, y = frame
    ex = shap_ext.TreeExplainer(xgb_reg, backend="cpu")
    with pytest.raises(ValueError, match="has 3 features, but the model was trained on 4"):
        ex.shap_values(X.to_numpy()[:, :3])
    assert ex.shap_values(X.to_numpy()[:0]).shape == (0, 4)  # zero rows: an empty array, as shap returns
    bad = X.iloc[:5].copy()
    bad["income"] = ["a", "b", "c", "d", "e"]
    with pytest.raises(ValueError, match="income"):  # XGBoost's own error names the column
        ex.shap_values(bad)
    with pytest.raises(ValueError, match="non-numeric"):
        ex.shap_values(np.array([["a", "b", "c", "d"]]))
    with pytest.raises(ValueError, match="background data has 3 features, but the model was trained on 4"):
        shap_ext.TreeExplainer(xgb_reg, X.to_numpy()[:20, :3], backend="cpu")
    with pytest.raises(InvalidModelError, match="not yet supported by TreeExplainer.*LinearRegression"):
        shap_ext.TreeExplainer(LinearRegression().fit(X, y), backend="cpu")
    with pytest.raises(ValueError, match="must be one of"):
        shap_ext.TreeExplainer(xgb_reg, backend="tpu")
    inter = shap_ext.TreeExplainer(xgb_reg, X.iloc[:10], backend="cpu")   # interventional interactions
    np.testing.assert_allclose(inter.shap_interaction_values(X.iloc[:2]).sum(axis=2), inter.shap_values(X.iloc[:2]),
                               rtol=1e-10, atol=1e-10)
    with pytest.raises(ExplainerError, match="labels"):
        shap_ext.TreeExplainer(xgb_reg, X.iloc[:10], model_output="log_loss", backend="cpu").shap_values(X)


@pytest.mark.skipif(hitml.kernels.device.gpu_available(), reason="checks the no-GPU behaviour")
def test_gpu_unavailable(xgb_reg, monkeypatch):
    with pytest.raises(GPUUnavailableError, match='backend="gpu" needs a CUDA GPU'):
        shap_ext.TreeExplainer(xgb_reg, backend="gpu")
    with pytest.raises(GPUUnavailableError):
        shap.GPUTreeExplainer(xgb_reg)
    monkeypatch.setattr(hitml.kernels.device, "_warned_fallback", False)
    with pytest.warns(RuntimeWarning, match="using the CPU backend"):
        ex = shap.TreeExplainer(xgb_reg, backend="auto")
    assert ex.backend == "cpu"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        shap.TreeExplainer(xgb_reg, backend="auto")  # warns once only


@pytest.mark.gpu
def test_gpu_matches_cpu_and_keeps_cupy(frame):
    import cupy as cp

    X, y = frame
    rf = RandomForestRegressor(n_estimators=10, max_depth=8, random_state=0).fit(X, y)
    clf = xgb.XGBClassifier(n_estimators=10, max_depth=4, n_jobs=1).fit(X, np.digitize(y, [-0.5, 0.5]))
    for model in (rf, clf):
        cpu = shap_ext.TreeExplainer(model, backend="cpu")
        # shap_ext's class directly: where shap-cuda is installed, shap.GPUTreeExplainer resolves to shap-cuda's
        # (shap prefers its "cuda" entry point); the entry point itself is tested in a subprocess above.
        gpu = shap_ext.GPUTreeExplainer(model)
        assert gpu.backend == "gpu"
        Xd = cp.asarray(X.to_numpy())
        out = gpu.shap_values(Xd)
        assert isinstance(out, cp.ndarray)
        np.testing.assert_allclose(out.get(), cpu.shap_values(X), rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(gpu.shap_values(X.to_numpy()), cpu.shap_values(X), rtol=1e-6, atol=1e-6)
        inter = gpu.shap_interaction_values(Xd[:10])
        assert isinstance(inter, cp.ndarray)
        np.testing.assert_allclose(inter.get(), cpu.shap_interaction_values(X.iloc[:10]), rtol=1e-6, atol=1e-6)
        bg = X.to_numpy()[:20]
        np.testing.assert_allclose(
            shap_ext.TreeExplainer(model, bg, backend="gpu").shap_values(Xd).get(),
            shap_ext.TreeExplainer(model, bg, backend="cpu").shap_values(X), rtol=1e-6, atol=1e-6)
        assert isinstance(gpu(Xd[:5]), shap.Explanation)


@pytest.mark.parametrize("n_bg,perturbation,model_output",
                         [(1200, "interventional", "raw"), (1001, "interventional", "probability"),
                          (1000, "interventional", "raw"), (1200, "auto", "raw")])
def test_large_background_warning_as_shap_gives_it(n_bg, perturbation, model_output):
    """The large-background warning comes exactly where shap's own TreeExplainer gives it (the reference), as a
    UserWarning matching shap's text, so shap's ``test_large_background_dataset_warning`` holds through hitml."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(n_bg, 3))
    model = xgb.XGBClassifier(n_estimators=3, max_depth=2, n_jobs=1).fit(X, X[:, 0] > 0)
    bg = shap.maskers.Independent(X, max_samples=n_bg)

    def slow_warnings(make):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            make()
        return [w for w in caught if "may lead to slow runtimes" in str(w.message)]

    ref = slow_warnings(lambda: shap.TreeExplainer(model, bg, feature_perturbation=perturbation,
                                                   model_output=model_output))
    ours = slow_warnings(lambda: shap_ext.TreeExplainer(model, bg, feature_perturbation=perturbation,
                                                        model_output=model_output, backend="cpu"))
    assert len(ours) == len(ref) == (1 if (n_bg > 1000 and perturbation == "interventional") else 0)
    if ours:
        assert ours[0].category is shap_ext.LargeBackgroundWarning and issubclass(ours[0].category, UserWarning)
        text = str(ours[0].message)
        assert f"Passing {n_bg} background samples" in text
        assert ("Consider shap.sample" in text) == (model_output == "probability")
