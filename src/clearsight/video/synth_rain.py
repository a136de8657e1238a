"""Rainy/clean frame pairs from a video: `clearsight.data.synth_rain_video`'s moving rain.

OUT/rain/ and OUT/clean/ are numbered PNG folders matched by name, the paired-frames layout
that `clearsight eval --video` reads; the clean side is each decoded frame written losslessly.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from pathlib import Path

from clearsight.data.synth_common import SynthReport
from clearsight.data.synth_rain import PRESETS
from clearsight.data.synth_rain_video import rainy_clip
from clearsight.errors import OptionError, VideoReadError
from clearsight.video.frames import FrameFolderWriter, open_source


def synth_rain_video(
    source: str | Path,
    out: str | Path,
    *,
    seed: int = 0,
    preset: str = "light",
    fps: float | None = None,
    max_frames: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Write OUT/rain/000001.png, ... and OUT/clean/000001.png, ... for a video file or a
    folder of numbered frames (read at `fps`), at most `max_frames` of them.

    The clean side is the decoded frame written losslessly, so each pair is aligned pixel for
    pixel. Both folders appear only once every frame is written (`FrameFolderWriter`).
    """
    if preset not in PRESETS:
        raise OptionError("preset", f"must be one of {', '.join(PRESETS)}, got {preset!r}")
    if max_frames is not None and (
        isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1
    ):
        raise OptionError("max_frames", f"must be a whole number >= 1, got {max_frames!r}")
    out = Path(out)
    n = 0
    with contextlib.ExitStack() as stack:
        reader = stack.enter_context(open_source(source, fps=fps))
        rain_w = stack.enter_context(FrameFolderWriter(out / "rain"))
        clean_w = stack.enter_context(FrameFolderWriter(out / "clean"))
        images = (f.image for f in itertools.islice(reader.frames(), max_frames))
        clean, to_rain = itertools.tee(images)  # zip takes a clean frame, then its rainy one
        for frame, rainy in zip(clean, rainy_clip(to_rain, seed, preset), strict=True):
            path = rain_w.write(rainy)
            clean_w.write(frame)
            n += 1
            if on_pair is not None:
                on_pair(path)
        if n == 0:
            raise VideoReadError(f"{source}: no frames to synthesise rain on")
    return SynthReport(pairs=n, out=out)
