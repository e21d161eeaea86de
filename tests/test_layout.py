"""The package's one-door rules (docs/design/layout.md), checked by reading the source and by calling the doors.

- CuPy is imported in one module, ``kernels/device.py``; every other module asks it (``cupy_module()``,
  ``array_module(x)``, ``is_cupy_array(x)``), GPU-only modules included.
- The backend string is resolved once, by the adapter: ``kernels.treeshap`` takes only "cpu" or "gpu"; the kernel
  families pick their engine module through ``device.engine_module``.
- Every engine's tuning is one checked options object (``kernels._options.Options``).
- Code only benchmarks or tests use lives in ``integration/`` or ``tests/``, not in the package.
- One export style in ``kernels/<family>/__init__.py``: eager relative imports, then ``__all__``; no ``__getattr__``.
- Comments say why; measurement history (before -> after numbers, rates, dates, commits) lives in docs/design/.
- Imports run one way: no import cycle in the package (imports inside functions count); the build and warm-up tools
  (``kernels/_warmup.py``, ``kernels/_aot_build.py``, ``python -m hitml.kernels``) import the kernel families and
  nothing imports them; the shipped cache entries (``kernels/_aot.py``), the work items, the background compiles
  and the registry below the families import none.
"""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

import hitml.kernels.device as dev
from _imports import find_cycle, import_graph, package_sources

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("kernels", "shap_ext", "xgboost_ext", "sklearn_ext")
CUPY_IMPORT = re.compile(r"^\s*(import|from)\s+cupyx?\b|(__import__|import_module)\(\s*['\"]cupy", re.MULTILINE)


def _sources():
    for pkg in PACKAGES:
        yield from sorted((ROOT / pkg).rglob("*.py"))


def test_sources_found():
    files = [p.relative_to(ROOT).as_posix() for p in _sources()]
    assert "kernels/device.py" in files and "shap_ext/_explainer.py" in files and len(files) > 40


def test_cupy_is_imported_only_in_device():
    offenders = [f"{p.relative_to(ROOT)}:{src[:m.start()].count(chr(10)) + 1}"
                 for p in _sources() for src in [p.read_text()] for m in CUPY_IMPORT.finditer(src)
                 if p.relative_to(ROOT).as_posix() != "kernels/device.py"]
    assert not offenders, f"import CuPy through hitml.kernels.device (cupy_module / array_module): {offenders}"


def test_pattern_catches_each_spelling():
    for line in ("import cupy", "    import cupy as cp", "from cupy import cuda", "import cupyx.scipy",
                 'xp = __import__("cupy")', "importlib.import_module('cupy')"):
        assert CUPY_IMPORT.search(line), line
    for line in ("import cupy_like", "# import cupy here", "x: cupy.ndarray", "cp = cupy_module()"):
        assert not CUPY_IMPORT.search(line), line


BENCH_ONLY = ("kernels_only", "central_from_power_sums", "next_fit_bins", "kendall_discordant", "naive_sketch",
              "naive_from_power_sums")


def test_bench_and_test_helpers_stay_out_of_the_package():
    pattern = re.compile(r"\b(%s)\b|^\s*(from|import)\s+(integration|tests|_naive_sketch)\b" % "|".join(BENCH_ONLY),
                         re.MULTILINE)
    offenders = [f"{p.relative_to(ROOT)}: {m.group(0).strip()}" for p in _sources()
                 for m in pattern.finditer(p.read_text())]
    assert not offenders, f"bench/test-only code belongs in integration/ or tests/: {offenders}"


HISTORY = re.compile(r"\d(\.\d+)?(e\d+)?\s*(->|\u2192)\s*\d|\d\s*(rows/s|GB/s|MB/s)\b|\b20\d\d-\d\d-\d\d\b"
                     r"|\b(commit|rev)\s+[0-9a-f]{7,}|\b\d+(\.\d+)?x (faster|slower)\b")


