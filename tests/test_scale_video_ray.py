"""Videos with `--engine ray` on a local Ray of 2 CPUs (docs/scale.md, "Videos"): one video
cut at keyframes across two workers and stitched gives the local run's frames, timestamps
and audio; a folder of videos runs one video per task, a broken one in failures.csv.

The planning (keyframes, segment starts) is checked without Ray. The model is `rescan-conv`
with its seeded random weights: tiny, per-frame, and it changes every pixel, so a frame
taken from the wrong place would show.
"""

from __future__ import annotations

import csv
import os
import signal
import threading
import time
import warnings
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from clearsight.engine.video_window import WindowSpec, restore_frames
from clearsight.errors import VideoReadError
from clearsight.io import write_image
from clearsight.scale.video_ray import (
    FrameProbe,
    JobResult,
    VideoJob,
    VideoTask,
    _check_segments,
    _finish,
    _plan,
    _run,
    probe_frames,
    segment_jobs,
    segment_starts,
    segments_folder,
    stitch,
)
from tests.optional import need
from tests.video_utils import (
    MS,
    _write_tone,
    audio_packets,
    decoded_frames,
    decoded_times,
    frame_image,
    make_video,
)

MODEL = "rescan-conv"  # random weights, seeded: the same in every process
LOSSLESS = {"codec": "ffv1", "pix_fmt": "bgr0"}
"""Outputs that decode to the very frames restored. libx264 (the default) is no exact
witness: through PyAV it is not reproducible run to run, even locally (docs/scale.md)."""


