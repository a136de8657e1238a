"""Shared fixtures: where the real benchmark data lives, and a skip when it is absent."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


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
