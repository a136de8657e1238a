"""`clearsight detect`: `clearsight.api.detect_files` (either engine) with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from clearsight.api import DEFAULT_DETECT
from clearsight.cli._app import EXIT_SOME_FAILED, app, friendly, progress, say, say_failed
from clearsight.cli._options import (
    AddressOpt,
    BackendOpt,
    BatchSizeOpt,
    DeviceOpt,
    EngineOpt,
    FailFastOpt,
    PrecisionOpt,
    SkipExistingOpt,
    WorkersOpt,
)
from clearsight.cli._runs import existing_policy, finish_ray


@app.command("detect")
@friendly
def detect_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Image files or folders; with --engine ray also globs, manifests, URIs."
        ),
    ],
    model: Annotated[
        str, typer.Option("--model", "-m", help="Detection artifact, bundled name or .onnx.")
    ] = DEFAULT_DETECT,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("detected"),
    score_threshold: Annotated[
        float, typer.Option("--score-threshold", help="Keep detections scoring at least this.")
    ] = 0.3,
    device: DeviceOpt = "cpu",
    backend: BackendOpt = "torch",
    precision: PrecisionOpt = "fp32",
    fail_fast: FailFastOpt = False,
    skip_existing: SkipExistingOpt = None,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
) -> None:
    """Detect objects: a copy of each image with labelled boxes under OUT, and
    OUT/detections.json in COCO results format (category ids as in the model's class map)."""
    from clearsight import api

    on_ray = engine == "ray"  # the API checks the name
    try:
        with progress() as bar:
            task = bar.add_task("detecting", total=None)

            def on_image(src: Path, dets: Any) -> None:
                bar.advance(task)
                say(f"{src}: {len(dets)} object(s)", err=True)

            def on_failure(f: Any) -> None:
                bar.advance(task)
                say_failed(f.source, f.reason)

            def on_result(r: Any) -> None:  # Ray: one image back from a worker
                bar.advance(task)
                if r.status != "done":
                    say_failed(r.source, r.reason)

            run = api.detect_files(
                model,
                inputs,
                out,
                engine=engine,
                score_threshold=score_threshold,
                device=device,
                backend=backend,
                precision=precision,
                existing=existing_policy(skip_existing),
                fail_fast=fail_fast,
                workers=workers,
                batch_size=batch_size,
                address=address,
                on_image=on_image,
                on_failure=on_failure,
                on_start=lambda todo, _skipped: bar.update(task, total=todo),
                on_result=on_result,
            )
    except api.FailuresCsvError as exc:  # the run's account still gets printed
        if exc.run is not None:
            say(exc.run.line() if on_ray else exc.run.summary())
        raise
    if on_ray:
        finish_ray(run, lambda s: f"{s.line()}; {s.detections} detection(s) in {s.results_path}")
        return
    say(f"detected in {len(run.items)} image(s); results in {run.results_path}")
    say(run.summary())
    if run.failed:
        say(f"{len(run.failed)} input(s) failed; listed in {out / 'failures.csv'}", err=True)
        raise typer.Exit(code=EXIT_SOME_FAILED)
