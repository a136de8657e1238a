"""Video through the same commands as images: restore, detect and score footage (docs/video.md).

A folder run may mix images and videos: `split_media` tells them apart by name; the images
go through `restore_files`/`detect_files`, each video through `restore_video` or
`detect_video` into `OUT/<its relative path>.mp4` (or its own container with
`keep_container`), and a video that fails is one line in `OUT/failures.csv` like an image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError, OptionError, is_library_error
from clearsight.output_plan import (
    VIDEO_SUFFIXES,
    MediaPlan,
    OutputClashError,
    RunPlan,
    VideoOutput,
    is_video,
    plan_fixed_outputs,
    plan_run,
    split_media,
    video_output,
)

if TYPE_CHECKING:
    from clearsight.runtime.failures import FailedFile

__all__ = [
    "DEFAULT_VIDEO_DERAIN",
    "VIDEO_SUFFIXES",
    "MediaPlan",
    "OutputClashError",
    "RunPlan",
    "VideoOutput",
    "detect_video",
    "evaluate_video",
    "is_video",
    "plan_fixed_outputs",
    "plan_run",
    "restore_video",
    "run_videos",
    "split_media",
    "video_output",
]

DEFAULT_VIDEO_DERAIN = "video-derain"


def restore_video(
    model: Any,
    source: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    device: str = "cpu",
    tile: int | None = None,
    **video_options: Any,
) -> Any:
    """Restore the video (or numbered-frame folder) `source` into `out` with `model`: a
    `load_model` reference or a `LoadedModel`. A video model (S2VD, `video-derain`) restores
    windows of frames as its official test does; an image model runs frame by frame through
    the `Restorer`. `video_options` go to `clearsight.video.restore.restore_video` (`start`,
    `duration`, `codec`, `crf`, `temporal`, `keep_partial`, `max_pixels`, `progress`,
    `on_frame`, ...). Returns its `VideoRestoreResult`; errors are one line naming the file."""
    from clearsight.api.models import load_model
    from clearsight.artifact import LoadedModel
    from clearsight.engine.video_window import video_model
    from clearsight.video.restore import restore_video as run

    loaded = model if isinstance(model, LoadedModel) else load_model(model, device=device)
    return run(video_model(loaded, device=device, tile=tile), source, out, **video_options)


def detect_video(model: Any, source: str | os.PathLike[str], out: str | os.PathLike[str],
                 **options: Any) -> Any:  # fmt: skip
    """Detect objects in every frame of `source` with `model` (a `Detector` or a model
    reference): `OUT/<stem>.mp4` drawn (timestamps and audio kept) and `OUT/<stem>.jsonl`,
    one line per frame; `track=True` gives persistent ids (ByteTrack). See
    `clearsight.video.detect.detect_video` for the options."""
    from clearsight.video.detect import detect_video as run

    return run(model, source, out, **options)


def evaluate_video(
    model: Any,
    pairs: Any,
    out: str | os.PathLike[str] | None = None,
    *,
    report: str | os.PathLike[str] | None = None,
    **options: Any,
) -> Any:
    """Restore a clip with `model` and score it per frame (PSNR/SSIM under `preset`, warping
    error): `pairs` is a folder with the input frames (`rain/`, `moire/` or `input/`) and
    `clean/`, or two video files. A video model (S2VD) restores it by windows. Writes
    `per_frame.csv` and `summary.json` to `out`; `report`: an HTML page there (per-frame
    plots, a frame strip, a before/after player whose two clips go beside it;
    `clearsight.report.video`). See `clearsight.video.evaluate`."""
    from clearsight.api.models import load_model
    from clearsight.artifact import LoadedModel
    from clearsight.engine.video_window import restore_frames, video_model
    from clearsight.families import Family
    from clearsight.video.evaluate import evaluate_video as run

    loaded = model if isinstance(model, LoadedModel) else load_model(model)
    if loaded.family is Family.VIDEO:
        vm = video_model(loaded)
        fn: Any = lambda frames: restore_frames(frames, vm)  # noqa: E731
        options["clip"] = True
    else:
        from clearsight.engine.inference import Restorer

        fn = Restorer(loaded)
    if report is None:
        return run(fn, pairs, out, **options)
    from clearsight.report.video import VideoReportCollector, write_video_report

    with VideoReportCollector(report, preset=options.get("preset", "y-matlab")) as collector:
        result = run(fn, pairs, out, on_start=collector.start, on_frame=collector, **options)
    write_video_report(result, collector, model=model, pairs=pairs, loaded=loaded)
    result.files += [collector.page, *collector.videos]
    return result


def _input_error(exc: BaseException) -> bool:
    """An error that fails one video and lets the run go on: the package's own, an OS
    error, a bad value, or one raised inside OpenCV or FFmpeg (a frame they refuse)."""
    if isinstance(exc, ClearsightError | OSError | ValueError | RuntimeError):
        return True
    return is_library_error(exc)


def _named(pair: tuple[Path, Path], keep_container: bool) -> VideoOutput:
    """A (source, OUT/stem) pair as the plan names it."""
    source, stem = Path(pair[0]), Path(pair[1])
    return VideoOutput(source, video_output(stem, source, keep_container))


def run_videos(
    videos: Sequence[VideoOutput | tuple[Path, Path]],
    run_one: Callable[[Path, Path], Any],
    out: str | os.PathLike[str],
    *,
    keep_container: bool = False,
    existing: str = "overwrite",
    fail_fast: bool = False,
    earlier_failed: Sequence[FailedFile] = (),
    on_done: Callable[[Path, Path, Any], None] | None = None,
    on_failure: Callable[[FailedFile], None] | None = None,
    on_skip: Callable[[Path, Path], None] | None = None,
) -> tuple[list[tuple[Path, Path, Any]], list[FailedFile], Path | None]:
    """Run `run_one(source, output)` for each video of a run's plan
    (`clearsight.output_plan.plan_run`; (source, OUT/stem) pairs are named with
    `keep_container`), as `restore_files` runs images: leftovers of killed runs swept
    first; with `existing="skip"` a video whose outputs all exist is kept (`on_skip`); a
    video that fails is recorded (`on_failure`) and the run goes on, unless `fail_fast`.
    `OUT/failures.csv` then lists the failed videos with `earlier_failed` (the run's
    images), or a previous run's list is removed when nothing failed. Returns (done,
    failed, that file or None); an unwritable list is a `FailuresCsvError` whose `run` is
    (done, failed, skipped), so the caller can still print the summary."""
    import time

    from clearsight.output_plan import finished, prepare_outputs
    from clearsight.runtime.batch import check_video_file
    from clearsight.runtime.failures import (
        FailedFile,
        FailuresCsvError,
        failure_reason,
        update_failures_csv,
    )

    if existing not in ("overwrite", "skip"):
        raise OptionError("existing", f"must be overwrite or skip, got {existing!r}")
    started = time.time()
    planned = [v if isinstance(v, VideoOutput) else _named(v, keep_container) for v in videos]
    out_dir = Path(out)
    written = [f for v in planned for f in (*v.files, *([v.frames] if v.frames else []))]
    prepare_outputs(out_dir, written, started)
    done: list[tuple[Path, Path, Any]] = []
    failed: list[FailedFile] = []
    skipped: list[Path] = []
    for video in planned:
        source, target = video.source, video.target
        if existing == "skip" and finished(video):
            skipped.append(source)
            if on_skip is not None:
                on_skip(source, target)
            continue
        try:
            check_video_file(source)  # a broken link, a pipe: named as such, never opened
            target.parent.mkdir(parents=True, exist_ok=True)
            result = run_one(source, target)
        except Exception as exc:
            if fail_fast or not _input_error(exc):
                raise
            f = FailedFile(source, target, failure_reason(exc))
            failed.append(f)
            if on_failure is not None:
                on_failure(f)
            continue
        done.append((source, target, result))
        if on_done is not None:
            on_done(source, target, result)
    try:
        csv = update_failures_csv(out_dir, [*earlier_failed, *failed])
    except FailuresCsvError as exc:
        exc.run = (done, failed, skipped)
        raise
    return done, failed, csv
