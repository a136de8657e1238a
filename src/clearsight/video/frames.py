"""Folders of numbered frames as videos: read at a given fps, written as numbered PNGs.

A folder of images named with frame numbers (00001.jpg, frame_2.png, ...) reads as a video
whose frame i is at i/fps seconds; its frames must share one size. Written frames are
000001.png, 000002.png, ... into a temporary folder that replaces the target once every
frame is written (`clearsight.atomic.atomic_dir`), so a failed run leaves no partial folder.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Callable, Iterable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from clearsight.atomic import ClosedOrAborted, atomic_dir, naming_target
from clearsight.data.video_pairs import frame_key
from clearsight.errors import (
    ClearsightError,
    VideoReadError,
    VideoWriteError,
    check_whole_number,
)
from clearsight.io import list_images, read_image, to_uint8
from clearsight.video.io import DecodeLimit, Frame, VideoInfo, VideoReader
from clearsight.video.options import check_duration, check_fps, check_start

FRAME_NAME = "{:06d}.png"
_WRITTEN = re.compile(r"^\d+\.png$")
FRAMES_MARK = ".clearsight-frames"
"""A hidden file in every frames folder written here: a rerun replaces a folder only when
it finds this mark (and nothing but numbered PNGs), never a folder it did not write."""


def list_frames(folder: str | Path) -> list[Path]:
    """The images directly in `folder`, in frame-number order; a `VideoReadError` if none."""
    p = Path(folder)
    try:
        files = list_images(p)
    except ClearsightError as exc:
        raise VideoReadError(str(exc)) from exc
    return sorted(files, key=frame_key)


class FrameFolderReader:
    """A folder of numbered frames read as a video at `fps` (same interface as
    `VideoReader`: `info`, `frames()`, `side_streams()`, `close()`)."""

    def __init__(
        self,
        folder: str | Path,
        *,
        fps: float | None,
        max_pixels: int | None = None,
        limit: DecodeLimit | None = None,
    ) -> None:
        self.path = Path(folder)
        rate = check_fps(fps)
        self.files = list_frames(self.path)
        self.max_pixels = max_pixels
        self.limit = limit
        self.frames_read = 0
        first = to_uint8(read_image(self.files[0], max_pixels=max_pixels))
        h, w = first.shape[:2]
        self.info = VideoInfo(
            path=self.path,
            width=w,
            height=h,
            time_base=1 / rate,
            rate=rate,
            frames=len(self.files),
            duration=float(len(self.files) / rate),
            codec="images",
            pix_fmt="rgb24",
        )

    def side_streams(self, start: float | None = None, duration: float | None = None) -> None:
        """A folder of frames has no audio to copy."""
        return None

    def frames(self, start: float | None = None, duration: float | None = None) -> Iterator[Frame]:
        """Frames from `start` seconds for `duration` seconds (frame i at i/fps), shifted so
        the first frame of the cut is at 0."""
        rate = self.info.rate
        assert rate is not None
        s = check_start(start) or Fraction(0)
        d = check_duration(duration)
        first = math.ceil(s * rate)
        stop = len(self.files) if d is None else min(len(self.files), math.ceil((s + d) * rate))
        if first >= stop:
            raise VideoReadError(
                f"{self.path}: no frames from {float(s):.3f} s "
                f"(its {len(self.files)} frames last {self.info.duration:.3f} s "
                f"at {float(rate)} fps)"
            )
        for i in range(first, stop):
            if self.limit is not None:
                self.limit.check(self.path, i - first + 1, float((i - first) / rate))
            img = to_uint8(read_image(self.files[i], max_pixels=self.max_pixels))
            if img.shape[:2] != (self.info.height, self.info.width):
                raise VideoReadError(
                    f"{self.files[i]}: {img.shape[1]}x{img.shape[0]} differs from the first "
                    f"frame's {self.info.width}x{self.info.height}; a video's frames share one size"
                )
            self.frames_read = i - first + 1
            yield Frame(i - first, img, i - first, self.info.time_base)

    def close(self) -> None:
        pass

    def __enter__(self) -> FrameFolderReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class FrameFolderWriter(ClosedOrAborted):
    """Write frames as OUT/000001.png, 000002.png, ... (8-bit RGB), atomically as a folder.

    An existing OUT is replaced only when it is empty or was written here (it holds the
    hidden `FRAMES_MARK` and nothing but numbered PNGs): a folder of numbered frames from
    elsewhere (a camera, ffmpeg, the input itself) is refused rather than deleted.
    """

    def __init__(self, folder: str | Path, *, keep_partial: bool = False) -> None:
        self.path = Path(folder)
        self.keep_partial = keep_partial
        self.frames_written = 0
        self._closed = False
        if self.path.exists():
            if not self.path.is_dir():
                raise VideoWriteError(f"frames folder {self.path} is a file, not a folder")
            names = sorted(p.name for p in self.path.iterdir())
            others = [n for n in names if n != FRAMES_MARK and not _WRITTEN.match(n)]
            if others or (names and FRAMES_MARK not in names):
                raise VideoWriteError(
                    f"frames folder {self.path} already holds other files, not written by "
                    f"clearsight ({(others or names)[0]}, ...); choose an empty or new folder"
                )
        self._atomic = atomic_dir(self.path)
        self._tmp = self._atomic.__enter__()
        try:
            (self._tmp / FRAMES_MARK).write_text(
                "numbered frames written by clearsight; a rerun replaces this folder\n",
                encoding="utf-8",
            )
        except OSError as exc:
            self.abort(exc)
            raise naming_target(exc, self.path / FRAMES_MARK) from None

    def write(self, image: np.ndarray, pts: int | None = None) -> Path:
        """Write the next frame (HxWx3 uint8 RGB); `pts` is ignored (frames are numbered)."""
        self.frames_written += 1
        target = self._tmp / FRAME_NAME.format(self.frames_written)
        # Straight into the temporary folder: the folder is renamed into place as a whole,
        # so the per-file temporary name and fsync of `clearsight.io.write_image` buy nothing.
        ok, buf = cv2.imencode(".png", np.ascontiguousarray(image[:, :, ::-1]))
        if not ok:
            raise VideoWriteError(f"{self.path}: cannot encode frame {self.frames_written}")
        try:
            target.write_bytes(buf.tobytes())
        except OSError as exc:  # named as the frame in place, not its temporary folder
            raise naming_target(exc, self.path / target.name) from None
        return self.path / target.name

    def close(self) -> None:
        """Put the folder in place."""
        if self._closed:
            return
        self._closed = True
        try:
            self._atomic.__exit__(None, None, None)
        except OSError as exc:
            raise naming_target(exc, self.path) from None

    def abort(self, exc: BaseException | None = None) -> None:
        """Remove the temporary folder (or keep the frames so far with `keep_partial`)."""
        if self._closed:
            return
        self._closed = True
        if self.keep_partial and self.frames_written:
            self._atomic.__exit__(None, None, None)
            return
        err = exc or VideoWriteError(f"{self.path}: aborted")
        with contextlib.suppress(BaseException):
            self._atomic.__exit__(type(err), err, err.__traceback__)


def open_source(
    path: str | Path,
    *,
    fps: float | None = None,
    max_pixels: int | None = None,
    limit: DecodeLimit | None = None,
) -> Any:
    """A reader for `path`: a `VideoReader` for a video file, a `FrameFolderReader` (at
    `fps`) for a folder of numbered frames. Both have `info`, `frames()` and `close()`, and
    stop at `limit` (frames and seconds decoded)."""
    p = Path(path)
    if p.is_dir():
        return FrameFolderReader(p, fps=fps, max_pixels=max_pixels, limit=limit)
    return VideoReader(p, max_pixels=max_pixels, limit=limit)


def write_clip_pairs(
    source: str | Path,
    out: Path,
    degraded: str,
    pairs: Callable[[Iterator[np.ndarray]], Iterable[tuple[np.ndarray, np.ndarray]]],
    *,
    what: str,
    fps: float | None = None,
    max_frames: int | None = None,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> int:
    """The frames of `source` (a video, or numbered frames at `fps`), at most `max_frames`,
    through `pairs` (frames in, (degraded, clean) out, in order) into the numbered folders
    OUT/<degraded> and OUT/clean; both appear only once every pair is written. Returns the
    pair count; a clip without frames is a one-line error (`what` is synthesised)."""
    if max_frames is not None:
        check_whole_number("max_frames", max_frames)
    from clearsight.output_plan import check_frames_folders

    check_frames_folders([out / degraded, out / "clean"], [source], "--out")
    n = 0
    with contextlib.ExitStack() as stack:
        reader = stack.enter_context(open_source(source, fps=fps, max_pixels=max_pixels))
        degraded_w = stack.enter_context(FrameFolderWriter(out / degraded))
        clean_w = stack.enter_context(FrameFolderWriter(out / "clean"))
        images = (f.image for f in itertools.islice(reader.frames(), max_frames))
        for bad, clean in pairs(images):
            path = degraded_w.write(bad)
            clean_w.write(clean)
            n += 1
            if on_pair is not None:
                on_pair(path)
        if n == 0:
            raise VideoReadError(f"{source}: no frames to synthesise {what} on")
    return n
