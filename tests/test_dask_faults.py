"""Faults: kill a worker process mid-computation; its tasks re-run and the result equals an undisturbed run."""
from __future__ import annotations

import os
import signal
import time

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
import xgboost as xgb  # noqa: E402 - after the pytest.importorskip above

from hitml import shap_ext  # noqa: E402 - after the pytest.importorskip above
from hitml.kernels.shuffle import permutation  # noqa: E402 - after the pytest.importorskip above
from hitml.shap_ext._dask import dask_shap_values  # noqa: E402 - after the pytest.importorskip above
from hitml.sklearn_ext._dask import dask_shuffle  # noqa: E402 - after the pytest.importorskip above


def _kill_worker_holding_results(client, futures, min_done: int, timeout: float = 60.0) -> int:
    """Wait until ``min_done`` partitions are finished, SIGKILL the process of a worker that holds some of them;
    return how many finished results it held (lost with it)."""
    deadline = time.monotonic() + timeout
    while sum(f.done() for f in futures) < min_done:
        assert time.monotonic() < deadline, "computation did not progress"
        time.sleep(0.05)
    assert not all(f.done() for f in futures), "finished before the fault could be injected; make it slower"
    held: dict[str, int] = {}
    for addrs in client.who_has([f for f in futures if f.done()]).values():
        for a in addrs:
            held[a] = held.get(a, 0) + 1
    victim = max(held, key=held.get)
    pid = client.run(os.getpid, workers=[victim])[victim]
    os.kill(pid, signal.SIGKILL)
    return held[victim]


def test_killed_worker_tasks_rerun_and_results_are_identical():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 8))
    y = X[:, 0] + np.sin(X[:, 1]) + X[:, 2] * X[:, 3]
    model = xgb.train({"max_depth": 6, "eta": 0.1}, xgb.DMatrix(X, y), 60)
    ex = shap_ext.TreeExplainer(model, backend="cpu")
    ref = ex.shap_values(X)  # in memory, undisturbed
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=50) as cluster, distributed.Client(cluster) as client:
        dX = da.from_array(X, chunks=(100, 8))  # 30 partitions
        clean = client.compute(dask_shap_values(ex, dX), sync=True)  # undisturbed distributed run (warms workers)
        np.testing.assert_array_equal(clean, ref)

        vals = dask_shap_values(ex, dX).persist()
        futures = list(distributed.futures_of(vals))
        lost = _kill_worker_holding_results(client, futures, min_done=6)
        assert lost >= 1
        faulty = vals.compute()
        np.testing.assert_array_equal(faulty, clean)  # bit for bit

        # the shuffle too: a lost worker's split/combine tasks re-run to the same permutation
        n = 40_000
        Z = np.arange(n, dtype=np.float64)[:, None] * np.ones((1, 4))
        sh = dask_shuffle(da.from_array(Z, chunks=(2000, 4)), random_state=3).persist()
        sh_futures = list(distributed.futures_of(sh))
        client.wait_for_workers(2, timeout=60)
        deadline = time.monotonic() + 30
        while not any(f.done() for f in sh_futures) and time.monotonic() < deadline:
            time.sleep(0.01)
        held = client.who_has([f for f in sh_futures if f.done()])
        victims = {a for addrs in held.values() for a in addrs}
        if victims:
            victim = sorted(victims)[0]
            os.kill(client.run(os.getpid, workers=[victim])[victim], signal.SIGKILL)
        np.testing.assert_array_equal(sh.compute(), Z[permutation(n, 3)])