def test_no_measurement_history_in_source():
    files = [p for p in _sources()] + [p for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.cu"))]
    offenders = [f"{p.relative_to(ROOT)}:{i}: {line.strip()}" for p in files
                 for i, line in enumerate(p.read_text().splitlines(), 1) if HISTORY.search(line)]
    assert not offenders, f"move the numbers to docs/design/*.md and keep the why: {offenders}"


def test_history_pattern_catches_each_form():
    for line in ("# 289 -> 1319 rows/s", "# 2.8 -> 19.5 GB/s", "# at 3.6e6 rows/s", "# on 2026-11-20",
                 "# see commit 9fe33de", "# 1.5x faster"):
        assert HISTORY.search(line), line
    for line in ("# (n, M+1) -> (n, M)", "x = a - 1 if b else -1", "# wider is slower"):
        assert not HISTORY.search(line), line


def _package_graph() -> dict[str, set[str]]:
    sources, packages = package_sources(ROOT, PACKAGES)
    return import_graph(sources, "hitml", packages)


def test_no_import_cycle_in_the_package():
    graph = _package_graph()
    assert "kernels.treeshap.cpu" in graph and "kernels._aot" in graph["kernels._background"], "the graph is drawn"
    cycle = find_cycle(graph)
    assert cycle is None, f"import cycle in the package: {' -> '.join(cycle)}"


TOOLS = {"kernels._warmup", "kernels._aot_build", "kernels.__main__"}   # the top: build and warm-up tools
FAMILIES = ("kernels.treeshap", "kernels.sketch", "kernels.shuffle", "kernels.shapley", "kernels.permutations")


def test_compile_layers_run_one_way():
    """The tools sit at the top (only other tools import them), the background compiles, the work items and the
    shipped cache entries below the families (they import no family), the registry at the bottom (it imports
    nothing of the package)."""
    graph = _package_graph()
    importers = {m: sorted(n for n in graph if m in graph[n] and n not in TOOLS) for m in TOOLS}
    assert importers == {m: [] for m in TOOLS}, "the library imports a build or warm-up tool"
    assert graph["kernels._registry"] == set()
    for low in ("kernels._aot", "kernels._items", "kernels._background"):
        family = sorted(t for t in graph[low] if t.startswith(FAMILIES))
        assert family == [], f"{low} imports kernel families: {family}"
    from hitml.kernels import _registry, _warmup

    declaring = {n.removeprefix("hitml.") for n in _warmup.FAMILY_MODULES}
    assert declaring <= set(graph) and {f for f in FAMILIES if any(d.startswith(f) for d in declaring)} == set(
        FAMILIES) - {"kernels.permutations"}, "the warm-up tool imports a module of every family"
    assert set(_warmup.warmup_tasks()) >= {"treeshap", "treeshap-paths", "sketch", "shuffle", "permutations"}
    assert all(g in _registry.warmups() for gs in _registry.shipped_modules().values() for g in gs)


def test_the_package_checker_sees_cycles():
    sources = {
        "kernels": "from .device import x\n",
        "kernels.device": "import numpy\n",
        "kernels._aot": "def entry():\n    from . import _warmup\n",
        "kernels._warmup": "from .treeshap import cpu\nfrom hitml.kernels.device import x\n",
        "kernels.treeshap": "from ..device import x\nfrom .paths import PathSet\n",
        "kernels.treeshap.paths": "import importlib\nimportlib.import_module('hitml.kernels._aot')\n",
        "kernels.treeshap.cpu": "from .. import _aot\nfrom . import paths as p\n",
    }
    graph = import_graph(sources, "hitml", {"kernels", "kernels.treeshap"})
    assert graph == {"kernels": {"kernels.device"}, "kernels.device": set(), "kernels._aot": {"kernels._warmup"},
                     "kernels._warmup": {"kernels.treeshap.cpu", "kernels.device"},
                     "kernels.treeshap": {"kernels.device", "kernels.treeshap.paths"},
                     "kernels.treeshap.paths": {"kernels._aot"},
                     "kernels.treeshap.cpu": {"kernels._aot", "kernels.treeshap.paths"}}
    assert find_cycle(graph) == ["kernels._aot", "kernels._warmup", "kernels.treeshap.cpu", "kernels._aot"]
    assert find_cycle({**graph, "kernels._aot": set()}) is None


def test_check_backend_one_message():
    assert dev.check_backend(None) == "auto"
    for bad in ("tpu", "GPU", 1, ""):
        with pytest.raises(ValueError, match=r"backend must be one of \('cpu', 'gpu', 'auto'\)"):
            dev.check_backend(bad)
        with pytest.raises(ValueError, match=r"backend must be one of \('cpu', 'gpu', 'auto'\)"):
            dev.resolve_backend(bad)


def test_check_resolved_refuses_auto(monkeypatch):
    assert dev.check_resolved("cpu") == "cpu"
    with pytest.raises(ValueError, match='backend="auto" must be resolved first'):
        dev.check_resolved("auto")
    with pytest.raises(ValueError, match="backend must be one of"):
        dev.check_resolved("tpu")
    monkeypatch.setattr(dev, "_cupy_or_reason", lambda: (None, "CuPy sees no CUDA device"))
    with pytest.raises(dev.GPUUnavailableError, match="CuPy sees no CUDA device"):
        dev.check_resolved("gpu")


def test_array_module_of_host_arrays():
    assert dev.array_module(np.zeros(2)) is np
    assert dev.array_module([1.0]) is np
    assert dev.array_module("cpu") is np


def test_backend_resolved_once_on_the_way_to_the_kernel(monkeypatch):
    """TreeExplainer resolves "auto" when built; the kernel gets "cpu" or "gpu" and resolves nothing."""
    shap = pytest.importorskip("shap")
    xgb = pytest.importorskip("xgboost")
    import hitml.kernels.treeshap as ts
    import hitml.shap_ext._explainer as exp_mod

    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    model = xgb.XGBRegressor(n_estimators=3, max_depth=2, n_jobs=1).fit(X, X[:, 0] - X[:, 1])
    calls = []
    real_resolve = exp_mod.resolve_backend
    monkeypatch.setattr(exp_mod, "resolve_backend", lambda b, *a: calls.append(b) or real_resolve(b, *a))
    monkeypatch.setattr(dev, "resolve_backend", lambda *a, **k: pytest.fail("the kernel resolved the backend again"))
    seen = []
    real_values = ts.shap_values
    monkeypatch.setattr(ts, "shap_values", lambda *a, **k: seen.append(k["backend"]) or real_values(*a, **k))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # "auto" without a GPU warns once per process
        ex = exp_mod.TreeExplainer(model, backend="auto")
    phi = ex.shap_values(X[:5])
    assert calls == ["auto"] and seen == [ex.backend] and ex.backend in ("cpu", "gpu")
    ref = shap.TreeExplainer(model).shap_values(X[:5])  # shap's own C++ TreeSHAP
    np.testing.assert_allclose(phi, ref, rtol=1e-5, atol=1e-5)
    paths = ex.paths
    with pytest.raises(ValueError, match='backend="auto" must be resolved first'):
        real_values(paths, X[:5], backend="auto")


def test_engine_options_are_checked_objects():
    """Every engine's tuning is one typed options object (kernels._options.Options): a bad value or name raises."""
    import dataclasses

    from hitml.kernels._options import Options
    from hitml.kernels.sketch._gpu_moments import GpuSketchOptions
    from hitml.kernels.treeshap import cpu
    from hitml.kernels.treeshap._gpu_core import GpuOptions

    assert isinstance(cpu.options, cpu.CpuOptions)
    for cls in (cpu.CpuOptions, GpuOptions, GpuSketchOptions):
        assert issubclass(cls, Options) and dataclasses.is_dataclass(cls)
    opts = cpu.CpuOptions()
    assert (opts.row_kernel, opts.pattern_tables, opts.sibling_pairs) == ("quadrature", False, True)
    with pytest.raises(ValueError, match=r"options.row_kernel must be one of \('quadrature', 'dp'\), got 'qd'"):
        opts.row_kernel = "qd"
    with pytest.raises(TypeError, match="options.pattern_tables must be True or False"):
        opts.pattern_tables = "yes"
    with pytest.raises(AttributeError, match="CpuOptions has no option 'ROW_KERNEL'; options: row_kernel"):
        opts.ROW_KERNEL = "dp"
    with pytest.raises(ValueError, match="row_kernel"):
        cpu.CpuOptions(row_kernel="fast")
    opts.row_kernel = "dp"
    assert opts.row_kernel == "dp" and cpu.options.row_kernel == "quadrature"
    with pytest.raises(ValueError, match=r"options.shap_sums must be one of"):
        GpuOptions().shap_sums = "sum"
    assert GpuSketchOptions(vals=np.int64(32)) == GpuSketchOptions(vals=32)  # normalised: one plan-cache key
    assert hash(GpuSketchOptions(stages=3)) == hash(GpuSketchOptions(stages=3))
    for bad in ({"vals": 17}, {"stages": 5}, {"minb": 0}, {"blocks_per_sm": 0}, {"bulk": "yes"}):
        with pytest.raises(ValueError, match=f"options.{next(iter(bad))} must be"):
            GpuSketchOptions(**bad)
    with pytest.raises(dataclasses.FrozenInstanceError):
        GpuSketchOptions().vals = 16


def test_cpu_row_kernels_agree_with_shap():
    """Both settings of cpu.options.row_kernel give shap's C++ TreeSHAP values (the option is read per call)."""
    shap = pytest.importorskip("shap")
    xgb = pytest.importorskip("xgboost")
    from hitml.kernels.treeshap import cpu, extract_paths

    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 4))
    model = xgb.XGBRegressor(n_estimators=5, max_depth=4, n_jobs=1).fit(X, X[:, 0] * X[:, 1] + X[:, 2])
    ens = shap.TreeExplainer(model).model
    ps = extract_paths(ens.children_left, ens.children_right, ens.children_default, ens.features, ens.thresholds,
                       ens.values, ens.node_sample_weight, ens.base_offset, n_features=4)
    ref = shap.TreeExplainer(model).shap_values(X[:20])
    try:
        for kernel in ("dp", "quadrature"):
            cpu.options.row_kernel = kernel
            np.testing.assert_allclose(cpu.shap_values(ps, X[:20])[:, :4, 0], ref, rtol=1e-5, atol=1e-5)
    finally:
        cpu.options.row_kernel = "quadrature"


