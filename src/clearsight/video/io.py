"""Reading and writing video files with PyAV (FFmpeg's libraries): docs/video.md.

What every caller gets:

* frames as HxWx3 uint8 RGB arrays in display orientation (the container's rotation is
  applied), whatever the pixel format: 10-bit and alpha formats are converted to rgb24 by
  swscale with the stream's colour matrix and range (alpha is dropped, as FFmpeg does when
  it writes a format without alpha);
* each frame's own timestamp (`pts` in the stream's `time_base`), so a variable frame rate
  survives a round trip; frames stream through the decoder one at a time and memory does not
  grow with the video's length;
* one-line `VideoReadError`/`VideoWriteError` messages naming the file, for a missing file,
  no video stream, zero frames, an undecodable codec, frames over the pixel limit, or a file
  that ends early (the frame where decoding stopped is named);
* outputs written to a temporary file beside the target and renamed when complete
  (`clearsight.atomic`), with the audio and subtitle streams of the source copied packet by
  packet (no re-encode).
"""

from __future__ import annotations

import contextlib
import logging
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import av.error
import numpy as np
from av.video.reformatter import ColorRange, Colorspace, VideoReformatter

from clearsight.atomic import ClosedOrAborted, atomic_path
from clearsight.errors import VideoReadError, VideoWriteError
from clearsight.io import MAX_PIXELS_ENV, _describe_pixels, resolve_max_pixels
from clearsight.video.options import (
    CRF_CODECS,
    DEFAULT_CODEC,
    check_crf,
    check_duration,
    check_start,
    video_encoder,
)

_log = logging.getLogger(__name__)

DEFAULT_CRF = 18
"""x264's constant-rate factor by default: visually near-lossless, so the file shows what the
model did rather than the encoder."""
COPIED_TYPES = ("audio", "subtitle")
FALLBACK_RATE = Fraction(25)

# FFmpeg's AVColorSpace codes -> swscale's colour tables (PyAV's Colorspace values)
_SWS_COLORSPACE = {1: 1, 4: 4, 5: 5, 6: 5, 7: 7, 9: 9, 10: 9}
_FULL_RANGE = 2  # AVCOL_RANGE_JPEG
_DURATION_TAG = re.compile(r"^(\d+):(\d\d):(\d\d(?:\.\d+)?)$")


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class Frame:
    """One decoded frame: RGB uint8 in display orientation and its timestamp."""

    index: int
    """Position in the clip being read (0-based, after any cut)."""
    image: np.ndarray
    pts: int
    """Timestamp in `time_base` units, as the output will carry it (shifted by a cut)."""
    time_base: Fraction

    @property
    def time(self) -> float:
        """The timestamp in seconds."""
        return float(self.pts * self.time_base)


@dataclass(frozen=True)
class VideoInfo:
    """What a reader knows before decoding the whole source."""

    path: Path
    width: int
    """Displayed width (after rotation)."""
    height: int
    time_base: Fraction
    rate: Fraction | None
    """Average frame rate (frames per second), when the container says."""
    frames: int | None
    """Frame count from the header, when the container stores one (an estimate)."""
    duration: float | None
    """Seconds, when the container says."""
    codec: str
    pix_fmt: str
    rotation: int = 0
    """Degrees the stored frames are turned clockwise for display (0, 90, 180, 270)."""
    side_streams: tuple[str, ...] = ()
    """Audio and subtitle streams that a writer copies, as "#1 audio aac"."""
    dropped_streams: tuple[str, ...] = ()
    """Other non-video streams (data, attachments, further video), not copied."""


@dataclass(frozen=True)
class SideStreams:
    """Which packets of which source a writer copies, and how far to shift them.

    `start`/`end` are seconds on the source's timeline (None: from the start / to the end);
    copied packets are shifted back by `start`, as the video frames of the cut are.
    """

    source: Path
    indices: tuple[int, ...]
    start: Fraction | None = None
    end: Fraction | None = None


