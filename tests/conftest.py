"""Shared fixtures: where the real benchmark data lives, and a skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]

if os.environ.get("PYTEST_XDIST_WORKER") and "OMP_NUM_THREADS" not in os.environ:
    # `pytest -n N` (pytest-xdist): N workers share the cores, so each gets its share of the
    # threads instead of all of them; set before any test imports torch, inherited by the
    # commands the tests start. Oversubscribed, torch's threads wait on each other.
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    os.environ["OMP_NUM_THREADS"] = str(max(1, (cores or 1) // workers))


def shared_data_dir() -> Path:
    """`../shared/data` beside the checkout, or $CLEARSIGHT_SHARED_DATA."""
    env = os.environ.get("CLEARSIGHT_SHARED_DATA")
    return Path(env) if env else REPO_ROOT.parent / "shared" / "data"


@pytest.fixture(scope="session")
def shared_data() -> Path:
    """The real-data folder; tests that use it skip cleanly where it is absent."""
    d = shared_data_dir()
    if not d.is_dir():
        pytest.skip(f"real benchmark data not found at {d}")
    return d
