"""Running a detector over a video: a drawn copy and one JSON line of boxes per frame.

Every frame goes through the project's `Detector` (`engine/detector.py`: the same
preprocessing, decoding, label map and box drawing as `clearsight detect` on images) inside
the reader/writer-thread pipeline of `video/restore.py`, so the drawn video keeps the
input's size, timestamps and audio. `track=True` links the boxes of consecutive frames
into objects with ByteTrack (Zhang et al., ECCV 2022; `video/bytetrack.py`, which says why
it is written here). docs/video.md.
"""

from __future__ import annotations

import contextlib
import itertools
import json
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from clearsight.atomic import atomic_path
from clearsight.errors import OptionError, check_unit_interval, check_whole_number
from clearsight.io import write_image
from clearsight.out_paths import check_output_folder
from clearsight.video.bytetrack import ByteTrack
from clearsight.video.frames import open_source
from clearsight.video.io import DEFAULT_CODEC, DecodeLimit, Frame
from clearsight.video.restore import DEFAULT_QUEUE, run_pipeline, writer_like

if TYPE_CHECKING:
    from clearsight.engine.detector import Detections

DEFAULT_SCORE_THRESHOLD = 0.3  # as `clearsight detect` (engine/detector.py)
DEFAULT_BATCH = 4
"""Frames per detector call: one forward pass for several frames of one size."""


@dataclass
class VideoDetectResult:
    """What `detect_video` wrote."""

    source: Path
    video: Path
    """OUT/<stem>.mp4: the frames with their boxes drawn."""
    jsonl: Path
    """OUT/<stem>.jsonl: one line per frame, {"frame", "time", "detections": [...]}."""
    frames: int
    detections: int
    """Boxes over all frames."""
    tracks: int | None
    """Distinct track ids (with `track`), else None."""
    seconds: float
    padded: tuple[int, int] | None = None
    copied_streams: tuple[str, ...] = ()


class _JsonLines:
    """A JSON-lines file written line by line under a temporary name, renamed when complete
    (`clearsight.atomic`), with the writers' close/abort interface."""

    def __init__(self, path: Path, *, keep_partial: bool = False) -> None:
        self.path = path
        self.keep_partial = keep_partial
        self.lines = 0
        self._atomic = atomic_path(path)
        self._fh = open(self._atomic.__enter__(), "w", encoding="utf-8")  # noqa: SIM115
        self._closed = False

    def add(self, record: dict[str, Any]) -> None:
        self._fh.write(json.dumps(record, separators=(",", ":")) + "\n")
        self.lines += 1

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._fh.close()
        self._atomic.__exit__(None, None, None)

    def abort(self, exc: BaseException) -> None:
        if self._closed:
            return
        if self.keep_partial and self.lines:
            self.close()
            return
        self._closed = True
        self._fh.close()
        with contextlib.suppress(BaseException):
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)


LOW_SCORE = 0.1
"""With `track`, boxes down to this score go to ByteTrack's second association, which lets
a tracked object whose score dips (occlusion, blur) keep its track; ByteTrack's default."""


def _new_tracker(rate: float, threshold: float) -> ByteTrack:
    """ByteTrack whose first association and new tracks take the boxes at or above the
    score threshold (the boxes `clearsight detect` would draw), the rest the second."""
    return ByteTrack(rate, activation_threshold=threshold, high_threshold=threshold)


def _subset(dets: Detections, keep: list[int]) -> Detections:
    index = torch.tensor(keep, dtype=torch.long)
    return replace(
        dets,
        boxes=dets.boxes[index],
        scores=dets.scores[index],
        labels=dets.labels[index],
        category_ids=[dets.category_ids[k] for k in keep],
        names=[dets.names[k] for k in keep],
    )


def _track(tracker: ByteTrack, dets: Detections, time: float) -> list[int | None]:
    """Track ids for `dets` in order (None: a box not yet part of a confirmed track)."""
    n = len(dets)
    return tracker.update(dets.boxes.numpy().reshape(n, 4), dets.scores.numpy(), time)


def _records(dets: Any, ids: list[int | None] | None) -> list[dict[str, Any]]:
    out = []
    boxes, scores = dets.boxes.tolist(), dets.scores.tolist()
    for k, ((x0, y0, x1, y1), score) in enumerate(zip(boxes, scores, strict=True)):
        rec: dict[str, Any] = {
            "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
            "score": round(float(score), 5),
            "category_id": dets.category_ids[k],
            "label": dets.names[k],
        }
        if ids is not None:
            rec["track_id"] = ids[k]
        out.append(rec)
    return out


