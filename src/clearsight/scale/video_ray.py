"""Restoring videos on a Ray cluster: the `--engine ray` of restore/derain/demoire on videos.

Several videos: one video per Ray task, each restored by a worker exactly as the local
engine restores it (`video.restore.restore_video`) into its own output. Fewer videos than
workers (one long video): each is cut into segments, restored in parallel and stitched.

Why this design (docs/scale.md, "Videos"): the driver demuxes the video stream's packets
without decoding them (`probe_frames`: every frame's pts and which are keyframes) and cuts
the clip into about `segments` parts of at least `min_segment_frames` frames: at keyframes
for a per-frame model; for a window model (S2VD, `video-derain`) at multiples of its
window, where the local run's windows start, each segment reading its windows' context
frames beyond both cuts. Each worker seeks to the keyframe before its first frame and
decodes only until its last (`VideoReader.frames(start, duration)`: frames before the start
are dropped), restores the same windows the local run restores there (`restore_frames` with
a `lead`), and writes the restored frames *losslessly* (FFV1, RGB) to a segment file,
returning their timestamps. The driver then decodes the segment files in order and encodes
the output once, with the local engine's writer (`writer_like`: its codec settings, the
input's timestamps, the audio and subtitle packets copied), and applies the `temporal`
blend there, since the blend needs the previous output. So the encoder gets the very frames
and timestamps the local run gives it, in the same order: the output equals the local run's
as far as the encoder repeats itself (exactly with a lossless or deterministic codec;
libx264 through PyAV is not reproducible run to run, docs/scale.md), and memory stays
bounded (frames stream through files; nothing holds a segment). Encoding the segments in
the workers and concatenating them would spare the driver, but a lossy encoder restarted at
each cut does not give the local run's frames.

A video with a cut (`start`/`duration`) or whose timestamps are not clean (missing or
repeated pts) runs whole, one video per task, as locally. A segment whose decoded
timestamps differ from the probe's fails its video with a one-line reason.
"""

from __future__ import annotations

import os
import shutil
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.errors import ClearsightError, VideoReadError
from clearsight.runtime.failures import (
    FailedFile,
    check_max_pixels,
    failure_reason,
    sweep_output_folders,
)
from clearsight.scale.inputs import WorkItem
from clearsight.scale.ray_engine import (
    STATUS_DONE,
    STATUS_FAILED,
    ItemResult,
    ScaleSummary,
    _connect,
    _resources,
    check_count,
    local_engine_threads,
    record_failures,
)

DEFAULT_MIN_SEGMENT_FRAMES = 48
"""A segment is at least this many frames (about 2 s at 25 fps): shorter ones cost more in
seeking, decoding the lead-in and starting than they save."""
SEGMENT_CODEC, SEGMENT_PIX_FMT, SEGMENT_SUFFIX = "ffv1", "bgr0", ".mkv"
"""Segment files: FFV1 in RGB is lossless, so the driver encodes the restored frames."""
_MAX_DENOMINATOR = 1_000_000  # `VideoReader` cuts at seconds limited to this denominator


@dataclass(frozen=True)
class VideoJob:
    """One Ray task: a whole video into `output`, or (`segment` >= 0) one segment into the
    segment file `output`: decode the cut `start`/`duration` (seconds; its frames come
    shifted back by `shift` pts), take its first `lead` frames as context only, and restore
    the `count` frames after them (None: all)."""

    source: str
    output: str
    segment: int = -1
    start: float | None = None
    duration: float | None = None
    shift: int = 0
    lead: int = 0
    count: int | None = None


@dataclass(frozen=True)
class JobResult:
    job: VideoJob
    ok: bool
    reason: str = ""
    frames: int = 0
    pts: tuple[int, ...] = ()
    """Segments: the timestamps of the restored frames, in the source's time base."""


@dataclass(frozen=True)
class VideoResult(ItemResult):
    """What became of one video (`latency_ms`: its wall time, restore and stitch)."""

    frames: int = 0
    segments: int = 1


