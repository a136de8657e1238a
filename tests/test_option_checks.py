"""The video options are checked once, before any work: a bad value is one line naming its
flag and exit 1, not one failed input per video (exit 3 and OUT/failures.csv)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.errors import OptionError
from clearsight.io import write_image
from clearsight.video.options import (
    CRF_RANGES,
    MAX_FPS,
    MIN_FPS,
    check_crf,
    check_fps,
    check_video_options,
)
from tests.video_utils import make_video

runner = CliRunner()


@pytest.fixture
def two_videos(tmp_path: Path) -> Path:
    """A folder of two tiny clips: a per-input check would fail twice."""
    folder = tmp_path / "clips"
    folder.mkdir()
    for name in ("a.mp4", "b.mp4"):
        make_video(folder / name, w=16, h=16, n=2, audio=None, pts=[0, 40])
    return folder


@pytest.fixture
def frames(tmp_path: Path) -> Path:
    """A folder of three numbered frames (a video with --fps)."""
    folder = tmp_path / "frames"
    for i in range(1, 4):
        write_image(folder / f"{i:05d}.png", np.full((16, 16, 3), 40 * i, np.uint8))
    return folder


@pytest.fixture
def pairs(tmp_path: Path) -> Path:
    """A clip of numbered frames for eval --video: rain/ and clean/."""
    root = tmp_path / "pairs"
    for i in range(1, 4):
        write_image(root / "clean" / f"{i:05d}.png", np.full((16, 16, 3), 40 * i, np.uint8))
        write_image(root / "rain" / f"{i:05d}.png", np.full((16, 16, 3), 40 * i + 9, np.uint8))
    return root


def _refused_before_any_work(res: object, out: Path, flag: str) -> None:
    """Exit 1, one error line naming `flag`, and nothing written into OUT."""
    output = res.output  # type: ignore[attr-defined]
    assert res.exit_code == 1, output  # type: ignore[attr-defined]
    errors = [ln for ln in output.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: {flag}:"), output
    assert "failed:" not in output and "internal error" not in output, output
    assert not (out / "failures.csv").exists()
    assert not list(out.rglob("*.mp4")) if out.exists() else True


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--start", "-1"], "--start"),
        (["--duration", "0"], "--duration"),
        (["--duration", "-1"], "--duration"),
        (["--codec", "nope"], "--codec"),
    ],
    ids=["start-negative", "duration-zero", "duration-negative", "codec-unknown"],
)
def test_a_bad_video_option_is_one_error_before_any_work(
    two_videos: Path, tmp_path: Path, args: list[str], flag: str
) -> None:
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(two_videos), "-o", str(out), *args]
    )
    _refused_before_any_work(res, out, flag)


def test_a_codec_the_mp4_outputs_cannot_hold_is_one_error(two_videos: Path, tmp_path: Path):
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        ["restore", "--model", "identity", str(two_videos), "-o", str(out), "--codec", "prores"],
    )
    _refused_before_any_work(res, out, "--codec")
    assert "--keep-container" in res.output  # the way to keep it: the inputs' own container


def test_crf_outside_the_encoders_range_is_refused(two_videos: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(two_videos), "-o", str(out), "--crf", "1000"]
    )
    _refused_before_any_work(res, out, "--crf")
    assert "0 to 51 for libx264" in res.output


def test_crf_ranges_are_the_encoders_own() -> None:
    check_crf(51, "libx264")
    check_crf(18, "h264")  # FFmpeg's name for libx264 takes its crf
    check_crf(63, "libvpx-vp9")  # VP9 goes to 63, past x264's 51
    for codec, crf in (("libx264", 52), ("libx265", 52), ("libvpx", 3), ("libvpx-vp9", 64)):
        with pytest.raises(OptionError, match=r"^crf: must be a whole number from"):
            check_crf(crf, codec)
    with pytest.raises(OptionError, match="mpeg4 takes no crf"):
        check_crf(10, "mpeg4")
    assert CRF_RANGES["libx264"] == (0, 51)


def test_a_huge_frame_rate_is_refused(frames: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(frames), "-o", str(out), "--fps", "1e9"]
    )
    _refused_before_any_work(res, out, "--fps")
    assert "0.001 to 1000" in res.output


def test_a_tiny_frame_rate_is_an_option_error_in_restore(frames: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(frames), "-o", str(out), "--fps", "1e-9"]
    )
    _refused_before_any_work(res, out, "--fps")


def test_a_tiny_frame_rate_is_an_option_error_in_eval_video(pairs: Path, tmp_path: Path) -> None:
    out = tmp_path / "ev"
    res = runner.invoke(
        app, ["eval", "--video", "--model", "identity", "--data", str(pairs), "-o", str(out),
              "--fps", "1e-9"],
    )  # fmt: skip
    _refused_before_any_work(res, out, "--fps")
    assert not out.exists()


def test_eval_video_on_a_video_without_clean_names_the_flags_that_exist(
    two_videos: Path,
) -> None:
    res = runner.invoke(
        app, ["eval", "--video", "--model", "identity", "--data", str(two_videos / "a.mp4")]
    )
    assert res.exit_code == 1, res.output
    assert "--pairs" not in res.output
    line = res.output.strip().splitlines()[-1]
    assert line.startswith("error: --data:") and "--clean" in line, res.output


def test_track_needs_no_optional_package(
    two_videos: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ByteTrack is the package's own: `--track` works where `trackers` is absent."""
    monkeypatch.setitem(sys.modules, "trackers", None)  # import trackers -> ImportError
    monkeypatch.setitem(sys.modules, "supervision", None)
    out = tmp_path / "det"
    res = runner.invoke(app, ["detect", str(two_videos), "-o", str(out), "--track"])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.glob("*.jsonl")) == ["a.jsonl", "b.jsonl"]


