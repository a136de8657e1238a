"""Checkpoints load with weights_only: a pickled object in one never runs code."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from clearsight.engine.checkpoint import FORMAT, VERSION, CheckpointError, load_checkpoint

_RAN: list[str] = []


class _Payload:
    """Unpickling this would call `_RAN.append` (any callable could be there instead)."""

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_RAN.append, ("code ran",))


def test_a_checkpoint_with_a_pickled_object_is_refused_unrun(tmp_path: Path) -> None:
    path = tmp_path / "checkpoint.pt"
    torch.save({"format": FORMAT, "version": VERSION, "step": 1, "x": _Payload()}, path)
    with pytest.raises(CheckpointError, match=os.fspath(path)):
        load_checkpoint(path)
    assert _RAN == []
