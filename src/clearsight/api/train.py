"""Training: a YAML config into a run folder, and the thresholds its checks use."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from clearsight.errors import ClearsightError

if TYPE_CHECKING:
    from clearsight.engine.trainer import TrainResult


def train(
    config: str | os.PathLike[str] | None = None,
    *,
    overrides: Sequence[str] = (),
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    overfit_batch: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train from a YAML `config` into `run_dir` (default runs/CONFIG-NAME), or continue the
    run in `resume` exactly; `overrides` are "key.path=value" strings (YAML values).

    Refuses to start a new run over a folder that already holds one (except to overfit a
    batch). The result's `run_dir` holds best/ and last/.
    """
    from clearsight.engine.checkpoint import CHECKPOINT_FILE, load_checkpoint
    from clearsight.engine.train_config import apply_overrides, config_from_dict, load_config
    from clearsight.engine.trainer import train as run_training

    if resume is not None:
        if config is not None:
            raise ClearsightError("give either CONFIG or --resume RUN_DIR, not both")
        out = Path(resume)
        state = load_checkpoint(out / CHECKPOINT_FILE)
        cfg = config_from_dict(apply_overrides(state["config"], list(overrides)))
    else:
        if config is None:
            raise ClearsightError("give a training CONFIG (YAML) or --resume RUN_DIR")
        cfg = load_config(Path(config), list(overrides))
        out = Path(run_dir) if run_dir is not None else Path("runs") / Path(config).stem
        if (out / CHECKPOINT_FILE).exists() and not overfit_batch:
            raise ClearsightError(
                f"{out} already holds a run; continue it with --resume {out} or pick --run-dir"
            )
    return run_training(
        cfg, out, resume=resume is not None, overfit_batch=overfit_batch, progress=progress
    )
