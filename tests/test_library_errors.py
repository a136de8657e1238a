"""Errors raised inside OpenCV and FFmpeg are the package's one-line errors, per input.

Frames too small for OpenCV's DIS optical flow (the temporal blend, the warping error and
flicker), a frame function that OpenCV refuses in a folder of videos, and a truncated file
that decodes to nothing. Tiny clips made with PyAV at run time (tests/video_utils.py)."""

from __future__ import annotations

import csv
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.api.video import run_videos
from clearsight.cli import app
from clearsight.cli._app import exception_line
from clearsight.errors import VideoReadError, library_reason
from clearsight.io import write_image
from clearsight.metrics.warping import FlowEstimator, FlowTooSmallError, flicker
from clearsight.runtime.failures import failure_reason
from clearsight.video.io import VideoReader
from clearsight.video.temporal import TemporalBlend
from tests.video_utils import decoded_frames, frame_image, make_video

runner = CliRunner()


def _opencv_error() -> cv2.error:
    try:
        cv2.DISOpticalFlow_create(0).calc(
            np.zeros((8, 8), np.uint8), np.zeros((8, 8), np.uint8), None
        )
    except cv2.error as exc:
        return exc
    raise AssertionError("OpenCV accepted an 8x8 flow")


def test_the_flow_size_check_is_opencvs_own_limit() -> None:
    """`too_small` refuses exactly the sizes DIS refuses (so the blend never crashes and
    never skips a frame it could have blended)."""
    est = FlowEstimator("fast")
    dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_FAST)
    for h, w in [(1, 1), (8, 8), (7, 40), (40, 7), (8, 11), (11, 11), (8, 12), (12, 8), (16, 16)]:
        gray = np.zeros((h, w), np.uint8)
        try:
            dis.calc(gray, gray, None)
            opencv_ok = True
        except cv2.error:
            opencv_ok = False
        assert (est.too_small(h, w) is None) == opencv_ok, (h, w)
        if not opencv_ok:
            with pytest.raises(FlowTooSmallError, match=f"frames of {w}x{h} are too small"):
                est(gray, gray)


def test_demoire_of_a_1x1_video_skips_the_blend_with_a_note(tmp_path: Path) -> None:
    """The default temporal blend on frames too small for the flow: the video is written,
    one warning names it, no internal error."""
    src = tmp_path / "one.mp4"
    make_video(src, w=1, h=1, n=4, pix_fmt="yuv444p", audio=None)
    out = tmp_path / "out"
    res = runner.invoke(app, ["demoire", str(src), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert "internal error" not in res.output
    assert "one.mp4: frames of 1x1 are too small for optical flow" in res.output
    assert "temporal blend is skipped" in res.output
    assert len(decoded_frames(out / "one.mp4")) == 4


def test_a_tiny_video_beside_a_good_one_under_temporal_loses_nothing(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    make_video(folder / "good.mp4", w=32, h=32, n=4, audio=None)
    make_video(folder / "small.mp4", w=8, h=8, n=4, audio=None)
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "-m", "identity", "--temporal", str(folder), "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert "internal error" not in res.output
    assert "small.mp4: frames of 8x8 are too small" in res.output
    assert len(decoded_frames(out / "good.mp4")) == 4
    assert len(decoded_frames(out / "small.mp4")) == 4


def test_the_blend_passes_small_frames_through_and_says_why() -> None:
    blend = TemporalBlend(source="clip.mp4")
    frames = [frame_image(i, 8, 8) for i in range(3)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = [blend(f) for f in frames]
    assert all(np.array_equal(a, b) for a, b in zip(out, frames, strict=True))
    assert blend.skipped is not None and "8x8" in blend.skipped
    assert len(caught) == 1 and str(caught[0].message).startswith("clip.mp4: frames of 8x8")


def test_eval_video_flicker_on_8x8_frames_says_it_cannot_be_computed(tmp_path: Path) -> None:
    clip = tmp_path / "clip"
    (clip / "input").mkdir(parents=True)
    for i in range(3):
        write_image(clip / "input" / f"{i + 1:05d}.png", frame_image(i, 8, 8))
    res = runner.invoke(app, ["eval", "-m", "identity", "--video", "-d", str(clip)])
    assert res.exit_code == 1, res.output
    assert "internal error" not in res.output
    assert "the flicker cannot be computed: frames of 8x8 are too small" in res.output
    with pytest.raises(FlowTooSmallError):
        flicker(iter([frame_image(0, 8, 8)] * 2), iter([frame_image(0, 8, 8)] * 2))


def test_an_opencv_error_in_one_video_fails_that_video_and_the_run_goes_on(
    tmp_path: Path,
) -> None:
    """A library error that reaches the folder loop is that input's one-line failure."""
    folder = tmp_path / "in"
    folder.mkdir()
    for name in ("a.mp4", "b.mp4"):
        make_video(folder / name, n=2, audio=None)
    out = tmp_path / "out"

    def run_one(source: Path, target: Path) -> str:
        if source.name == "a.mp4":
            raise _opencv_error()
        target.write_bytes(b"ok")
        return "done"

    videos = [(folder / n, out / Path(n).stem) for n in ("a.mp4", "b.mp4")]
    done, failed, listed = run_videos(videos, run_one, out)
    assert [d[0].name for d in done] == ["b.mp4"]
    assert [f.source.name for f in failed] == ["a.mp4"]
    reason = failed[0].reason
    assert reason.startswith("OpenCV: The input image must have") and "dis_flow.cpp" not in reason
    assert listed is not None
    rows = list(csv.DictReader(listed.open()))
    assert [Path(r["file"]).name for r in rows] == ["a.mp4"]


def test_library_errors_are_one_line_not_internal_errors(tmp_path: Path) -> None:
    import av

    exc = _opencv_error()
    line = exception_line(exc)
    assert "internal error" not in line and "\n" not in line
    assert line == failure_reason(exc) == library_reason(exc)
    empty = tmp_path / "empty.mkv"
    empty.write_bytes(b"")
    with pytest.raises(av.error.FFmpegError) as info:
        av.open(str(empty))
    line = exception_line(info.value)
    assert "internal error" not in line and line.startswith(f"{empty}: FFmpeg: ")
    assert library_reason(ValueError("x")) is None


def test_a_truncated_mkv_that_decodes_to_nothing_says_it_is_truncated(tmp_path: Path) -> None:
    whole = tmp_path / "whole.mkv"
    make_video(whole, n=10, audio=None)
    data = whole.read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) // 2])
    with pytest.raises(VideoReadError, match=r"cut.mkv: .*truncated or damaged") as info:
        VideoReader(cut)  # the probe decodes the first frame
    assert "has no frames" not in str(info.value)
    empty = tmp_path / "empty.mkv"
    make_video(empty, n=0, audio="pcm_s16le", pts=[], images=[])  # a stream, truly empty
    with pytest.raises(VideoReadError, match=r"empty.mkv: the video stream has no frames"):
        VideoReader(empty)
