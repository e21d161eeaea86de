"""Every private name of scikit-learn that ``hitml.sklearn_ext`` uses, and nothing else.

The drop-ins validate and split exactly as scikit-learn does by calling scikit-learn's own helpers, most of which
are private. The rest of the adapter imports them from here, never from scikit-learn's private modules
(``tests/test_compat.py`` fails otherwise). All were checked on scikit-learn 1.9.1 (pyproject allows >= 1.5). If
one moves or is renamed, ``import`` of the drop-in that uses it raises ImportError here, naming the helper; none
is looked up lazily, so a moved helper never turns into a silent change of behaviour.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

# Parameter validation (sklearn.utils._param_validation): the constraint objects and the checker behind
# scikit-learn's @validate_params, so a bad parameter raises scikit-learn's InvalidParameterError with scikit-learn's
# message. If the module moves, the drop-ins' parameter checks (and their error type) go with it.
from sklearn.utils._param_validation import (HasMethods, Interval, InvalidParameterError, RealNotInt, StrOptions,
                                             validate_parameter_constraints, validate_params)

# train_test_split's sizes: scikit-learn's rule for test_size/train_size (fractions rounded as it rounds them) and
# its error messages. If it moves: the splitters' sizes would need their own copy of that rule.
from sklearn.model_selection._split import _validate_shuffle_split as validate_shuffle_split

# StratifiedShuffleSplit's per-class counts (scikit-learn's rounding and tie breaking), so class sizes match its.
from sklearn.utils.extmath import _approximate_mode as approximate_mode

# Row count of any array-like (lists, frames, sparse), as scikit-learn counts it.
from sklearn.utils.validation import _num_samples as num_samples

# The feature names a fitted estimator gives its outputs (get_feature_names_out), with scikit-learn's checks.
from sklearn.utils.validation import _check_feature_names_in as check_feature_names_in

# Row selection of any array-like (NumPy, pandas, lists, sparse) as scikit-learn's shuffle does it. Public in
# scikit-learn's documentation despite the underscore (sklearn/utils/__init__.py says so).
from sklearn.utils import _safe_indexing as safe_indexing

__all__ = [
    "approximate_mode", "check_feature_names_in", "declares_classifier", "default_test_size", "HasMethods", "Interval",
    "InvalidParameterError", "KFoldHook", "num_samples", "RealNotInt", "safe_indexing", "ShuffleSplitHook",
    "StrOptions", "validate_parameter_constraints", "validate_params", "validate_shuffle_split",
]


def declares_classifier(est: Any) -> bool:
    """``est._estimator_type == "classifier"``: how a model outside scikit-learn's tag system (``is_classifier``
    raises on it) says it classifies. scikit-learn's convention before 1.6; its own estimators no longer set it
    (1.9.1), CatBoost's still do (1.2.10). A model without it counts as no classifier (read through ``predict``)."""
    return getattr(est, "_estimator_type", None) == "classifier"


def default_test_size(splitter: Any) -> float:
    """The test fraction a ShuffleSplit-family splitter uses when neither size is given (``_default_test_size``:
    0.1 for ShuffleSplit and StratifiedShuffleSplit; checked on scikit-learn 1.9.1). If it goes: AttributeError."""
    return splitter._default_test_size


# scikit-learn's splitters yield their folds from private generators that subclasses override: KFold's ``split``
# takes each test fold from ``_iter_test_indices`` (BaseCrossValidator), the shuffle splitters take (train, test)
# from ``_iter_indices`` (BaseShuffleSplit). Checked on scikit-learn 1.9.1. The mixins below are the only overrides;
# a subclass writes ``_hitml_indices``. If scikit-learn renames a hook, defining the subclass raises TypeError, so
# ``split`` never silently yields scikit-learn's own folds instead of hitml's.


class _SplitterHook:
    hook = ""  # the scikit-learn method a subclass of this mixin overrides

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ != __name__ and not any(cls.hook in vars(base) for base in cls.__mro__
                                                  if base.__module__.split(".")[0] == "sklearn"):
            raise TypeError(f"{cls.__name__}: scikit-learn no longer defines {cls.hook} on its splitters (checked "
                            f"on scikit-learn 1.9.1); hitml's splitter cannot hand it its folds")


class KFoldHook(_SplitterHook):
    """Mixin for a KFold subclass: ``_iter_test_indices`` yields ``self._hitml_indices(X, y, groups)``."""

    hook = "_iter_test_indices"

    def _iter_test_indices(self, X: Any, y: Any = None, groups: Any = None) -> Iterator:
        return self._hitml_indices(X, y, groups)


class ShuffleSplitHook(_SplitterHook):
    """Mixin for a ShuffleSplit-family subclass: ``_iter_indices`` yields ``self._hitml_indices(X, y, groups)``."""

    hook = "_iter_indices"

    def _iter_indices(self, X: Any, y: Any = None, groups: Any = None) -> Iterator:
        return self._hitml_indices(X, y, groups)
