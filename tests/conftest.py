"""Shared pytest set-up: the gpu marker skips where CuPy sees no device."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("HITML_PROGRESS", "0")


def pytest_collection_modifyitems(config, items):
    from kernels.device import _cupy_or_reason

    cp, why = _cupy_or_reason()
    if cp is not None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {why}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
