"""Video in and out with PyAV: timestamps, rotation, pixel formats, audio copy, bad input."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clearsight.errors import OptionError, VideoReadError, VideoWriteError
from clearsight.video import (
    FrameFolderReader,
    FrameFolderWriter,
    VideoReader,
    VideoWriter,
    list_frames,
    open_source,
)
from tests.video_utils import (
    PORTRAIT_MATRIX,
    audio_packets,
    corrupt_codec_tag,
    decoded_frames,
    decoded_times,
    make_audio_only,
    make_video,
    set_rotation,
    vfr_pts,
)


def copy_video(src: Path, dst: Path, **kwargs: object) -> VideoWriter:
    """Decode `src` and encode every frame to `dst`, audio copied."""
    start = kwargs.pop("start", None)
    duration = kwargs.pop("duration", None)
    with VideoReader(src) as r:
        info = r.info
        w = VideoWriter(
            dst,
            width=info.width,
            height=info.height,
            time_base=info.time_base,
            rate=info.rate,
            side=r.side_streams(start, duration),  # type: ignore[arg-type]
            **kwargs,  # type: ignore[arg-type]
        )
        with w:
            for f in r.frames(start, duration):  # type: ignore[arg-type]
                w.write(f.image, f.pts)
    return w


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if "clearsight-" in p.name)


# --------------------------------------------------------------------------- round trips


def test_round_trip_keeps_vfr_timestamps_audio_and_pixels(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.mp4", tmp_path / "out.mp4"
    frames = make_video(src, w=64, h=48, n=12, audio="aac")
    writer = copy_video(src, dst)
    expected = [t / 1000 for t in vfr_pts(12)]
    assert decoded_times(src) == pytest.approx(expected)
    assert decoded_times(dst) == pytest.approx(expected)  # variable frame rate survives
    src_audio = audio_packets(src)
    assert src_audio and audio_packets(dst) == src_audio  # remuxed, not re-encoded
    assert writer.side_bytes == {1: sum(len(b) for b in src_audio)}
    with VideoReader(src) as r:
        before = np.stack([f.image for f in r.frames()]).astype(int)
    with VideoReader(dst) as r:
        after = np.stack([f.image for f in r.frames()]).astype(int)
    assert after.shape == (12, 48, 64, 3)
    assert np.abs(before - np.stack(frames)).mean() < 3.0  # the source as read: near the frames
    assert np.abs(after - before).mean() < 2.0  # crf 18, colour matrix tagged and honoured
    assert leftovers(tmp_path) == []


def test_reader_streams_frames_lazily_with_info(tmp_path: Path) -> None:
    src = tmp_path / "in.mkv"
    make_video(src, n=10, audio="pcm_s16le")
    with VideoReader(src) as r:
        assert (r.info.width, r.info.height) == (32, 32)
        assert r.info.side_streams == ("#1 audio pcm_s16le",)
        it = r.frames()
        first = next(it)
        assert first.index == 0 and first.image.dtype == np.uint8 and first.time == 0.0
        assert r.frames_read == 1  # decoded one frame, not the whole video
        rest = list(it)
    assert [f.time for f in [first, *rest]] == pytest.approx([t / 1000 for t in vfr_pts(10)])


def test_pcm_audio_from_mkv_copied_into_mp4(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.mkv", tmp_path / "out.mp4"
    make_video(src, n=8, audio="pcm_s16le")
    copy_video(src, dst)
    assert audio_packets(dst) == audio_packets(src)
    assert decoded_times(dst) == pytest.approx(decoded_times(src))


def test_cut_keeps_frames_in_window_shifted_to_zero(tmp_path: Path) -> None:
    src, dst = tmp_path / "in.mp4", tmp_path / "cut.mp4"
    make_video(src, n=20, audio="aac")  # frames at 0, 40, 120, 160, 240, ... ms
    with VideoReader(src) as r:
        times = [f.time for f in r.frames(start=0.1, duration=0.3)]
    assert times == pytest.approx([0.02, 0.06, 0.14, 0.18, 0.26])  # 120..360 ms, minus 100
    with (
        VideoReader(src) as r,
        pytest.raises(VideoReadError, match=r"in.mp4: no frames in the cut"),
    ):
        list(r.frames(start=30.0))
    copy_video(src, dst, start=0.1, duration=0.3)
    assert decoded_times(dst) == pytest.approx(times)
    cut_audio, all_audio = audio_packets(dst), audio_packets(src)
    assert 0 < len(cut_audio) < len(all_audio)
    assert all(p in all_audio for p in cut_audio)  # whole packets, untouched


def test_rotation_metadata_is_applied(tmp_path: Path) -> None:
    plain, rotated = tmp_path / "plain.mp4", tmp_path / "rot.mp4"
    img = np.zeros((16, 32, 3), np.uint8)
    img[:8] = 200  # top half bright
    make_video(plain, w=32, h=16, n=3, audio=None, images=[img] * 3, pts=[0, 40, 80])
    set_rotation(plain, rotated, PORTRAIT_MATRIX)
    with VideoReader(rotated) as r:
        assert (r.info.width, r.info.height, r.info.rotation) == (16, 32, 90)
        frame = next(r.frames()).image
    assert frame.shape == (32, 16, 3)
    # turned clockwise: the stored top half is now the right half
    assert frame[:, 12:].mean() > 180 and frame[:, :4].mean() < 20
    out = tmp_path / "out.mp4"
    copy_video(rotated, out)
    assert decoded_frames(out)[0].shape == (32, 16, 3)  # written upright, no matrix needed


@pytest.mark.parametrize(
    ("name", "codec", "pix_fmt"),
    [("ten.mp4", "libx264", "yuv420p10le"), ("alpha.mkv", "ffv1", "yuva420p")],
)
def test_ten_bit_and_alpha_become_rgb24(
    tmp_path: Path, name: str, codec: str, pix_fmt: str
) -> None:
    src = tmp_path / name
    img = np.zeros((32, 32, 3), np.uint8)
    img[...] = (200, 60, 30)
    make_video(src, n=2, audio=None, codec=codec, pix_fmt=pix_fmt, images=[img, img], pts=[0, 40])
    with VideoReader(src) as r:
        assert r.info.pix_fmt == pix_fmt
        frame = next(r.frames()).image
    assert frame.dtype == np.uint8 and frame.shape == (32, 32, 3)
    assert np.abs(frame.reshape(-1, 3).mean(0) - (200, 60, 30)).max() < 4


def test_odd_size_is_padded_for_yuv420p_and_said(tmp_path: Path) -> None:
    src, dst = tmp_path / "odd.mkv", tmp_path / "out.mp4"
    make_video(src, w=33, h=31, n=4, pix_fmt="yuv444p", audio=None)
    writer = copy_video(src, dst)
    assert writer.padded == (34, 32)
    frames = decoded_frames(dst)
    assert frames[0].shape == (32, 34, 3)
    # the added column repeats the last one
    assert np.abs(frames[0][:, 33].astype(int) - frames[0][:, 32].astype(int)).mean() < 3
    exact = tmp_path / "exact.mkv"
    writer = copy_video(src, exact, pix_fmt="yuv444p")  # no subsampling: no padding
    assert writer.padded is None and decoded_frames(exact)[0].shape == (31, 33, 3)


# --------------------------------------------------------------------------- frame folders


def test_frame_folder_reads_in_number_order_at_fps(tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    with FrameFolderWriter(folder) as w:
        for i in range(3):
            w.write(np.full((8, 10, 3), 10 * i, np.uint8))
    assert [p.name for p in list_frames(folder)] == ["000001.png", "000002.png", "000003.png"]
    other = tmp_path / "named"
    other.mkdir()
    for i in (1, 2, 10):
        (other / f"f{i}.png").write_bytes((folder / "000001.png").read_bytes())
    assert [p.name for p in list_frames(other)] == ["f1.png", "f2.png", "f10.png"]
    r = open_source(folder, fps=12.5)
    assert isinstance(r, FrameFolderReader)
    frames = list(r.frames())
    assert [f.time for f in frames] == pytest.approx([0.0, 0.08, 0.16])
    assert [int(f.image[0, 0, 0]) for f in frames] == [0, 10, 20]
    assert [f.time for f in r.frames(start=0.05)] == pytest.approx([0.0, 0.08])


def test_frame_folder_errors(tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    with FrameFolderWriter(folder) as w:
        w.write(np.zeros((8, 8, 3), np.uint8))
        w.write(np.zeros((8, 8, 3), np.uint8))
    with pytest.raises(OptionError, match="fps"):
        open_source(folder)
    import cv2

    cv2.imwrite(str(folder / "000003.png"), np.zeros((9, 8, 3), np.uint8))
    with pytest.raises(VideoReadError, match=r"000003.png: 8x9 differs"):
        list(FrameFolderReader(folder, fps=25).frames())
    (folder / "notes.txt").write_text("x")
    with pytest.raises(VideoWriteError, match="already holds other files"):
        FrameFolderWriter(folder)


def test_frame_folder_writer_leaves_nothing_on_failure(tmp_path: Path) -> None:
    folder = tmp_path / "frames"
    with pytest.raises(RuntimeError), FrameFolderWriter(folder) as w:
        w.write(np.zeros((8, 8, 3), np.uint8))
        raise RuntimeError("model failed")
    assert not folder.exists() and leftovers(tmp_path) == []


# --------------------------------------------------------------------------- bad input


def test_truncated_file_names_the_frame_where_decoding_stopped(tmp_path: Path) -> None:
    src = tmp_path / "in.mkv"
    make_video(src, w=64, h=64, n=40, audio="pcm_s16le")
    data = src.read_bytes()
    cut = tmp_path / "cut.mkv"
    cut.write_bytes(data[: len(data) // 2])
    with VideoReader(cut) as r, pytest.raises(VideoReadError) as err:
        list(r.frames())
    msg = str(err.value)
    assert msg.startswith(f"{cut}: decoding stopped at frame ") and "truncated" in msg
    assert "\n" not in msg


@pytest.mark.parametrize("name", ["long_audio.mkv", "long_audio.mp4", "long_audio.ts"])
def test_audio_longer_than_video_is_not_truncation(tmp_path: Path, name: str) -> None:
    src = tmp_path / name
    make_video(src, n=6, audio="aac", audio_ms=3000)  # video 0.36 s, audio 3 s
    with VideoReader(src) as r:
        assert len(list(r.frames())) == 6


def test_truncated_mp4_without_index_cannot_open(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_video(src, n=10)
    cut = tmp_path / "cut.mp4"
    cut.write_bytes(src.read_bytes()[:1000])  # the moov index is at the end
    with pytest.raises(VideoReadError, match=r"cut.mp4: cannot open as a video"):
        VideoReader(cut)


def test_no_video_stream_zero_frames_and_missing_file(tmp_path: Path) -> None:
    audio = tmp_path / "sound.wav"
    make_audio_only(audio)
    with pytest.raises(VideoReadError, match=r"sound.wav: no video stream \(found audio\)"):
        VideoReader(audio)
    empty = tmp_path / "empty.mkv"
    make_video(empty, n=0, audio="pcm_s16le", pts=[], images=[])  # a video stream, no frames
    with pytest.raises(VideoReadError, match=r"empty.mkv: the video stream has no frames"):
        VideoReader(empty)
    with pytest.raises(VideoReadError, match=r"video not found: .*nothere.mp4"):
        VideoReader(tmp_path / "nothere.mp4")


def test_codec_ffmpeg_cannot_decode(tmp_path: Path) -> None:
    src, bad = tmp_path / "in.mp4", tmp_path / "bad.mp4"
    make_video(src, n=3, audio=None)
    corrupt_codec_tag(src, bad)
    with pytest.raises(VideoReadError, match=r"bad.mp4: .*cannot decode"):
        VideoReader(bad)


def test_frames_over_max_pixels(tmp_path: Path) -> None:
    src = tmp_path / "in.mp4"
    make_video(src, w=64, h=48, n=2, audio=None)
    with pytest.raises(
        VideoReadError, match=r"in.mp4: 64x48 = 3,072 pixels per frame exceeds the limit"
    ):
        VideoReader(src, max_pixels=3000)


def test_output_container_that_cannot_hold_the_codec(tmp_path: Path) -> None:
    src = tmp_path / "in.mkv"
    make_video(src, n=3, audio="pcm_s16le")
    with pytest.raises(VideoWriteError, match=r"out.webm: the webm container cannot hold h264"):
        copy_video(src, tmp_path / "out.webm")
    with pytest.raises(VideoWriteError, match=r"cannot hold the pcm_s16le audio stream #1"):
        copy_video(src, tmp_path / "vp9.webm", codec="libvpx-vp9")
    with pytest.raises(VideoWriteError, match=r"no container format for the extension '.xyz'"):
        copy_video(src, tmp_path / "out.xyz")
    with pytest.raises(OptionError, match="codec"):
        copy_video(src, tmp_path / "out.mp4", codec="nosuchcodec")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.mkv"]  # nothing half-written


def test_writer_failure_leaves_no_file(tmp_path: Path) -> None:
    dst = tmp_path / "out.mp4"
    dst.write_bytes(b"old")
    with pytest.raises(RuntimeError), VideoWriter(dst, width=16, height=16, time_base=1 / 25) as w:  # type: ignore[arg-type]
        w.write(np.zeros((16, 16, 3), np.uint8), 0)
        raise RuntimeError("boom")
    assert dst.read_bytes() == b"old" and leftovers(tmp_path) == []
