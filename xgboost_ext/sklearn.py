"""Drop-in XGBRegressor / XGBClassifier that take a `binner` and train `hist` on its cuts."""
from __future__ import annotations

import inspect
import textwrap
from typing import Any

import numpy as np
import xgboost as xgb
from sklearn.base import clone

from hitml.kernels.sketch import MomentSketch

from ._compat import DMatrixHook, check_dmatrix_hook
from .binner import QuantileBinner
from .hook import check_same_max_bin, reference_dmatrix


class _BinnedMixin(DMatrixHook):
    """Fits the binner on X (with sample_weight) and hands XGBoost a QuantileDMatrix whose ref carries our cuts."""

    def _hitml_fit(self, X, y, sample_weight, fit_kwargs):
        check_dmatrix_hook()
        if self.tree_method not in (None, "hist"):
            raise ValueError(f'a binner only applies to tree_method="hist", got {self.tree_method!r}')
        if self.booster not in (None, "gbtree", "dart"):
            raise ValueError(f"a binner needs a tree booster, got booster={self.booster!r}")
        if self.binner is None:
            binner = QuantileBinner(max_bin=self.max_bin if self.max_bin is not None else 256)
        else:
            binner = clone(self.binner)
        check_same_max_bin(self.max_bin, binner.max_bin)
        ft = self.feature_types
        if ft is not None and not hasattr(X, "iloc") and isinstance(binner.categorical_features, str):
            # category codes marked by feature_types="c" (NumPy or sparse input) are XGBoost's to bin
            binner.set_params(categorical_features=np.array([t == "c" for t in ft], bool))
        if getattr(X, "shape", (1,))[0] == 0 and getattr(X, "ndim", 2) == 2:
            # XGBoost trains on 0 rows; a scikit-learn transformer refuses them: the binner gets a sketch of nothing
            binner.n_features_in_ = X.shape[1]
            self.binner_ = binner.fit_sketch(MomentSketch.empty(X.shape[1], binner.n_moments, int(binner.max_bin),
                                                                binner.n_sample))
        else:
            self.binner_ = binner.fit(X, sample_weight=sample_weight)
        self._hitml_ref = reference_dmatrix(self.binner_, feature_types=ft if not hasattr(X, "iloc") else None)
        try:
            return super().fit(X, y, sample_weight=sample_weight, **fit_kwargs)
        finally:
            self._hitml_ref = None

    def _hitml_dmatrix(self, ref, **kwargs: Any):
        our = getattr(self, "_hitml_ref", None)
        if our is not None:  # training matrix: our ref; eval matrices: the training matrix as ref, our max_bin
            return xgb.QuantileDMatrix(**kwargs, ref=our if ref is None else ref, nthread=self.n_jobs,
                                       max_bin=int(self.binner_.max_bin))  # XGBoost's JSON takes no NumPy int
        return None

    def get_xgb_params(self) -> dict[str, Any]:
        params = super().get_xgb_params()
        for k in [k for k in params if k == "binner" or k.startswith("binner__")]:
            params.pop(k)
        if getattr(self, "binner_", None) is not None:
            params["max_bin"] = int(self.binner_.max_bin)
        return params


class XGBRegressor(_BinnedMixin, xgb.XGBRegressor):
    """:class:`xgboost.XGBRegressor` whose ``hist`` cut points come from ``binner`` (see ``help()``)."""

    def __init__(self, *, binner: QuantileBinner | None = None, **kwargs: Any) -> None:
        self.binner = binner
        super().__init__(**kwargs)

    def fit(self, X, y, *, sample_weight=None, **kwargs):
        """Fit the binner on ``X`` (and ``sample_weight``), then XGBoost's ``fit`` on its cuts; returns ``self``."""
        return self._hitml_fit(X, y, sample_weight, kwargs)


class XGBClassifier(_BinnedMixin, xgb.XGBClassifier):
    """:class:`xgboost.XGBClassifier` whose ``hist`` cut points come from ``binner`` (see ``help()``)."""

    def __init__(self, *, binner: QuantileBinner | None = None, **kwargs: Any) -> None:
        self.binner = binner
        super().__init__(**kwargs)

    def fit(self, X, y, *, sample_weight=None, **kwargs):
        """Fit the binner on ``X`` (and ``sample_weight``), then XGBoost's ``fit`` on its cuts; returns ``self``."""
        return self._hitml_fit(X, y, sample_weight, kwargs)


