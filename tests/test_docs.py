"""Every code block of README.md and docs/*.md runs as written.

Fenced blocks are found at any indentation (inside list items too) and dedented. The ```python blocks of one file
run in order in one fresh interpreter (cwd = repository root), so a later block can use
what an earlier one defined. ```bash blocks run in bash with the test environment's `python` first on PATH. A block whose
first line is `# requires: gpu` (or `multi-gpu`, `dask`, `dask-cuda`, `pyspark`) is skipped where that is missing. A bash line that calls scripts/test.sh is
not run again: that command is what runs this test. ```text blocks are output samples and ```console blocks install
transcripts (`$ pip install ...`: tests/test_packaging.py installs the wheel, scripts/env.sh the test extra); neither is
run here, so the test never changes the environment it runs in.
"""

from __future__ import annotations

import json
import os
import shutil
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hitml.kernels.device import gpu_available

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# A fence at any indentation (a block inside a list item too); its closing fence has the same indentation.
FENCE = re.compile(r"^([ \t]*)```(\w*)[^\n]*\n(.*?)^\1```[ \t]*$", re.S | re.M)
RUNNABLE = {"python", "bash", "sh"}

RUNNER = r"""
import json, sys
if __name__ == "__main__":  # Dask's spawned worker processes import this file again
    blocks = json.load(open(sys.argv[1]))
    ns = {"__name__": "__main__"}
    for b in blocks:
        exec(compile(b["src"], f"{b['file']}:{b['line']}", "exec"), ns)
"""


def _blocks(path: Path) -> list[dict]:
    text = path.read_text()
    out = []
    for m in FENCE.finditer(text):
        indent, lang = m.group(1), m.group(2).lower()
        src = "".join(line[len(indent):] if line.startswith(indent) else line.lstrip(" \t")
                      for line in m.group(3).splitlines(keepends=True))
        if lang not in RUNNABLE:
            continue
        line = text.count("\n", 0, m.start()) + 2
        need = re.match(r"#\s*requires:\s*([\w, -]+)", src.lstrip())
        out.append({"lang": "python" if lang == "python" else "bash", "src": src, "line": line,
                    "file": str(path.relative_to(ROOT)),
                    "requires": [r.strip() for r in need.group(1).split(",")] if need else []})
    return out


def _have(requirement: str) -> bool:
    if requirement == "gpu":
        return gpu_available()
    if requirement == "multi-gpu":
        return gpu_available() and __import__("cupy").cuda.runtime.getDeviceCount() >= 2
    if requirement in ("dask", "dask-cuda", "pyspark"):
        try:
            __import__({"dask": "dask.distributed", "dask-cuda": "dask_cuda"}.get(requirement, requirement))
        except ImportError:
            return False
        # Spark also needs a JVM
        return requirement != "pyspark" or bool(os.environ.get("JAVA_HOME") or shutil.which("java"))
    raise ValueError(f"unknown '# requires:' {requirement!r} in a doc block")


def test_every_doc_has_a_runnable_block():
    for path in DOCS:
        assert _blocks(path), f"{path.relative_to(ROOT)} has no runnable code block"


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_doc_code_blocks_run(path, tmp_path):
    blocks = _blocks(path)
    runnable = [b for b in blocks if all(_have(r) for r in b["requires"])]
    env = {**os.environ, "HITML_PROGRESS": "0", "PYTHONWARNINGS": "ignore", "MPLBACKEND": "Agg",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    py = [b for b in runnable if b["lang"] == "python"]
    if py:
        (tmp_path / "blocks.json").write_text(json.dumps(py))
        (tmp_path / "runner.py").write_text(RUNNER)
        res = subprocess.run([sys.executable, str(tmp_path / "runner.py"), str(tmp_path / "blocks.json")], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=600)
        assert res.returncode == 0, f"python blocks of {path.name} failed:\n{res.stdout[-2000:]}\n{res.stderr[-4000:]}"
    for b in runnable:
        if b["lang"] != "bash":
            continue
        src = "\n".join(line for line in b["src"].splitlines() if "scripts/test.sh" not in line)
        res = subprocess.run(["bash", "-euo", "pipefail", "-c", src], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=600)
        assert res.returncode == 0, f"bash block at {b['file']}:{b['line']} failed:\n{res.stdout[-2000:]}\n" \
                                    f"{res.stderr[-4000:]}"
    if not runnable:
        pytest.skip(f"every block of {path.name} needs {sorted({r for b in blocks for r in b['requires']})}")


def test_blocks_inside_list_items_are_collected(tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    md = tmp_path / "list.md"
    md.write_text("1. Step one:\n\n   ```python\n   x = 1\n   if x:\n       y = 2\n   ```\n\n"
                  "   ```python\n   # requires: gpu\n   import cupy\n   ```\n\n```text\nnot code\n```\n")
    blocks = _blocks(md)
    assert [(b["line"], b["src"], b["requires"]) for b in blocks] == [
        (4, "x = 1\nif x:\n    y = 2\n", []), (10, "# requires: gpu\nimport cupy\n", ["gpu"])]
