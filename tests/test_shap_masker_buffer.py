"""shap's ``maskers.Independent`` while ``hitml.shap_ext`` is imported: a NumPy background kept whole is not copied
up front (shap's masking buffer, ``_masked_data``, is made on first read), and shap's own explainers give the bytes
they give with shap's eager masker; pickles load in a process without hitml; other backgrounds take shap's path."""
from __future__ import annotations

import os
import pickle
import subprocess
import sys
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

shap = pytest.importorskip("shap")
import hitml.shap_ext as shap_ext  # noqa: E402 -- after the skip: needs shap

ROOT = Path(__file__).resolve().parents[1]


def _data(n=400, m=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((n, m))
    X[rng.random(X.shape) < 0.05] = np.nan
    return X


def _eager(data, max_samples):
    """shap's own masker, built with the hook removed."""
    shap_ext.uninstall()
    try:
        return shap.maskers.Independent(data, max_samples=max_samples)
    finally:
        shap_ext.install()


def test_a_whole_numpy_background_is_not_copied_up_front():
    bg = np.random.default_rng(0).standard_normal((200_000, 20), dtype=np.float32)
    tracemalloc.start()
    try:
        m = shap.maskers.Independent(bg, max_samples=len(bg))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 0.01 * bg.nbytes, peak
    assert m.data is bg and m.shape == bg.shape and m.max_samples == len(bg)
    assert "_masked_data" not in vars(m)
    buf = m._masked_data                             # made on first read, as shap makes it
    assert buf.shape == bg.shape and buf.dtype == bg.dtype and buf is not bg


def _model(X):
    x = np.nan_to_num(X)
    return x[:, 0] * x[:, 1] + np.sin(x[:, 2]) - 0.5 * x[:, 3] + (x[:, 4] > 0) * x[:, 5]


@pytest.mark.parametrize("algorithm", ["exact", "permutation"])
def test_shaps_explainers_give_the_same_bytes_with_the_lazy_buffer(algorithm):
    bg, X = _data(60, 6, 1), _data(8, 6, 2)
    lazy = shap.maskers.Independent(bg, max_samples=len(bg))
    assert "_masked_data" not in vars(lazy)
    eager = _eager(bg, len(bg))
    assert "_masked_data" in vars(eager)
    kw = {"max_evals": 200} if algorithm == "permutation" else {}
    got = shap.Explainer(_model, lazy, algorithm=algorithm, seed=3)(X, **kw)
    want = shap.Explainer(_model, eager, algorithm=algorithm, seed=3)(X, **kw)
    assert got.values.tobytes() == want.values.tobytes()
    assert np.asarray(got.base_values).tobytes() == np.asarray(want.base_values).tobytes()


def test_both_masking_calls_overwrite_the_buffer_as_shaps_do():
    bg, x = _data(50, 6, 4), _data(1, 6, 5)[0]
    lazy, eager = shap.maskers.Independent(bg, max_samples=50), _eager(bg, 50)
    for mask in (np.array([True, False, True, False, False, True]), np.zeros(6, bool), np.ones(6, bool)):
        assert lazy(mask, x)[0].tobytes() == eager(mask, x)[0].tobytes()
    delta = np.array([0, 2, -1, 5, 1], np.int64)                  # shap's delta masking (integer masks)
    got, want = lazy(delta, x), eager(delta, x)
    assert got[0][0].tobytes() == want[0][0].tobytes() and got[1].tobytes() == want[1].tobytes()


def test_frames_and_sampled_backgrounds_take_shaps_own_path():
    pd = pytest.importorskip("pandas")
    bg = _data(300, 4, 6)
    sampled = shap.maskers.Independent(bg, max_samples=100)
    assert sampled.data.shape == (100, 4) and "_masked_data" in vars(sampled)
    assert sampled.data.tobytes() == _eager(bg, 100).data.tobytes()        # shap's sample
    frame = shap.maskers.Independent(pd.DataFrame(bg, columns=list("abcd")), max_samples=300)
    assert "_masked_data" in vars(frame) and list(frame.feature_names) == list("abcd")


_LOAD = r"""
import pickle, sys
import numpy as np
m = pickle.load(open(sys.argv[1], "rb"))
x, mask = pickle.load(open(sys.argv[2], "rb"))
assert not any(k == "hitml" or k.startswith("hitml.") for k in sys.modules), sorted(k for k in sys.modules if "hitml" in k)
sys.stdout.buffer.write(m(mask, x)[0].tobytes())
"""


def test_a_pickled_masker_loads_and_masks_in_a_process_without_hitml(tmp_path):
    bg, x = _data(40, 6, 7), _data(1, 6, 8)[0]
    mask = np.array([True, True, False, False, True, False])
    lazy = shap.maskers.Independent(bg, max_samples=40)
    (tmp_path / "m.pkl").write_bytes(pickle.dumps(lazy))
    (tmp_path / "x.pkl").write_bytes(pickle.dumps((x, mask)))
    assert "_masked_data" not in vars(lazy)                       # pickling made the buffer for the pickle only
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([sys.executable, "-c", _LOAD, str(tmp_path / "m.pkl"), str(tmp_path / "x.pkl")],
                       capture_output=True, timeout=300, cwd=tmp_path, env=env, check=False)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    assert r.stdout == _eager(bg, 40)(mask, x)[0].tobytes()


def test_uninstall_gives_shaps_init_back_and_lazy_maskers_keep_working():
    bg, x = _data(30, 6, 9), _data(1, 6, 10)[0]
    lazy = shap.maskers.Independent(bg, max_samples=30)
    mask = np.array([False, True, True, False, True, True])
    shap_ext.uninstall()
    try:
        assert "_masked_data" in vars(shap.maskers.Independent(bg, max_samples=30))
        assert lazy(mask, x)[0].tobytes() == shap.maskers.Independent(bg, max_samples=30)(mask, x)[0].tobytes()
    finally:
        shap_ext.install()


def test_the_interventional_explainer_keeps_the_users_masker_uncopied():
    xgb = pytest.importorskip("xgboost")
    rng = np.random.default_rng(11)
    X = rng.standard_normal((2000, 5)).astype(np.float32)
    model = xgb.XGBRegressor(n_estimators=10, max_depth=4, n_jobs=1).fit(X, X[:, 0] - X[:, 1] * X[:, 2])
    masker = shap.maskers.Independent(X[:1500], max_samples=1500)
    ex = shap.TreeExplainer(model, data=masker, feature_perturbation="interventional", backend="cpu")
    assert ex.masker is masker and ex.data is masker.data and "_masked_data" not in vars(masker)
    theirs = shap.TreeExplainer(model, data=_eager(X[:1500], 1500), feature_perturbation="interventional")
    np.testing.assert_allclose(ex.shap_values(X[:20]), theirs.shap_values(X[:20]), rtol=1e-5, atol=1e-5)