def _video_restorer(restore: Any, device: Any) -> tuple[Any, bool]:
    """(window runner, gated) for a `--restore` value on videos (or a loaded restoration
    model, not gated): a video model (S2VD) runs by windows, an image model frame by frame
    (`engine.video_window.video_model`)."""
    from clearsight.artifact import LoadedModel
    from clearsight.engine.pipeline import check_restore_model, parse_restore
    from clearsight.engine.video_window import video_model
    from clearsight.zoo import resolve_model

    if isinstance(restore, LoadedModel):
        if restore.is_detector:
            raise OptionError("restore", f"{restore.source} is a detector, not a restorer")
        return video_model(restore, device=device), False
    ref, gated = parse_restore(restore)
    check_restore_model(ref, video=True)
    return video_model(resolve_model(ref, device=device), device=device), gated


def _restored(
    frames: Iterator[Frame], runner: Any, gated: bool
) -> Iterator[tuple[Frame, np.ndarray]]:
    """(frame, what the detector sees) in order: the frames restored by `runner`, or, when
    `gated` and the first frame's rain score is under the threshold, the frames as they are
    (the decision is per video, so the boxes do not flicker with the gate)."""
    from clearsight.detection.rain_measure import RAIN_THRESHOLD, streak_score
    from clearsight.engine.video_window import restore_frames

    it = iter(frames)
    first = next(it, None)
    if first is None:
        return
    chained = itertools.chain([first], it)
    if gated and streak_score(first.image) < RAIN_THRESHOLD:
        yield from ((f, f.image) for f in chained)
        return
    held: deque[Frame] = deque()

    def images() -> Iterator[np.ndarray]:
        for f in chained:
            held.append(f)
            yield f.image

    for image in restore_frames(images(), runner):
        yield held.popleft(), np.asarray(image)


