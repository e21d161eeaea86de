"""Sphinx configuration of hitml's API reference (built by tests/test_api_docs.py with warnings as errors)."""
from __future__ import annotations

import os

os.environ.setdefault("HITML_PROGRESS", "0")

project = "hitml"
author = "hitml contributors"
extensions = ["sphinx.ext.autodoc", "numpydoc"]
root_doc = "index"
exclude_patterns = ["_build"]
html_theme = "alabaster"
autodoc_member_order = "bysource"
autodoc_typehints = "none"  # numpydoc's Parameters sections carry the types; signatures stay readable
numpydoc_show_class_members = False
numpydoc_class_members_toctree = False
numpydoc_validation_checks: set[str] = set()

_XGB_MARK = "XGBoost's parameters (from ``help(xgboost."


def _xgboost_parameters_verbatim(app, what, name, obj, options, lines):
    """hitml.xgboost_ext's estimators append XGBoost's own docstring for help(); render it verbatim here, since
    its markup refers to pages of XGBoost's documentation that this site does not have."""
    for i, line in enumerate(lines):
        if line.lstrip().startswith(_XGB_MARK):
            rest = [f"    {x}" if x.strip() else "" for x in lines[i + 1:]]
            lines[i:] = [".. rubric:: XGBoost's own parameters", "", "::", "", *rest]
            return


def setup(app):
    app.connect("autodoc-process-docstring", _xgboost_parameters_verbatim, priority=100)
