"""Restoring a video with a per-frame image model: decode, restore and encode overlapped.

A reader thread decodes frames into a bounded queue, the calling thread runs the model on
each, and a writer thread encodes the results from a second bounded queue: at most
`2 * queue_size + 3` frames are alive at once, whatever the video's length, and decoding and
encoding (FFmpeg and swscale release the GIL) run while the model works. The output keeps
the input's size, timestamps and audio/subtitle streams (`clearsight.video.io`);
`frames_out` also (or instead) writes numbered PNGs. docs/video.md.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.errors import OptionError, VideoWriteError
from clearsight.out_paths import check_output_file, check_output_folder
from clearsight.video.frames import FrameFolderWriter, open_source
from clearsight.video.io import DEFAULT_CODEC, DecodeLimit, Frame, VideoWriter

_log = logging.getLogger(__name__)
FrameFn = Callable[[np.ndarray], np.ndarray]
DEFAULT_QUEUE = 4
_END = object()
_POLL_S = 0.1


@dataclass
class VideoRestoreResult:
    """What `restore_video` did."""

    source: Path
    output: Path | None
    frames_out: Path | None
    frames: int
    seconds: float
    model_seconds: float
    """Time spent in the model (and the temporal blend), summed over frames."""
    padded: tuple[int, int] | None = None
    """(width, height) the encoder needed (odd sides in yuv420p), or None."""
    copied_streams: tuple[str, ...] = ()
    dropped_streams: tuple[str, ...] = ()
    temporal: bool = False
    """Whether the temporal blend ran (False also when the frames were too small for it)."""
    temporal_skipped: str | None = None
    """Why the temporal blend asked for did not run (frames too small for the flow)."""
    side_bytes: dict[int, int] = field(default_factory=dict)
    """Bytes of each copied audio/subtitle stream (by source index)."""

    @property
    def fps(self) -> float:
        """Frames restored per second of wall time, decode and encode included."""
        return self.frames / self.seconds if self.seconds > 0 else 0.0


class _Failure:
    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def _put(q: queue.Queue[Any], item: object, stop: threading.Event) -> bool:
    """Put, waiting while the queue is full, unless `stop` is set (then False)."""
    while not stop.is_set():
        try:
            q.put(item, timeout=_POLL_S)
            return True
        except queue.Full:
            continue
    return False


def _get(q: queue.Queue[Any], stop: threading.Event) -> object:
    while True:
        try:
            return q.get(timeout=_POLL_S)
        except queue.Empty:
            if stop.is_set():
                return _END


def frame_function(model: Any) -> FrameFn:
    """A uint8 RGB -> uint8 RGB function for `model`: a `Restorer` (its `restore_image`) or
    any such callable."""
    from clearsight.engine.inference import Restorer

    if isinstance(model, Restorer):
        return model.restore_image
    if callable(model):
        return model
    raise TypeError(f"expected a Restorer or a frame function, got {type(model).__name__}")


def _estimate_total(info: Any, start: float | None, duration: float | None) -> int | None:
    """Frames the cut will hold, for the progress bar (None when unknown)."""
    if info.rate is None or info.duration is None:
        return info.frames
    length = max(0.0, info.duration - (start or 0.0))
    if duration is not None:
        length = min(length, duration)
    return max(1, round(length * float(info.rate)))


def writer_like(
    reader: Any,
    out: Path,
    start: float | None,
    duration: float | None,
    codec: str = DEFAULT_CODEC,
    crf: int | None = None,
    pix_fmt: str | None = None,
    keep_partial: bool = False,
) -> VideoWriter:
    """A `VideoWriter` for `out` with the source's size, clock and frame rate, copying its
    audio/subtitle packets of the cut [start, start + duration)."""
    info = reader.info
    return VideoWriter(
        out,
        width=info.width,
        height=info.height,
        time_base=info.time_base,
        rate=info.rate,
        codec=codec,
        crf=crf,
        pix_fmt=pix_fmt,
        side=reader.side_streams(start, duration),
        keep_partial=keep_partial,
    )


def _restore_step(fn: FrameFn, blend: Any, src: Path) -> Callable[[Frame], np.ndarray]:
    def step(frame: Frame) -> np.ndarray:
        restored = fn(frame.image)
        if blend is not None:
            restored = blend(restored)
        if restored.shape != frame.image.shape or restored.dtype != np.uint8:
            raise VideoWriteError(
                f"{src}: the model returned a {restored.shape} {restored.dtype} frame for "
                f"a {frame.image.shape} uint8 one"
            )
        return restored

    return step


def run_pipeline(
    reader: Any,
    writers: list[Any],
    step: Callable[[Frame], np.ndarray] | None,
    *,
    stream: Callable[[Iterator[Frame]], Iterator[tuple[np.ndarray, int]]] | None = None,
    start: float | None = None,
    duration: float | None = None,
    keep_partial: bool = False,
    queue_size: int = DEFAULT_QUEUE,
    progress: bool = False,
    on_start: Callable[[int | None], None] | None = None,
    on_frame: Callable[[int, float], None] | None = None,
) -> tuple[int, float, float]:
    """Decode `reader` on a thread, run `step` (a decoded `Frame` -> the uint8 RGB image to
    write) on the calling thread, and encode into every writer (`write(image, pts)`) on a
    second thread; bounded queues keep at most `2 * queue_size + 3` frames alive. `stream`
    instead of `step`: decoded frames in, (image, pts) out in order, possibly later (a model
    that restores a window of frames at once holds that window). Owns the
    reader and writers: the reader is closed, the writers closed on success and aborted on
    failure (kept with `keep_partial`), and the error re-raised. Returns (frames, wall
    seconds, seconds spent in `step`). What `restore_video` and `detect_video` share."""
    src = reader.info.path
    total = _estimate_total(reader.info, start, duration)
    if on_start is not None:
        on_start(total)
    bar = None
    task = None
    if progress:
        from clearsight.progress import progress_bar

        bar = progress_bar(fields=["{task.fields[fps]:.1f} fps"])
        bar.start()
        task = bar.add_task(src.name, total=total, fps=0.0)

    stop = threading.Event()
    in_q: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
    out_q: queue.Queue[Any] = queue.Queue(maxsize=queue_size)
    writer_error: list[BaseException] = []

    def read_job() -> None:
        try:
            for frame in reader.frames(start, duration):
                if not _put(in_q, frame, stop):
                    return
            _put(in_q, _END, stop)
        except BaseException as exc:
            _put(in_q, _Failure(exc), stop)

    def write_job() -> None:
        try:
            while True:
                item = _get(out_q, stop)
                if item is _END:
                    return
                image, pts = item  # type: ignore[misc]
                for w in writers:
                    w.write(image, pts)
        except BaseException as exc:
            writer_error.append(exc)
            stop.set()

    t0 = time.perf_counter()
    model_s = 0.0
    done = 0
    error: BaseException | None = None
    read_thread = threading.Thread(target=read_job, name="clearsight-video-read", daemon=True)
    write_thread = threading.Thread(target=write_job, name="clearsight-video-write", daemon=True)
    read_thread.start()
    write_thread.start()
    waited = [0.0]

    def decoded() -> Iterator[Frame]:
        while True:
            w0 = time.perf_counter()
            item = _get(in_q, stop)
            waited[0] += time.perf_counter() - w0
            if item is _END:
                return
            if isinstance(item, _Failure):
                raise item.exc
            assert isinstance(item, Frame)
            yield item

    if stream is None:
        assert step is not None
        per_frame = step

        def stream(frames: Iterator[Frame]) -> Iterator[tuple[np.ndarray, int]]:
            for f in frames:
                yield per_frame(f), f.pts

    try:
        outputs = stream(decoded())
        while True:
            m0, w0 = time.perf_counter(), waited[0]
            try:
                restored, pts = next(outputs)
            except StopIteration:
                break
            model_s += time.perf_counter() - m0 - (waited[0] - w0)
            if not _put(out_q, (restored, pts), stop):
                break
            done += 1
            rate = done / (time.perf_counter() - t0)
            if bar is not None and task is not None:
                bar.update(task, completed=done, fps=rate)
            if on_frame is not None:
                on_frame(done, rate)
    except BaseException as exc:
        error = exc
    finally:
        if error is not None and not keep_partial:
            stop.set()  # nothing will be kept: the writer need not drain
        _put(out_q, _END, stop)
        write_thread.join()
        stop.set()
        read_thread.join()
        reader.close()
        if bar is not None:
            bar.stop()
    if error is None and writer_error:
        error = writer_error[0]
    if error is not None:
        for w in writers:
            w.abort(error)
        if keep_partial and done and not writer_error:
            kept = ", ".join(str(w.path) for w in writers)
            _log.warning("%s: kept the %d frames done before the failure (%s)", src, done, kept)
        raise error
    try:
        for w in writers:
            w.close()
    except BaseException as exc:
        for w in writers:
            w.abort(exc)
        raise
    return done, time.perf_counter() - t0, model_s


def _window_stream(model: Any, blend: Any) -> Callable[[Iterator[Frame]], Iterator[Any]]:
    """A window model (`engine/video_window.py`: S2VD, or an image model as `PerFrame`) over
    decoded frames: the restored images, in order, each with its input's timestamp."""
    from clearsight.engine.video_window import restore_frames

    def stream(frames: Iterator[Frame]) -> Iterator[tuple[np.ndarray, int]]:
        stamps: deque[int] = deque()

        def images() -> Iterator[np.ndarray]:
            for f in frames:
                stamps.append(f.pts)
                yield f.image

        for image in restore_frames(images(), model):
            out = np.asarray(image)
            yield (blend(out) if blend is not None else out), stamps.popleft()

    return stream


