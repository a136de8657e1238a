"""`clearsight restore`, `derain` and `demoire`: one body, `restore_images`, around
`clearsight.api.restore_files` (derain and demoire are restore with a bundled model)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from clearsight.api import (
    DEFAULT_DEMOIRE,
    DEFAULT_DERAIN,
    DEFAULT_STAGE_THRESHOLD,
    DEFAULT_VIDEO_DERAIN,
)
from clearsight.cli._app import EXIT_SOME_FAILED, app, friendly, progress, say, say_failed
from clearsight.cli._options import (
    AddressOpt,
    BatchSizeOpt,
    CodecOpt,
    CrfOpt,
    DemoireTemporalOpt,
    DeviceOpt,
    DurationOpt,
    EngineOpt,
    FailFastOpt,
    FpsOpt,
    FramesOutOpt,
    KeepContainerOpt,
    KeepPartialOpt,
    MaxPixOpt,
    ModelOpt,
    PrecisionOpt,
    RestoreBackendOpt,
    ScalesOpt,
    SkipExistingOpt,
    StagesOpt,
    StageThresholdOpt,
    StartOpt,
    TemporalOpt,
    TileOpt,
    TtaOpt,
    VerboseOpt,
    WorkersOpt,
)
from clearsight.cli._runs import existing_policy, finish_ray, run_on_ray, run_videos_summarised
from clearsight.errors import OptionError

if TYPE_CHECKING:
    from clearsight.api import RestoredFile, Restorer, RestoreRun

__all__ = ["restore_images", "run_on_ray"]

CHECKED_VIDEO_OPTIONS = ("start", "duration", "codec", "crf", "fps")
"""The video options checked once before any work (`clearsight.video.options`)."""

EPILOG = (
    "Existing outputs are replaced (--overwrite, the default: rerunning with another model "
    "or options must refresh them); --skip-existing keeps them, to resume a run. A file that "
    "cannot be restored is reported and listed in OUT/failures.csv, and the run goes on. "
    "Exit codes: 0 all done; 1 an error stopped the command (or the first failure, with "
    "--fail-fast); 2 a usage error; 3 the run finished but some inputs failed."
)


def restore_images(
    inputs: list[str],
    out: Path,
    *,
    model: str,
    what: str,
    verb: str,
    engine: str = "local",
    max_pixels: int | None = None,
    skip_existing: bool | None = None,
    fail_fast: bool = False,
    verbose: bool = False,
    address: str | None = None,
    workers: int = 1,
    batch_size: int = 8,
    bundled: str | None = None,
    video_model: str | None = None,
    video: dict[str, Any] | None = None,
    **options: Any,
) -> Any:
    """The body of restore, derain and demoire: `clearsight.api.restore_files` on either
    engine under a progress bar, printing each file, failure and skip as it happens and the
    run's summary. Exits 3 when some inputs failed, else returns the run's account (a
    `RestoreRun`, or Ray's `ScaleSummary`). `bundled`: `model` must be a bundled model (this
    architecture's, named in the error). `options` are `InferenceOptions` fields; a
    `scales` text is parsed here. Videos among the inputs (or in their folders) are restored
    with `video_model` (default: `model`) into OUT/<name>.mp4, with the `video` options
    (start, duration, codec, crf, temporal, keep_partial, keep_container, and fps: folders
    given are then numbered-frame videos; frames_out: numbered PNGs of each)."""
    from clearsight import api

    api.check_max_pixels(max_pixels)
    if isinstance(options.get("scales"), str):
        options["scales"] = api.parse_scales(options["scales"])
    api.InferenceOptions(**options)  # checked once, for videos as for images
    video = dict(video or {})
    api.check_video_options(
        **{k: video.get(k) for k in CHECKED_VIDEO_OPTIONS},
        container=None if video.get("keep_container") else "mp4",
        container_hint=", or --keep-container for .mkv inputs",
    )
    on_ray = api.check_engine(engine) == "ray"
    plan = _media_plan(inputs, out, video, on_ray)
    if bundled is not None and (plan.images or not plan.videos):
        api.require_bundled(model, bundled)
    account = None
    if plan.images or not plan.videos:
        account = _restore_image_inputs(
            plan.images, out, model=model, what=what, engine=engine, on_ray=on_ray,
            max_pixels=max_pixels, skip_existing=skip_existing, fail_fast=fail_fast,
            verbose=verbose, address=address, workers=workers, batch_size=batch_size,
            options=options, verb=verb,
        )  # fmt: skip
    if not plan.videos:
        if on_ray:
            finish_ray(account, lambda s: f"{s.line()} into {out}")
        else:
            finish(account, verb, out)  # type: ignore[arg-type]
        return account
    if account is not None and on_ray:
        say(f"{account.line()} into {out}")
    elif account is not None:
        summarize(account, verb, out)
    common: dict[str, Any] = dict(
        verb=verb, max_pixels=max_pixels, earlier=account.failed if account is not None else [],
        device=options.get("device", "cpu"), tile=options.get("tile"), video=video,
    )  # fmt: skip
    if on_ray:
        failed = _restore_videos_ray(
            inputs, out, video_model or model, skip_existing=skip_existing, address=address,
            workers=workers, **common,
        )  # fmt: skip
    else:
        failed = _restore_videos(plan.videos, out, video_model or model, fail_fast=fail_fast,
                                 skip_existing=bool(skip_existing), **common)  # fmt: skip
    earlier = len(account.failed) if account is not None else 0
    if failed or earlier:
        say(f"{len(failed) + earlier} input(s) failed; see {out / 'failures.csv'}", err=True)
        raise typer.Exit(code=EXIT_SOME_FAILED)
    return account


def _media_plan(inputs: list[str], out: Path, video: dict[str, Any], on_ray: bool) -> Any:
    """The run's one output plan (`clearsight.output_plan.plan_run`), checked before any
    work: images apart from videos; with --fps, each folder given is one video of numbered
    frames, restored to OUT/<folder name>.mp4. On Ray the image engine plans the images
    (globs, manifests and URIs), so only the videos are planned here."""
    from clearsight import api

    fps, frames_out = video.get("fps"), video.get("frames_out")
    if on_ray:
        for option, name in (("fps", "--fps"), ("frames_out", "--frames-out")):
            if video.get(option) is not None:
                raise OptionError(
                    option, f"{name} runs with --engine local (Ray takes video files)"
                )
    plan = api.plan_run(
        inputs, out, fps=fps, frames_out=frames_out, plan_images=not on_ray,
        keep_container=bool(video.get("keep_container")),
    )  # fmt: skip
    if video.get("keep_container"):
        api.check_output_containers(video.get("codec"), (v.target for v in plan.videos))
    if frames_out is not None and not plan.videos:
        raise OptionError("frames_out", "writes the frames of videos; no video among the inputs")
    return plan


def _restore_videos(
    videos: list[Any],
    out: Path,
    model: str,
    *,
    verb: str,
    max_pixels: int | None,
    fail_fast: bool,
    skip_existing: bool,
    earlier: list[Any],
    device: str,
    tile: int | None,
    video: dict[str, Any],
) -> list[Any]:
    """Each planned video (`clearsight.output_plan.VideoOutput`) through
    `clearsight.api.restore_video`, one line each, and the summary (also when failures.csv
    cannot be written); returns the ones that failed (also in OUT/failures.csv, with the
    images that failed before)."""
    from clearsight import api

    video = {k: v for k, v in video.items() if k not in ("keep_container", "frames_out")}
    frames = {v.source: v.frames for v in videos}
    loaded = api.load_model(model, device=device)
    skipped: list[Path] = []

    def one(source: Path, target: Path) -> Any:
        return api.restore_video(
            loaded, source, target, device=device, tile=tile, max_pixels=max_pixels,
            progress=True, frames_out=frames[source], **video,
        )  # fmt: skip

    def done(source: Path, target: Path, r: Any) -> None:
        say(f"{source} -> {target}  ({r.frames} frames, {r.fps:.2f} fps)", err=True)

    def skip(source: Path, target: Path) -> None:
        skipped.append(source)
        say(f"{source} -> {target}  (exists, skipped)", err=True)

    def summary(ok: int, failed: int) -> None:
        say(f"{verb} {ok} video(s) into {out} with {model}")
        say(f"{ok} done, {len(skipped)} skipped, {failed} failed")

    return run_videos_summarised(
        videos, one, out, summary, existing="skip" if skip_existing else "overwrite",
        fail_fast=fail_fast, earlier_failed=earlier, on_done=done, on_skip=skip,
    )  # fmt: skip


def _restore_videos_ray(
    inputs: list[str], out: Path, model: str, *, verb: str, earlier: list[Any],
    skip_existing: bool | None, video: dict[str, Any], **options: Any,
) -> list[Any]:  # fmt: skip
    """The videos of `inputs` on Ray actors (`clearsight.api.video_ray`: one video is cut
    across the workers), one line each as `_restore_videos` prints them; returns the ones
    that failed. Finished outputs are skipped unless --overwrite, as Ray runs images."""
    from clearsight.api.video_ray import restore_videos_ray

    video = {k: v for k, v in video.items() if k not in ("fps", "frames_out")}  # local only

    def start(**callbacks: Any) -> Any:
        return restore_videos_ray(
            model, inputs, out, overwrite=skip_existing is False, earlier_failed=earlier,
            **options, **video, **callbacks,
        )  # fmt: skip

    summary = run_on_ray("videos", start)
    for r in summary.done:  # the failed ones were printed as they came back
        say(f"{r.source} -> {r.output}  ({r.frames} frames, {r.segments} segment(s))", err=True)
    say(f"{verb} {len(summary.done)} video(s) into {out} with {model}")
    say(summary.line())
    return summary.failed


def _restore_image_inputs(
    inputs: list[str],
    out: Path,
    *,
    model: str,
    what: str,
    verb: str,
    engine: str,
    on_ray: bool,
    max_pixels: int | None,
    skip_existing: bool | None,
    fail_fast: bool,
    verbose: bool,
    address: str | None,
    workers: int,
    batch_size: int,
    options: dict[str, Any],
) -> Any:
    """The images of a run through `clearsight.api.restore_files` under a progress bar,
    printing each file, failure and skip as it happens; returns the run's account."""
    from clearsight import api

    if isinstance(options.get("scales"), str):
        options["scales"] = api.parse_scales(options["scales"])
    loaded: list[Restorer] = []

    def ray_line(s: Any) -> str:
        return f"{s.line()} into {out}"

    try:
        with progress() as bar:
            files = bar.add_task(what, total=None)
            tiles: dict[Path, object] = {}
            reasons: set[str] = set()

            def on_tile(src: Path, done: int, total: int) -> None:
                if src not in tiles:
                    tiles[src] = bar.add_task(f"  {src.name}", total=None)
                bar.update(tiles[src], completed=done, total=total)  # type: ignore[arg-type]

            def on_file(r: RestoredFile) -> None:
                if r.source in tiles:
                    bar.remove_task(tiles.pop(r.source))  # type: ignore[arg-type]
                bar.advance(files)
                note = _stages_note(r)
                choice = loaded[0].last_backend  # set by --backend auto only
                if choice is not None:
                    note += f", {choice.backend}"
                    if verbose and choice.reason not in reasons:  # each distinct choice once
                        reasons.add(choice.reason)
                        say(f"backend auto: {choice.reason}", err=True)
                say(f"{r.source} -> {r.output}  ({r.latency_ms:.0f} ms{note})", err=True)

            def on_failure(f: Any) -> None:
                if f.source in tiles:
                    bar.remove_task(tiles.pop(f.source))  # type: ignore[arg-type]
                bar.advance(files)
                say_failed(f.source, f.reason)

            def on_skip(src: Path, dst: Path) -> None:
                bar.advance(files)
                say(f"{src} -> {dst}  (exists, skipped)", err=True)

            def on_result(r: Any) -> None:  # Ray: one image back from a worker
                bar.advance(files)
                if r.status != "done":
                    say_failed(r.source, r.reason)

            account = api.restore_files(
                model,
                inputs,
                out,
                engine=engine,
                max_pixels=max_pixels,
                existing=existing_policy(skip_existing if on_ray else bool(skip_existing)),
                fail_fast=fail_fast,
                workers=workers,
                batch_size=batch_size,
                address=address,
                on_load=loaded.append,
                on_start=lambda n, *_skipped: bar.update(files, total=n),
                on_tile=on_tile,
                on_file=on_file,
                on_failure=on_failure,
                on_skip=on_skip,
                on_result=on_result,
                **options,
            )
    except api.FailuresCsvError as exc:  # the run's account still gets printed
        if exc.run is not None:
            if on_ray:
                say(ray_line(exc.run))
            else:
                summarize(exc.run, verb, out)
        raise
    return account


def _stages_note(restored: RestoredFile) -> str:
    """', 3 stages' for a file restored with --stages other than all."""
    used = restored.stages
    if not used:
        return ""
    text = ", ".join(f"{n:g}" for n in used)
    return f", {text} stage{'' if used == [1] else 's'}"


def summarize(run: RestoreRun, verb: str, out: Path) -> None:
    """'restored 3 image(s) into OUT' and '3 done, 0 skipped, 1 failed'."""
    replaced = f"; replaced {len(run.replaced)} existing" if run.replaced else ""
    say(f"{verb} {len(run)} image(s) into {out}{replaced}")
    say(run.summary())


def finish(run: RestoreRun, verb: str, out: Path) -> None:
    """Print the summary; exit 3 when some inputs failed (after the whole run)."""
    summarize(run, verb, out)
    if run.failed:
        say(f"{len(run.failed)} input(s) failed; see {run.failures_csv}", err=True)
        raise typer.Exit(code=EXIT_SOME_FAILED)


@app.command("restore", epilog=EPILOG)
@friendly
def restore_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Image or video files, or folders; with --engine ray also globs, manifests, URIs."
        ),
    ],
    model: ModelOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("restored"),
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    scales: ScalesOpt = "1.0",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    precision: PrecisionOpt = "fp32",
    backend: RestoreBackendOpt = "auto",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    skip_existing: SkipExistingOpt = None,
    fail_fast: FailFastOpt = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
    start: StartOpt = None,
    duration: DurationOpt = None,
    crf: CrfOpt = None,
    codec: CodecOpt = "libx264",
    temporal: TemporalOpt = False,
    keep_partial: KeepPartialOpt = False,
    keep_container: KeepContainerOpt = False,
    fps: FpsOpt = None,
    frames_out: FramesOutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Restore images with MODEL; outputs mirror the input names under OUT."""
    restore_images(
        inputs, out, model=model, what="restoring", verb="restored", engine=engine,
        max_pixels=max_pixels, skip_existing=skip_existing, fail_fast=fail_fast,
        verbose=verbose, address=address, workers=workers, batch_size=batch_size,
        tile=tile, ensemble=tta, scales=scales, device=device, backend=backend,
        stages=stages, stage_threshold=stage_threshold, precision=precision,
        video=dict(start=start, duration=duration, crf=crf, codec=codec, temporal=temporal,
                   keep_partial=keep_partial, keep_container=keep_container, fps=fps,
                   frames_out=frames_out),
    )  # fmt: skip


@app.command("derain", epilog=EPILOG)
@friendly
def derain_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Rainy images or videos (files or folders); --engine ray: images, globs, URIs."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("derained"),
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Default: default-derain (RESCAN) for images, video-derain (S2VD, windows of "
            "frames) for videos; a model given here runs on both.",
        ),
    ] = None,
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    precision: PrecisionOpt = "fp32",
    backend: RestoreBackendOpt = "auto",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    skip_existing: SkipExistingOpt = None,
    fail_fast: FailFastOpt = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
    start: StartOpt = None,
    duration: DurationOpt = None,
    crf: CrfOpt = None,
    codec: CodecOpt = "libx264",
    temporal: TemporalOpt = False,
    keep_partial: KeepPartialOpt = False,
    keep_container: KeepContainerOpt = False,
    fps: FpsOpt = None,
    frames_out: FramesOutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Remove rain from images (bundled RESCAN) and videos (bundled S2VD, see `models`)."""
    restore_images(
        inputs, out, model=model or DEFAULT_DERAIN, bundled=None if model else "RESCAN",
        video_model=model or DEFAULT_VIDEO_DERAIN, what="deraining",
        verb="derained", engine=engine, max_pixels=max_pixels, skip_existing=skip_existing,
        fail_fast=fail_fast, verbose=verbose, address=address, workers=workers,
        batch_size=batch_size, tile=tile, ensemble=tta, device=device, backend=backend,
        stages=stages, stage_threshold=stage_threshold, precision=precision,
        video=dict(start=start, duration=duration, crf=crf, codec=codec, temporal=temporal,
                   keep_partial=keep_partial, keep_container=keep_container, fps=fps,
                   frames_out=frames_out),
    )  # fmt: skip


