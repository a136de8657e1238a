"""Rainy/clean frame pairs from a video: `clearsight.data.synth_rain_video`'s moving rain.

OUT/rain/ and OUT/clean/ are numbered PNG folders matched by name, the paired-frames layout
that `clearsight eval --video` reads; the clean side is each decoded frame written losslessly.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from clearsight.data.synth_common import SynthReport
from clearsight.data.synth_rain import PRESETS
from clearsight.data.synth_rain_video import rainy_clip
from clearsight.errors import OptionError
from clearsight.video.frames import write_clip_pairs


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
    out = Path(out)

    def pairs(images: Iterator[np.ndarray]) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        clean, to_rain = itertools.tee(images)  # zip takes a clean frame, then its rainy one
        for frame, rainy in zip(clean, rainy_clip(to_rain, seed, preset), strict=True):
            yield rainy, frame

    n = write_clip_pairs(
        source, out, "rain", pairs, what="rain", fps=fps, max_frames=max_frames, on_pair=on_pair
    )
    return SynthReport(pairs=n, out=out)
