"""sklearn splitters and train_test_split drop-ins whose random orders come from the bijective shuffle."""
from __future__ import annotations

import numbers
from itertools import chain

import numpy as np
from sklearn.model_selection import KFold as _SkKFold
from sklearn.model_selection import ShuffleSplit as _SkShuffleSplit
from sklearn.model_selection import StratifiedShuffleSplit as _SkStratifiedShuffleSplit
from sklearn.utils import check_array, indexable

from hitml.kernels.device import to_numpy
from hitml.kernels.shuffle import as_generator

from ._compat import (ShuffleSplitHook, Interval, RealNotInt, StrOptions, KFoldHook, approximate_mode, default_test_size,
                      num_samples, validate_params, validate_shuffle_split)
from ._dask import dask_train_test_split, is_dask_collection
from ._shuffle import _backend, _host, _permutation, _take


class KFold(KFoldHook, _SkKFold):
    """sklearn.model_selection.KFold; with shuffle=True the sample order is the bijective shuffle of ``random_state``.

    Folds are contiguous slices of that order with sklearn's sizes (the first n % n_splits folds one larger).
    Indices come back as NumPy arrays. For the same ``random_state`` the fold sizes are scikit-learn's but the rows
    in each fold are not (the order is not NumPy's ``RandomState`` permutation).

    Parameters
    ----------
    n_splits : int, default 5
        Number of folds, at least 2.
    shuffle : bool, default False
        Shuffle the samples before splitting them into folds (without it: scikit-learn's contiguous folds).
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffle (only with ``shuffle=True``).
    backend : {"auto", "cpu", "gpu"}, default "auto"
        Where the random order is computed: "auto" follows the data (the GPU for CuPy input, else the CPU).

    See Also
    --------
    sklearn.model_selection.KFold : the splitter this replaces.
    ShuffleSplit, StratifiedShuffleSplit, train_test_split

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.sklearn_ext import KFold
    >>> X = np.zeros((10, 2))
    >>> [len(test) for _, test in KFold(3, shuffle=True, random_state=0).split(X)]
    [4, 3, 3]
    """

    def __init__(self, n_splits=5, *, shuffle=False, random_state=None, backend="auto"):
        super().__init__(n_splits=n_splits, shuffle=shuffle, random_state=random_state)
        self.backend = backend

    def _hitml_indices(self, X, y=None, groups=None):
        n = num_samples(X)
        if self.shuffle:
            indices = _host(_permutation(n, as_generator(self.random_state), _backend([X], self.backend)))
        else:
            indices = np.arange(n)
        fold_sizes = np.full(self.n_splits, n // self.n_splits, dtype=int)
        fold_sizes[: n % self.n_splits] += 1
        current = 0
        for size in fold_sizes:
            yield indices[current:current + size]
            current += size


class ShuffleSplit(ShuffleSplitHook, _SkShuffleSplit):
    """sklearn.model_selection.ShuffleSplit: each split takes test = perm[:n_test], train = perm[n_test:n_test+n_train].

    ``perm`` is a fresh bijective shuffle per split. Sizes are scikit-learn's; the rows are not scikit-learn's for the
    same ``random_state``.

    Parameters
    ----------
    n_splits : int, default 10
        Number of re-shuffling and splitting iterations.
    test_size, train_size : float, int or None
        As in scikit-learn (fractions or counts; the test size defaults to 0.1).
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffles.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        Where the random order is computed: "auto" follows the data (the GPU for CuPy input, else the CPU).

    See Also
    --------
    sklearn.model_selection.ShuffleSplit : the splitter this replaces.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.sklearn_ext import ShuffleSplit
    >>> [(len(tr), len(te)) for tr, te in ShuffleSplit(2, test_size=0.25, random_state=0).split(np.zeros((8, 1)))]
    [(6, 2), (6, 2)]
    """

    def __init__(self, n_splits=10, *, test_size=None, train_size=None, random_state=None, backend="auto"):
        super().__init__(n_splits=n_splits, test_size=test_size, train_size=train_size, random_state=random_state)
        self.backend = backend

    def _hitml_indices(self, X, y=None, groups=None):
        n = num_samples(X)
        n_train, n_test = validate_shuffle_split(n, self.test_size, self.train_size,
                                                  default_test_size=default_test_size(self))
        gen = as_generator(self.random_state)
        be = _backend([X], self.backend)
        for _ in range(self.n_splits):
            perm = _host(_permutation(n, gen, be))
            yield perm[n_test:n_test + n_train], perm[:n_test]


class StratifiedShuffleSplit(ShuffleSplitHook, _SkStratifiedShuffleSplit):
    """sklearn.model_selection.StratifiedShuffleSplit with per-class orders from the bijective shuffle.

    Class allocations follow sklearn (the approximate mode of the multivariate hypergeometric, ties broken at random).
    Sizes and class counts are scikit-learn's; the rows are not scikit-learn's for the same ``random_state``.

    Parameters
    ----------
    n_splits : int, default 10
        Number of re-shuffling and splitting iterations.
    test_size, train_size : float, int or None
        As in scikit-learn (fractions or counts; the test size defaults to 0.1).
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffles.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        Where the random order is computed: "auto" follows the data (the GPU for CuPy input, else the CPU).

    See Also
    --------
    sklearn.model_selection.StratifiedShuffleSplit : the splitter this replaces.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.sklearn_ext import StratifiedShuffleSplit
    >>> y = np.array([0] * 6 + [1] * 4)
    >>> train, test = next(StratifiedShuffleSplit(1, test_size=0.5, random_state=0).split(np.zeros((10, 1)), y))
    >>> np.bincount(y[test]).tolist()
    [3, 2]
    """

    def __init__(self, n_splits=10, *, test_size=None, train_size=None, random_state=None, backend="auto"):
        super().__init__(n_splits=n_splits, test_size=test_size, train_size=train_size, random_state=random_state)
        self.backend = backend

    def _hitml_indices(self, X, y, groups=None):
        n = num_samples(X)
        y = check_array(to_numpy(y), input_name="y", ensure_2d=False, dtype=None)
        n_train, n_test = validate_shuffle_split(n, self.test_size, self.train_size,
                                                  default_test_size=default_test_size(self))
        if y.ndim == 2:
            y = np.array([" ".join(row.astype("str")) for row in y])
        classes, y_indices, class_counts = np.unique(y, return_inverse=True, return_counts=True)
        n_classes = classes.shape[0]
        if np.min(class_counts) < 2:
            raise ValueError("The least populated classes in y have only 1 member, which is too few. The minimum "
                             "number of groups for any class cannot be less than 2. Classes with too few members "
                             f"are: {classes[class_counts < 2].tolist()}")
        if n_train < n_classes:
            raise ValueError(f"The train_size = {n_train} should be greater or equal to the number of classes = "
                             f"{n_classes}")
        if n_test < n_classes:
            raise ValueError(f"The test_size = {n_test} should be greater or equal to the number of classes = "
                             f"{n_classes}")
        class_indices = np.split(np.argsort(y_indices, kind="stable"), np.cumsum(class_counts)[:-1])
        gen = as_generator(self.random_state)
        be = _backend([X], self.backend)
        tie_rng = np.random.RandomState(int(gen.integers(0, 2**32)))
        for _ in range(self.n_splits):
            n_i = approximate_mode(class_counts, n_train, tie_rng)
            t_i = approximate_mode(class_counts - n_i, n_test, tie_rng)
            train, test = [], []
            for i in range(n_classes):
                perm = class_indices[i][_host(_permutation(int(class_counts[i]), gen, be))]
                train.append(perm[: n_i[i]])
                test.append(perm[n_i[i]: n_i[i] + t_i[i]])
            train, test = np.concatenate(train), np.concatenate(test)
            yield (train[_host(_permutation(train.size, gen, be))], test[_host(_permutation(test.size, gen, be))])


@validate_params(
    {
        "test_size": [Interval(RealNotInt, 0, 1, closed="neither"), Interval(numbers.Integral, 1, None, closed="left"),
                      None],
        "train_size": [Interval(RealNotInt, 0, 1, closed="neither"), Interval(numbers.Integral, 1, None, closed="left"),
                       None],
        "shuffle": ["boolean"],
        "stratify": ["array-like", None],
        "backend": [StrOptions({"auto", "cpu", "gpu"}), None],
    },
    prefer_skip_nested_validation=True,
)
def train_test_split(*arrays, test_size=None, train_size=None, random_state=None, shuffle=True, stratify=None,
                     backend="auto"):
    """sklearn.model_selection.train_test_split drop-in; CuPy inputs are split on the GPU and stay there.

    Sizes, stratified class counts and errors are scikit-learn's. With ``shuffle=True`` the test rows are the first
    ``n_test`` of the bijective order of ``random_state`` and the training rows the next ``n_train``: the same rows for
    NumPy, pandas, CuPy and Dask input, but not the rows scikit-learn picks for the same ``random_state``.

    Parameters
    ----------
    *arrays : sequence of indexables with the same length
        NumPy, pandas, scipy.sparse, lists or CuPy.
    test_size, train_size : float, int or None
        As in scikit-learn (the test size defaults to 0.25).
    random_state : None, int, numpy.random.Generator or numpy.random.RandomState
        Seed of the bijective shuffle.
    shuffle : bool, default True
        Without it, the first rows train and the last rows test, as in scikit-learn.
    stratify : array-like, optional
        Class labels to keep the class proportions of.
    backend : {"auto", "cpu", "gpu"}, default "auto"
        Where the random order is computed: "auto" follows the data (the GPU for CuPy input, else the CPU).

    Returns
    -------
    list
        ``[a_train, a_test]`` for each input array, in order, of the input's type.

    Raises
    ------
    ValueError
        As scikit-learn: no array, inconsistent lengths, or sizes that leave a side empty.

    See Also
    --------
    sklearn.model_selection.train_test_split : the function this replaces.
    dask_train_test_split : the same split of Dask collections.

    Examples
    --------
    >>> import numpy as np
    >>> from hitml.sklearn_ext import train_test_split
    >>> X, y = np.arange(20).reshape(10, 2), np.arange(10)
    >>> X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.3, random_state=0)
    >>> X_tr.shape, X_te.shape, bool((X_te[:, 0] // 2 == y_te).all())
    ((7, 2), (3, 2), True)
    """
    if len(arrays) == 0:
        raise ValueError("At least one array required as input")
    if any(is_dask_collection(a) for a in arrays):
        return dask_train_test_split(*arrays, test_size=test_size, train_size=train_size,
                                     random_state=random_state, shuffle=shuffle, stratify=stratify)
    arrays = indexable(*arrays)
    n = num_samples(arrays[0])
    n_train, n_test = validate_shuffle_split(n, test_size, train_size, default_test_size=0.25)
    if shuffle is False:
        if stratify is not None:
            raise ValueError("Stratified train/test split is not implemented for shuffle=False")
        train, test = np.arange(n_train), np.arange(n_train, n_train + n_test)
    else:
        cls = StratifiedShuffleSplit if stratify is not None else ShuffleSplit
        cv = cls(n_splits=1, test_size=n_test, train_size=n_train, random_state=random_state,
                 backend=_backend(arrays, backend))
        train, test = next(cv.split(X=arrays[0], y=stratify))
    return list(chain.from_iterable((_take(a, train), _take(a, test)) for a in arrays))
