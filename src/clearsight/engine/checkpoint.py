"""Training checkpoints: all a run needs to continue exactly, written so a crash loses nothing.

A checkpoint is one `torch.save` file (model, optimizer, scheduler state, EMA, RNG states of
torch, numpy and Python, step, epoch and position in the epoch, config). It is written to a
temporary file beside the target, fsynced, then renamed over it: until the rename the
previous checkpoint is untouched, so a process killed mid-save leaves the last good one
(and a temporary file in `clearsight.atomic`'s pattern, which the next run sweeps).
It loads with `torch.load(weights_only=True)`: RNG states are stored as tensors and plain
types, never pickled objects. Unlike model artifacts (`clearsight.artifact`), checkpoints are
for resuming, not for inference.

Test hook: `CLEARSIGHT_TEST_SAVE_PAUSE="N:SECONDS"` sleeps in the N-th save of the process
after half the bytes are in the temporary file, so a test can kill a real run mid-save.
"""

from __future__ import annotations

import io
import os
import random
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clearsight.atomic import atomic_path
from clearsight.errors import ClearsightError

CHECKPOINT_FILE = "checkpoint.pt"
FORMAT = "clearsight.checkpoint"
VERSION = 1
PAUSE_ENV = "CLEARSIGHT_TEST_SAVE_PAUSE"

_saves_in_process = [0]  # counts saves for the test hook only


class CheckpointError(ClearsightError):
    """A checkpoint is missing, unreadable or not a clearsight checkpoint."""


def rng_state() -> dict[str, Any]:
    """torch, numpy and Python RNG states as tensors and plain types (weights_only-safe)."""
    np_state = np.random.get_state()
    py_version, py_internal, py_gauss = random.getstate()
    state: dict[str, Any] = {
        "torch": torch.get_rng_state(),
        "numpy": {
            "keys": torch.from_numpy(np.asarray(np_state[1], dtype=np.int64)),
            "pos": int(np_state[2]),
            "has_gauss": int(np_state[3]),
            "cached_gaussian": float(np_state[4]),
        },
        "python": {
            "version": int(py_version),
            "internal": torch.tensor(py_internal, dtype=torch.int64),
            "gauss_next": py_gauss,
        },
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what `rng_state` captured."""
    torch.set_rng_state(state["torch"])
    n = state["numpy"]
    keys = n["keys"].numpy().astype(np.uint32)
    np.random.set_state(("MT19937", keys, n["pos"], n["has_gauss"], n["cached_gaussian"]))
    p = state["python"]
    internal = tuple(int(v) for v in p["internal"].tolist())
    random.setstate((p["version"], internal, p["gauss_next"]))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _test_pause() -> float:
    spec = os.environ.get(PAUSE_ENV, "")
    if not spec:
        return 0.0
    nth, _, seconds = spec.partition(":")
    return float(seconds or 60) if _saves_in_process[0] == int(nth) else 0.0


def save_checkpoint(state: dict[str, Any], path: str | os.PathLike[str]) -> Path:
    """Write `state` atomically: temp file + fsync + rename; the old file stays until then."""
    _saves_in_process[0] += 1
    target = Path(path)
    buf = io.BytesIO()
    torch.save({"format": FORMAT, "version": VERSION, **state}, buf)
    data = buf.getbuffer()
    with atomic_path(target) as tmp, open(tmp, "wb") as fh:
        half = len(data) // 2
        fh.write(data[:half])
        pause = _test_pause()
        if pause:
            fh.flush()
            os.fsync(fh.fileno())
            time.sleep(pause)
        fh.write(data[half:])
    return target


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True` (no code is unpickled)."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_FILE
    if not p.is_file():
        raise CheckpointError(f"no checkpoint found at {p}")
    try:
        state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise CheckpointError(
            f"{p}: cannot read checkpoint ({type(exc).__name__}: {exc})"
        ) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a clearsight training checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(f"{p}: checkpoint version {state.get('version')!r} is not supported")
    return state
