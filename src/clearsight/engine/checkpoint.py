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
import pickle
import random
import re
import time
import warnings
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
# What a resume reads (`trainer._Run.load`); "ema" and "distill" may be None.
REQUIRED_KEYS = (
    "step", "epoch", "position", "model", "optimizer", "scheduler", "ema", "rng", "config",
    "best", "counters",
)  # fmt: skip

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


def _refusal(p: Path, exc: Exception) -> CheckpointError:
    """One line for a failed `torch.load`, never PyTorch's advice to load unsafely."""
    text = str(exc)
    if isinstance(exc, pickle.UnpicklingError):
        found = re.search(r"Unsupported global: GLOBAL (\S+)", text) or re.search(
            r"WeightsUnpickler error: \s*(.+?)\s*$", text, re.MULTILINE
        )
        what = f" ({found[1]})" if found else ""
        return CheckpointError(
            f"{p}: holds objects other than tensors{what}; refused without running anything "
            "in it (a clearsight checkpoint holds only tensors and plain values)"
        )
    return CheckpointError(f"{p}: not a readable checkpoint ({one_line(exc)})")


def one_line(exc: BaseException, limit: int = 240) -> str:
    """`Type: message` on one line, shortened; PyTorch's multi-line messages (a state dict's
    size mismatches, its advice to load with weights_only=False) folded or dropped."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    text = "; ".join(ln for ln in lines if "weights_only" not in ln).replace(":; ", ": ")
    if len(text) > limit:
        text = text[: limit - 3] + "..."
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def load_checkpoint(path: str | os.PathLike[str]) -> dict[str, Any]:
    """Read a checkpoint with `weights_only=True` (no code is unpickled) and check that it
    holds every part a resume reads (`REQUIRED_KEYS`)."""
    p = Path(path)
    if p.is_dir():
        p = p / CHECKPOINT_FILE
    if not p.is_file():
        raise CheckpointError(f"no checkpoint found at {p}")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # e.g. "Detected pickle protocol 4": noise here
            state = torch.load(p, map_location="cpu", weights_only=True)
    except Exception as exc:  # torch raises many types for corrupt files
        raise _refusal(p, exc) from None
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{p}: not a clearsight training checkpoint")
    if state.get("version") != VERSION:
        raise CheckpointError(f"{p}: checkpoint version {state.get('version')!r} is not supported")
    missing = [k for k in REQUIRED_KEYS if k not in state]
    if missing:
        raise CheckpointError(f"{p}: checkpoint lacks {', '.join(missing)}")
    for key in ("step", "epoch", "position"):
        if type(state[key]) is not int or state[key] < 0:
            raise CheckpointError(f"{p}: {key} is {state[key]!r}, not a count")
    if not isinstance(state["config"], dict):
        raise CheckpointError(
            f"{p}: its config is a {type(state['config']).__name__}, not a mapping"
        )
    return state