@pytest.fixture(autouse=True)
def one_thread():
    """torch on one thread here and in the workers (`threads=1`): on the shared 2 cores two
    threads made a 20-frame clip take 11 s instead of 0.2 s. Outputs compared are all made
    at one thread, so they must be equal."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def make_gop_video(path: Path, *, n: int, gop: int, w: int = 32, h: int = 24) -> None:
    """`n` frames at 25 fps with a keyframe every `gop` frames (B-frames on) and audio."""
    with av.open(str(path), "w") as c:
        v = c.add_stream("libx264", rate=25)
        v.width, v.height, v.pix_fmt = w, h, "yuv420p"
        v.time_base = v.codec_context.time_base = MS
        v.options = {"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0", "bf": "2"}
        a = c.add_stream("aac", rate=48000)
        a.layout = "mono"
        for i in range(n):
            f = av.VideoFrame.from_ndarray(frame_image(i, w, h), format="rgb24")
            f.pts, f.time_base = 40 * i, MS
            for p in v.encode(f):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        _write_tone(c, a, total=48 * 40 * n)


def _local(source: Path, out: Path, model: str = MODEL, **options: object) -> None:
    from clearsight.api import restore_video

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # untrained weights, on purpose
        restore_video(model, source, out, **options)


def _assert_same_steps(video: Path, source: Path) -> None:
    """The source's frame times, up to the shift Matroska applies to every stream when the
    AAC audio starts before the video (docs/video.md)."""
    got, want = decoded_times(video), decoded_times(source)
    assert len(got) == len(want)
    assert np.allclose(np.diff(got), np.diff(want), atol=1e-6) and abs(got[0] - want[0]) < 0.03


# ------------------------------------------------------------------ planning, no Ray


def test_the_probe_finds_every_frame_and_the_keyframes_without_decoding(tmp_path: Path):
    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=23, gop=5)
    probe = probe_frames(clip)
    assert probe is not None
    assert [float(p * probe.time_base) for p in probe.pts] == decoded_times(clip)
    keys = sorted(probe.pts.index(k) for k in probe.keyframes)
    assert keys == [0, 5, 10, 15, 20]
    assert probe_frames(tmp_path / "missing.mp4") is None


def test_segments_start_at_keyframes_near_equal_shares_and_respect_the_minimum():
    probe = FrameProbe(tuple(range(0, 400, 10)), frozenset(range(0, 400, 50)), Fraction(1, 100))
    assert segment_starts(probe, 2, 5) == [0, 20]  # 40 frames, keyframes every 5 frames
    assert segment_starts(probe, 4, 5) == [0, 10, 20, 30]
    assert segment_starts(probe, 4, 15) == [0, 20]  # only two parts of >= 15 frames fit
    sparse = FrameProbe(probe.pts, frozenset({0, 350}), probe.time_base)
    assert segment_starts(sparse, 2, 5) == [0, 35]  # the one keyframe there is
    assert segment_starts(probe, 3, 30) == [0]  # too short to cut
    jobs = segment_jobs(Path("v.mp4"), probe, [0, 15, 30], Path("seg"))
    assert [(j.start, j.duration, j.shift, j.lead, j.count) for j in jobs] == [
        (None, 1.5, 0, 0, 15),
        (1.5, 1.5, 150, 0, 15),
        (3.0, None, 300, 0, None),
    ]
    # a window model of 8 frames and 2 of context: cut where its windows start, and each
    # segment decodes the context beyond its cuts
    assert segment_starts(probe, 2, 5, window=8) == [0, 16]
    jobs = segment_jobs(Path("v.mp4"), probe, [0, 16], Path("seg"), context=2)
    assert [(j.start, j.duration, j.shift, j.lead, j.count) for j in jobs] == [
        (None, 1.8, 0, 0, 16),
        (1.4, None, 140, 2, None),
    ]


class _WindowMean:
    """A window model whose every output frame depends on the whole window (context too)."""

    spec = WindowSpec(frames=4, context=1)

    def __call__(self, window: torch.Tensor) -> torch.Tensor:
        return (window + window.mean(dim=2, keepdim=True)) / 2


def test_segments_restored_apart_give_the_windows_of_the_whole_clip():
    rng = np.random.default_rng(0)
    clip = [rng.integers(0, 256, (6, 5, 3), dtype=np.uint8) for _ in range(19)]
    model = _WindowMean()
    whole = list(restore_frames(iter(clip), model))
    pieces = []
    for s, e in ((0, 8), (8, 16), (16, 19)):  # cut at multiples of the window, as planned
        first, stop = max(0, s - 1), min(e + 1, 19)
        count = e - s if e < 19 else None
        pieces += list(restore_frames(iter(clip[first:stop]), model, s - first, count))
    assert len(pieces) == 19
    assert all(np.array_equal(a, b) for a, b in zip(pieces, whole, strict=True))
    # without its context a segment's first window differs: the test can tell
    alone = list(restore_frames(iter(clip[8:17]), model, 0, 8))
    assert not np.array_equal(alone[0], whole[8])


def test_a_cut_or_a_clip_of_one_window_runs_whole(tmp_path: Path):
    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=20, gop=5)
    target = tmp_path / "out" / "clip.mp4"
    for window in ((1, 0), (4, 1)):
        (split,) = _plan([(clip, target)], window, 2, 5, False)
        assert len(split.jobs) == 2 and segments_folder(target).is_dir()
    for window, cut in (((24, 2), False), ((1, 0), True)):
        (whole,) = _plan([(clip, target)], window, 2, 5, cut)
        assert [j.segment for j in whole.jobs] == [-1] and whole.probe is None


def _segments_in_process(clip: Path, target: Path, video: dict) -> tuple[Any, list[Any]]:
    """What the workers do, here: plan the clip into 2 segments and restore each."""
    task = VideoTask(MODEL, video=video)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = task.load()
    (planned,) = _plan([(clip, target)], (1, 0), 2, 5, False)
    return planned, [task.run(model, job) for job in planned.jobs]


def test_segments_restored_apart_and_stitched_equal_the_local_run(tmp_path: Path):
    """The workers' part and the driver's, in this process: the same frames and times."""
    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=20, gop=5)
    reference = tmp_path / "local.mkv"
    _local(clip, reference, **LOSSLESS)
    target = tmp_path / "out" / "clip.mkv"
    planned, results = _segments_in_process(clip, target, LOSSLESS)
    assert [r.frames for r in results] == [10, 10] and all(r.ok for r in results)
    _check_segments(clip, planned.probe, results)
    assert stitch(clip, target, results, **LOSSLESS) == 20
    got, want = decoded_frames(target), decoded_frames(reference)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))
    assert decoded_times(target) == decoded_times(reference)
    with pytest.raises(VideoReadError, match="segments decoded 10 frames where the stream"):
        _check_segments(clip, planned.probe, results[:1])


def test_a_failed_segment_fails_its_video_and_keep_partial_keeps_the_frames_before(tmp_path):
    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=20, gop=5)
    for keep in (False, True):
        target = tmp_path / f"out{keep}" / "clip.mp4"
        planned, results = _segments_in_process(clip, target, {"keep_partial": keep})
        results[1] = JobResult(results[1].job, False, f"{clip}: decoding stopped at frame 3")
        planned.results = dict(enumerate(results))
        reported: list[Any] = []
        _finish(VideoTask(MODEL, video={"keep_partial": keep}), planned, reported.append)
        (r,) = reported
        assert r.status == "failed" and r.reason == f"{clip}: decoding stopped at frame 3"
        assert not segments_folder(target).exists()
        if keep:
            assert len(decoded_frames(target)) == 10  # the first segment's frames
        else:
            assert not target.exists()


# ------------------------------------------------------------------ on Ray

# each starts two actors: 8 to 17 s on the shared 2 cores, torch on one thread


@pytest.fixture(scope="module")
def local_ray():
    need("ray")
    from tests import scale_utils

    with scale_utils.local_ray(__name__):
        yield


def test_one_video_cut_across_workers_equals_the_local_run(local_ray, tmp_path: Path):
    from clearsight.scale.video_ray import restore_videos_ray

    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=30, gop=5)
    reference = tmp_path / "local.mkv"
    _local(clip, reference, **LOSSLESS)
    out = tmp_path / "out"
    summary = restore_videos_ray(
        MODEL,
        [(clip, out / "clip.mkv")],
        out,
        workers=2,
        min_segment_frames=5,
        threads=1,
        **LOSSLESS,
    )
    (done,) = summary.done
    assert done.segments >= 2 and done.frames == 30 and not summary.failed
    got, want = out / "clip.mkv", reference
    assert decoded_times(got) == decoded_times(want)
    _assert_same_steps(got, clip)
    frames, ref_frames = decoded_frames(got), decoded_frames(want)
    assert len(frames) == 30
    assert all(np.array_equal(a, b) for a, b in zip(frames, ref_frames, strict=True))
    assert not np.array_equal(frames[3], decoded_frames(clip)[3])  # the model did change it
    assert audio_packets(got) == audio_packets(want) == audio_packets(clip)
    assert sorted(p.name for p in out.iterdir()) == ["clip.mkv"]  # no segment files left

    rerun = restore_videos_ray(MODEL, [(clip, out / "clip.mkv")], out, workers=2)
    assert not rerun.done and len(rerun.skipped) == 1


def test_a_window_model_cut_across_workers_equals_the_local_run(local_ray, tmp_path: Path):
    """S2VD (seeded random weights): windows of 24 frames with 2 of context; the second
    segment starts at frame 24 and reads frames 22 and 23 as its context."""
    from clearsight.scale.video_ray import restore_videos_ray

    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=52, gop=10)
    reference = tmp_path / "local.mkv"
    _local(clip, reference, model="s2vd", **LOSSLESS)
    out = tmp_path / "out"
    summary = restore_videos_ray(
        "s2vd",
        [(clip, out / "clip.mkv")],
        out,
        workers=2,
        min_segment_frames=5,
        threads=1,
        **LOSSLESS,
    )
    assert summary.done[0].segments == 2, summary.failed
    got = decoded_frames(out / "clip.mkv")
    assert len(got) == 52 and decoded_times(out / "clip.mkv") == decoded_times(reference)
    assert all(np.array_equal(a, b) for a, b in zip(got, decoded_frames(reference), strict=True))


def test_the_temporal_blend_runs_in_the_driver_and_still_equals_the_local_run(
    local_ray, tmp_path: Path
):
    from clearsight.scale.video_ray import restore_videos_ray

    clip = tmp_path / "clip.mp4"
    make_gop_video(clip, n=20, gop=5)
    reference = tmp_path / "local.mkv"
    _local(clip, reference, temporal=True, **LOSSLESS)
    out = tmp_path / "out"
    summary = restore_videos_ray(
        MODEL, [(clip, out / "clip.mkv")], out, workers=2, min_segment_frames=5, threads=1,
        temporal=True, **LOSSLESS,
    )  # fmt: skip
    assert summary.done[0].segments >= 2
    got = decoded_frames(out / "clip.mkv")
    assert all(np.array_equal(a, b) for a, b in zip(got, decoded_frames(reference), strict=True))


@pytest.mark.slow
def test_a_folder_of_videos_runs_one_per_task_and_lists_the_broken_one(local_ray, tmp_path):
    """Through the CLI, against the local engine's run of the same folder (with an image)."""
    from clearsight.cli import app

    folder = tmp_path / "in"
    (folder / "sub").mkdir(parents=True)
    make_video(folder / "a.mp4", w=32, h=24, n=8)
    make_video(folder / "sub" / "b.mkv", w=24, h=16, n=6)
    (folder / "broken.mp4").write_bytes(b"not a video at all")
    write_image(folder / "photo.png", np.full((12, 16, 3), 128, np.uint8))  # images go first
    runner = CliRunner()
    args = ["restore", "--model", MODEL, str(folder)]
    local = runner.invoke(app, [*args, "-o", str(tmp_path / "local")])
    assert local.exit_code == 3, local.output
    res = runner.invoke(app, [*args, "-o", str(tmp_path / "ray"), "--engine", "ray",
                              "--workers", "2"])  # fmt: skip
    assert res.exit_code == 3, res.output
    assert "done 2, skipped 0, failed 1 video(s)" in res.output
    assert (tmp_path / "ray" / "photo.png").read_bytes() == (
        tmp_path / "local" / "photo.png"
    ).read_bytes()
    for rel in ("a.mp4", "sub/b.mp4"):  # libx264 at crf 18: equal up to the encoder
        got, want = tmp_path / "ray" / rel, tmp_path / "local" / rel
        assert decoded_times(got) == decoded_times(want)
        assert audio_packets(got) == audio_packets(want)
        diffs = [
            np.abs(a.astype(int) - b).mean()
            for a, b in zip(decoded_frames(got), decoded_frames(want), strict=True)
        ]
        assert max(diffs) < 2, diffs
    rows = [list(csv.DictReader((tmp_path / d / "failures.csv").open())) for d in ("ray", "local")]
    assert [(Path(r["file"]).name, r["reason"]) for r in rows[0]] == [
        (Path(r["file"]).name, r["reason"]) for r in rows[1]
    ]
    assert [Path(r["file"]).name for r in rows[0]] == ["broken.mp4"]