def test_one_export_style_in_kernel_families():
    import ast
    import importlib

    families = sorted(p.parent for p in (ROOT / "kernels").glob("*/__init__.py") if p.parent.name != "permutations")
    assert {f.name for f in families} >= {"shapley", "shuffle", "sketch", "treeshap"}
    for fam in families:
        tree = ast.parse((fam / "__init__.py").read_text())
        names = [n.name for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef))]
        assert "__getattr__" not in names, f"kernels/{fam.name}: lazy __getattr__ exports"
        assert "globals()" not in (fam / "__init__.py").read_text(), f"kernels/{fam.name}: globals() exports"
        body = [n for n in tree.body if not (isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant))]
        is_all = [isinstance(n, ast.Assign) and n.targets[0].id == "__all__" for n in body]
        all_at = is_all.index(True)
        defs = [i for i, n in enumerate(body) if isinstance(n, (ast.FunctionDef, ast.ClassDef, ast.Assign))
                and not is_all[i]]
        first_def = defs[0] if defs else len(body)
        assert all(isinstance(n, (ast.Import, ast.ImportFrom)) for n in body[:all_at]), f"kernels/{fam.name}"
        assert all_at < first_def, f"kernels/{fam.name}: __all__ comes right after the imports"
        mod = importlib.import_module(f"hitml.kernels.{fam.name}")
        missing = [n for n in mod.__all__ if not hasattr(mod, n)]
        assert not missing, f"kernels/{fam.name} exports names it does not define: {missing}"


