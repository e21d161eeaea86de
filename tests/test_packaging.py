"""The built wheel, installed non-editable into a fresh virtual environment beside PyPI's unrelated `kernels`.

hitml installs its packages under the `hitml` namespace, so a distribution whose import name is `kernels` (PyPI has a
popular one) installs beside it and both import. The checks run in subprocesses with cwd outside the repository, so
nothing resolves to the source tree.
"""

from __future__ import annotations

import json
import os
import site
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CU_SOURCES = {"hitml/kernels/treeshap/treeshap.cu", "hitml/kernels/sketch/moments.cu",
              "hitml/kernels/shuffle/shuffle.cu"}


def _run(cmd: list[str], cwd: Path, env: dict | None = None, timeout: int = 900) -> subprocess.CompletedProcess:
    res = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, "PYTHONNOUSERSITE": "1", "HITML_PROGRESS": "0", **(env or {})})
    assert res.returncode == 0, f"{cmd} failed:\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    _run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)], cwd=out)
    (whl,) = out.glob("hitml-*.whl")
    return whl


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel) -> Path:
    """A fresh venv holding PyPI's `kernels` (with its own dependencies) and hitml's wheel, installed non-editable.

    hitml's heavy dependencies (numpy, shap, xgboost, numba, ...) are not installed again: a .pth file puts the test
    environment's site-packages after the venv's own. That path holds no `hitml` import package (the development
    install is an editable finder that a plain .pth path does not activate), which the test checks below.
    """
    home = tmp_path_factory.mktemp("venv")
    env_dir = home / "env"
    _run([sys.executable, "-m", "venv", str(env_dir)], cwd=home)
    py = env_dir / "bin" / "python"
    purelib = _run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=home).stdout.strip()
    (Path(purelib) / "zz_test_deps.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    _run([str(py), "-m", "pip", "install", "-q", "kernels"], cwd=home)
    _run([str(py), "-m", "pip", "install", "-q", "--no-deps", str(wheel)], cwd=home)
    return py


def test_wheel_holds_namespaced_packages_and_cu_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    assert CU_SOURCES <= names
    tops = {n.split("/")[0] for n in names if not n.split("/")[0].endswith((".dist-info", ".data"))}
    assert tops == {"hitml"}, f"top-level import names other than hitml: {tops - {'hitml'}}"
    eps = next(n for n in names if n.endswith("entry_points.txt"))
    assert "hitml = hitml.shap_ext:GPUTreeExplainer" in zipfile.ZipFile(wheel).read(eps).decode()


def test_wheel_ships_kernels_that_serve_where_they_match(wheel, venv, tmp_path):
    """Building the wheel compiles the TreeSHAP kernels and ships their Numba cache entries (setup.py); installed,
    a first-ever process loads them and compiles nothing where the build's Numba, Python and CPU are this
    environment's, and gives XGBoost's values either way."""
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = [n for n in names if n.startswith("hitml/kernels/_compiled/numba_cache/") and n.endswith(".nbi")]
    assert len(shipped) >= 14 and "hitml/kernels/_compiled/numba_cache/built.json" in names, sorted(names)
    assert not wheel.name.endswith("-none-any.whl"), wheel.name   # a platform wheel: it holds machine code
    code = textwrap.dedent("""
        import json, numpy as np, xgboost as xgb, shap
        import hitml.shap_ext
        from hitml.kernels import _aot
        from hitml.kernels.treeshap import _cpu_quad as q
        X = np.random.default_rng(0).normal(size=(200, 4)); y = X[:, 0] * X[:, 1]
        model = xgb.XGBRegressor(n_estimators=5, max_depth=4, n_jobs=1).fit(X, y)
        sv = shap.TreeExplainer(model, backend="cpu").shap_values(X)
        ref = model.get_booster().predict(xgb.DMatrix(X), pred_contribs=True)
        print(json.dumps({"usable": _aot.usable(), "status": _aot.status(), "folder": _aot.folder(),
                          "close": bool(np.allclose(sv, ref[:, :-1], atol=1e-5)),
                          "compiled": sum(q.shap_quad_kernel.stats.cache_misses.values())}))
    """)
    out = json.loads(_run([str(venv), "-c", code], cwd=tmp_path, env={
        "NUMBA_CACHE_DIR": str(tmp_path / "cache"), "HITML_BACKGROUND": "0"}).stdout.strip().splitlines()[-1])
    assert out["close"] and out["folder"].startswith(str(venv.parents[1])), out
    if out["usable"]:                                  # built by this environment's Numba, for this CPU
        assert out["compiled"] == 0, out
    else:                                              # another Numba or CPU: compiled, and said why
        assert out["compiled"] > 0 and "shipped kernels" in out["status"], out


def test_installs_beside_pypi_kernels(venv):
    code = textwrap.dedent("""
        import json, importlib.metadata as md, importlib.resources as res
        import kernels, hitml.kernels, hitml.shap_ext, hitml.xgboost_ext, hitml.sklearn_ext
        print(json.dumps({
            "pypi_kernels": md.distribution("kernels").version, "pypi_file": kernels.__file__,
            "hitml_file": hitml.kernels.__file__,
            "cu": (res.files("hitml.kernels.treeshap") / "treeshap.cu").is_file(),
        }))
    """)
    out = json.loads(_run([str(venv), "-c", code], cwd=venv.parents[1]).stdout)
    env_dir = str(venv.parents[1])
    assert out["pypi_file"].startswith(env_dir) and "hitml" not in out["pypi_file"]
    assert out["hitml_file"].startswith(env_dir) and out["hitml_file"].endswith("hitml/kernels/__init__.py")
    assert out["cu"]


def test_entry_point_resolves_without_other_backends(venv):
    code = textwrap.dedent("""
        import importlib.metadata as md, shap
        names = sorted(ep.name for ep in md.entry_points(group="shap.tree_backends"))
        cls = shap.GPUTreeExplainer
        print(names, cls.__module__, cls.__name__, issubclass(cls, shap.TreeExplainer))
    """)
    out = _run([str(venv), "-c", code], cwd=venv.parents[1]).stdout.split()
    assert out == ["['hitml']", "hitml.shap_ext._explainer", "GPUTreeExplainer", "True"]


def test_python_m_runs_a_script(venv, tmp_path):
    script = tmp_path / "user_script.py"
    script.write_text(textwrap.dedent("""
        import sys
        import numpy as np, shap, xgboost as xgb
        X = np.random.default_rng(0).normal(size=(50, 3)); y = X[:, 0] * X[:, 1]
        model = xgb.XGBRegressor(n_estimators=4, max_depth=3, n_jobs=1).fit(X, y)
        ex = shap.TreeExplainer(model)
        sv = ex.shap_values(X)
        ref = model.get_booster().predict(xgb.DMatrix(X), pred_contribs=True)
        print(type(ex).__module__, ex.backend, bool(np.allclose(sv, ref[:, :-1], atol=1e-5)), sys.argv[1:])
    """))
    res = _run([str(venv), "-m", "hitml.shap_ext", str(script), "x"], cwd=tmp_path,
               env={"HITML_SHAP_BACKEND": "cpu", "PYTHONWARNINGS": "ignore"})
    assert res.stdout.strip() == "hitml.shap_ext._explainer cpu True ['x']"


def test_coexists_with_another_gpu_backend(venv, tmp_path):
    """With shap-cuda (entry point "cuda") installed, shap.GPUTreeExplainer is shap-cuda's, as shap's own priority
    says; hitml stays reachable through backend= and through hitml.shap_ext.GPUTreeExplainer."""
    (tmp_path / "fake_cuda_backend.py").write_text("import shap\nclass GPUTreeExplainer(shap.TreeExplainer):\n    pass\n")
    info = tmp_path / "fake_shap_cuda-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: fake-shap-cuda\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[shap.tree_backends]\ncuda = fake_cuda_backend:GPUTreeExplainer\n")
    code = textwrap.dedent("""
        import numpy as np, shap, xgboost as xgb
        import hitml.shap_ext
        X = np.random.default_rng(0).normal(size=(40, 3)); y = X[:, 0]
        model = xgb.XGBRegressor(n_estimators=2, max_depth=2, n_jobs=1).fit(X, y)
        print(shap.GPUTreeExplainer.__module__, type(shap.TreeExplainer(model, backend="cpu")).__module__,
              hitml.shap_ext.GPUTreeExplainer.__module__)
    """)
    out = _run([str(venv), "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}).stdout.split()
    assert out == ["fake_cuda_backend", "hitml.shap_ext._explainer", "hitml.shap_ext._explainer"]
