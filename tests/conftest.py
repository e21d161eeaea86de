"""Shared pytest set-up: the gpu marker skips where CuPy sees no device; a LocalCluster client for dask tests."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HITML_PROGRESS", "0")


def pytest_collection_modifyitems(config, items):
    from hitml.kernels.device import _cupy_or_reason

    cp, why = _cupy_or_reason()
    if cp is not None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="module")
def client():
    """A dask Client on a 2-process LocalCluster, one per test module that asks for it (skips without distributed)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c
