"""The API reference: the Sphinx site builds without a warning, help() names every parameter a user can pass, and
the Examples sections of the public docstrings run as doctests."""
from __future__ import annotations

import doctest
import importlib
import inspect
import os
import pydoc
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import shap

from hitml import shap_ext

ROOT = Path(__file__).resolve().parents[1]

# The modules whose __all__ is the public API (ARCHITECTURE.md: public API is what the package __init__ exports).
PUBLIC_MODULES = [
    "hitml.shap_ext", "hitml.xgboost_ext", "hitml.xgboost_ext.dask", "hitml.sklearn_ext", "hitml.kernels",
    "hitml.kernels.treeshap", "hitml.kernels.sketch", "hitml.kernels.shuffle", "hitml.kernels.shapley",
]


def _run(args: list[str], **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=ROOT, timeout=600,
                          env={**os.environ, "HITML_PROGRESS": "0", "PYTHONWARNINGS": "ignore", **env})


@pytest.mark.slow  # about 30 s: imports every module and renders four pages
def test_api_reference_builds_without_warnings(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("numpydoc")
    res = _run(["-m", "sphinx", "-E", "-W", "--keep-going", "-q", "-b", "html", "-d", str(tmp_path / "doctrees"),
                str(ROOT / "docs" / "api"), str(tmp_path / "html")])
    assert res.returncode == 0, f"sphinx-build -W failed:\n{res.stdout[-3000:]}\n{res.stderr[-6000:]}"
    for page in ("shap_ext", "xgboost_ext", "sklearn_ext", "kernels"):
        assert (tmp_path / "html" / f"{page}.html").stat().st_size > 0
    assert "n_estimators" in (tmp_path / "html" / "xgboost_ext.html").read_text()  # XGBoost's own parameters


def test_patched_tree_explainer_names_backend_and_progress():
    shap_ext.install()
    sig = inspect.signature(shap.TreeExplainer)
    assert sig.parameters["backend"].kind is inspect.Parameter.KEYWORD_ONLY
    assert "progress" in sig.parameters and "model" in sig.parameters and "feature_perturbation" in sig.parameters
    assert "backend" in inspect.signature(shap.TreeExplainer.__init__).parameters
    text = pydoc.render_doc(shap.TreeExplainer, renderer=pydoc.plaintext)
    assert "backend : {\"cpu\", \"gpu\", \"auto\"}" in text and "progress : bool" in text
    assert "Uses Tree SHAP algorithms" in text  # shap's own docstring stays, first
    init_text = pydoc.render_doc(shap.TreeExplainer.__init__, renderer=pydoc.plaintext)
    assert "backend" in init_text and "progress" in init_text


def test_uninstall_gives_shap_back_its_own_class():
    try:
        shap_ext.uninstall()
        assert "backend" not in inspect.signature(shap.TreeExplainer).parameters
        assert "feature_perturbation" in inspect.signature(shap.TreeExplainer).parameters
        assert "hitml" not in (shap.TreeExplainer.__doc__ or "")
        rng = np.random.default_rng(0)
        X = rng.normal(size=(40, 3))
        import xgboost as xgb

        model = xgb.XGBRegressor(n_estimators=2, max_depth=2, n_jobs=1).fit(X, X[:, 0])
        with pytest.raises(TypeError, match="backend"):
            shap.TreeExplainer(model, backend="cpu")
        assert type(shap.TreeExplainer(model)) is shap.explainers.TreeExplainer
        assert type(shap.Explainer(model, algorithm="tree")) is shap.explainers.TreeExplainer
        assert type(shap_ext.TreeExplainer(model, backend="cpu")) is shap_ext.TreeExplainer
    finally:
        shap_ext.install()
    assert "backend" in inspect.signature(shap.TreeExplainer).parameters


def test_backend_keyword_needs_the_import():
    """Without hitml imported shap has no backend= (shap offers no hook that runs at `import shap`); looking up
    shap.GPUTreeExplainer imports hitml.shap_ext through the entry point, which installs the hook."""
    code = ("import numpy as np, shap, xgboost as xgb\n"
            "X = np.random.default_rng(0).normal(size=(40, 3))\n"
            "m = xgb.XGBRegressor(n_estimators=2, max_depth=2, n_jobs=1).fit(X, X[:, 0])\n"
            "try:\n    shap.TreeExplainer(m, backend='cpu')\nexcept TypeError as e:\n    print('TypeError', 'backend' in str(e))\n"
            "shap.GPUTreeExplainer\n"
            "print(type(shap.TreeExplainer(m, backend='cpu')).__module__)\n")
    res = _run(["-c", code])
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["TypeError", "True", "hitml.shap_ext._explainer"]


@pytest.mark.parametrize("name", ["XGBRegressor", "XGBClassifier"])
def test_xgboost_estimators_show_xgboost_parameters(name):
    import xgboost as xgb

    from hitml import xgboost_ext

    ours, host = getattr(xgboost_ext, name), getattr(xgb, name)
    params = inspect.signature(ours).parameters
    assert list(params)[0] == "binner"
    host_names = set(inspect.signature(xgb.XGBModel.__init__).parameters) - {"self", "kwargs"}
    assert host_names <= set(params), sorted(host_names - set(params))
    assert params["objective"].default == inspect.signature(host.__init__).parameters["objective"].default
    text = pydoc.render_doc(ours, renderer=pydoc.plaintext)
    for word in ("binner : QuantileBinner", "n_estimators", "max_depth", "grow_policy", "See Also"):
        assert word in text, word
    est = ours(n_estimators=3, max_depth=2)
    got = est.get_params()
    assert got["n_estimators"] == 3 and got["binner"] is None and set(host().get_params()) <= set(got)
    assert repr(est) == f"{name}(max_depth=2, n_estimators=3)"  # scikit-learn shows what differs from the defaults


def test_usage_text_names_the_installed_module():
    res = _run(["-m", "hitml.shap_ext", "--help"])
    assert res.returncode == 0 and res.stderr.startswith("usage: python -m hitml.shap_ext ")
    text = pydoc.render_doc(shap_ext, renderer=pydoc.plaintext)
    assert "python -m hitml.shap_ext" in text and "python -m shap_ext" not in text


def _public_doctests():
    finder = doctest.DocTestFinder(exclude_empty=True)
    seen, out = set(), []
    for modname in PUBLIC_MODULES:
        mod = importlib.import_module(modname)
        objs = [(modname, mod)] + [(f"{modname}.{n}", getattr(mod, n)) for n in getattr(mod, "__all__", [])]
        for name, obj in objs:
            if not (inspect.ismodule(obj) or inspect.isclass(obj) or inspect.isroutine(obj)) or id(obj) in seen:
                continue
            seen.add(id(obj))
            home = inspect.getmodule(obj)
            out += [t for t in finder.find(obj, name, module=home) if t.examples]
    return out


_DOCTESTS = {t.name: t for t in _public_doctests()}


ADAPTERS = ["hitml.shap_ext", "hitml.xgboost_ext", "hitml.sklearn_ext"]
# Exports whose docstrings still lack sections, each with the reason; the list may only shrink (now empty).
NOT_YET: dict[str, str] = {}


def _exports(modules):
    out = []
    for m in modules:
        mod = importlib.import_module(m)
        out += [f"{m}.{n}" for n in mod.__all__
                if inspect.isclass(getattr(mod, n)) or inspect.isroutine(getattr(mod, n))]
    return out


def _sections(name):
    from numpydoc.docscrape import ClassDoc, FunctionDoc

    if name in NOT_YET:
        pytest.skip(NOT_YET[name])
    module, _, attr = name.rpartition(".")
    obj = getattr(importlib.import_module(module), attr)
    return ClassDoc(obj) if inspect.isclass(obj) else FunctionDoc(obj)


@pytest.mark.parametrize("name", _exports(ADAPTERS))
def test_adapter_exports_have_numpydoc_sections(name):
    """Every export of an adapter has a summary, See Also (naming what it replaces) and Examples."""
    doc = _sections(name)
    missing = [section for section in ("Summary", "See Also", "Examples") if not doc[section]]
    assert not missing, f"{name}: no {missing}"


@pytest.mark.parametrize("name", _exports([m for m in PUBLIC_MODULES if m.startswith("hitml.kernels")]))
def test_kernel_exports_have_examples(name):
    """Every class and function the kernels' packages export has a summary and Examples."""
    doc = _sections(name)
    missing = [section for section in ("Summary", "Examples") if not doc[section]]
    assert not missing, f"{name}: no {missing}"


@pytest.mark.parametrize("name", sorted(_DOCTESTS))
def test_docstring_examples_run(name):
    failures: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    result = runner.run(_DOCTESTS[name], out=failures.append)
    assert result.failed == 0, "".join(failures)
