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
    CodecOpt,
    CrfOpt,
    DeviceOpt,
    DurationOpt,
    EngineOpt,
    FailFastOpt,
    KeepPartialOpt,
    PrecisionOpt,
    RestoreOpt,
    SaveRestoredOpt,
    SkipExistingOpt,
    StartOpt,
    WorkersOpt,
)
from clearsight.cli._runs import existing_policy, finish_ray, run_videos_summarised
from clearsight.errors import OptionError, check_unit_interval


@app.command("detect")
@friendly
def detect_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Image or video files, or folders; with --engine ray also globs, URIs."
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
    track: Annotated[
        bool,
        typer.Option("--track", help="Videos: persistent object ids across frames (ByteTrack)."),
    ] = False,
    start: StartOpt = None,
    duration: DurationOpt = None,
    crf: CrfOpt = None,
    codec: CodecOpt = "libx264",
    keep_partial: KeepPartialOpt = False,
    restore: RestoreOpt = None,
    save_restored: SaveRestoredOpt = None,
) -> None:
    """Detect objects: a copy of each image with labelled boxes under OUT, and
    OUT/detections.json in COCO results format (category ids as in the model's class map);
    each video drawn into OUT/<name>.mp4 with OUT/<name>.jsonl, one line per frame.
    --restore runs a derain/demoiré model first (boxes drawn on the input)."""
    from clearsight import api

    on_ray = api.check_engine(engine) == "ray"
    check_unit_interval("score_threshold", score_threshold)
    api.check_detector_options(device, backend, precision)
    api.check_max_pixels(None)  # $CLEARSIGHT_MAX_PIXELS, once, for videos as for images
    api.check_video_options(start=start, duration=duration, codec=codec, crf=crf, container="mp4")
    plan = api.plan_run(
        inputs, out, sidecars=(".jsonl",), plan_images=not on_ray,
        run_files=("failures.csv", "detections.json"),
    )  # fmt: skip
    if plan.videos and on_ray:
        raise OptionError("engine", "videos run with --engine local (one at a time)")
    if save_restored is not None and restore is None:
        raise OptionError("save_restored", "needs --restore (nothing is restored without it)")
    chain = {"restore": restore, "save_restored": save_restored}
    if plan.videos and skip_existing and not on_ray:  # as for images (`api.detect_files`)
        raise OptionError("skip_existing", "detect resumes a run only with --engine ray")
    failed: list[Any] = []
    if plan.images:
        failed = _detect_images(
            plan.images, out, model=model, engine=engine, score_threshold=score_threshold,
            device=device, backend=backend, precision=precision, skip_existing=skip_existing,
            fail_fast=fail_fast, workers=workers, batch_size=batch_size, address=address,
            **chain,
        )  # fmt: skip
    if plan.videos:
        video = dict(track=track, start=start, duration=duration, crf=crf, codec=codec,
                     keep_partial=keep_partial, score_threshold=score_threshold,
                     **chain)  # fmt: skip
        loading = dict(device=device, backend=backend, precision=precision)
        failed += _detect_videos(plan, out, model, loading, fail_fast, video, failed)
    if failed:
        say(f"{len(failed)} input(s) failed; listed in {out / 'failures.csv'}", err=True)
        raise typer.Exit(code=EXIT_SOME_FAILED)


def _detect_images(
    inputs: list[str],
    out: Path,
    *,
    model: str,
    engine: str,
    score_threshold: float,
    device: str,
    backend: str,
    precision: str,
    skip_existing: bool | None,
    fail_fast: bool,
    workers: int,
    batch_size: int,
    address: str | None,
    restore: str | None = None,
    save_restored: Path | None = None,
) -> list[Any]:
    """The images through `clearsight.api.detect_files` under a progress bar, printing each
    image and failure and the summary; returns the failed inputs (Ray: exits itself)."""
    from clearsight import api

    on_ray = engine == "ray"
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
                restore=restore,
                save_restored=save_restored,
            )
    except api.FailuresCsvError as exc:  # the run's account still gets printed
        if exc.run is not None:
            say(exc.run.line() if on_ray else exc.run.summary())
        raise
    if on_ray:
        finish_ray(run, lambda s: f"{s.line()}; {s.detections} detection(s) in {s.results_path}")
        return []
    say(f"detected in {len(run.items)} image(s); results in {run.results_path}")
    say(run.summary())
    return list(run.failed)


def _detect_videos(
    plan: Any,
    out: Path,
    model: str,
    loading: dict[str, str],
    fail_fast: bool,
    video: dict[str, Any],
    earlier: list[Any],
) -> list[Any]:
    """Each video through `clearsight.api.detect_video` (the detector loaded with `loading`:
    device, backend, precision), one line each; returns the videos
    that failed (OUT/failures.csv then lists them with the `earlier` failed images)."""
    from clearsight import api

    detector = api.Detector.from_pretrained(model, **loading)

    def one(source: Path, target: Path) -> Any:
        return api.detect_video(detector, source, target.parent, progress=True, **video)

    def done(source: Path, target: Path, r: Any) -> None:
        say(f"{source} -> {r.video}  ({r.frames} frames, {r.detections} detection(s))", err=True)

    def summary(ok: int, failed: int) -> None:
        say(f"detected in {ok} video(s) into {out}")
        say(f"{ok} done, 0 skipped, {failed} failed")

    return run_videos_summarised(
        plan.videos, one, out, summary, fail_fast=fail_fast, earlier_failed=earlier,
        on_done=done,
    )  # fmt: skip
