"""setuptools hook: building or installing hitml also compiles its CPU TreeSHAP kernels and ships their Numba cache
entries.

``python -m hitml.kernels aot`` compiles the kernels with Numba for the building machine's CPU and writes their cache
entries under ``hitml/kernels/_compiled/numba_cache/`` (``kernels/_aot.py`` says how they are used, and when not).
It needs Numba only, no C compiler. A failed build only warns: the kernels then compile on first use. ``HITML_AOT=0``
skips it.
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
_NOT_BUILT = "hitml: the shipped kernels were not built"


class BuildPyWithKernels(build_py):
    """``build_py``, then the kernels' cache entries: into the source tree for an editable install, else into the
    build."""

    def run(self) -> None:
        super().run()
        if os.environ.get("HITML_AOT", "1") == "0":
            return
        if getattr(self, "editable_mode", False):
            out = os.path.join(ROOT, "kernels", "_compiled")
        else:   # a build folder left by an earlier build holds its entries: a failed build must not ship them
            out = os.path.join(os.path.abspath(self.build_lib), "hitml", "kernels", "_compiled")
            shutil.rmtree(out, ignore_errors=True)
        with tempfile.TemporaryDirectory(prefix="hitml-build-") as ns:   # `hitml.kernels` importable from the source
            env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (ns, os.environ.get("PYTHONPATH")) if p))
            try:
                os.makedirs(os.path.join(ns, "hitml"))
                os.symlink(os.path.join(ROOT, "kernels"), os.path.join(ns, "hitml", "kernels"))
                done = subprocess.run([sys.executable, "-m", "hitml.kernels", "aot", out], env=env, cwd=ns,
                                      capture_output=True, text=True)
                lines = done.stderr.strip().splitlines()
                code = done.returncode and (lines[-1] if lines else f"exit status {done.returncode}")
            except OSError as exc:   # no symbolic links (Windows without the right), no process to spare
                code = f"{exc}"
        if not code:
            print(done.stderr, end="", file=sys.stderr)   # the build's one line: what it built, how long it took
        elif code.startswith(_NOT_BUILT):   # the tool's own line, with the reason
            print(code, file=sys.stderr)
        else:   # a crash: its last line is the reason
            print(f"{_NOT_BUILT} ({code}); the CPU kernels compile on first use", file=sys.stderr)


class KernelsDistribution(Distribution):
    """A wheel holding the kernels' cache entries is for this platform and Python (its tag says so), not pure
    Python."""

    def has_ext_modules(self) -> bool:
        return os.environ.get("HITML_AOT", "1") != "0"


setup(cmdclass={"build_py": BuildPyWithKernels}, distclass=KernelsDistribution)
