"""The video options, checked once before any work (docs/video.md, "Options are checked
before any work").

Every command that takes them (restore, derain, demoire, detect, eval --video, synth
--video, the Ray video engine) calls `check_video_options` before it reads an input, so a
bad value is one `OptionError` naming its flag (exit 1), not one failed input per video.
The reader and the writer call the same validators, so Python callers of one video get the
same errors.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from fractions import Fraction
from pathlib import Path
from typing import Any

from clearsight.errors import OptionError

DEFAULT_CODEC = "libx264"

MIN_FPS = Fraction(1, 1000)
"""A frame every 1000 s (a time-lapse); lower rates are a typo (`--fps 1e-9` once reached
`Fraction(1, 0)`)."""
MAX_FPS = 1000
"""High-speed capture stops here (phones film slow motion at 960 fps); `--fps 1e9` made a
clip 4 ns long on a clock of 1/1e9 s."""
FPS_DENOMINATOR = 100_000
"""A frame rate is kept as a fraction with at most this denominator (29.97 -> 2997/100);
within [MIN_FPS, MAX_FPS] that never rounds to 0."""
SECONDS_DENOMINATOR = 1_000_000
"""`--start` and `--duration` are kept to the microsecond."""
MAX_SECONDS = 10_000_000
"""`--start` and `--duration` at most (about 116 days, longer than any recording): any cut
then stays within FFmpeg's 64-bit timestamps even on a nanosecond clock (`--start 1e18`
overflowed the seek, an internal error that stopped the whole run)."""

CRF_RANGES: dict[str, tuple[int, int]] = {
    # x264's scale for 8-bit video; FFmpeg hands x264 any value without a word (measured:
    # crf 1000 encoded), so the range is checked here
    "libx264": (0, 51),
    "libx265": (0, 51),  # x265 refuses 52 and up when the encoder opens
    "libvpx": (4, 63),  # VP8's crf may not be under its qmin, 4 by default (0-3 refused)
    "libvpx-vp9": (0, 63),
    "libaom-av1": (0, 63),
    "libsvtav1": (0, 63),  # SVT-AV1 refuses 64 and up, and -1
}
"""The constant-rate-factor range of each encoder that takes one (by FFmpeg encoder name;
`--codec h264` is libx264). Measured with PyAV's FFmpeg, except libaom-av1 (not in its
build), whose range is FFmpeg's documented 0-63."""
CRF_CODECS = tuple(CRF_RANGES)


def check_seconds(option: str, value: float | None, *, positive: bool) -> Fraction | None:
    """`value` seconds as an exact fraction (None stays None): finite, from 0 to
    `MAX_SECONDS`, and > 0 (at least a microsecond) when `positive`."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise OptionError(option, f"must be a number of seconds, got {value!r}")
    if value < 0 or (positive and value == 0):
        raise OptionError(option, f"must be {'> 0' if positive else '>= 0'} seconds, got {value}")
    if value > MAX_SECONDS:
        raise OptionError(option, f"must be at most {MAX_SECONDS:,} seconds, got {value:g}")
    seconds = Fraction(value).limit_denominator(SECONDS_DENOMINATOR)
    if positive and seconds == 0:
        raise OptionError(option, f"must be at least 0.000001 seconds, got {value}")
    return seconds


def check_start(start: float | None) -> Fraction | None:
    """`--start`: seconds after the first frame, >= 0."""
    return check_seconds("start", start, positive=False)


def check_duration(duration: float | None) -> Fraction | None:
    """`--duration`: seconds, > 0."""
    return check_seconds("duration", duration, positive=True)


def check_fps(fps: float | None, option: str = "fps") -> Fraction:
    """A frame rate from `MIN_FPS` to `MAX_FPS` as an exact fraction (29.97 -> 2997/100)."""
    if fps is None:
        raise OptionError(option, "a folder of frames needs a frame rate (fps), e.g. 25")
    if isinstance(fps, bool) or not isinstance(fps, int | float) or not math.isfinite(fps):
        raise OptionError(option, f"must be a number of frames per second, got {fps!r}")
    if not MIN_FPS <= fps <= MAX_FPS:
        raise OptionError(
            option,
            f"must be a frame rate from {float(MIN_FPS):g} to {MAX_FPS} frames per second, "
            f"got {fps:g}",
        )
    return Fraction(fps).limit_denominator(FPS_DENOMINATOR)


def video_encoder(codec: str) -> Any:
    """FFmpeg's video encoder `codec` (an `av.codec.Codec`); an `OptionError` when FFmpeg
    has none by that name, or it encodes audio or subtitles."""
    import av
    import av.error

    if not isinstance(codec, str) or not codec.strip():
        raise OptionError("codec", f"must name a video encoder, e.g. {DEFAULT_CODEC}")
    try:
        encoder = av.codec.Codec(codec, "w")
    except (av.error.FFmpegError, ValueError) as exc:
        raise OptionError("codec", f"FFmpeg has no {codec!r} video encoder") from exc
    if encoder.type != "video":
        raise OptionError("codec", f"{codec!r} encodes {encoder.type}, not video")
    return encoder


CONTAINER_FORMATS = {
    ".mp4": "mp4",
    ".m4v": "mp4",
    ".mov": "mov",
    ".mkv": "matroska",
    ".webm": "webm",
    ".avi": "avi",
}
"""FFmpeg's format for each video suffix an output may have (`--keep-container`)."""