def detect_video(
    detector: Any,
    source: str | Path,
    out_dir: str | Path,
    *,
    track: bool = False,
    score_threshold: float = DEFAULT_SCORE_THRESHOLD,
    iou_threshold: float | None = None,
    max_detections: int = 100,
    fps: float | None = None,
    start: float | None = None,
    duration: float | None = None,
    codec: str = DEFAULT_CODEC,
    crf: int | None = None,
    pix_fmt: str | None = None,
    max_pixels: int | None = None,
    decode_limit: DecodeLimit | None = None,
    keep_partial: bool = False,
    queue_size: int = DEFAULT_QUEUE,
    batch_size: int = DEFAULT_BATCH,
    progress: bool = False,
    on_start: Callable[[int | None], None] | None = None,
    on_frame: Callable[[int, float], None] | None = None,
    restore: Any = None,
    save_restored: str | Path | None = None,
    restore_gated: bool = False,
) -> VideoDetectResult:
    """Detect objects in every frame of `source` (a video, or a folder of numbered frames at
    `fps`) with `detector` (an `engine.detector.Detector`, or a model reference for
    `Detector.from_pretrained`) and write `out_dir/<stem>.mp4`,
    the frames with their boxes drawn (the input's size, timestamps and audio), and
    `out_dir/<stem>.jsonl`, one line per frame: {"frame", "time" (seconds), "detections":
    [{"bbox": [x, y, w, h] in input pixels, "score", "category_id" (the dataset's id),
    "label", "track_id" (with `track`; null until ByteTrack confirms the track)}]}.

    Both files appear atomically when complete (`keep_partial` keeps what was done before a
    failure, and the error is still raised); `batch_size` frames go through the detector in
    one call (the boxes are those of one frame at a time; at most `2 * queue_size + 3 +
    batch_size` frames are alive); the other options are `restore_video`'s.
    `restore` (a restoration model reference, "auto" or "auto:REF") restores the frames
    first, a video model by windows, an image model frame by frame, as `derain` does; the
    boxes are drawn on the input frames, and `save_restored` keeps what the detector saw as
    numbered PNGs in `save_restored/<stem>/`. A loaded model as `restore` runs on every
    frame, or, with `restore_gated`, only if the first frame looks rainy.
    """
    threshold = check_unit_interval("score_threshold", score_threshold)
    check_whole_number("batch_size", batch_size)
    if isinstance(detector, str | Path):
        from clearsight.engine.detector import Detector

        detector = Detector.from_pretrained(str(detector))
    if not (hasattr(detector, "detect_batch") and hasattr(detector, "draw")):
        raise OptionError("detector", f"expected a Detector, got {type(detector).__name__}")
    src = Path(source)
    out = check_output_folder(out_dir, "out_dir")
    stem = src.stem if src.is_file() else src.name
    video_path, jsonl_path = out / f"{stem}.mp4", out / f"{stem}.jsonl"
    if src.exists() and video_path.resolve() == src.resolve():
        raise OptionError("out_dir", f"{video_path} is the input video; choose another folder")
    runner, gated = (None, False)
    if restore is not None:
        runner, gated = _video_restorer(restore, getattr(detector, "device", "cpu"))
        gated = gated or restore_gated
    elif save_restored is not None:
        raise OptionError("save_restored", "needs --restore (nothing is restored without it)")
    seen_dir = Path(save_restored) / stem if save_restored is not None else None

    reader = open_source(src, fps=fps, max_pixels=max_pixels, limit=decode_limit)
    writers: list[Any] = []
    try:
        info = reader.info
        writers.append(
            writer_like(reader, video_path, start, duration, codec, crf, pix_fmt, keep_partial)
        )
        lines = _JsonLines(jsonl_path, keep_partial=keep_partial)
    except BaseException as exc:
        for w in writers:
            w.abort(exc)
        reader.close()
        raise
    rate = float(info.rate) if info.rate else 25.0
    tracker = _new_tracker(rate, threshold) if track else None
    detect_at = min(threshold, LOW_SCORE) if track else threshold
    counts = {"boxes": 0}
    track_ids: set[int] = set()

    def finish(frame: Frame, dets: Detections) -> np.ndarray:
        """Track, record and draw one frame's boxes, in frame order."""
        ids = None
        if tracker is not None:
            ids = _track(tracker, dets, frame.time)
            # the boxes over the threshold, and the weaker ones ByteTrack kept on a track
            scores = dets.scores.tolist()
            keep = [k for k, i in enumerate(ids) if scores[k] >= threshold or i is not None]
            dets, ids = _subset(dets, keep), [ids[k] for k in keep]
        lines.add(
            {"frame": frame.index, "time": round(frame.time, 6), "detections": _records(dets, ids)}
        )
        counts["boxes"] += len(dets)
        if ids is not None:
            track_ids.update(i for i in ids if i is not None)
            named = zip(ids, dets.names, strict=True)
            dets = replace(dets, names=[n if i is None else f"#{i} {n}" for i, n in named])
        return detector.draw(frame.image, dets)

    def batched(frames: Iterator[Frame]) -> Iterator[tuple[np.ndarray, int]]:
        """`batch_size` decoded frames per detector call, then each frame in order."""
        pairs = (
            _restored(frames, runner, gated)
            if runner is not None
            else ((f, f.image) for f in frames)
        )
        while batch := list(itertools.islice(pairs, batch_size)):
            images = [seen for _, seen in batch]
            found = detector.detect_batch(images, detect_at, iou_threshold, max_detections)
            for (frame, seen), dets in zip(batch, found, strict=True):
                if seen_dir is not None:
                    write_image(seen_dir / f"{frame.index + 1:05d}.png", seen)
                yield finish(frame, dets), frame.pts

    try:
        done, seconds, _ = run_pipeline(
            reader,
            writers,
            None,
            stream=batched,
            start=start,
            duration=duration,
            keep_partial=keep_partial,
            queue_size=queue_size,
            progress=progress,
            on_start=on_start,
            on_frame=on_frame,
        )
    except BaseException as exc:
        lines.abort(exc)
        raise
    lines.close()
    video = writers[0]
    return VideoDetectResult(
        source=src,
        video=video_path,
        jsonl=jsonl_path,
        frames=done,
        detections=counts["boxes"],
        tracks=len(track_ids) if track else None,
        seconds=seconds,
        padded=video.padded,
        copied_streams=info.side_streams,
    )


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """The per-frame records of a `detect_video` JSON-lines file (for scoring or tests)."""
    rows = []
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


__all__ = ["VideoDetectResult", "detect_video", "read_jsonl"]
