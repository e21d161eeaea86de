"""The CUDA sources compile, without warnings, under every build option the hosts pass, where ``nvcc`` is on PATH.

The GPU tests run each source only with the options they select; an option that is off by default (an A/B variant
such as ``_gpu_linear.TABLES``) would otherwise meet its compiler first on a GPU machine. NVRTC (CuPy's compiler) and
nvcc share the CUDA front end, so a source that nvcc rejects NVRTC rejects too. Skipped where nvcc is absent (CI).
"""
from __future__ import annotations

import itertools
import shutil
import subprocess
from pathlib import Path

import pytest

NVCC = shutil.which("nvcc")
ROOT = Path(__file__).resolve().parents[1] / "kernels"
pytestmark = pytest.mark.skipif(NVCC is None, reason="nvcc is not on PATH (only compiles the CUDA sources)")


def _compile(src: Path, defines: tuple[str, ...], tmp_path: Path) -> None:
    cmd = [NVCC, "-arch=sm_90", "--std=c++17", "-cubin", "-Werror", "all-warnings", "-o", str(tmp_path / "k.cubin"),
           *(f"-D{d}" for d in defines), "-x", "cu", str(src)]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, f"{src.name} {defines}:\n{res.stdout}{res.stderr}"


@pytest.mark.parametrize("src", sorted(p.relative_to(ROOT).as_posix() for p in ROOT.rglob("*.cu")))
def test_each_source_compiles_with_its_defaults(src, tmp_path):
    _compile(ROOT / src, (), tmp_path)


def _linear_options() -> list[tuple[str, ...]]:
    """linear.cu's options as ``_gpu_linear.launch`` and ``_diag_linear_gpu.py`` combine them: the stack and
    branch flags, each chunk length, with and without the chunk tables, and the first factor divided."""
    out = []
    for bits, local in itertools.product((False, True), repeat=2):
        base = tuple(d for d, on in (("HITML_LINEAR_BITS", bits), ("HITML_LINEAR_LOCAL", local)) if on)
        out += [base + ("EV_CHUNK=128",), base + ("EV_CHUNK=64",)]
        out += [base + ("HITML_LINEAR_TABLES", f"EV_CHUNK={c}") for c in (16, 32, 64)]
    out.append(("HITML_LINEAR_BITS", "HITML_LINEAR_LOCAL", "HITML_LINEAR_DIVIDE_FIRST", "EV_CHUNK=128"))
    from hitml.kernels.treeshap import _gpu_linear   # the modules built for a lane width and output count
    out += [tuple(o[2:] for o in _gpu_linear._options(ql, ks)) for ql, ks in sorted(_gpu_linear.SPECIALIZED)]
    out += [("HITML_LINEAR_TABLES", "EV_CHUNK=32", "LIN_QL=16", "LIN_KS=2"), ("EV_CHUNK=128", "LIN_QL=8", "LIN_KS=1")]
    return out


@pytest.mark.parametrize("defines", _linear_options(), ids=lambda d: "-".join(d))
def test_linear_compiles_under_every_option(defines, tmp_path):
    _compile(ROOT / "treeshap" / "linear.cu", defines, tmp_path)