def test_families_pick_their_engine_through_device():
    """treeshap, sketch and shuffle dispatch through device.engine_module (no importlib or `from . import gpu` of their
    own), and engine_module gives the family's cpu module for "cpu" and refuses "auto"."""
    for fam in ("treeshap", "sketch", "shuffle"):
        src = (ROOT / "kernels" / fam / "__init__.py").read_text()
        assert "engine_module(__name__" in src, fam
        assert not re.search(r"importlib|from \. import (cpu|gpu)|import_module", src), fam
    assert dev.engine_module("hitml.kernels.sketch", "cpu").__name__ == "hitml.kernels.sketch.cpu"
    with pytest.raises(ValueError, match="resolved first"):
        dev.engine_module("hitml.kernels.sketch", "auto")
    assert dev.engine_module("hitml.kernels.shapley", "cpu").__name__ == "hitml.kernels.shapley.cpu"
    assert "engine_module(" in (ROOT / "kernels" / "shapley" / "_api.py").read_text()
    with pytest.raises(NotImplementedError, match=r"hitml\.kernels\.shuffle\.cpu\.cpu\) is not available"):
        dev.engine_module("hitml.kernels.shuffle.cpu", "cpu")  # a package without engine modules


def test_every_noqa_says_why():
    """Each ``# noqa`` names its codes and gives the reason after them (``# noqa: E402 - after the sys.path set-up``
    or ``# noqa: F401 (the engine's API)``), so a reader sees why the rule does not hold there."""
    bare = []
    for folder in ("kernels", "shap_ext", "xgboost_ext", "sklearn_ext", "integration", "tests"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for i, line in enumerate(path.read_text().splitlines(), 1):
                m = re.search(r".*#\s*noqa\b(.*)$", line)  # the last noqa of the line
                if m and not re.match(r":\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*\s*(-\s*\S|\(\S)", m.group(1)):
                    bare.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    assert not bare, "noqa without a reason:\n" + "\n".join(bare)


# The broad catches left in the package, by "path::function": how many, and why no value can depend on them. Every
# other handler names the exceptions it expects (AttributeError, NotFittedError, CatBoostError, ...), so that an
# unexpected error surfaces instead of silently taking another path to the values (issue #39).
BROAD_EXCEPT_ALLOWED = {
    "kernels/_items.py::run_items.work": (1, "a worker thread's error, re-raised in the calling thread"),
    "kernels/sketch/_newton.py::run_features.work": (1, "a worker thread's error, re-raised in the caller"),
    "kernels/treeshap/_gpu_patterns.py::_Ahead.run": (1, "a compile thread's error, re-raised in the caller"),
    "kernels/treeshap/_gpu_patterns.py::_Upload.run": (1, "an upload thread's error: the pass uploads again in its own thread"),
    "kernels/_warmup.py::_run_task": (1, "warm-up reporting: the error is printed, no value is computed"),
    "kernels/_warmup.py::_fork_runs": (1, "a forked compile child only sets its exit code"),
    "kernels/_aot_build.py::main": (1, "command-line reporting of a failed build; kernels compile on first use"),
    "kernels/device.py::_cupy_or_reason": (2, "CuPy import / device probing: only decides 'no usable GPU'"),
    "kernels/device.py::_PinnedPool.take": (1, "pinned host memory or pageable: the same bytes either way"),
    "kernels/sketch/_gpu_moments.py::_Launches.graph": (1, "a CUDA graph or plain launches of the same kernels"),
    "sklearn_ext/_shapley.py::ShapleyExplainer.fit": (1, "re-raised as ValueError with the model's error chained"),
    "sklearn_ext/_shapley.py::ShapleyExplainer._allow_nan": (1, "a third-party estimator's tags failing only "
                                                             "refuses NaN (a raise), never changes a value"),
}


def _broad_handlers(source: str) -> list[tuple[str, int]]:
    """``(function qualname, line)`` of each ``except:``, ``except Exception`` or ``except BaseException`` (alone
    or in a tuple) in ``source``."""
    import ast

    def broad(t) -> bool:
        if t is None:
            return True
        return any((isinstance(e, ast.Name) and e.id in ("Exception", "BaseException"))
                   or (isinstance(e, ast.Attribute) and e.attr in ("Exception", "BaseException"))
                   for e in (t.elts if isinstance(t, ast.Tuple) else [t]))

    found = []

    def visit(node, scope):
        for child in ast.iter_child_nodes(node):
            inner = scope + [child.name] if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef,
                                                               ast.ClassDef)) else scope
            if isinstance(child, ast.ExceptHandler) and broad(child.type):
                found.append((".".join(scope) or "<module>", child.lineno))
            visit(child, inner)

    visit(ast.parse(source), [])
    return found


