"""Shared pytest set-up: the gpu marker skips where CuPy sees no device; the quick subset (`-m "not slow"`); skips
summarised one line per reason; a LocalCluster client for dask tests."""
from __future__ import annotations

import collections
import math
import os

import pytest

os.environ.setdefault("HITML_PROGRESS", "0")

# The quick subset, `bash scripts/test.sh --quick` (= pytest -m "not slow"), leaves out these modules whole ...
SLOW_MODULES = {
    "test_dask_distributed": "starts Dask clusters",
    "test_dask_dropins": "starts Dask clusters",
    "test_dask_faults": "starts Dask clusters and kills workers",
    "test_dask_gpu": "starts Dask clusters",
    "test_dask_shap_local": "starts Dask clusters",
    "test_dask_shuffle": "starts Dask clusters",
    "test_xgboost_ext_dask": "starts Dask clusters",
    "test_packaging": "builds the wheel and installs it into fresh environments",
    "test_docs": "runs every example of README.md and docs/ in subprocesses",
}
# ... these tests (the longest of the rest: 30-100 s each on a busy 2-core machine, wall) ...
SLOW_TESTS = {
    "tests/test_treeshap_cpu_quad.py::test_multiclass_rows_do_not_depend_on_blocks_groups_or_threads": "threads",
    "tests/test_treeshap_cpu_quad.py::test_rows_do_not_depend_on_block_position_or_threads": "thread counts",
    "tests/test_treeshap_cpu_quad.py::test_lightgbm_categorical_matches_native": "LightGBM categorical models",
    "tests/test_shap_ext_treelite.py::test_xgboost_treelite_interactions_and_hook": "treelite interactions",
    "tests/test_shap_ext_treelite.py::test_sklearn_treelite_matches_shap_cpp": "treelite forests",
    "tests/test_sketch_robust.py::test_downstream_no_worse_than_xgboost": "trains XGBoost on every column family",
}
# ... and keeps QUICK_CASES evenly spread cases of a parametrized test (every k-th), marking the others slow.
QUICK_CASES = 8


def _mark_slow(items) -> None:
    slow = pytest.mark.slow
    cases = collections.defaultdict(list)
    for item in items:
        module = item.module.__name__.rpartition(".")[2] if getattr(item, "module", None) else ""
        if module in SLOW_MODULES or item.nodeid.partition("[")[0] in SLOW_TESTS:
            item.add_marker(slow)
        elif hasattr(item, "callspec"):
            cases[(item.nodeid.partition("[")[0])].append(item)
    for group in cases.values():
        step = math.ceil(len(group) / QUICK_CASES)
        for i, item in enumerate(group):
            if i % step:
                item.add_marker(slow)


def pytest_collection_modifyitems(config, items):
    _mark_slow(items)
    from hitml.kernels.device import _cupy_or_reason

    cp, why = _cupy_or_reason()
    if cp is not None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """One line per skip reason with its count, instead of one line per skipped test (`-rs`)."""
    reasons = collections.Counter()
    for report in terminalreporter.stats.get("skipped", []):
        longrepr = report.longrepr
        reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
        reasons[reason.removeprefix("Skipped: ")] += 1
    if reasons:
        terminalreporter.section("skipped tests, by reason", sep="-")
        for reason, n in reasons.most_common():
            terminalreporter.write_line(f"{n:5d}  {reason}")


@pytest.fixture(scope="module")
def client():
    """A dask Client on a 2-process LocalCluster, one per test module that asks for it (skips without distributed)."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c
