"""Per-frame image models over videos: restore_video and the temporal blend."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest

from clearsight.engine.inference import Restorer
from clearsight.errors import OptionError, VideoReadError, VideoWriteError
from clearsight.video import VideoReader, list_frames
from clearsight.video.restore import restore_video
from clearsight.video.temporal import TemporalBlend
from tests.video_utils import (
    add_subtitles,
    audio_packets,
    decoded_times,
    make_video,
    subtitle_packets,
    vfr_pts,
)


def invert(img: np.ndarray) -> np.ndarray:
    return 255 - img


def test_restore_video_keeps_timestamps_audio_and_writes_frames(tmp_path: Path) -> None:
    src, dst, folder = tmp_path / "in.mp4", tmp_path / "out.mp4", tmp_path / "frames"
    make_video(src, w=48, h=32, n=10, audio="aac")
    with VideoReader(src) as r:
        inputs = [f.image for f in r.frames()]
    seen: list[int] = []
    result = restore_video(
        invert, src, dst, frames_out=folder, on_frame=lambda n, _: seen.append(n)
    )
    assert result.frames == 10 and seen == list(range(1, 11))
    assert result.copied_streams == ("#1 audio aac",) and result.padded is None
    assert decoded_times(dst) == pytest.approx([t / 1000 for t in vfr_pts(10)])
    assert audio_packets(dst) == audio_packets(src)
    # the PNG frames are the model's outputs exactly; the video is them, encoded
    from clearsight.io import read_image

    pngs = [read_image(p) for p in list_frames(folder)]
    assert len(pngs) == 10
    assert all(np.array_equal(p, invert(i)) for p, i in zip(pngs, inputs, strict=True))
    with VideoReader(dst) as r:
        outs = [f.image.astype(int) for f in r.frames()]
    assert np.mean([np.abs(o - p).mean() for o, p in zip(outs, pngs, strict=True)]) < 2.0


def test_subtitles_and_audio_copied_into_mkv_refused_by_mp4(tmp_path: Path) -> None:
    plain, src = tmp_path / "plain.mkv", tmp_path / "in.mkv"
    make_video(plain, n=10, audio="pcm_s16le")
    texts = add_subtitles(plain, src, tmp_path)
    result = restore_video(invert, src, tmp_path / "out.mkv")
    assert result.copied_streams == ("#1 audio pcm_s16le", "#2 subtitle srt")
    assert subtitle_packets(tmp_path / "out.mkv") == texts
    assert audio_packets(tmp_path / "out.mkv") == audio_packets(src)
    with pytest.raises(
        VideoWriteError, match=r"mp4 container cannot hold the srt subtitle stream #2"
    ):
        restore_video(invert, src, tmp_path / "out.mp4")
    assert not (tmp_path / "out.mp4").exists()


def test_restorer_runs_on_frames_folder(tmp_path: Path) -> None:
    folder, dst = tmp_path / "frames", tmp_path / "out.mkv"
    folder.mkdir()
    from clearsight.io import write_image

    for i in range(4):
        write_image(folder / f"{i + 1:05d}.png", np.full((16, 24, 3), 40 * i, np.uint8))
    restorer = Restorer.from_pretrained("identity")
    result = restore_video(restorer, folder, dst, fps=10, crf=0)
    assert result.frames == 4
    assert decoded_times(dst) == pytest.approx([0.0, 0.1, 0.2, 0.3])
    with VideoReader(dst) as r:
        firsts = [int(f.image[8, 12, 0]) for f in r.frames()]
    assert [abs(v - 40 * i) <= 2 for i, v in enumerate(firsts)] == [True] * 4


def test_model_failure_leaves_nothing(tmp_path: Path) -> None:
    src, dst, folder = tmp_path / "in.mp4", tmp_path / "out.mp4", tmp_path / "frames"
    make_video(src, n=10, audio=None)
    calls = 0

    def flaky(img: np.ndarray) -> np.ndarray:
        nonlocal calls
        calls += 1
        if calls == 5:
            raise RuntimeError("model failed on frame 5")
        return img

    with pytest.raises(RuntimeError, match="frame 5"):
        restore_video(flaky, src, dst, frames_out=folder)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]
    # the reader and writer threads ended (other tests of this process may leave their own)
    assert not [t for t in threading.enumerate() if t.name.startswith("clearsight-video")]


def test_truncated_input_raises_and_keep_partial_keeps_frames(tmp_path: Path) -> None:
    src = tmp_path / "in.mkv"
    make_video(src, w=64, h=64, n=40, audio="pcm_s16le")
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(src.read_bytes()[: src.stat().st_size // 2])
    dst = tmp_path / "out.mkv"
    with pytest.raises(VideoReadError, match=r"cut.mkv: decoding stopped at frame (\d+)"):
        restore_video(invert, cut, dst)
    assert not dst.exists()
    with pytest.raises(VideoReadError, match="decoding stopped") as err:
        restore_video(invert, cut, dst, keep_partial=True)
    stopped_at = int(str(err.value).split("frame ")[1].split()[0])
    assert dst.exists() and 0 < stopped_at < 40
    assert len(decoded_times(dst)) == stopped_at


def test_options_checked_before_work(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_video(src, n=3, audio=None)
    with pytest.raises(OptionError, match="out"):
        restore_video(invert, src)
    with pytest.raises(OptionError, match="input video"):
        restore_video(invert, src, src)
    with pytest.raises(OptionError, match="start"):
        restore_video(invert, src, tmp_path / "o.mp4", start=-1.0)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mp4"]


def test_cut_and_model_returning_wrong_shape(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    make_video(src, n=20, audio="aac")
    result = restore_video(invert, src, dst, start=0.1, duration=0.3)
    assert result.frames == 5
    assert decoded_times(dst) == pytest.approx([0.02, 0.06, 0.14, 0.18, 0.26])
    with pytest.raises(Exception, match="model returned"):
        restore_video(lambda img: img[:8], src, tmp_path / "bad.mp4")
    assert not (tmp_path / "bad.mp4").exists()


def _scene(t: int, noise: np.random.Generator | None) -> np.ndarray:
    """A textured static background and a bright square moving 3 px per frame."""
    yy, xx = np.mgrid[0:64, 0:64]
    bg = 100 + 40 * np.sin(xx / 5.0) * np.cos(yy / 7.0)
    img = np.repeat(bg[..., None], 3, axis=2)
    img[20:36, 8 + 3 * t : 24 + 3 * t] = 230
    if noise is not None:
        img = img + noise.normal(0, 6, size=(64, 64, 1))  # per-frame flicker, all channels
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def test_temporal_blend_lowers_flicker_without_smearing_the_moving_square() -> None:
    from clearsight.metrics.warping import warping_error

    rng = np.random.default_rng(0)
    clean = [_scene(t, None) for t in range(8)]
    noisy = [_scene(t, rng) for t in range(8)]
    blend = TemporalBlend()
    blended = [blend(f) for f in noisy]
    before = warping_error(noisy, clean).mean
    after = warping_error(blended, clean).mean
    assert after < 0.7 * before
    last, prev_pos = blended[-1].astype(int), (20, 36, 8 + 3 * 6, 8 + 3 * 7)
    # the square where it is now is as bright as in the frame, and no ghost trails behind it
    assert np.abs(last[22:34, 8 + 3 * 7 + 2 : 24 + 3 * 7 - 2] - 230).mean() < 8
    trail = last[22:34, prev_pos[2] : prev_pos[3]]
    assert np.abs(trail - clean[-1][22:34, prev_pos[2] : prev_pos[3]]).mean() < 8
    assert len(blend.blended_fraction) == 7 and min(blend.blended_fraction) > 0.5
