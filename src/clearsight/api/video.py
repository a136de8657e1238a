"""Video through the same commands as images: restore, detect and score footage (docs/video.md).

A folder run may mix images and videos: `split_media` tells them apart by name; the images
go through `restore_files`/`detect_files`, each video through `restore_video` or
`detect_video` into `OUT/<its relative path>.mp4` (or its own container with
`keep_container`), and a video that fails is one line in `OUT/failures.csv` like an image.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError, is_library_error

if TYPE_CHECKING:
    from clearsight.runtime.failures import FailedFile

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v")
"""File names read as videos (any container FFmpeg decodes; these are the usual ones)."""
DEFAULT_VIDEO_DERAIN = "video-derain"


def is_video(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


@dataclass
class MediaPlan:
    """The image inputs of a run (files and folders, as given) and its videos with the
    output path (without suffix) each will have under OUT."""

    images: list[str] = field(default_factory=list)
    videos: list[tuple[Path, Path]] = field(default_factory=list)


def split_media(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> MediaPlan:
    """Videos apart from images: a video file given goes to `OUT/<stem>`, a video inside a
    folder to `OUT/<its path inside the folder>` (as images do); a folder stays an image
    input when it holds images."""
    from clearsight.errors import ImageReadError
    from clearsight.io import list_images

    def has_images(folder: Path) -> bool:
        try:
            return bool(list_images(folder, recursive=True))
        except ImageReadError:  # a folder without images
            return False

    plan = MediaPlan()
    root = Path(out)
    for item in inputs:
        p = Path(item)
        if p.is_file() and is_video(p):
            plan.videos.append((p, root / p.stem))
        elif p.is_dir():
            found = sorted(v for v in p.rglob("*") if v.is_file() and is_video(v))
            plan.videos += [(v, root / v.relative_to(p).with_suffix("")) for v in found]
            if not found or has_images(p):
                plan.images.append(str(item))
        else:
            plan.images.append(str(item))
    return plan


def video_output(stem: Path, source: Path, keep_container: bool) -> Path:
    """`stem.mp4`, or `stem` with the source's own suffix when `keep_container` (a folder of
    numbered frames has none: .mp4). The suffix is added, not swapped: `my.clip` becomes
    `my.clip.mp4`, not `my.mp4`."""
    suffix = source.suffix.lower() if keep_container and is_video(source) else ".mp4"
    return stem.with_name(stem.name + suffix)


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


def run_videos(
    videos: Sequence[tuple[Path, Path]],
    run_one: Callable[[Path, Path], Any],
    out: str | os.PathLike[str],
    *,
    keep_container: bool = False,
    fail_fast: bool = False,
    earlier_failed: Sequence[FailedFile] = (),
    on_done: Callable[[Path, Path, Any], None] | None = None,
    on_failure: Callable[[FailedFile], None] | None = None,
) -> tuple[list[tuple[Path, Path, Any]], list[FailedFile], Path | None]:
    """Run `run_one(source, output)` for each video; a video that fails is recorded (and
    reported with `on_failure`) and the run goes on, unless `fail_fast`. When one failed,
    `OUT/failures.csv` lists it with `earlier_failed` (the run's images); returns (done,
    failed, that file or None)."""
    from clearsight.runtime.failures import FailedFile, failure_reason, update_failures_csv

    done: list[tuple[Path, Path, Any]] = []
    failed: list[FailedFile] = []
    for source, stem in videos:
        target = video_output(stem, source, keep_container)
        try:
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
    csv = update_failures_csv(Path(out), [*earlier_failed, *failed]) if failed else None
    return done, failed, csv
