"""integration/ scripts import each other without a cycle, and its helper modules import no other script."""
from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INTEGRATION = ROOT / "integration"


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """``{module: modules of ``sources`` it imports}``, from every import statement (nested ones too), written as
    ``import m``, ``from m import``, ``integration.m``, relative, or ``importlib.import_module``/``__import__`` of a
    constant name."""
    graph: dict[str, set[str]] = {}
    for name, text in sources.items():
        targets: set[str] = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level and not node.module:
                    targets.update(a.name for a in node.names)
                elif node.module:
                    targets.add(node.module)
                    targets.update(f"{node.module}.{a.name}" for a in node.names)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None)
                       == "__import__")):
                targets.add(node.args[0].value)
        mods = set()
        for t in targets:
            parts = t.split(".")
            head = parts[1] if parts[0] == "integration" and len(parts) > 1 else parts[0]
            if head in sources and head != name:
                mods.add(head)
        graph[name] = mods
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as ``[a, b, ..., a]``, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt, path + [nxt])
                if found:
                    return found
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state:
            found = visit(start, [start])
            if found:
                return found
    return None


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