@dataclass
class VideoSummary(ScaleSummary):
    """A video run's outcome; `done`/`failed` hold `VideoResult`s."""

    frames: int = 0

    def line(self) -> str:
        """done 2, skipped 0, failed 1 video(s), 41.0 frames/s"""
        rate = self.frames / self.seconds if self.seconds > 0 else 0.0
        return (
            f"done {len(self.done)}, skipped {len(self.skipped)}, failed {len(self.failed)} "
            f"video(s), {rate:.1f} frames/s"
        )


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True)
class FrameProbe:
    """A video stream's frame timestamps (presentation order) and its keyframes' pts."""

    pts: tuple[int, ...]
    keyframes: frozenset[int]
    time_base: Fraction


def probe_frames(path: str | os.PathLike[str]) -> FrameProbe | None:
    """Every frame's pts from the video stream's packets, demuxed without decoding; None
    when the timestamps cannot place a cut (a packet without pts, two frames at one pts,
    a time base finer than the reader's cuts), so the video is restored whole."""
    import av

    try:
        container = av.open(str(path))
    except (av.error.FFmpegError, OSError, UnicodeDecodeError):
        return None
    try:
        if not container.streams.video:
            return None
        stream = container.streams.video[0]
        tb = Fraction(stream.time_base) if stream.time_base else None
        if tb is None or tb.denominator > _MAX_DENOMINATOR:
            return None
        pts: list[int] = []
        keys: set[int] = set()
        for packet in container.demux(stream):
            if packet.size == 0:  # the demuxer's flush packet
                continue
            if packet.pts is None:
                return None
            if packet.is_discard:  # edit lists: decoded, never shown
                continue
            pts.append(int(packet.pts))
            if packet.is_keyframe:
                keys.add(int(packet.pts))
    except av.error.FFmpegError:
        return None
    finally:
        container.close()
    ordered = tuple(sorted(pts))
    if not ordered or len(set(ordered)) != len(ordered):
        return None
    return FrameProbe(ordered, frozenset(keys), tb)