@dataclass(frozen=True)
class _SlowTask(VideoTask):
    """A task that leaves its worker's pid in `pid_dir` and takes a second per job, so a
    test can kill the worker while it holds one."""

    pid_dir: str = ""

    def run(self, model: Any, job: VideoJob) -> JobResult:
        Path(self.pid_dir, str(os.getpid())).touch()
        time.sleep(1.0)
        return super().run(model, job)


def test_a_worker_killed_mid_job_is_replaced_and_its_job_done_again(local_ray, tmp_path):
    clips = []
    for i in range(3):
        clips.append(tmp_path / f"v{i}.mp4")
        make_video(clips[-1], w=16, h=16, n=6)
    out, pids = tmp_path / "out", tmp_path / "pids"
    pids.mkdir()
    task = _SlowTask(MODEL, video=LOSSLESS, pid_dir=str(pids))
    todo = [(c, out / f"{c.stem}.mkv") for c in clips]
    outcome: dict[str, Any] = {}

    def run() -> None:
        outcome["results"] = _run(task, todo, workers=2, segments=1, min_frames=48,
                                  device="cpu", threads=1, on_result=None)  # fmt: skip

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline, victim = time.monotonic() + 60, None
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        found = sorted(pids.iterdir())
        if found:
            victim = int(found[0].name)
            os.kill(victim, signal.SIGKILL)
        time.sleep(0.05)
    thread.join(timeout=120)
    assert victim is not None and not thread.is_alive()
    results = outcome["results"]
    assert sorted(Path(r.source).name for r in results if r.status == "done") == [
        "v0.mp4", "v1.mp4", "v2.mp4"
    ]  # fmt: skip
    for c in clips:
        assert len(decoded_frames(out / f"{c.stem}.mkv")) == 6
    assert len(list(pids.iterdir())) > 2  # the replacement worker took jobs too
