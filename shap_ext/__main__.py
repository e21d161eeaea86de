"""``python -m hitml.shap_ext [--backend auto|cpu|gpu] script.py [args...]``: run an unmodified script with hitml enabled.

Every ``shap.TreeExplainer(...)`` the script creates (and ``shap.Explainer`` on a tree model) computes with hitml's
engine, on the backend given by ``--backend``, else the ``HITML_SHAP_BACKEND`` environment variable, else "auto"
(GPU when CuPy sees one, otherwise CPU with one warning). ``python -m hitml.shap_ext -m module [args...]`` runs a module.
"""
from __future__ import annotations

import os
import runpy
import sys

USAGE = "usage: python -m hitml.shap_ext [--backend auto|cpu|gpu] (script.py | -m module) [args...]"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    backend = os.environ.get("HITML_SHAP_BACKEND", "auto")
    while args and args[0].startswith("--backend"):
        opt = args.pop(0)
        if "=" in opt:
            backend = opt.split("=", 1)[1]
        elif args:
            backend = args.pop(0)
        else:
            print(USAGE, file=sys.stderr)
            return 2
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, file=sys.stderr)
        return 0 if args else 2
    from hitml import shap_ext

    try:
        shap_ext.enable(backend)
    except ValueError as exc:
        print(f"python -m hitml.shap_ext: {exc}", file=sys.stderr)
        return 2
    if args[0] == "-m":
        if len(args) < 2:
            print(USAGE, file=sys.stderr)
            return 2
        sys.argv = [args[1], *args[2:]]
        runpy.run_module(args[1], run_name="__main__", alter_sys=True)
        return 0
    script = args[0]
    sys.argv = [script, *args[1:]]
    sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
    runpy.run_path(script, run_name="__main__")
    return 0


if __name__ == "__main__":
    sys.exit(main())