_DOC = ''':class:`xgboost.{host}` whose ``hist`` cut points come from ``binner``.

    A drop-in: every XGBoost parameter keeps its meaning (``help()`` lists them after these notes). ``fit`` sketches
    ``X`` (weighted by ``sample_weight``) with the binner and trains on a ``QuantileDMatrix`` holding its cuts;
    ``predict`` and the rest are XGBoost's.

    Parameters
    ----------
    binner : QuantileBinner, optional
        Chooses each feature's cut points from a moment sketch of the training rows. Cloned before fitting.
        Default: ``QuantileBinner(max_bin=max_bin)`` (``max_bin`` 256 when not given).
    **kwargs
        The parameters of :class:`xgboost.{host}` (``n_estimators``, ``max_depth``, ``max_bin``, ...).
        ``tree_method`` must be "hist" or None, ``booster`` a tree booster, and ``max_bin``, where given, equal
        to the binner's.

    Attributes
    ----------
    binner_ : QuantileBinner
        The fitted binner whose cuts the trees were trained on.

    Raises
    ------
    ValueError
        From ``fit``: another ``tree_method``, a linear booster, or a ``max_bin`` that differs from the binner's.

    See Also
    --------
    xgboost.{host} : the estimator this replaces; it picks its own cuts.
    QuantileBinner : the binner, usable on its own as a scikit-learn transformer.
    quantile_dmatrix : the same cuts for ``xgboost.train``.

    Examples
    --------
{example}
'''

_EXAMPLES = {
    "XGBRegressor": """\
    >>> import numpy as np
    >>> from hitml.xgboost_ext import QuantileBinner, XGBRegressor
    >>> X = np.random.default_rng(0).lognormal(size=(500, 3))
    >>> reg = XGBRegressor(binner=QuantileBinner(max_bin=32), n_estimators=5).fit(X, X[:, 0])
    >>> int(reg.binner_.n_bins_.max()) <= 32
    True
""",
    "XGBClassifier": """\
    >>> import numpy as np
    >>> from hitml.xgboost_ext import XGBClassifier
    >>> X = np.random.default_rng(0).normal(size=(500, 3))
    >>> clf = XGBClassifier(n_estimators=5, max_bin=64).fit(X, X[:, 0] > 0)
    >>> clf.get_xgb_params()["max_bin"]
    64
""",
}


def _with_xgboost_parameters(cls: type, host: type) -> None:
    """Show XGBoost's own parameters in ``help(cls)`` and ``inspect.signature(cls)``, after ``binner``.

    XGBoost's wrappers take most parameters through ``**kwargs``; listing them (with XGBoost's defaults) also lets
    scikit-learn's ``get_params`` and ``repr`` see them as they see XGBoost's.
    """
    kw, seen = inspect.Parameter.KEYWORD_ONLY, {"self", "binner"}
    params = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD),
              inspect.Parameter("binner", kw, default=None, annotation="QuantileBinner | None")]
    for fn in (host.__init__, xgb.XGBModel.__init__):
        for p in inspect.signature(fn).parameters.values():
            if p.name not in seen and p.kind is not inspect.Parameter.VAR_KEYWORD:
                params.append(p.replace(kind=kw))
                seen.add(p.name)
    params.append(inspect.Parameter("kwargs", inspect.Parameter.VAR_KEYWORD, annotation="Any"))
    cls.__init__.__signature__ = inspect.Signature(params, return_annotation="None")
    host_doc = inspect.cleandoc(host.__doc__ or "").replace("Parameters\n----------\n", "", 1)  # one such section
    doc = _DOC.format(host=host.__name__, example=_EXAMPLES[host.__name__].rstrip())
    cls.__doc__ = (f"{doc.rstrip()}\n\n    XGBoost's parameters (from ``help(xgboost.{host.__name__})``)\n\n"
                   + textwrap.indent(host_doc, "    "))


_with_xgboost_parameters(XGBRegressor, xgb.XGBRegressor)
_with_xgboost_parameters(XGBClassifier, xgb.XGBClassifier)
