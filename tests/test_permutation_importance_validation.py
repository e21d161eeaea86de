"""hitml.sklearn_ext.permutation_importance refuses what sklearn.inspection.permutation_importance refuses, with the
same exception type and message: bad parameters (InvalidParameterError), labels its metrics cannot score, scorings
that do not fit the estimator. Each case calls both functions on the same inputs."""
from __future__ import annotations

import numpy as np
import pytest
from sklearn.inspection import permutation_importance as sk_pi
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from hitml.sklearn_ext import permutation_importance as our_pi


def _outcome(fn, *args, **kw):
    try:
        fn(*args, **kw)
    except Exception as e:
        return type(e), str(e)
    return None


def assert_same_refusal(*args, **kw):
    theirs = _outcome(sk_pi, *args, **kw)
    ours = _outcome(our_pi, *args, **kw)
    assert theirs is not None, "sklearn accepts this input; the case does not test a refusal"
    assert ours == theirs


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((120, 4))
    y_reg = X @ np.array([1.0, -2.0, 0.0, 0.5]) + 0.1 * rng.standard_normal(120)
    y_cls = (X[:, 0] + X[:, 1] > 0).astype(int) + (X[:, 2] > 1).astype(int)  # classes 0, 1, 2
    return X, y_reg, y_cls


def test_accuracy_on_a_regressor(data):
    X, y_reg, _ = data
    reg = LinearRegression().fit(X, y_reg)
    assert_same_refusal(reg, X, y_reg, scoring="accuracy", random_state=0)


def test_string_labels_against_integer_classes(data):
    X, _, y_cls = data
    clf = DecisionTreeClassifier(random_state=0).fit(X, y_cls)
    y_str = np.array(["a", "b", "c"])[y_cls]
    for scoring in (None, "accuracy"):
        assert_same_refusal(clf, X, y_str, scoring=scoring, random_state=0)
    # neg_log_loss reads probability columns by the sorted labels of y: sklearn accepts, and so do we, same score
    a = sk_pi(clf, X, y_str, scoring="neg_log_loss", n_repeats=2, random_state=0)
    b = our_pi(clf, X, y_str, scoring="neg_log_loss", n_repeats=2, random_state=0, progress=False)
    c = our_pi(clf, X, y_cls, scoring="neg_log_loss", n_repeats=2, random_state=0, progress=False)
    assert a.importances.shape == b.importances.shape
    np.testing.assert_array_equal(b.importances, c.importances)


@pytest.mark.parametrize("n_classes", [2, 3])
def test_neg_log_loss_with_unseen_labels(data, n_classes):
    X, _, y_cls = data
    y = np.minimum(y_cls, n_classes - 1)
    clf = LogisticRegression(max_iter=500).fit(X, y)
    y_unseen = y.copy()
    y_unseen[::9] = n_classes  # a label the model never saw
    assert_same_refusal(clf, X, y_unseen, scoring="neg_log_loss", random_state=0)


@pytest.mark.parametrize("kw", [
    {"scoring": "no_such_metric"}, {"scoring": 3}, {"n_repeats": 0}, {"n_repeats": 1.5},
    {"max_samples": 0}, {"max_samples": 0.0}, {"max_samples": 1.5}, {"max_samples": "half"}, {"max_samples": 10_000},
    {"n_jobs": "two"}, {"random_state": "seed"}, {"sample_weight": 3.0},
])
def test_bad_parameters(data, kw):
    X, y_reg, _ = data
    reg = LinearRegression().fit(X, y_reg)
    assert_same_refusal(reg, X, y_reg, **kw)


def test_bad_estimator_and_X(data):
    X, y_reg, _ = data
    assert_same_refusal(object(), X, y_reg)
    reg = LinearRegression().fit(X, y_reg)
    assert_same_refusal(reg, 5, y_reg)


def test_valid_inputs_score_as_sklearn(data):
    """Where both accept, the baseline is sklearn's: an unused feature's importances are exactly 0 in both."""
    X, _, y_cls = data
    Xs = X[:, :3].copy()
    Xs[:, 2] = 0.0
    clf3 = DecisionTreeClassifier(random_state=0, max_depth=3).fit(Xs, y_cls)
    for scoring in (None, "accuracy", "neg_log_loss"):
        a = sk_pi(clf3, Xs, y_cls, scoring=scoring, n_repeats=3, random_state=0)
        b = our_pi(clf3, Xs, y_cls, scoring=scoring, n_repeats=3, random_state=0, progress=False)
        np.testing.assert_array_equal(a.importances[2], 0.0)
        np.testing.assert_array_equal(b.importances[2], 0.0)
