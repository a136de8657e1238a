"""What a video job does: its upload checked before it is queued, then the family's run.

The form's options are parsed into a `Work` before the job is queued (a bad option is a
422 at once, not a failed job later); the work itself calls `clearsight.video`'s
`restore_video` or `detect_video`, as `clearsight derain CLIP.mp4` and `clearsight detect
CLIP.mp4` do, with the job's frame callback (progress, cancellation) and the server's pixel
limit. Which run a model gets is looked up by its family (`clearsight.families`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import VideoReadError
from clearsight.families import Family
from clearsight.serve.jobs import VideoJob, Work
from clearsight.serve.options import flag_true, restore_options, score_threshold

if TYPE_CHECKING:
    from clearsight.serve.registry import ServedModel

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v")
"""A client's file name ending in one of these keeps it on the server's own name for the
upload (a hint to FFmpeg, which reads the container from the bytes anyway); any other
name is not used."""
UNKNOWN_DURATION_FPS = 60
"""The frame rate a job's frame count is bounded at when the header states none."""
MAX_JOB_FPS = 240
"""The highest header frame rate the frame bound believes (a crafted header can claim any)."""


def upload_suffix(filename: str | None) -> str:
    suffix = Path(filename or "").suffix.lower()
    return suffix if suffix in VIDEO_SUFFIXES else ""


def check_upload(job: VideoJob, max_pixels: int | None, max_seconds: float) -> None:
    """Refuse before queueing what cannot run: not a video, no video stream, undecodable,
    frames over the pixel limit, or stated longer than `max_seconds` (one line, naming
    what). The header can lie, so the job also gets a `DecodeLimit`: it fails once a
    decoded frame is `max_seconds` past the first, or once it has decoded more frames than
    `max_seconds` at the header's frame rate (at most `MAX_JOB_FPS`; `UNKNOWN_DURATION_FPS`
    when none is stated)."""
    from clearsight.video.io import DecodeLimit, probe_video

    try:
        info = probe_video(job.upload, max_pixels=max_pixels)
    except VideoReadError as exc:
        raise VideoReadError(job.private(str(exc))) from None
    if info.duration is not None and info.duration > max_seconds:
        raise VideoReadError(
            f"the uploaded video is {info.duration:.2f} s long; the server's limit is "
            f"{max_seconds:g} s"
        )
    rate = min(float(info.rate), MAX_JOB_FPS) if info.rate else UNKNOWN_DURATION_FPS
    frames = max(1, math.ceil(max_seconds * rate))
    job.decode_limit = DecodeLimit(max_seconds, frames, "the server's limit")


def _restoration(
    served: ServedModel,
    fields: Mapping[str, str],
    max_pixels: int | None,
    models: Mapping[str, ServedModel] | None = None,
) -> Work:
    """A per-frame restorer (with the form's tile, tta, scales, stages and `temporal`), or
    a video model (S2VD) by windows, into `result.mp4`."""
    options = restore_options(fields)
    temporal = flag_true(fields, "temporal", False)

    def work(job: VideoJob) -> None:
        import numpy as np

        from clearsight.engine.inference import Restorer
        from clearsight.engine.video_window import Windowed, video_model
        from clearsight.io import image_to_tensor, tensor_to_image
        from clearsight.video.restore import restore_video

        model: Any = video_model(served.loaded, device=options.device, tile=options.tile)
        if not isinstance(model, Windowed):
            restorer = Restorer(served.loaded, options)

            def model(frame: np.ndarray) -> np.ndarray:
                # the job's check as the tile hook: a cancelled job stops at its next tile
                out = restorer.restore(image_to_tensor(frame), job.check)
                return tensor_to_image(out, dtype=np.uint8)

        out = job.folder / "result.mp4"
        result = restore_video(
            model,
            job.upload,
            out,
            temporal=temporal,
            max_pixels=max_pixels,
            decode_limit=job.decode_limit,
            on_start=job.on_start,
            on_frame=job.on_frame,
        )
        if result.temporal_skipped is not None:
            job.notes.append(f"{result.temporal_skipped}; the temporal blend was skipped")
        job.result = out

    return work


def _detection(
    served: ServedModel,
    fields: Mapping[str, str],
    max_pixels: int | None,
    models: Mapping[str, ServedModel] | None = None,
) -> Work:
    """The drawn video and one JSON line of boxes per frame (`track`: ByteTrack ids;
    `restore`: a served restoration model run on the frames first)."""
    from clearsight.serve.registry import restore_front
    from clearsight.video.detect import DEFAULT_SCORE_THRESHOLD

    front = restore_front(models or {}, fields.get("restore"), video=True)

    threshold = score_threshold(fields, DEFAULT_SCORE_THRESHOLD)
    track = flag_true(fields, "track", False)

    def work(job: VideoJob) -> None:
        from clearsight.video.detect import detect_video

        result = detect_video(
            served.detector,
            job.upload,
            job.folder / "result",
            track=track,
            score_threshold=threshold,
            max_pixels=max_pixels,
            decode_limit=job.decode_limit,
            on_start=job.on_start,
            on_frame=job.on_frame,
            restore=None if front is None else front[0],
            restore_gated=front is not None and front[1],
        )
        job.result, job.detections = result.video, result.jsonl

    return work


WORK: dict[Family, Callable[..., Work]] = {
    Family.RESTORATION: _restoration,
    Family.DETECTION: _detection,
}


def plan_work(
    served: ServedModel,
    fields: Mapping[str, str],
    max_pixels: int | None,
    models: Mapping[str, ServedModel] | None = None,
) -> Work:
    """The run for `served`'s family with the form's options (their errors raised now);
    `models`: the server's, which a detector's `restore` field may name."""
    return WORK[served.loaded.family](served, fields, max_pixels, models)


__all__ = ["VIDEO_SUFFIXES", "check_upload", "plan_work", "upload_suffix"]