def check_container(codec: str, container: str, hint: str = "", suffix: str = "") -> None:
    """Every output is a `container` file (an FFmpeg format name, e.g. "mp4"; its outputs'
    `suffix` when that differs): refuse an encoder it cannot hold once, rather than failing
    each video when its writer opens."""
    import io

    import av

    encoder = video_encoder(codec)
    with av.open(io.BytesIO(), "w", format=container) as probe:
        supported = probe.supported_codecs
    if encoder.canonical_name not in supported:
        held = [name for name in EXAMPLE_CODECS if _canonical(name) in supported]
        raise OptionError(
            "codec",
            f"the {suffix or '.' + container} outputs cannot hold {encoder.canonical_name} "
            f"video ({encoder.name}); choose one they hold, e.g. {', '.join(held)}{hint}",
        )


EXAMPLE_CODECS = ("libx264", "libx265", "libvpx-vp9", "libsvtav1", "ffv1")
"""Encoders named in the advice when a container cannot hold the one asked for (those of
them it holds: a .webm holds no H.264)."""


def _canonical(name: str) -> str | None:
    """The codec an encoder writes (libx264 -> h264), or None where FFmpeg lacks it."""
    try:
        return str(video_encoder(name).canonical_name)
    except OptionError:
        return None


def check_output_containers(codec: str | None, outputs: Iterable[Path]) -> None:
    """`codec` checked against the container of every output video, once per suffix,
    before any work (with `--keep-container` a .webm input is written as .webm, which
    cannot hold H.264: that was one failed input per video)."""
    for suffix in sorted({p.suffix.lower() for p in outputs}):
        if suffix in CONTAINER_FORMATS:
            check_container(codec or DEFAULT_CODEC, CONTAINER_FORMATS[suffix], suffix=suffix)


def check_crf(crf: int | None, codec: str = DEFAULT_CODEC) -> None:
    """`--crf` for the encoder `codec`: a whole number within that encoder's range
    (`CRF_RANGES`); an encoder without a crf takes none."""
    if crf is None:
        return
    name = video_encoder(codec).name
    if name not in CRF_RANGES:
        raise OptionError("crf", f"{codec} takes no crf; crf applies to {', '.join(CRF_CODECS)}")
    low, high = CRF_RANGES[name]
    if isinstance(crf, bool) or not isinstance(crf, int) or not low <= crf <= high:
        raise OptionError(
            "crf", f"must be a whole number from {low} to {high} for {name}, got {crf!r}"
        )


def check_video_options(
    *,
    start: float | None = None,
    duration: float | None = None,
    codec: str | None = None,
    crf: int | None = None,
    fps: float | None = None,
    container: str | None = None,
    container_hint: str = "",
) -> None:
    """The one check of the video options a command was given, before any work: `start`
    >= 0 s, `duration` > 0 s, `codec` an FFmpeg video encoder (that `container`, the
    format every output is written in when the command knows it, can hold), `crf` within
    its range, `fps` (when given) from `MIN_FPS` to `MAX_FPS`. Each failure is an
    `OptionError` naming the option."""
    check_start(start)
    check_duration(duration)
    encoder = codec if codec is not None else DEFAULT_CODEC
    video_encoder(encoder)
    if container is not None:
        check_container(encoder, container, container_hint)
    check_crf(crf, encoder)
    if fps is not None:
        check_fps(fps)


__all__ = [
    "CRF_RANGES",
    "MAX_FPS",
    "MAX_SECONDS",
    "MIN_FPS",
    "check_container",
    "check_output_containers",
    "check_crf",
    "check_duration",
    "check_fps",
    "check_start",
    "check_video_options",
    "video_encoder",
]
