"""`clearsight detect`: `Detector.detect_files` (or `detect_files_ray`) with a progress bar."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

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
from clearsight.cli.restore import check_max_pixels, finish_ray, run_on_ray, use_ray
from clearsight.errors import OptionError

DEFAULT_DETECT = "default-detect"


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
    check_max_pixels(None)  # $CLEARSIGHT_MAX_PIXELS, before any work
    if use_ray(engine):
        if backend != "torch" or precision != "fp32":
            raise OptionError(
                "backend", "detect runs --backend onnxruntime and int8 with --engine local"
            )
        _detect_on_ray(
            inputs,
            out,
            model,
            score_threshold=score_threshold,
            device=device,
            overwrite=skip_existing is False,
            address=address,
            workers=workers,
            batch_size=batch_size,
        )
        return
    if skip_existing:
        raise OptionError("skip_existing", "detect resumes a run only with --engine ray")
    from clearsight.detection.detector import Detector
    from clearsight.engine.restore_files import FailedFile, FailuresCsvError

    detector = Detector.from_pretrained(model, device=device, backend=backend, precision=precision)
    with progress() as bar:
        task = bar.add_task("detecting", total=None)

        def on_image(src: Path, dets: object) -> None:
            bar.advance(task)
            say(f"{src}: {len(dets)} object(s)", err=True)  # type: ignore[arg-type]

        def on_failure(f: FailedFile) -> None:
            bar.advance(task)
            say_failed(f.source, f.reason)

        try:
            run = detector.detect_files(
                [Path(p) for p in inputs],
                out,
                score_threshold=score_threshold,
                on_image=on_image,
                fail_fast=fail_fast,
                on_failure=on_failure,
            )
        except FailuresCsvError as exc:
            if exc.run is not None:
                bar.stop()
                say(exc.run.summary())
            raise
    say(f"detected in {len(run.items)} image(s); results in {run.results_path}")
    say(run.summary())
    if run.failed:
        say(f"{len(run.failed)} input(s) failed; listed in {out / 'failures.csv'}", err=True)
        raise typer.Exit(code=EXIT_SOME_FAILED)


def _detect_on_ray(inputs: list[str], out: Path, model: str, **kw: object) -> None:
    """`detect_files_ray` with a bar; prints the summary, exits 3 when an image failed.
    Ray runs resume (skip images drawn and recorded) unless --overwrite is given."""
    from clearsight.scale.detect_ray import detect_files_ray

    summary = run_on_ray(
        "detecting",
        lambda **callbacks: detect_files_ray(inputs, out, model, **kw, **callbacks),  # type: ignore[arg-type]
        lambda s: s.line(),
    )
    finish_ray(summary, lambda s: f"{s.line()}; {s.detections} detection(s) in {s.results_path}")