@dataclass(frozen=True)
class DecodeLimit:
    """The most of a video a reader decodes, counted on the decoded frames themselves, never
    on the header (which a crafted file can set to anything): at most `frames` frames, none
    `seconds` or more after the first. Past it, `frames()` raises a `VideoReadError` naming
    `name` (the server's job limit: docs/serving.md)."""

    seconds: float
    frames: int
    name: str = "the limit"

    def check(self, path: Path, count: int, seconds: float) -> None:
        """Raise when the `count`-th frame, `seconds` after the first, is past the limit."""
        if seconds >= self.seconds:
            raise VideoReadError(
                f"{path} decodes past {self.seconds:g} s (frame {count} at {seconds:.2f} s), "
                f"over {self.name}; its header understates its length"
            )
        if count > self.frames:
            raise VideoReadError(
                f"{path} holds more than {self.frames} frames, over {self.name} of "
                f"{self.seconds:g} s"
            )


# --------------------------------------------------------------------------- helpers


def _reason(exc: BaseException) -> str:
    """FFmpeg's message without PyAV's errno prefix and file name, on one line."""
    text = str(exc)
    if isinstance(exc, av.error.FFmpegError) and exc.strerror:
        text = exc.strerror
    text = " ".join(text.split())
    return text or type(exc).__name__


def _open_input(path: Path) -> av.container.InputContainer:
    if not path.exists():
        raise VideoReadError(f"video not found: {path}")
    if path.is_dir():
        raise VideoReadError(f"{path} is a folder; read it as numbered frames (with fps)")
    try:
        return av.open(str(path), "r")
    except (av.error.FFmpegError, OSError, UnicodeDecodeError) as exc:
        raise VideoReadError(
            f"{path}: cannot open as a video ({_reason(exc)}); the file is not a video "
            "FFmpeg reads, or it is truncated"
        ) from exc


def _video_stream(container: av.container.InputContainer, path: Path) -> Any:
    if not container.streams.video:
        kinds = ", ".join(s.type for s in container.streams) or "no streams"
        raise VideoReadError(f"{path}: no video stream (found {kinds})")
    stream = container.streams.video[0]
    if stream.codec_context is None:
        raise VideoReadError(
            f"{path}: video stream #{stream.index} has a codec FFmpeg cannot decode"
        )
    return stream


def _check_pixels(path: Path, width: int, height: int, limit: int) -> None:
    """Frames over the pixel limit are refused before they are converted or restored."""
    if width * height > limit:
        size, lim = _describe_pixels(width * height, limit)
        raise VideoReadError(
            f"{path}: {width}x{height} = {size} per frame exceeds the limit of {lim} "
            f"(raise it with --max-pixels or {MAX_PIXELS_ENV})"
        )


def _rotation_of(frame: av.VideoFrame) -> int:
    """Clockwise degrees for display; FFmpeg's display matrix angle is counter-clockwise."""
    try:
        ccw = float(frame.rotation)
    except (AttributeError, TypeError, ValueError):
        return 0
    return int(round(-ccw / 90.0)) % 4 * 90


