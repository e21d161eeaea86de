"""integration/ scripts import each other without a cycle, and its helper modules import no other script."""
from __future__ import annotations

from pathlib import Path

from _imports import find_cycle, import_graph

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION = ROOT / "integration"


def _sources() -> dict[str, str]:
    return {p.stem: p.read_text() for p in sorted(INTEGRATION.glob("*.py"))}


def test_no_import_cycle_in_integration():
    graph = import_graph(_sources())
    assert any(graph.values()), "the scripts import each other: the graph should not be empty"
    assert find_cycle(graph) is None, f"import cycle in integration/: {' -> '.join(find_cycle(graph))}"


def test_helper_modules_import_no_script():
    """Shared helpers (``_name.py``, diagnostics aside) sit at the bottom: they import no other integration module."""
    graph = import_graph(_sources())
    helpers = {m for m in graph if m.startswith("_") and not m.startswith("_diag")}
    assert helpers, "integration/ has helper modules"
    assert {m: sorted(graph[m]) for m in helpers if graph[m]} == {}


def test_the_checker_sees_cycles():
    sources = {
        "a": "import b\n",
        "b": "def f():\n    from integration.c import g\n",
        "c": "import importlib\nimportlib.import_module('a')\n",
        "d": "import numpy\nfrom . import a\n",
    }
    graph = import_graph(sources)
    assert graph == {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({**graph, "c": set()}) is None
