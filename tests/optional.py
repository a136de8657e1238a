"""Tests that need an optional package skip, where it is missing, with a reason naming the
extra that installs it. The README's install line (`pip install -e '.[test]'`) has every
extra, so there none of them skips; a narrower install skips rather than fails."""

from __future__ import annotations

from typing import Any

import pytest

EXTRA_OF: dict[str, str] = {
    "fastapi": "serve",
    "uvicorn": "serve",
    "multipart": "serve",
    "ray": "scale",
    "pyarrow": "scale",
    "tflite": "convert",
    "flatbuffers": "convert",
    "torch_pruning": "compress",
    "paddle": "paddle",
    "x2paddle": "paddle",
    "mkdocs": "docs",
    "huggingface_hub": "hub",
    "httpx": "test",
    "playwright": "test",
    "ai_edge_litert": "test",
}
"""Top-level module -> the extra of pyproject.toml that installs it (tests/test_readme.py
checks that each extra lists it and that `test` includes every extra)."""


def skip_reason(module: str) -> str:
    extra = EXTRA_OF[module.split(".")[0]]
    return f"{module} is not installed: pip install -e '.[{extra}]' (or '.[test]': every extra)"


def need(module: str) -> Any:
    """`module`, imported, or a skip naming its extra."""
    return pytest.importorskip(module, reason=skip_reason(module))
