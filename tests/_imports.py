"""The import graph of a set of modules, drawn from their source (every import statement, nested ones too), and a
cycle in it: for integration/'s scripts (test_integration_imports.py) and the package (test_layout.py)."""
from __future__ import annotations

import ast
from collections.abc import Collection
from pathlib import Path


def package_sources(root: Path, packages: Collection[str]) -> tuple[dict[str, str], set[str]]:
    """``({dotted module name: source}, {names that are packages})`` of the ``*.py`` files under ``root / pkg`` for
    each ``pkg`` of ``packages`` (``kernels/treeshap/cpu.py`` is ``kernels.treeshap.cpu``, its ``__init__.py`` is
    ``kernels.treeshap``)."""
    sources, pkgs = {}, set()
    for pkg in packages:
        for path in sorted((root / pkg).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
                pkgs.add(".".join(parts))
            sources[".".join(parts)] = path.read_text()
    return sources, pkgs


def import_graph(sources: dict[str, str], prefix: str = "integration",
                 packages: Collection[str] = ()) -> dict[str, set[str]]:
    """``{module: modules of ``sources`` it imports}``, from every import statement (nested ones too): ``import m``,
    ``from m import n`` (the module ``m.n`` where there is one, else ``m``), relative ones (resolved against the
    module's package; the modules named in ``packages`` are packages, their ``__init__``), absolute ones with or
    without ``prefix`` (``integration.m``, ``hitml.kernels.m``), and ``importlib.import_module``/``__import__`` of a
    constant name. A name resolves to the longest of its dotted prefixes that is a module of ``sources``."""
    packages = set(packages)

    def resolve(target: str) -> str | None:
        if prefix and target.startswith(prefix + "."):
            target = target[len(prefix) + 1:]
        parts = target.split(".")
        for end in range(len(parts), 0, -1):
            name = ".".join(parts[:end])
            if name in sources:
                return name
        return None

    graph: dict[str, set[str]] = {}
    for name, text in sources.items():
        base = name if name in packages else name.rpartition(".")[0]
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Import):
                targets.update(resolve(a.name) for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = base.split(".") if base else []
                    parts = parts[:len(parts) - (node.level - 1)]
                    module = ".".join(parts + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                targets.update(resolve(f"{module}.{a.name}" if module else a.name) for a in node.names)
            elif (isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant)
                  and isinstance(node.args[0].value, str)
                  and (getattr(node.func, "attr", None) == "import_module" or getattr(node.func, "id", None)
                       == "__import__")):
                targets.add(resolve(node.args[0].value))
        graph[name] = {t for t in targets if t is not None and t != name}
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