def _display(rgb: np.ndarray, rotation: int) -> np.ndarray:
    if rotation == 0:
        return rgb
    return np.ascontiguousarray(np.rot90(rgb, k=-(rotation // 90)))


def _to_rgb(frame: av.VideoFrame, reformatter: VideoReformatter) -> np.ndarray:
    """The frame as HxWx3 uint8 RGB, converted with its own colour matrix and range.

    An untagged YUV frame is taken as BT.709 at HD sizes and BT.601 below, as players do.
    """
    fmt = frame.format
    kwargs: dict[str, Any] = {}
    if not fmt.is_rgb and len(fmt.components) >= 3:
        cs = _SWS_COLORSPACE.get(int(frame.colorspace))
        if cs is None:
            cs = 1 if frame.height >= 720 or frame.width >= 1280 else 5
        kwargs["src_colorspace"] = Colorspace(cs)
        full = int(frame.color_range) == _FULL_RANGE or fmt.name.startswith("yuvj")
        kwargs["src_color_range"] = ColorRange.JPEG if full else ColorRange.MPEG
    rgb = reformatter.reformat(frame, format="rgb24", **kwargs)
    return rgb.to_ndarray()


def _tag_seconds(value: str | None) -> Fraction | None:
    """Matroska's per-stream DURATION tag ("00:00:02.960000000") in seconds."""
    if not value:
        return None
    m = _DURATION_TAG.match(value.strip())
    if m is None:
        return None
    return int(m[1]) * 3600 + int(m[2]) * 60 + Fraction(m[3])


# --------------------------------------------------------------------------- reading


class VideoReader:
    """Frames of a video file, decoded one at a time (`frames()`), with its `info`.

    Opening probes the file: it must have a decodable video stream with at least one frame
    within the pixel limit. `limit` bounds what `frames()` decodes (`DecodeLimit`). Use as
    a context manager, or call `close()`.
    """

    def __init__(
        self, path: str | Path, *, max_pixels: int | None = None, limit: DecodeLimit | None = None
    ) -> None:
        self.path = Path(path)
        self.max_pixels = resolve_max_pixels(max_pixels)
        self.limit = limit
        self.frames_read = 0
        self._container: av.container.InputContainer | None = None
        self._reformatter = VideoReformatter()
        self._stated_end: Fraction | None = None
        self.info, self._first_pts = self._probe()

    def _probe(self) -> tuple[VideoInfo, int]:
        container = _open_input(self.path)
        try:
            stream = _video_stream(container, self.path)
            cc = stream.codec_context
            if cc.width and cc.height:
                _check_pixels(self.path, cc.width, cc.height, self.max_pixels)
            tb = stream.time_base or Fraction(1, 90000)
            tag = _tag_seconds(stream.metadata.get("DURATION"))
            # where the video stream itself says it ends (seconds on its timeline); the
            # container's duration may be the audio's, so it never counts as truncation
            if stream.duration:
                self._stated_end = ((stream.start_time or 0) + stream.duration) * tb
            elif tag is not None:
                self._stated_end = tag
            duration: float | None = None
            if self._stated_end is not None:
                duration = float(self._stated_end - (stream.start_time or 0) * tb)
            elif container.duration:
                duration = container.duration / 1e6
            # Matroska's stream duration may be the segment's (audio included): its tag wins
            stated = float(tag) if tag is not None else duration
            first = self._first_frame(container, stream, stated)
            _check_pixels(self.path, first.width, first.height, self.max_pixels)
            rotation = _rotation_of(first)
            w, h = (
                (first.height, first.width)
                if rotation in (90, 270)
                else (first.width, first.height)
            )
            side, dropped = [], []
            for s in container.streams:
                if s.index == stream.index:
                    continue
                codec = s.codec_context.name if s.codec_context is not None else "unknown"
                label = f"#{s.index} {s.type} {codec}"
                (side if s.type in COPIED_TYPES else dropped).append(label)
            rate = stream.average_rate or stream.guessed_rate or None
            info = VideoInfo(
                path=self.path,
                width=w,
                height=h,
                time_base=Fraction(tb),
                rate=Fraction(rate) if rate else None,
                frames=int(stream.frames) or None,
                duration=duration,
                codec=cc.name,
                pix_fmt=first.format.name,
                rotation=rotation,
                side_streams=tuple(side),
                dropped_streams=tuple(dropped),
            )
            first_pts = first.pts if first.pts is not None else 0
            return info, first_pts
        finally:
            container.close()

    def _first_frame(
        self, container: av.container.InputContainer, stream: Any, stated: float | None
    ) -> av.VideoFrame:
        """The first decoded frame. None decoding from a stream that states a length is a
        truncated or damaged file (its frames are cut off or unreadable), not an empty one."""
        try:
            for frame in container.decode(stream):
                return frame
        except av.error.DecoderNotFoundError as exc:
            raise VideoReadError(
                f"{self.path}: FFmpeg cannot decode its {stream.codec_context.name} video"
            ) from exc
        except av.error.FFmpegError as exc:
            raise VideoReadError(
                f"{self.path}: decoding stopped at frame 0 ({_reason(exc)}); the file is "
                "truncated or corrupt"
            ) from exc
        raise VideoReadError(self._no_frames(stated))

    def _no_frames(self, stated: float | None) -> str:
        if stated is not None and stated > 0:
            return (
                f"{self.path}: no frame decodes though the video stream states "
                f"{stated:.3f} s; the file is truncated or damaged"
            )
        return f"{self.path}: the video stream has no frames"

    # -- cut ---------------------------------------------------------------------------
    def _window(
        self, start: float | None, duration: float | None
    ) -> tuple[Fraction | None, Fraction | None]:
        """The cut on the source's timeline in seconds, (start, end), from the first frame."""
        s = check_start(start)
        d = check_duration(duration)
        first = self._first_pts * self.info.time_base
        begin = None if s is None else first + s
        end = None if d is None else (begin if begin is not None else first) + d
        return begin, end

    def side_streams(
        self, start: float | None = None, duration: float | None = None
    ) -> SideStreams:
        """The audio and subtitle streams a writer copies for the cut (`start`, `duration`)."""
        begin, end = self._window(start, duration)
        indices = tuple(int(label.split()[0][1:]) for label in self.info.side_streams)
        return SideStreams(self.path, indices, begin, end)

    # -- frames ------------------------------------------------------------------------
    def frames(self, start: float | None = None, duration: float | None = None) -> Iterator[Frame]:
        """Decode the frames from `start` seconds (after the first frame) for `duration`
        seconds; their timestamps are shifted back by `start`. A file that ends before its
        header says raises a `VideoReadError` naming the frame where decoding stopped."""
        begin, end = self._window(start, duration)
        tb = self.info.time_base
        begin_pts = None if begin is None else math.ceil(begin / tb)
        end_pts = None if end is None else math.ceil(end / tb)
        shift = begin_pts or 0
        self.close()
        container = _open_input(self.path)
        self._container = container
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        if begin_pts is not None and begin_pts > self._first_pts:
            container.seek(begin_pts, stream=stream, backward=True)
        nominal = 1 / self.info.rate if self.info.rate else Fraction(1, 25)
        n = 0
        last_pts: int | None = None
        last_dur = 0
        reached_end = False
        decoded = container.decode(stream)
        while True:
            try:
                frame = next(decoded)
            except StopIteration:
                break
            except av.error.FFmpegError as exc:
                at = f"{float(last_pts * tb):.3f} s" if last_pts is not None else "the start"
                raise VideoReadError(
                    f"{self.path}: decoding stopped at frame {n} (after {at}): {_reason(exc)}; "
                    "the file is truncated or corrupt"
                ) from exc
            pts = frame.pts
            if pts is None:
                pts = (last_pts + max(last_dur, 1)) if last_pts is not None else self._first_pts
            if begin_pts is not None and pts < begin_pts:
                continue
            if end_pts is not None and pts >= end_pts:
                reached_end = True
                break
            if last_pts is not None and pts <= last_pts:
                pts = last_pts + 1  # broken files repeat timestamps; encoders need them rising
            if frame.duration:
                last_dur = int(frame.duration)  # the frame's own (a held last frame counts)
            elif last_pts is not None:
                last_dur = pts - last_pts
            if frame.width * frame.height > self.max_pixels:
                _check_pixels(self.path, frame.width, frame.height, self.max_pixels)
            if self.limit is not None:
                self.limit.check(self.path, n + 1, float((pts - self._first_pts) * tb))
            image = _display(_to_rgb(frame, self._reformatter), _rotation_of(frame))
            last_pts = pts
            n += 1
            self.frames_read = n
            yield Frame(n - 1, image, pts - shift, tb)
        self.close()
        if n == 0:
            if begin is not None or end is not None:
                raise VideoReadError(
                    f"{self.path}: no frames in the cut {_describe_cut(begin, end)}"
                )
            raise VideoReadError(f"{self.path}: the video stream has no frames")
        if not reached_end:
            self._check_complete(n, last_pts, last_dur, nominal, end)

    def _check_complete(
        self, n: int, last_pts: int | None, last_dur: int, nominal: Fraction, end: Fraction | None
    ) -> None:
        """Raise when decoding ended well before the stream's stated duration: a file whose
        tail is missing decodes without an error, just fewer frames."""
        info = self.info
        if self._stated_end is None or last_pts is None:
            return
        tb = info.time_base
        stated = self._stated_end
        if end is not None:
            stated = min(stated, end)
        step = last_dur * tb if last_dur else nominal
        reached = last_pts * tb + step
        if stated - reached > 2 * max(step, nominal):
            raise VideoReadError(
                f"{self.path}: decoding stopped at frame {n} ({float(reached):.3f} s of "
                f"{float(stated):.3f} s): the file is truncated or corrupt"
            )

    def close(self) -> None:
        if self._container is not None:
            with contextlib.suppress(Exception):
                self._container.close()
            self._container = None

    def __enter__(self) -> VideoReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _describe_cut(begin: Fraction | None, end: Fraction | None) -> str:
    a = f"{float(begin):.3f} s" if begin is not None else "the start"
    b = f"{float(end):.3f} s" if end is not None else "the end"
    return f"from {a} to {b}"


def probe_video(path: str | Path, *, max_pixels: int | None = None) -> VideoInfo:
    """What `VideoReader` learns on opening `path` (size, rotation, rate, streams)."""
    with VideoReader(path, max_pixels=max_pixels) as reader:
        return reader.info


# --------------------------------------------------------------------------- writing


def _subsampled(pix_fmt: str) -> tuple[bool, bool]:
    """Whether `pix_fmt` halves chroma horizontally / vertically (so sides must be even)."""
    fmt = av.VideoFormat(pix_fmt)
    return fmt.chroma_width(2) != 2, fmt.chroma_height(2) != 2


@dataclass
class _SideCopy:
    """Packets of the source's audio/subtitle streams, muxed in step with the video."""

    container: Any
    streams: dict[int, Any]
    start: Fraction | None
    end: Fraction | None
    packets: Iterator[Any]
    pending: Any = None
    copied: int = 0
    bytes: dict[int, int] = field(default_factory=dict)


class VideoWriter(ClosedOrAborted):
    """Encode RGB frames to a video file at their own timestamps, atomically.

    The container follows the extension; `codec` (default libx264) at `crf` (default 18)
    in `pix_fmt` (default yuv420p, or the encoder's first format when it takes no yuv420p:
    rgb24 for png). Sides that a
    subsampled pixel format cannot hold (odd width or height in yuv420p) are padded by
    repeating the last column/row: `padded` says so and the file is that much larger.
    `side` copies the source's audio and subtitle packets unchanged. Frames are written to a
    temporary file beside `path`, renamed onto it by `close()`; `abort()` (or an exception
    in a `with` block) removes it, unless `keep_partial` (then what was written is closed
    and kept at `path`).
    """

    def __init__(
        self,
        path: str | Path,
        *,
        width: int,
        height: int,
        time_base: Fraction,
        rate: Fraction | None = None,
        codec: str = DEFAULT_CODEC,
        crf: int | None = None,
        pix_fmt: str | None = None,
        side: SideStreams | None = None,
        keep_partial: bool = False,
    ) -> None:
        self.path = Path(path)
        self.width, self.height = int(width), int(height)
        self.time_base = Fraction(time_base).limit_denominator(1_000_000)
        self.keep_partial = keep_partial
        self.frames_written = 0
        self._last_pts: int | None = None
        self._closed = False
        encoder = video_encoder(codec)  # the checks every command ran before any work
        check_crf(crf, codec)
        self._atomic = atomic_path(self.path)
        tmp = self._atomic.__enter__()
        try:
            self._open(tmp, encoder, rate, crf, pix_fmt, side)
        except BaseException as exc:
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)
            raise

    def _open(
        self,
        tmp: Path,
        encoder: Any,
        rate: Fraction | None,
        crf: int | None,
        pix_fmt: str | None,
        side: SideStreams | None,
    ) -> None:
        try:
            self._out = av.open(str(tmp), "w")
        except (av.error.FFmpegError, ValueError) as exc:
            raise VideoWriteError(
                f"{self.path}: no container format for the extension {self.path.suffix!r} "
                f"({_reason(exc)}); use .mp4, .mkv, .mov, .avi or .webm"
            ) from exc
        fmt_name = self._out.format.name.split(",")[0]
        supported = self._out.supported_codecs
        if encoder.canonical_name not in supported:
            self._out.close()
            raise VideoWriteError(
                f"{self.path}: the {fmt_name} container cannot hold {encoder.canonical_name} "
                f"video ({encoder.name}); choose another codec or a .mkv file"
            )
        if pix_fmt is None:
            pix_fmt = "yuv420p" if encoder.canonical_name == "h264" else None
        stream = self._out.add_stream(encoder.name, rate=rate or FALLBACK_RATE)
        if pix_fmt is None:  # PyAV's default, yuv420p, unless the encoder takes no such input
            pix_fmt = stream.pix_fmt or "yuv420p"
            takes = [f.name for f in encoder.video_formats or ()]
            if takes and pix_fmt not in takes:  # png: rgb24
                pix_fmt = takes[0]
        wide, tall = _subsampled(pix_fmt)
        enc_w = self.width + (self.width % 2 if wide else 0)
        enc_h = self.height + (self.height % 2 if tall else 0)
        self.padded = (enc_w, enc_h) if (enc_w, enc_h) != (self.width, self.height) else None
        """(width, height) the frames were padded to for the encoder, or None."""
        if self.padded:
            _log.warning(
                "%s: %dx%d padded to %dx%d (%s needs even sides), last column/row repeated",
                self.path,
                self.width,
                self.height,
                enc_w,
                enc_h,
                pix_fmt,
            )
        stream.width, stream.height, stream.pix_fmt = enc_w, enc_h, pix_fmt
        # the encoder's clock is the source's, so no timestamp is rounded onto another
        stream.time_base = self.time_base
        stream.codec_context.time_base = self.time_base
        self.pix_fmt = pix_fmt
        self._yuv = not av.VideoFormat(pix_fmt).is_rgb
        if self._yuv:
            cc = stream.codec_context
            cc.colorspace, cc.color_range, cc.color_primaries, cc.color_trc = 1, 1, 1, 1
        if crf is None and encoder.name in CRF_CODECS:
            crf = DEFAULT_CRF
        if crf is not None:
            stream.options = {"crf": str(crf), **({"b": "0"} if "vpx" in encoder.name else {})}
        self._stream = stream
        self._reformatter = VideoReformatter()
        self._side = self._open_side(side) if side is not None and side.indices else None
        try:
            self._stream.codec_context.open()
        except av.error.FFmpegError as exc:
            self._out.close()
            raise VideoWriteError(
                f"{self.path}: cannot start the {encoder.name} encoder at {enc_w}x{enc_h} "
                f"{pix_fmt} ({_reason(exc)})"
            ) from exc

    def _open_side(self, side: SideStreams) -> _SideCopy:
        src = _open_input(side.source)
        streams: dict[int, Any] = {}
        fmt_name = self._out.format.name.split(",")[0]
        for i in side.indices:
            s = src.streams[i]
            name = s.codec_context.name if s.codec_context is not None else "unknown"
            if name not in self._out.supported_codecs:
                # the message first: a closed container's streams must not be touched
                msg = (
                    f"{self.path}: the {fmt_name} container cannot hold the {name} {s.type} "
                    f"stream #{i} of {side.source}; write a .mkv file, or drop the stream"
                )
                src.close()
                self._out.close()
                raise VideoWriteError(msg)
            streams[i] = self._out.add_stream_from_template(s)
        packets = src.demux([src.streams[i] for i in side.indices])
        return _SideCopy(src, streams, side.start, side.end, packets)

    # -- side packets --------------------------------------------------------------------
    def _mux_side(self, until: Fraction | None) -> None:
        """Mux the copied packets up to `until` seconds on the source's timeline (all, when
        None), so that audio and video stay interleaved without buffering either."""
        side = self._side
        if side is None:
            return
        shift = side.start or Fraction(0)
        while True:
            if side.pending is None:
                try:
                    side.pending = next(side.packets)
                except StopIteration:
                    return
                except av.error.FFmpegError as exc:
                    raise VideoReadError(
                        f"{side.container.name}: cannot read its audio/subtitle packets "
                        f"({_reason(exc)}); the file is truncated or corrupt"
                    ) from exc
            pkt = side.pending
            ts = pkt.dts if pkt.dts is not None else pkt.pts
            if ts is None or pkt.size == 0:
                side.pending = None
                continue
            tb = pkt.time_base
            t = (pkt.pts if pkt.pts is not None else ts) * tb
            if until is not None and ts * tb - shift > until:
                return
            side.pending = None
            if side.start is not None and t < side.start:
                continue
            if side.end is not None and t >= side.end:
                continue
            if shift:
                off = round(shift / tb)
                pkt.dts = ts - off
                if pkt.pts is not None:
                    pkt.pts -= off
            index = pkt.stream.index
            side.bytes[index] = side.bytes.get(index, 0) + pkt.size
            pkt.stream = side.streams[index]
            self._out.mux(pkt)
            side.copied += 1

    @property
    def side_bytes(self) -> dict[int, int]:
        """Bytes copied per source stream index (audio/subtitles), so far."""
        return dict(self._side.bytes) if self._side is not None else {}

    # -- frames --------------------------------------------------------------------------
    def write(self, image: np.ndarray, pts: int) -> None:
        """Encode one HxWx3 uint8 RGB frame at `pts` (in `time_base`, rising)."""
        if image.shape != (self.height, self.width, 3) or image.dtype != np.uint8:
            raise ValueError(
                f"expected a {self.height}x{self.width}x3 uint8 frame, got {image.shape} "
                f"{image.dtype}"
            )
        if self._last_pts is not None and pts <= self._last_pts:
            pts = self._last_pts + 1
        if self.padded:
            pw, ph = self.padded
            image = np.pad(image, ((0, ph - self.height), (0, pw - self.width), (0, 0)), "edge")
        frame = av.VideoFrame.from_ndarray(np.ascontiguousarray(image), format="rgb24")
        if self._yuv:
            frame = self._reformatter.reformat(
                frame,
                format=self.pix_fmt,
                src_colorspace=Colorspace.ITU709,
                dst_colorspace=Colorspace.ITU709,
                dst_color_range=ColorRange.MPEG,
            )
        else:
            frame = self._reformatter.reformat(frame, format=self.pix_fmt)
        frame.pts = pts
        frame.time_base = self.time_base
        try:
            packets = self._stream.encode(frame)
            for packet in packets:
                self._mux_video(packet)
        except av.error.FFmpegError as exc:
            raise VideoWriteError(f"{self.path}: encoding failed ({_reason(exc)})") from exc
        self._last_pts = pts
        self.frames_written += 1

    def _mux_video(self, packet: Any) -> None:
        if self._side is not None and packet.dts is not None:
            self._mux_side(packet.dts * packet.time_base)
        self._out.mux(packet)

    def _finish(self) -> None:
        try:
            for packet in self._stream.encode(None):
                self._mux_video(packet)
        except av.error.FFmpegError as exc:
            raise VideoWriteError(f"{self.path}: encoding failed ({_reason(exc)})") from exc
        self._mux_side(None)
        self._out.close()
        if self._side is not None:
            self._side.container.close()

    def close(self) -> None:
        """Flush the encoder, copy the rest of the side streams, and rename into place."""
        if self._closed:
            return
        self._closed = True
        try:
            if self.frames_written == 0:
                raise VideoWriteError(f"{self.path}: no frames were written")
            self._finish()
        except BaseException as exc:
            self._discard(exc)
            raise
        self._atomic.__exit__(None, None, None)

    def abort(self, exc: BaseException | None = None) -> None:
        """Give up: remove the temporary file (or, with `keep_partial`, keep what was
        written at `path`)."""
        if self._closed:
            return
        self._closed = True
        if self.keep_partial and self.frames_written:
            try:
                self._finish()
            except Exception as err:
                self._discard(err)
                return
            self._atomic.__exit__(None, None, None)
            return
        self._discard(exc or VideoWriteError(f"{self.path}: aborted"))

    def _discard(self, exc: BaseException) -> None:
        with contextlib.suppress(Exception):
            self._out.close()
        if self._side is not None:
            with contextlib.suppress(Exception):
                self._side.container.close()
        with contextlib.suppress(BaseException):
            self._atomic.__exit__(type(exc), exc, exc.__traceback__)
