"""The HTML report of `eval --video`: plots, frame strip and before/after player."""

from __future__ import annotations

import base64
import io
import re
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from clearsight.api import evaluate_video as api_evaluate_video
from clearsight.cli import app
from clearsight.errors import VideoReadError
from clearsight.io import write_image
from clearsight.metrics.presets import get_preset
from clearsight.report.video import VideoReportCollector, write_video_report
from clearsight.video.evaluate import ClipFrame, evaluate_video
from tests.video_utils import decoded_frames, make_video

URI = re.compile(r'class="strip-img" src="data:image/jpeg;base64,([A-Za-z0-9+/=]+)"')


def _clean(t: int) -> np.ndarray:
    yy, xx = np.mgrid[0:24, 0:32]
    img = np.repeat((100 + 60 * np.sin(xx / 3.0 + t) * np.cos(yy / 5.0))[..., None], 3, axis=2)
    img[6:12, 2 + 2 * t : 8 + 2 * t] = 230
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _rainy(t: int) -> np.ndarray:
    noise = np.random.default_rng(t).normal(0, 6 + 2 * t, size=(24, 32, 1))
    return np.clip(np.rint(_clean(t) + noise), 0, 255).astype(np.uint8)


def _folder(root: Path, n: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    rain, clean = [_rainy(t) for t in range(n)], [_clean(t) for t in range(n)]
    for t in range(n):
        write_image(root / "rain" / f"{t + 1:05d}.png", rain[t])
        write_image(root / "clean" / f"{t + 1:05d}.png", clean[t])
    return rain, clean


def _titles(html: str, cls: str) -> list[float]:
    """The value in each circle's tooltip of the series `cls`, in frame order."""
    got = re.findall(rf'<circle class="{cls}"[^>]*><title>frame \d+: \w+ ([-0-9.]+)', html)
    return [float(v) for v in got]


def _smooth(img: np.ndarray) -> np.ndarray:
    """A 'model' that changes the frame (a 3x3 box blur), so restored != input."""
    p = np.pad(img.astype(np.float32), ((1, 1), (1, 1), (0, 0)), mode="edge")
    acc = sum(p[i : i + img.shape[0], j : j + img.shape[1]] for i in range(3) for j in range(3))
    return np.clip(np.rint(acc / 9), 0, 255).astype(np.uint8)


def test_report_plots_every_frame_shows_a_strip_and_a_player_that_decodes(
    tmp_path: Path,
) -> None:
    n = 8
    rain, clean = _folder(tmp_path / "clip", n)
    page = tmp_path / "out" / "report.html"
    with VideoReportCollector(page, strip=4) as col:
        result = evaluate_video(
            _smooth, tmp_path / "clip", tmp_path / "out", on_start=col.start, on_frame=col
        )
    write_video_report(result, col, model="blur", pairs=tmp_path / "clip")
    html = page.read_text()
    assert "<svg" in html
    restored = _titles(html, "psnr-restored")
    assert len(restored) == n
    assert restored == pytest.approx([r["psnr"] for r in result.rows], abs=1e-4)
    # the input's PSNR beside it, frame for frame (not the restored one's)
    preset = get_preset("y-matlab")
    want_in = [preset.compute(r, c)["psnr"] for r, c in zip(rain, clean, strict=True)]
    assert _titles(html, "psnr-input") == pytest.approx(want_in, abs=1e-4)
    assert len(_titles(html, "warping-error")) == n - 1  # none for the first frame
    # the strip: 4 evenly spaced frames (first and last), input/restored/clean/error each
    assert [i for i, _ in col.strip_frames()] == [0, 2, 5, 7]
    thumbs = URI.findall(html)
    assert len(thumbs) == 4 * 4
    for data in thumbs:
        with Image.open(io.BytesIO(base64.b64decode(data))) as im:
            assert im.format == "JPEG" and im.size == (32, 24)
    # the player: both clips beside the page, one decoded frame per frame of the clip
    for name in ("report-input.mp4", "report-restored.mp4"):
        assert f'src="{name}"' in html
        frames = decoded_frames(page.parent / name)
        assert len(frames) == n and frames[0].shape == (24, 32, 3)
    played = decoded_frames(page.parent / "report-restored.mp4")
    assert np.abs(played[3].astype(int) - _smooth(rain[3]).astype(int)).mean() < 4
    assert np.abs(played[3].astype(int) - rain[3].astype(int)).mean() > 4  # not the input


def test_a_clip_model_that_reads_ahead_still_pairs_each_input_with_its_frame(
    tmp_path: Path,
) -> None:
    """A window model holds several inputs before it returns the first output: the report
    still compares input t (not t+3) with clean t."""
    rain, clean = _folder(tmp_path / "clip", 7)

    def window(frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        held: list[np.ndarray] = []
        for f in frames:
            held.append(f)
            if len(held) == 4:
                yield _smooth(held.pop(0))
        for f in held:
            yield _smooth(f)

    with VideoReportCollector(tmp_path / "r" / "report.html") as col:
        result = evaluate_video(window, tmp_path / "clip", clip=True, on_start=col.start,
                                on_frame=col)  # fmt: skip
    preset = get_preset("y-matlab")
    want = [preset.compute(r, c)["psnr"] for r, c in zip(rain, clean, strict=True)]
    assert col.input_psnr == pytest.approx(want)
    assert [r["psnr"] for r in result.rows] != pytest.approx(want)  # the model did something
    assert len(decoded_frames(tmp_path / "r" / "report-input.mp4")) == 7


def test_thumbnails_stay_bounded_and_evenly_spaced_over_a_long_clip(tmp_path: Path) -> None:
    col = VideoReportCollector(tmp_path / "report.html", strip=3)
    col.start(None, Fraction(10))
    img = np.zeros((8, 8, 3), np.uint8)
    with col:
        for i in range(101):
            col(ClipFrame(i, f"{i:03d}", img, img, img))
            assert len(col.kept) <= 4 * 3
    assert [i for i, _ in col.strip_frames()] == [0, 48, 96]  # kept every 16th: 0..96
    assert len(decoded_frames(tmp_path / "report-restored.mp4")) == 101


def test_a_failure_leaves_no_report_and_no_player_clips(tmp_path: Path) -> None:
    _folder(tmp_path / "clip", 5)

    def breaks(img: np.ndarray) -> np.ndarray:
        breaks.calls += 1  # type: ignore[attr-defined]
        if breaks.calls == 4:  # type: ignore[attr-defined]
            raise RuntimeError("model broke")
        return img

    breaks.calls = 0  # type: ignore[attr-defined]
    out = tmp_path / "out"
    with pytest.raises(RuntimeError), VideoReportCollector(out / "report.html") as col:
        evaluate_video(breaks, tmp_path / "clip", out, on_start=col.start, on_frame=col)
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []


def test_two_videos_without_clean_frames_plot_the_flicker(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_video(src, w=32, h=24, n=6, audio=None, pts=[40 * i for i in range(6)])
    page = tmp_path / "out" / "report.html"
    result = api_evaluate_video("identity", (src, None), tmp_path / "out", report=page)
    html = page.read_text()
    assert "flicker" in result.summary and len(_titles(html, "flicker")) == 5
    assert page in result.files
    assert len(decoded_frames(tmp_path / "out" / "report-input.mp4")) == 6
    assert len(URI.findall(html)) == 6 * 2  # input and restored: no clean frames


def test_cli_eval_video_writes_the_report_beside_the_scores_or_at_report(tmp_path: Path) -> None:
    _folder(tmp_path / "clip", 3)
    out = tmp_path / "ev"
    runner = CliRunner()
    res = runner.invoke(
        app, ["eval", "--video", "-m", "identity", "-d", str(tmp_path / "clip"), "-o", str(out),
              "--fps", "12"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    names = {p.name for p in out.iterdir()}
    assert names >= {"per_frame.csv", "summary.json", "report.html", "report-restored.mp4"}
    assert "12 fps" in (out / "report.html").read_text()
    elsewhere = tmp_path / "pages" / "clip.html"
    res = runner.invoke(
        app, ["eval", "--video", "-m", "identity", "-d", str(tmp_path / "clip"),
              "--report", str(elsewhere)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (tmp_path / "pages" / "clip-input.mp4").is_file()
    assert len(decoded_frames(tmp_path / "pages" / "clip-restored.mp4")) == 3
    bad = runner.invoke(
        app, ["eval", "--video", "-m", "identity", "-d", str(tmp_path / "clip"), "--fps", "0",
              "--report", str(elsewhere)],
    )  # fmt: skip
    assert bad.exit_code != 0 and "--fps" in bad.output and "0.001 to 1000" in bad.output


def test_a_frame_of_another_size_is_one_line_naming_it_and_leaves_nothing(
    tmp_path: Path,
) -> None:
    _folder(tmp_path / "clip", 4)
    odd = np.zeros((20, 30, 3), np.uint8)
    write_image(tmp_path / "clip" / "rain" / "00003.png", odd)
    write_image(tmp_path / "clip" / "clean" / "00003.png", odd)
    out = tmp_path / "out"
    with (
        pytest.raises(VideoReadError, match=r"^frame 00003: the input frame is 30x20, the first"),
        VideoReportCollector(out / "report.html") as col,
    ):
        evaluate_video(lambda im: im, tmp_path / "clip", out, on_start=col.start, on_frame=col)
    assert not out.exists() or sorted(p.name for p in out.iterdir()) == []
