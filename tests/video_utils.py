"""Small videos made with PyAV at test time (no video is committed)."""

from __future__ import annotations

import struct
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

MS = Fraction(1, 1000)


def frame_image(i: int, w: int, h: int) -> np.ndarray:
    """Frame i: a flat colour that changes with i and a bright bar that moves right."""
    img = np.empty((h, w, 3), np.uint8)
    img[...] = ((40 + 9 * i) % 200, 90, (200 - 7 * i) % 200)
    x = (3 * i) % max(1, w - 4)
    img[:, x : x + 4] = 240
    return img


def vfr_pts(n: int) -> list[int]:
    """Milliseconds with a variable frame rate: steps of 40 and 80 ms alternate."""
    pts, t = [], 0
    for i in range(n):
        pts.append(t)
        t += 40 if i % 2 == 0 else 80
    return pts


def make_video(
    path: Path,
    *,
    w: int = 32,
    h: int = 32,
    n: int = 10,
    codec: str = "libx264",
    pix_fmt: str = "yuv420p",
    audio: str | None = "aac",
    pts: list[int] | None = None,
    options: dict[str, str] | None = None,
    images: list[np.ndarray] | None = None,
    audio_ms: int | None = None,
) -> list[np.ndarray]:
    """Write `n` frames (variable frame rate unless `pts` is given, in ms) and an audio
    stream covering them; return the RGB frames written."""
    pts = pts if pts is not None else vfr_pts(n)
    frames = images if images is not None else [frame_image(i, w, h) for i in range(n)]
    fmt_options = options or {}
    with av.open(str(path), "w", options=fmt_options) as c:
        v = c.add_stream(codec, rate=25)
        v.width, v.height, v.pix_fmt = w, h, pix_fmt
        v.time_base = MS
        v.codec_context.time_base = MS
        a = None
        if audio is not None:
            a = c.add_stream(audio, rate=48000)
            a.layout = "mono"
        if not frames:
            c.start_encoding()  # a header and no frames
        for img, t in zip(frames, pts, strict=True):
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = t, MS
            for p in v.encode(f):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        if a is not None:
            end = audio_ms or (pts[-1] + 40 if pts else 200)
            _write_tone(c, a, total=48 * end)
    return frames


def _write_tone(
    c: av.container.OutputContainer, a: av.audio.stream.AudioStream, total: int
) -> None:
    fs = a.codec_context.frame_size or 1024
    fmt = a.codec_context.format.name
    t = 0
    while t < total:
        k = min(fs, total - t)
        wave = np.sin(np.arange(t, t + k) / 15.0).astype(np.float32) * 0.2
        data = wave[None] if fmt.startswith("flt") else (wave * 32767).astype(np.int16)[None]
        fr = av.AudioFrame.from_ndarray(data, format=fmt, layout="mono")
        fr.sample_rate, fr.pts = 48000, t
        for p in a.encode(fr):
            c.mux(p)
        t += k
    for p in a.encode():
        c.mux(p)


def add_subtitles(src: Path, dst: Path, work: Path) -> list[bytes]:
    """Copy the mkv `src` to `dst` with an SRT subtitle stream added; return its texts."""
    srt = work / "subs.srt"
    srt.write_text(
        "1\n00:00:00,000 --> 00:00:00,200\nhello\n\n2\n00:00:00,300 --> 00:00:00,500\nworld\n"
    )
    with av.open(str(src)) as v, av.open(str(srt)) as s, av.open(str(dst), "w") as o:
        streams = {st.index: o.add_stream_from_template(st) for st in v.streams}
        sub = o.add_stream_from_template(s.streams[0])
        for pk in v.demux():
            if pk.size:
                pk.stream = streams[pk.stream.index]
                o.mux(pk)
        for pk in s.demux():
            if pk.size:
                pk.stream = sub
                o.mux(pk)
    return [b"hello", b"world"]


def subtitle_packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        if not c.streams.subtitles:
            return []
        return [bytes(p) for p in c.demux(subtitles=0) if p.size]


def make_audio_only(path: Path) -> None:
    with av.open(str(path), "w") as c:
        a = c.add_stream("pcm_s16le", rate=48000)
        a.layout = "mono"
        _write_tone(c, a, total=4800)


def decoded_times(path: Path) -> list[float]:
    with av.open(str(path)) as c:
        return [float(f.pts * f.time_base) for f in c.decode(video=0)]


def decoded_frames(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def audio_packets(path: Path) -> list[bytes]:
    with av.open(str(path)) as c:
        if not c.streams.audio:
            return []
        return [bytes(p) for p in c.demux(audio=0) if p.size]


def set_rotation(src: Path, dst: Path, matrix: tuple[int, ...]) -> None:
    """Copy an mp4, replacing the video track's display matrix (tkhd) with `matrix`, as a
    phone does for a portrait video. The first track is the video one in `make_video`."""
    data = bytearray(src.read_bytes())
    i = data.find(b"tkhd")
    version = data[i + 4]
    times = 8 + 8 + 4 + 4 + 8 if version == 1 else 4 + 4 + 4 + 4 + 4
    off = i + 4 + 4 + times + 8 + 8
    data[off : off + 36] = struct.pack(">9i", *matrix)
    dst.write_bytes(bytes(data))


PORTRAIT_MATRIX = (0, 65536, 0, -65536, 0, 0, 0, 0, 0x40000000)
"""The display matrix of a phone held upright: shown turned 90 degrees clockwise."""


def corrupt_codec_tag(src: Path, dst: Path) -> None:
    """Copy an mp4 with its avc1 sample entry renamed, so no decoder is found for it."""
    data = src.read_bytes()
    assert b"avc1" in data
    dst.write_bytes(data.replace(b"avc1", b"zzz1"))


def small_video(path: Path, n: int = 4) -> Path:
    """A silent 32x24 clip of `n` frames at `path` (folders made): the output-plan tests'."""
    path.parent.mkdir(parents=True, exist_ok=True)
    make_video(path, w=32, h=24, n=n, audio=None)
    return path


def small_image(path: Path) -> Path:
    """A 16x16 frame image at `path` (folders made)."""
    from clearsight.io import write_image

    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, frame_image(1, 16, 16))
    return path
