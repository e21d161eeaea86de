"""Each adapter touches its host libraries' private names only in its ``_compat.py``.

A private name is one starting with ``_`` (dunders aside) that belongs to shap, XGBoost, scikit-learn, LightGBM or
CatBoost: a private module or name imported from them, an attribute read off their objects (``model._predictors``,
``getattr(ens, "_xgb_dmatrix_props")``), or a private method of theirs that a hitml subclass overrides. The source
cannot tell whose object ``x._name`` is, so an attribute counts as hitml's own only where hitml itself defines that
name outside the ``_compat.py`` modules (assigns it, or defines a function, class or class attribute of that name).
"""
from __future__ import annotations

import ast
import importlib
import inspect
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ADAPTERS = ("shap_ext", "xgboost_ext", "sklearn_ext")
PACKAGES = ("kernels", *ADAPTERS)
HOSTS = frozenset({"shap", "xgboost", "sklearn", "lightgbm", "catboost"})
# Not a host library of this rule: dask documents ``collection._meta`` as the way to read a collection's prototype.
ALLOWED = frozenset({"_meta"})
# Files another change owns that still hold a host private name, with the name: the entry must stay true (the test
# fails once the file no longer needs it) and goes when the file imports from its adapter's _compat.py.
PENDING = {
}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _sources(packages=PACKAGES):
    for pkg in packages:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            yield path.relative_to(ROOT).as_posix(), path.read_text()


def own_private_names(sources) -> set[str]:
    """Private names hitml defines: attributes it assigns, its functions and classes, class-level and module-level
    names; ``_compat.py`` modules left out (what they define wraps a host name)."""
    names: set[str] = set()
    for rel, text in sources:
        if rel.endswith("/_compat.py"):
            continue
        tree = ast.parse(text)
        scopes = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for body in scopes:
            for node in body:
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AnnAssign) else [])
                names.update(t.id for t in targets if isinstance(t, ast.Name))
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                for t in targets:
                    for sub in ast.walk(t):
                        if isinstance(sub, ast.Attribute):
                            names.add(sub.attr)
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr"
                  and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)):
                names.add(node.args[1].value)
    return {n for n in names if isinstance(n, str) and _private(n)}


def _host_private_path(dotted: str) -> bool:
    parts = dotted.split(".")
    return parts[0] in HOSTS and any(_private(p) for p in parts[1:])


def private_uses(text: str, own: set[str]) -> list[str]:
    """The host private names a module's source touches, as ``line: name``."""
    found = []
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module.split(".")[0] in HOSTS:
                for alias in node.names:
                    if _host_private_path(f"{node.module}.{alias.name}"):
                        found.append(f"{node.lineno}: {node.module}.{alias.name}")
        elif isinstance(node, ast.Import):
            found += [f"{node.lineno}: {a.name}" for a in node.names if _host_private_path(a.name)]
        elif isinstance(node, ast.Attribute):
            if _private(node.attr) and node.attr not in own and node.attr not in ALLOWED:
                found.append(f"{node.lineno}: {node.attr}")
        elif (isinstance(node, ast.Call) and _is_import(node) and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str) and _host_private_path(node.args[0].value)):
            found.append(f"{node.lineno}: {node.args[0].value}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "hasattr", "setattr", "delattr") and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
            name = node.args[1].value
            if _private(name) and name not in own and name not in ALLOWED:
                found.append(f"{node.lineno}: {name}")
    return found


def _is_import(node: ast.Call) -> bool:
    f = node.func
    return (isinstance(f, ast.Name) and f.id == "__import__") or (isinstance(f, ast.Attribute)
                                                                  and f.attr == "import_module")


def _name_of(entry: str) -> str:
    return entry.split(": ", 1)[1]


OWN = own_private_names(list(_sources()))


@pytest.mark.parametrize("rel", [rel for rel, _ in _sources(ADAPTERS) if not rel.endswith("/_compat.py")])
def test_no_host_private_name_outside_compat(rel):
    uses = private_uses((ROOT / rel).read_text(), OWN)
    pending = PENDING.get(rel, set())
    if pending:
        left = {_name_of(u) for u in uses}
        assert pending <= left, f"{rel} no longer uses {sorted(pending - left)}: drop them from PENDING"
        uses = [u for u in uses if _name_of(u) not in pending]
    assert not uses, f"{rel} touches host private names outside _compat.py: {uses}"


def _adapter_classes():
    for pkg in ADAPTERS:
        for path in sorted((ROOT / pkg).glob("*.py")):
            if path.name in ("__main__.py", "_compat.py"):
                continue
            mod = importlib.import_module(f"hitml.{pkg}.{path.stem}")
            for cls in vars(mod).values():
                if inspect.isclass(cls) and cls.__module__ == mod.__name__:
                    yield f"{pkg}/{path.name}", cls


def _is_host(cls: type) -> bool:
    return cls.__module__.split(".")[0] in HOSTS


def _abstract_in_host(cls: type, name: str) -> bool:
    """The host declares ``name`` abstract: its documented way to subclass (SelectorMixin._get_support_mask)."""
    return any(getattr(vars(b).get(name), "__isabstractmethod__", False) for b in cls.__mro__ if _is_host(b))


def test_no_override_of_a_host_private_method_outside_compat():
    """A hitml class (outside _compat.py) that defines a private name a host base class defines overrides it."""
    bad = []
    for rel, cls in _adapter_classes():
        host_names = {n for base in cls.__mro__ if _is_host(base) for n in vars(base) if _private(n)}
        for base in cls.__mro__:
            if base.__module__.startswith("hitml.") and not base.__module__.endswith("._compat"):
                bad += [f"{rel}: {base.__name__}.{n}" for n in vars(base)
                        if n in host_names and n in OWN and not _abstract_in_host(cls, n)]
    assert not bad, f"host private methods overridden outside _compat.py: {sorted(set(bad))}"


def test_the_checker_finds_each_kind_of_use():
    """The rules above flag what they should, and not hitml's own names."""
    src = '''
from sklearn.utils._param_validation import Interval
from sklearn.utils.validation import _num_samples, check_array
from lightgbm.basic import _data_from_pandas
import shap.explainers._tree
from hitml.kernels._progress import progress_bar
import importlib
mod = importlib.import_module("sklearn.ensemble._iforest")
model._predictors
shap.explainers._tree.TreeEnsemble
getattr(ens, "_xgb_dmatrix_props", {})
self._validate_data(X)
ens._own_thing
self._own_thing = 1
x._meta
'''
    uses = private_uses(src, own={"_own_thing"})
    assert sorted(_name_of(u) for u in uses) == sorted([
        "sklearn.utils._param_validation.Interval", "sklearn.utils.validation._num_samples",
        "lightgbm.basic._data_from_pandas", "shap.explainers._tree", "sklearn.ensemble._iforest", "_predictors",
        "_xgb_dmatrix_props", "_validate_data", "_tree"])


def test_compat_modules_are_the_only_users():
    """Each _compat.py holds host private names (else it has no reason to exist) and imports no other adapter."""
    for pkg in ADAPTERS:
        text = (ROOT / pkg / "_compat.py").read_text()
        assert private_uses(text, OWN), f"{pkg}/_compat.py wraps no host private name"
        imported = {n.module.split(".")[0] for n in ast.walk(ast.parse(text)) if isinstance(n, ast.ImportFrom)
                    and n.module and n.level == 0}
        assert not imported & {"hitml"}, f"{pkg}/_compat.py imports hitml: it wraps host names only"
