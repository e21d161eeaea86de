"""hitml's exact TreeSHAP (CPU or GPU) behind shap's TreeExplainer: ``shap.TreeExplainer(model, backend=...)``.

Three ways to use it, and what each needs:

1. ``import hitml.shap_ext``, then ``shap.TreeExplainer(model, backend="cpu"|"gpu"|"auto")`` (and
   ``shap.Explainer(model, algorithm="tree", backend=...)``). The import installs a hook on shap's classes; without
   the import shap knows no ``backend`` keyword and raises ``TypeError``. A call without ``backend`` still builds
   shap's own explainer. ``hitml.shap_ext.TreeExplainer(model, backend=...)`` is the class itself.
2. ``shap.GPUTreeExplainer(model)`` with no import: shap finds :class:`GPUTreeExplainer` through the
   ``shap.tree_backends`` entry point ``hitml`` (shap prefers a backend named ``cuda`` where shap-cuda is installed).
3. ``python -m hitml.shap_ext [--backend auto|cpu|gpu] script.py [args...]`` runs an unmodified script with the
   backend enabled for every TreeExplainer it creates (:func:`enable` does the same inside Python).

Examples
--------
>>> import numpy as np, shap, xgboost
>>> import hitml.shap_ext
>>> X = np.random.default_rng(0).normal(size=(200, 4))
>>> model = xgboost.XGBRegressor(n_estimators=5, max_depth=3).fit(X, X[:, 0])
>>> shap.TreeExplainer(model, backend="cpu").shap_values(X[:3]).shape
(3, 4)
"""
from __future__ import annotations

from hitml.kernels._exports import lazy_exports

from ._patch import install

# name -> private module that defines it (hitml.kernels._exports); ._patch (and with it ._explainer) loads here,
# since the import installs the backend= hook on shap.
__all__, __getattr__, __dir__ = lazy_exports(__name__, {
    "GPUTreeExplainer": "._explainer",
    "LargeBackgroundWarning": "._explainer",
    "TreeExplainer": "._explainer",
    "disable": "._patch",
    "enable": "._patch",
    "install": "._patch",
    "load_catboost_json": "._catboost",
    "uninstall": "._patch",
    "broadcast_explainer": "._spark",
    "spark_background": "._spark",
    "spark_shap_values": "._spark",
})

install()