def test_broad_excepts_only_where_no_value_depends_on_them():
    """No ``except Exception`` / ``except BaseException`` / bare ``except:`` in the package outside the allow-list
    (each entry with its count and reason): a broad catch where a value or a path to values depends on it turns an
    unexpected error (a missing optional package, a library change) into silently other values."""
    seen: dict[str, list[int]] = {}
    for path in _sources():
        for scope, line in _broad_handlers(path.read_text()):
            seen.setdefault(f"{path.relative_to(ROOT)}::{scope}", []).append(line)
    wrong = [f"{key} (lines {lines}): {len(lines)} broad handler(s), allowed "
             f"{BROAD_EXCEPT_ALLOWED.get(key, (0, ''))[0]}" for key, lines in sorted(seen.items())
             if len(lines) != BROAD_EXCEPT_ALLOWED.get(key, (0, ""))[0]]
    stale = sorted(set(BROAD_EXCEPT_ALLOWED) - set(seen))
    assert not wrong, "broad except outside the allow-list (name the exceptions, or allow it with a reason):\n" + \
        "\n".join(wrong)
    assert not stale, f"allow-list entries without a broad handler any more: {stale}"
    # the reader catches each spelling
    spelled = "def f():\n    try: g()\n    except: pass\n    try: g()\n    except (ValueError, Exception): pass\n" \
              "    try: g()\n    except builtins.BaseException: pass\n    try: g()\n    except ValueError: pass\n"
    assert [line for _, line in _broad_handlers(spelled)] == [3, 5, 7]
