"""`clearsight detect`: `Detector.detect_files` with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clearsight.cli._app import EXIT_SOME_FAILED, app, console, err_console, friendly, progress
from clearsight.cli._options import DeviceOpt, FailFastOpt

DEFAULT_DETECT = "default-detect"


@app.command("detect")
@friendly
def detect_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="Image files or folders.")],
    model: Annotated[
        str, typer.Option("--model", "-m", help="Detection artifact, bundled name or .onnx.")
    ] = DEFAULT_DETECT,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("detected"),
    score_threshold: Annotated[
        float, typer.Option("--score-threshold", help="Keep detections scoring at least this.")
    ] = 0.3,
    device: DeviceOpt = "cpu",
    fail_fast: FailFastOpt = False,
) -> None:
    """Detect objects: a copy of each image with labelled boxes under OUT, and
    OUT/detections.json in COCO results format (category ids as in the model's class map)."""
    from clearsight.detection.detector import Detector

    detector = Detector.from_pretrained(model, device=device)
    with progress() as bar:
        task = bar.add_task("detecting", total=None)

        def on_image(src: Path, dets: object) -> None:
            bar.advance(task)
            err_console.print(f"{src}: {len(dets)} object(s)", highlight=False)  # type: ignore[arg-type]

        def on_failure(f: object) -> None:
            bar.advance(task)
            err_console.print(f"failed: {f.source}: {f.reason}", highlight=False)  # type: ignore[attr-defined]

        run = detector.detect_files(
            inputs,
            out,
            score_threshold=score_threshold,
            on_image=on_image,
            fail_fast=fail_fast,
            on_failure=on_failure,
        )
    console.print(f"detected in {len(run.items)} image(s); results in {run.results_path}")
    console.print(run.summary())
    if run.failed:
        err_console.print(f"{len(run.failed)} input(s) failed; listed in {out / 'failures.csv'}")
        raise typer.Exit(code=EXIT_SOME_FAILED)
