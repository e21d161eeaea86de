"""xgboost_ext.dask: per-partition sketches merged on a 2-process LocalCluster, then xgboost.dask on our cuts."""
from __future__ import annotations

import json

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
pytest.importorskip("distributed")
import xgboost as xgb  # noqa: E402 - after the pytest.importorskip above
from xgboost import dask as dxgb  # noqa: E402 - after the pytest.importorskip above

from hitml.kernels.sketch import cpu  # noqa: E402 - after the pytest.importorskip above
from hitml.xgboost_ext import QuantileBinner  # noqa: E402 - after the pytest.importorskip above
from hitml.xgboost_ext.dask import dask_quantile_dmatrix, fit_binner, snap_partitions  # noqa: E402 - after the pytest.importorskip above


def test_dask_sketch_train_on_our_cuts(client):
    rng = np.random.default_rng(0)
    n = 6000
    X = np.column_stack([rng.lognormal(size=n), rng.normal(1000, 1, n), np.round(rng.normal(size=n) * 2),
                         rng.normal(size=n)]).astype(np.float32)
    X[rng.random(n) < 0.03, 0] = np.nan
    y = np.log1p(np.nan_to_num(X[:, 0])) + X[:, 2] * 0.2 + np.sin(X[:, 3])
    dX = da.from_array(X, chunks=(1500, 4))
    dy = da.from_array(y, chunks=1500)
    b = fit_binner(dX, binner=QuantileBinner(max_bin=32))
    # the merged partition sketches equal the in-memory sketch (two-pass reference covered in test_sketch)
    local = cpu.sketch(X, n_moments=b.n_moments, max_distinct=32)
    np.testing.assert_allclose(b.sketch_.M, local.M, rtol=1e-10)
    np.testing.assert_array_equal(b.sketch_.n_distinct, local.n_distinct)
    ref = QuantileBinner(max_bin=32).fit(X)
    for a, c in zip(b.cuts_.values, ref.cuts_.values):
        assert a.size == c.size and np.allclose(a, c, rtol=1e-5)
    dtrain = dask_quantile_dmatrix(client, dX, dy, binner=b)
    out = dxgb.train(client, {"max_bin": 32, "max_depth": 4, "tree_method": "hist"}, dtrain, num_boost_round=10)
    bst = out["booster"]
    m = json.loads(bst.save_raw("json"))
    for t in m["learner"]["gradient_booster"]["model"]["trees"]:
        for i, left in enumerate(t["left_children"]):
            if left == -1:
                continue
            f, c = t["split_indices"][i], np.float32(t["split_conditions"][i])
            assert c in set(b.cuts_.values[f].tolist()) or c > b.cuts_.vmax[f], (f, c)
    # the booster predicts on raw data as on snapped data, locally and through dask
    raw = bst.predict(xgb.DMatrix(X))
    np.testing.assert_array_equal(raw, bst.predict(xgb.DMatrix(snap_partitions(dX, b).compute())))
    np.testing.assert_allclose(dxgb.predict(client, bst, dX).compute(), raw, rtol=1e-6)