@app.command("demoire", epilog=EPILOG)
@friendly
def demoire_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Screen photos or videos (files or folders); with --engine ray also globs, URIs."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("demoired"),
    model: Annotated[
        str | None,
        typer.Option(
            "--model",
            "-m",
            help="Default: default-demoire (mbcnn-light); any demoiréing artifact, e.g. an "
            "imported ESDNet (`clearsight import torch`), runs on images and videos.",
        ),
    ] = None,
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    scales: ScalesOpt = "1.0",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    precision: PrecisionOpt = "fp32",
    backend: RestoreBackendOpt = "auto",
    skip_existing: SkipExistingOpt = None,
    fail_fast: FailFastOpt = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
    start: StartOpt = None,
    duration: DurationOpt = None,
    crf: CrfOpt = None,
    codec: CodecOpt = "libx264",
    temporal: DemoireTemporalOpt = True,
    keep_partial: KeepPartialOpt = False,
    keep_container: KeepContainerOpt = False,
    fps: FpsOpt = None,
    frames_out: FramesOutOpt = None,
    verbose: VerboseOpt = False,
) -> None:
    """Remove moiré with the bundled default demoiréing model (mbcnn-light, see `models`)
    or the one given with --model."""
    restore_images(
        inputs, out, model=model or DEFAULT_DEMOIRE, bundled=None if model else "MBCNN",
        what="demoiréing",
        verb="demoiréd", engine=engine, max_pixels=max_pixels, skip_existing=skip_existing,
        fail_fast=fail_fast, verbose=verbose, address=address, workers=workers,
        batch_size=batch_size, tile=tile, ensemble=tta, scales=scales, device=device,
        backend=backend, precision=precision,
        video=dict(start=start, duration=duration, crf=crf, codec=codec, temporal=temporal,
                   keep_partial=keep_partial, keep_container=keep_container, fps=fps,
                   frames_out=frames_out),
    )  # fmt: skip
