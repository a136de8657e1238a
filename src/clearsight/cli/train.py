"""`clearsight train`: `clearsight.train` and its one-line summary."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clearsight.cli._app import app, console, friendly, say
from clearsight.errors import ClearsightError


@app.command("train")
@friendly
def train_cmd(
    config: Annotated[Path | None, typer.Argument(help="Training config (YAML).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value: key.path=value (YAML value)."),
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Output folder (default: runs/CONFIG-NAME).")
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Continue the run in this folder exactly.")
    ] = None,
    overfit_batch: Annotated[
        bool,
        typer.Option(
            "--overfit-batch",
            help="Train on one batch; fail if the loss won't fall (a detector: if its AP on "
            "the batch stays below 0.9).",
        ),
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Train a model from CONFIG (or --resume RUN_DIR); writes RUN_DIR/best and RUN_DIR/last."""
    import os

    from clearsight.api import train

    result = train(
        config,
        overrides=set_ or [],
        run_dir=run_dir,
        resume=resume,
        overfit_batch=overfit_batch,
        progress=not no_progress,
    )
    if os.environ.get("RANK", "0") != "0":
        return  # under torchrun, rank 0 reports
    if overfit_batch:
        first, last = result.first_loss, result.last_loss
        console.print(f"overfit one batch: first loss {first:.6g}, last loss {last:.6g}")
        if result.overfit_ap is not None:
            from clearsight.api import OVERFIT_AP

            console.print(f"COCO AP on that batch: {result.overfit_ap:.4f}", highlight=False)
            if not result.overfit_ok:
                raise ClearsightError(
                    f"AP on the batch trained on stayed below {OVERFIT_AP:g} after "
                    f"{result.steps} steps: check the loss, the targets and the learning rate"
                )
            say(("ok:", "green"), " near-perfect AP on its batch")
            return
        if not result.overfit_ok:
            from clearsight.api import OVERFIT_MARGIN

            raise ClearsightError(
                f"the loss did not fall below {OVERFIT_MARGIN:g} x its first value in "
                f"{result.steps} steps on one batch: check the model, loss and learning rate"
            )
        say(("ok:", "green"), " the loss fell")
        return
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.val_metrics.items()) or "no validation"
    console.print(
        f"trained {result.steps} steps: loss {result.first_loss:.6g} -> {result.last_loss:.6g}; "
        f"{metrics}; skipped {result.nan_skipped} NaN step(s), {result.rollbacks} rollback(s)",
        highlight=False,
    )
    if result.nan_events:  # where each NaN/inf was found (all of them in train_log.jsonl)
        where = "; ".join(f"step {e['step']}: {e['nan']}" for e in result.nan_events[:5])
        more = len(result.nan_events) - 5
        console.print(f"NaN/inf at {where}" + (f" (+{more} more)" if more > 0 else ""))
    out = result.run_dir
    console.print(f"model: {out / 'best'} (best), {out / 'last'} (last)", highlight=False)