def test_detect_checks_the_video_options_before_any_work(two_videos: Path, tmp_path: Path):
    out = tmp_path / "det"
    res = runner.invoke(app, ["detect", str(two_videos), "-o", str(out), "--duration", "0"])
    _refused_before_any_work(res, out, "--duration")


@pytest.mark.parametrize("kind", ["videos", "images"])
def test_detect_checks_the_score_threshold_once(two_videos: Path, tmp_path: Path, kind: str):
    source = two_videos
    if kind == "images":
        source = tmp_path / "photos"
        for name in ("a.png", "b.png"):
            write_image(source / name, np.full((16, 16, 3), 90, np.uint8))
    out = tmp_path / "det"
    res = runner.invoke(app, ["detect", str(source), "-o", str(out), "--score-threshold", "2"])
    _refused_before_any_work(res, out, "--score-threshold")
    assert not out.exists()


def test_a_start_past_any_recording_is_refused_not_an_overflow(two_videos: Path, tmp_path):
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(two_videos), "-o", str(out), "--start", "1e18"]
    )
    _refused_before_any_work(res, out, "--start")


def test_synth_video_checks_the_frame_rate(frames: Path, tmp_path: Path) -> None:
    out = tmp_path / "pairs"
    res = runner.invoke(
        app, ["synth", "rain", "--video", "--clean", str(frames), "-o", str(out), "--fps", "1e-9"]
    )
    assert res.exit_code == 1 and "error: --fps:" in res.output, res.output
    assert "internal error" not in res.output and not out.exists()


def test_frame_rates_at_the_bounds_are_exact_and_never_zero() -> None:
    assert check_fps(float(MIN_FPS)) == MIN_FPS
    assert check_fps(MAX_FPS) == MAX_FPS
    assert check_fps(29.97) == pytest.approx(29.97)
    for bad in (0, -1, 1e-9, 1e9, float("nan"), float("inf")):
        with pytest.raises(OptionError, match=r"^fps: "):
            check_fps(bad)


def test_the_ray_engine_checks_the_video_options_before_starting(two_videos: Path, tmp_path):
    from clearsight.scale.video_ray import restore_videos_ray

    video = two_videos / "a.mp4"
    with pytest.raises(OptionError, match=r"^crf: "):
        restore_videos_ray("identity", [(video, tmp_path / "a.mp4")], tmp_path, crf=1000)


def test_one_check_takes_every_video_option() -> None:
    check_video_options(start=0, duration=0.5, codec="libx264", crf=0, fps=25)
    with pytest.raises(OptionError, match=r"^duration: must be at least 0.000001 seconds"):
        check_video_options(duration=1e-9)  # would be an empty cut for every video
