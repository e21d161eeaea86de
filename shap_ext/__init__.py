"""hitml's exact TreeSHAP (CPU or GPU) behind shap's TreeExplainer: ``shap.TreeExplainer(model, backend=...)``.

Importing this package installs a small hook so that ``shap.TreeExplainer(model, backend="cpu"|"gpu"|"auto")``
(and ``shap.Explainer(model, algorithm="tree", backend=...)``) build :class:`shap_ext.TreeExplainer`; without
``backend`` shap behaves exactly as before. ``shap.GPUTreeExplainer`` resolves to :class:`GPUTreeExplainer`
through the ``shap.tree_backends`` entry point ``hitml``; ``python -m shap_ext script.py`` runs a script with the
backend enabled for every TreeExplainer it creates.
"""
from __future__ import annotations

from ._explainer import GPUTreeExplainer, TreeExplainer
from ._patch import disable, enable, install, uninstall

install()

__all__ = ["GPUTreeExplainer", "TreeExplainer", "disable", "enable", "install", "uninstall"]