def segment_starts(probe: FrameProbe, parts: int, min_frames: int, window: int = 1) -> list[int]:
    """Indices (into `probe.pts`) where segments start: 0, then up to `parts - 1` cuts near
    equal shares of the frames, every segment at least `min_frames` long. A per-frame model
    (`window` 1) is cut at keyframes, where decoding starts; a window model at multiples of
    its `window` frames, where the local run's windows start."""
    n = len(probe.pts)
    parts = max(1, min(parts, n // max(1, min_frames)))
    if window == 1:
        cuts = [i for i, p in enumerate(probe.pts) if i > 0 and p in probe.keyframes]
    else:
        cuts = list(range(window, n, window))
    starts = [0]
    for k in range(1, parts):
        ideal = k * n / parts
        fits = [i for i in cuts if i - starts[-1] >= min_frames and n - i >= min_frames]
        if not fits:
            break
        best = min(fits, key=lambda i: (abs(i - ideal), i))
        starts.append(best)
    return starts


def _seconds(value: Fraction) -> float | None:
    """`value` as a float the reader turns back into exactly `value`, else None."""
    f = float(value)
    return f if Fraction(f).limit_denominator(_MAX_DENOMINATOR) == value else None


def segment_jobs(
    source: Path, probe: FrameProbe, starts: list[int], folder: Path, context: int = 0
) -> list[VideoJob]:
    """The jobs restoring the segments of `source` that begin at `starts` into `folder`,
    each decoding `context` frames more on either side (what the local run's windows see
    there); empty when a cut cannot be expressed exactly in the reader's seconds."""
    pts, tb, n = probe.pts, probe.time_base, len(probe.pts)
    jobs: list[VideoJob] = []
    for k, s in enumerate(starts):
        e = starts[k + 1] if k + 1 < len(starts) else n
        first = max(0, s - context)  # decoded from here ...
        stop = e + context if e + context < n else None  # ... to here (None: the end)
        start = _seconds((pts[first] - pts[0]) * tb) if first > 0 else None
        duration = _seconds((pts[stop] - pts[first]) * tb) if stop is not None else None
        if (first > 0 and start is None) or (stop is not None and duration is None):
            return []
        out = folder / f"{k:04d}{SEGMENT_SUFFIX}"
        shift = pts[first] if first > 0 else 0
        count = e - s if e < n else None
        jobs.append(VideoJob(str(source), str(out), k, start, duration, shift, s - first, count))
    return jobs


def segments_folder(target: Path) -> Path:
    """Where a video's segment files are kept until stitched: a hidden folder beside it."""
    return target.parent / f".{target.name}.segments"


# --------------------------------------------------------------------------- workers


@dataclass(frozen=True)
class VideoTask:
    """Picklable recipe of a worker: the model as the local engine loads it for videos
    (`api.restore_video`: `load_model`, then `video_model` with `device` and `tile`), and
    the options of `video.restore.restore_video` for whole videos."""

    model: str
    device: str = "cpu"
    tile: int | None = None
    max_pixels: int | None = None
    video: dict[str, Any] = field(default_factory=dict)
    """`codec`, `crf`, `pix_fmt`, `start`, `duration`, `temporal`, `keep_partial`."""

    def load(self) -> Any:
        from clearsight.engine.video_window import video_model
        from clearsight.zoo import resolve_model

        loaded = resolve_model(self.model, device=self.device)
        return video_model(loaded, device=self.device, tile=self.tile)

    def run(self, model: Any, job: VideoJob) -> JobResult:
        """Restore one job; any error becomes a failed result with a one-line reason."""
        try:
            if job.segment < 0:
                from clearsight.video.restore import restore_video

                r = restore_video(model, job.source, job.output, max_pixels=self.max_pixels,
                                  **self.video)  # fmt: skip
                return JobResult(job, True, frames=r.frames)
            stamps = self._segment(model, job)
        except Exception as exc:  # one bad video never stops the run
            return JobResult(job, False, failure_reason(exc))
        return JobResult(job, True, frames=len(stamps), pts=tuple(stamps))

    def _segment(self, model: Any, job: VideoJob) -> list[int]:
        """Decode only the segment, restore it and write it losslessly; its frames' pts."""
        from clearsight.video.frames import open_source
        from clearsight.video.io import VideoWriter
        from clearsight.video.restore import run_pipeline

        reader = open_source(job.source, max_pixels=self.max_pixels)
        try:
            info = reader.info
            writer = VideoWriter(
                job.output, width=info.width, height=info.height, time_base=info.time_base,
                rate=info.rate, codec=SEGMENT_CODEC, pix_fmt=SEGMENT_PIX_FMT,
            )  # fmt: skip
        except BaseException:
            reader.close()
            raise
        stamped = _Stamped(writer, job.shift)
        run_pipeline(reader, [stamped], None, stream=_segment_stream(model, job.lead, job.count),
                     start=job.start, duration=job.duration)  # fmt: skip
        return stamped.pts


def _segment_stream(model: Any, lead: int, count: int | None) -> Callable[..., Any]:
    """`run_pipeline`'s stream for a segment: its restored frames with their pts."""

    def stream(frames: Iterator[Any]) -> Iterator[tuple[np.ndarray, int]]:
        from clearsight.engine.video_window import restore_frames

        stamps: list[int] = []

        def images() -> Iterator[np.ndarray]:
            for f in frames:
                stamps.append(f.pts)
                yield f.image

        for k, image in enumerate(restore_frames(images(), model, lead, count)):
            yield image, stamps[lead + k]

    return stream


class _Stamped:
    """A writer that also records each frame's pts on the source's timeline (a cut's frames
    come shifted back by its start)."""

    def __init__(self, writer: Any, shift: int) -> None:
        self.writer, self.shift, self.path = writer, shift, writer.path
        self.pts: list[int] = []

    def write(self, image: np.ndarray, pts: int) -> None:
        self.writer.write(image, pts)
        self.pts.append(pts + self.shift)

    def close(self) -> None:
        self.writer.close()

    def abort(self, exc: BaseException | None = None) -> None:
        self.writer.abort(exc)


class _VideoWorker:
    """The Ray actor: one loaded model, jobs in, results out."""

    def __init__(self, task: VideoTask, threads: int | None) -> None:
        import torch

        # the local engine's thread count, so the restored frames are its (docs/scale.md)
        torch.set_num_threads(threads or local_engine_threads())
        self.task, self.model, self.error = task, None, ""
        try:
            self.model = task.load()
        except Exception as exc:  # reported by `window`, so the driver says it once
            self.error = failure_reason(exc)

    def window(self) -> tuple[int, int, str]:
        """(frames, context) of the model's windows, and why it did not load ("" if it did)."""
        spec = getattr(self.model, "spec", None)
        return (spec.frames, spec.context, self.error) if spec else (1, 0, self.error)

    def run(self, job: VideoJob) -> JobResult:
        if self.model is None:
            return JobResult(job, False, f"{job.source}: {self.error}")
        return self.task.run(self.model, job)


# --------------------------------------------------------------------------- stitching


def stitch(
    source: Path,
    target: Path,
    parts: Sequence[JobResult],
    *,
    max_pixels: int | None = None,
    codec: str | None = None,
    crf: int | None = None,
    pix_fmt: str | None = None,
    temporal: bool = False,
    keep_partial: bool = False,
    error: BaseException | None = None,
) -> int:
    """Encode the segment files of `parts` (in order) into `target` as the local engine
    writes `source`'s restored frames: its writer, timestamps and copied audio/subtitles.
    `error`: a segment after `parts` failed; the frames before it are kept only with
    `keep_partial`, and the error is raised. Returns the frames written."""
    from clearsight.video.frames import open_source
    from clearsight.video.io import DEFAULT_CODEC, VideoReader
    from clearsight.video.restore import writer_like

    reader = open_source(source, max_pixels=max_pixels)
    try:
        writer = writer_like(reader, target, None, None, codec or DEFAULT_CODEC, crf, pix_fmt,
                             keep_partial)  # fmt: skip
    finally:
        reader.close()
    blend = None
    if temporal:
        from clearsight.video.temporal import TemporalBlend

        blend = TemporalBlend(source=source)
    try:
        for part in parts:
            with VideoReader(part.job.output, max_pixels=max_pixels) as seg:
                for frame, pts in zip(seg.frames(), part.pts, strict=True):
                    image = blend(frame.image) if blend is not None else frame.image
                    writer.write(image, pts)
        if error is not None:
            raise error
    except BaseException as exc:
        writer.abort(exc)
        raise
    writer.close()
    return writer.frames_written


def _check_segments(source: Path, probe: FrameProbe, results: Sequence[JobResult]) -> None:
    """The segments' timestamps, end to end, must be the probe's: else a cut lost or
    doubled a frame (a keyframe that is no clean entry point) and the output would differ."""
    got = [p for r in results for p in r.pts]
    if got != list(probe.pts):
        raise VideoReadError(
            f"{source}: its segments decoded {len(got)} frames where the stream holds "
            f"{len(probe.pts)} (a keyframe is no clean cut); restore it with --engine local"
        )


# --------------------------------------------------------------------------- the run


@dataclass
class _Video:
    """The driver's account of one video being restored."""

    source: Path
    target: Path
    jobs: list[VideoJob]
    probe: FrameProbe | None = None
    results: dict[int, JobResult] = field(default_factory=dict)
    began: float = field(default_factory=time.perf_counter)


def restore_videos_ray(
    model: str,
    videos: Sequence[tuple[str | os.PathLike[str], str | os.PathLike[str]]],
    out: str | os.PathLike[str],
    *,
    workers: int = 1,
    segments: int | None = None,
    min_segment_frames: int = DEFAULT_MIN_SEGMENT_FRAMES,
    address: str | None = None,
    overwrite: bool = False,
    device: str = "cpu",
    tile: int | None = None,
    max_pixels: int | None = None,
    threads: int | None = None,
    earlier_failed: Sequence[FailedFile | ItemResult] = (),
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[VideoResult], None] | None = None,
    **video_options: Any,
) -> VideoSummary:
    """Restore `videos`, (source, output file) pairs, with `model` (a reference, loaded in
    each of `workers` Ray actors) into the local engine's outputs: same frames, timestamps
    and copied streams. `segments`: parts each video is cut into at keyframes (None: the
    workers shared out over the videos, so one video gets them all and as many videos as
    workers get one each); no part is shorter than `min_segment_frames`.

    `video_options`: `codec`, `crf`, `pix_fmt`, `start`, `duration`, `temporal`,
    `keep_partial`, as `clearsight.video.restore.restore_video`. A rerun skips outputs that
    exist (`overwrite=True` redoes them). A video that fails is a row of OUT/failures.csv,
    written with `earlier_failed` (the run's images), and the others go on. `address`,
    `threads`: as `restore_files_ray`. `on_start(todo, skipped)`; `on_result(video)`.
    """
    check_count("workers", workers)
    if segments is not None:
        check_count("segments", segments)
    check_count("min_segment_frames", min_segment_frames)
    check_max_pixels(max_pixels)
    unknown = set(video_options) - {"codec", "crf", "pix_fmt", "start", "duration", "temporal",
                                    "keep_partial"}  # fmt: skip
    if unknown:
        raise TypeError(f"unknown video options: {', '.join(sorted(unknown))}")
    from clearsight.video.options import check_video_options

    check_video_options(**{k: video_options.get(k) for k in ("start", "duration", "codec", "crf")})
    from clearsight.zoo import model_task

    model_task(model)  # an unknown model is one line here, before Ray starts
    out_dir = Path(out)
    pairs = [(Path(s), Path(t)) for s, t in videos]
    seen: dict[Path, Path] = {}
    for s, t in pairs:
        if t.resolve() in seen:
            first = seen[t.resolve()]
            raise ClearsightError(f"two inputs would be written to {t}: {first} and {s}")
        if s.exists() and t.resolve() == s.resolve():
            raise ClearsightError(f"output {t} would overwrite its input; choose another --out")
        seen[t.resolve()] = s
    skipped = [] if overwrite else [WorkItem(str(s), str(t)) for s, t in pairs if t.exists()]
    done_already = {i.output for i in skipped}
    todo = [(s, t) for s, t in pairs if str(t) not in done_already]
    if on_start is not None:
        on_start(len(todo), len(skipped))
    given = {k: v for k, v in video_options.items() if v is not None}  # None: the default
    task = VideoTask(model, device, tile, max_pixels, given)
    start = time.perf_counter()
    results: list[VideoResult] = []
    if todo:
        owned = _connect(address)
        start = time.perf_counter()
        try:
            results = _run(task, todo, workers=workers, segments=segments,
                           min_frames=min_segment_frames, device=device, threads=threads,
                           on_result=on_result)  # fmt: skip
        finally:
            if owned:
                import ray

                ray.shutdown()
            sweep_output_folders(out_dir, (t for _, t in todo), time.time())
    seconds = time.perf_counter() - start
    done = [r for r in results if r.status == STATUS_DONE]
    failed = [r for r in results if r.status != STATUS_DONE]
    summary = VideoSummary(list(done), skipped, list(failed), seconds,
                           frames=sum(r.frames for r in done))  # fmt: skip
    if failed or todo:  # a rerun with nothing to do keeps the list it found
        record_failures(summary, out_dir, [*earlier_failed, *failed])
    return summary


def _plan(
    todo: Sequence[tuple[Path, Path]], window: tuple[int, int], parts: int, min_frames: int,
    cut: bool,
) -> list[_Video]:  # fmt: skip
    """Each video as segment jobs when it can be cut exactly (no `cut`, clean timestamps, at
    least two segments; `window`: the model's (frames, context)), else as one job."""
    plan: list[_Video] = []
    frames, context = window
    for source, target in todo:
        video = _Video(source, target, [VideoJob(str(source), str(target))])
        if parts > 1 and not cut:
            probe = probe_frames(source)
            starts = segment_starts(probe, parts, min_frames, frames) if probe else [0]
            folder = segments_folder(target)
            jobs = (
                segment_jobs(source, probe, starts, folder, context)
                if probe is not None and len(starts) > 1
                else []
            )
            if probe is not None and jobs:
                shutil.rmtree(folder, ignore_errors=True)  # a killed run's leftovers
                folder.mkdir(parents=True)
                video.jobs, video.probe = jobs, probe
        plan.append(video)
    return plan


def _run(
    task: VideoTask,
    todo: Sequence[tuple[Path, Path]],
    *,
    workers: int,
    segments: int | None,
    min_frames: int,
    device: str,
    threads: int | None,
    on_result: Callable[[VideoResult], None] | None,
) -> list[VideoResult]:
    """Start the actors, plan the jobs with the model's window (asked of a worker, which
    has loaded it) and run them; the actors are stopped at the end."""
    import ray

    cpus, gpus = _resources(workers, device)
    actor = ray.remote(_VideoWorker).options(
        num_cpus=cpus, num_gpus=gpus or None, max_restarts=-1, max_task_retries=-1
    )
    actors = [actor.remote(task, threads) for _ in range(workers)]
    plan: list[_Video] = []
    try:
        frames, context, error = ray.get(actors[0].window.remote())
        if error:
            raise ClearsightError(f"{task.model}: cannot load the model in a worker ({error})")
        parts = segments or max(1, workers // len(todo))
        cut = task.video.get("start") is not None or task.video.get("duration") is not None
        plan = _plan(todo, (frames, context), parts, min_frames, cut)
        return _dispatch(task, actors, plan, on_result)
    finally:
        for a in actors:
            ray.kill(a)
        for video in plan:  # stitched ones are gone already; an interrupted run's too
            shutil.rmtree(segments_folder(video.target), ignore_errors=True)


def _dispatch(
    task: VideoTask,
    actors: list[Any],
    plan: list[_Video],
    on_result: Callable[[VideoResult], None] | None,
) -> list[VideoResult]:
    """Hand one job at a time to each free actor; a video whose jobs are all back is
    reported, or stitched on a driver thread while the actors go on."""
    import ray

    queue = deque((v, j) for v in plan for j in v.jobs)
    idle = list(actors)
    pending: dict[Any, tuple[Any, _Video, VideoJob]] = {}
    results: list[VideoResult] = []
    lock = threading.Lock()

    def report(r: VideoResult) -> None:
        with lock:
            results.append(r)
            if on_result is not None:
                on_result(r)

    stitches: list[Future[None]] = []
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="clearsight-stitch") as pool:
        while queue or pending:
            while idle and queue:
                a = idle.pop()
                video, job = queue.popleft()
                pending[a.run.remote(job)] = (a, video, job)
            ready, _ = ray.wait(list(pending), num_returns=1)
            for ref in ready:
                a, video, job = pending.pop(ref)
                idle.append(a)
                try:
                    r: JobResult = ray.get(ref)
                except Exception as exc:  # the actor is gone for good
                    r = JobResult(job, False, f"{job.source}: {failure_reason(exc)}")
                video.results[job.segment] = r
                if len(video.results) == len(video.jobs):
                    if video.probe is None:
                        report(_whole_result(video, r))
                    else:
                        stitches.append(pool.submit(_finish, task, video, report))
        for s in stitches:
            s.result()
    return results


def _whole_result(video: _Video, r: JobResult) -> VideoResult:
    ms = (time.perf_counter() - video.began) * 1000
    status = STATUS_DONE if r.ok else STATUS_FAILED
    return VideoResult(str(video.source), str(video.target), status, r.reason, ms, r.frames)


def _finish(task: VideoTask, video: _Video, report: Callable[[VideoResult], None]) -> None:
    """Stitch a segmented video whose segments are all back (keeping what `keep_partial`
    keeps when one failed), remove its segment files, and report it."""
    assert video.probe is not None
    ordered = [video.results[k] for k in range(len(video.jobs))]
    ok = [r for r in ordered if r.ok]
    bad = next((r for r in ordered if not r.ok), None)
    opts = task.video
    frames, reason = 0, ""
    try:
        if bad is None:
            _check_segments(video.source, video.probe, ordered)
        head = ordered[: ordered.index(bad)] if bad is not None else ok
        error = VideoReadError(bad.reason) if bad is not None else None
        if bad is None or (opts.get("keep_partial") and head):
            frames = stitch(video.source, video.target, head, max_pixels=task.max_pixels,
                            codec=opts.get("codec"), crf=opts.get("crf"),
                            pix_fmt=opts.get("pix_fmt"), temporal=bool(opts.get("temporal")),
                            keep_partial=bool(opts.get("keep_partial")), error=error)  # fmt: skip
        elif error is not None:
            raise error
    except Exception as exc:
        reason = failure_reason(exc)
    finally:
        shutil.rmtree(segments_folder(video.target), ignore_errors=True)
    ms = (time.perf_counter() - video.began) * 1000
    status = STATUS_FAILED if reason else STATUS_DONE
    report(VideoResult(str(video.source), str(video.target), status, reason, ms, frames,
                       len(video.jobs)))  # fmt: skip
