"""setuptools hook: building or installing hitml also builds the compiled copies of its CPU TreeSHAP kernels.

``python -m hitml.kernels aot`` compiles the kernels with Numba's ``pycc`` for the building machine's CPU into
``hitml/kernels/_compiled/`` (``kernels/_aot.py`` says how they are used, and when not). A failed build only warns:
the kernels then compile on first use. ``HITML_AOT=0`` skips it.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithKernels(build_py):
    """``build_py``, then the compiled kernels: into the source tree for an editable install, else into the build."""

    def run(self) -> None:
        super().run()
        if os.environ.get("HITML_AOT", "1") == "0":
            return
        if getattr(self, "editable_mode", False):
            out = os.path.join(ROOT, "kernels", "_compiled")
        else:   # a build folder left by an earlier build holds its copies: a failed build must not ship them
            out = os.path.join(os.path.abspath(self.build_lib), "hitml", "kernels", "_compiled")
            shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="hitml-build-") as ns:   # `hitml.kernels` importable from the source
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ns, os.environ.get("PYTHONPATH")) if p))
            try:
                os.makedirs(os.path.join(ns, "hitml"))
                os.symlink(os.path.join(ROOT, "kernels"), os.path.join(ns, "hitml", "kernels"))
                code = subprocess.run([sys.executable, "-m", "hitml.kernels", "aot", out], env=env, cwd=ns).returncode
            except OSError as exc:   # no symbolic links (Windows without the right), no process to spare
                code = f"{exc}"
        if code:
            print(f"hitml: the compiled kernels were not built ({code}); the CPU kernels compile on first use",
                  file=sys.stderr)


class KernelsDistribution(Distribution):
    """A wheel holding the compiled kernels is for this platform and Python (its tag says so), not pure Python."""

    def has_ext_modules(self) -> bool:
        return os.environ.get("HITML_AOT", "1") != "0"


setup(cmdclass={"build_py": BuildPyWithKernels}, distclass=KernelsDistribution)