def restore_video(
    model: Any,
    source: str | Path,
    out: str | Path | None = None,
    *,
    frames_out: str | Path | None = None,
    fps: float | None = None,
    start: float | None = None,
    duration: float | None = None,
    codec: str = DEFAULT_CODEC,
    crf: int | None = None,
    pix_fmt: str | None = None,
    max_pixels: int | None = None,
    decode_limit: DecodeLimit | None = None,
    temporal: bool = False,
    smooth_tone: bool = False,
    keep_partial: bool = False,
    queue_size: int = DEFAULT_QUEUE,
    progress: bool = False,
    on_start: Callable[[int | None], None] | None = None,
    on_frame: Callable[[int, float], None] | None = None,
) -> VideoRestoreResult:
    """Restore every frame of `source` (a video file, or a folder of numbered frames at
    `fps`) with `model` into the video `out` and/or the numbered-PNG folder `frames_out`.
    `model`: a `Restorer` or a uint8 RGB frame function (frame by frame), or a window model
    from `engine.video_window.video_model` (S2VD restores windows of frames; memory is
    bounded by the window, not the video).

    `start`/`duration` (seconds) cut the source; `codec`/`crf`/`pix_fmt` choose the encoding
    (H.264 yuv420p, crf 18, in the container of `out`'s extension by default); `temporal`
    blends each output with the flow-warped previous one where that is safe, and
    `smooth_tone` averages an image model's global statistics (MBCNN's tone vectors) over
    frames (`video/temporal.py`; it costs a second forward per frame). `decode_limit`
    stops decoding past a number of frames or seconds, counted on the decoded frames
    (`video.io.DecodeLimit`: how the server bounds a job).
    Errors are one-line `ClearsightError`s naming the file; nothing half-written remains
    unless `keep_partial` (then the frames restored before a failure are kept, and the error
    is still raised). `on_start(total or None)` once; `on_frame(done, fps)` after each
    frame; `progress` draws a bar on stderr.
    """
    if out is None and frames_out is None:
        raise OptionError("out", "give an output video, a frames_out folder, or both")
    if isinstance(queue_size, bool) or not isinstance(queue_size, int) or queue_size < 1:
        raise OptionError("queue_size", f"must be a whole number >= 1, got {queue_size!r}")
    from clearsight.engine.video_window import PerFrame, Windowed

    src = Path(source)
    blend = None
    if temporal:
        from clearsight.video.temporal import TemporalBlend

        blend = TemporalBlend(source=src)
    if smooth_tone:
        from clearsight.video.temporal import with_smoothed_stats

        model = with_smoothed_stats(model)
    windowed = model if isinstance(model, Windowed | PerFrame) else None
    fn = frame_function(model) if windowed is None else None
    out_path = check_output_file(out, "output video") if out is not None else None
    frames_path = check_output_folder(frames_out, "frames_out") if frames_out is not None else None
    if out_path is not None and src.exists() and out_path.resolve() == src.resolve():
        raise OptionError("out", f"{out_path} is the input video; choose another output path")

    reader = open_source(src, fps=fps, max_pixels=max_pixels, limit=decode_limit)
    writers: list[Any] = []
    try:
        info = reader.info
        if out_path is not None:
            writers.append(
                writer_like(reader, out_path, start, duration, codec, crf, pix_fmt, keep_partial)
            )
        if frames_path is not None:
            writers.append(FrameFolderWriter(frames_path, keep_partial=keep_partial))
    except BaseException as exc:
        for w in writers:
            w.abort(exc)
        reader.close()
        raise

    step = _restore_step(fn, blend, src) if fn is not None else None
    stream = _window_stream(windowed, blend) if windowed is not None else None
    done, seconds, model_s = run_pipeline(
        reader,
        writers,
        step,
        stream=stream,
        start=start,
        duration=duration,
        keep_partial=keep_partial,
        queue_size=queue_size,
        progress=progress,
        on_start=on_start,
        on_frame=on_frame,
    )
    video = writers[0] if out_path is not None else None
    return VideoRestoreResult(
        source=src,
        output=out_path,
        frames_out=frames_path,
        frames=done,
        seconds=seconds,
        model_seconds=model_s,
        padded=video.padded if video is not None else None,
        copied_streams=info.side_streams if video is not None else (),
        dropped_streams=info.dropped_streams,
        temporal=blend is not None and blend.skipped is None,
        temporal_skipped=blend.skipped if blend is not None else None,
        side_bytes=video.side_bytes if video is not None else {},
    )
