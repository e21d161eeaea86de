"""The adapters export one way (hitml.kernels._exports.lazy_exports): dir() is __all__, every name resolves to the
object its module defines, and importing an adapter loads none of its heavy modules until a name is used."""
from __future__ import annotations

import ast
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("shap_ext", "xgboost_ext", "sklearn_ext")


@pytest.mark.parametrize("adapter", ADAPTERS)
def test_adapter_exports_through_lazy_exports(adapter):
    tree = ast.parse((ROOT / adapter / "__init__.py").read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", None) == "lazy_exports"]
    assert len(calls) == 1, f"{adapter}/__init__.py: one lazy_exports call, found {len(calls)}"
    defined = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)}
    assert not defined & {"__getattr__", "__dir__"}, f"{adapter}/__init__.py defines its own {defined}"
    mod = importlib.import_module(f"hitml.{adapter}")
    assert dir(mod) == mod.__all__ == sorted(mod.__all__)
    for name in mod.__all__:
        obj = getattr(mod, name)
        assert obj.__name__ == name and obj.__module__.startswith(f"hitml.{adapter}."), (name, obj.__module__)
        assert getattr(importlib.import_module(obj.__module__), name) is obj
    with pytest.raises(AttributeError, match=f"hitml.{adapter}' has no attribute 'no_such_name'"):
        getattr(mod, "no_such_name")  # noqa: B009 - the attribute look-up under test


def test_import_loads_no_heavy_module():
    code = ("import sys, hitml.xgboost_ext, hitml.sklearn_ext\n"
            "print(sorted(m for m in sys.modules if m.startswith(('xgboost', 'dask', 'hitml.xgboost_ext.',"
            " 'hitml.sklearn_ext.'))))\n"
            "from hitml.xgboost_ext import QuantileBinner\n"
            "print('hitml.xgboost_ext.binner' in sys.modules, 'hitml.xgboost_ext.sklearn' in sys.modules)\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split("\n")[:2] == ["[]", "True False"]
