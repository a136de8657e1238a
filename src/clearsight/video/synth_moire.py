"""Moiré/clean frame pairs from a video: `clearsight.data.synth_moire_video`'s moving camera.

OUT/moire/ and OUT/clean/ are numbered PNG folders matched by name, the paired-frames layout
that `clearsight eval --video` reads; the clean side is each decoded frame written losslessly
(or, with `match_tone`, with the capture's tone change).
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from pathlib import Path

from clearsight.data.synth_common import SynthReport
from clearsight.data.synth_moire import MoireConfig
from clearsight.data.synth_moire_video import CameraMotion, moire_clip
from clearsight.errors import OptionError, VideoReadError
from clearsight.video.frames import FrameFolderWriter, open_source


def synth_moire_video(
    source: str | Path,
    out: str | Path,
    *,
    seed: int = 0,
    match_tone: bool = False,
    motion: CameraMotion | None = None,
    fps: float | None = None,
    max_frames: int | None = None,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Write OUT/moire/000001.png, ... and OUT/clean/000001.png, ... for a video file or a
    folder of numbered frames (read at `fps`), at most `max_frames` of them.

    The moiré moves with a camera whose view of the screen changes smoothly (`motion`); each
    pair is aligned pixel for pixel. Both folders appear only once every frame is written
    (`FrameFolderWriter`).
    """
    if max_frames is not None and (
        isinstance(max_frames, bool) or not isinstance(max_frames, int) or max_frames < 1
    ):
        raise OptionError("max_frames", f"must be a whole number >= 1, got {max_frames!r}")
    out = Path(out)
    cfg = MoireConfig(match_tone=match_tone)
    n = 0
    with contextlib.ExitStack() as stack:
        reader = stack.enter_context(open_source(source, fps=fps, max_pixels=max_pixels))
        moire_w = stack.enter_context(FrameFolderWriter(out / "moire"))
        clean_w = stack.enter_context(FrameFolderWriter(out / "clean"))
        images = (f.image for f in itertools.islice(reader.frames(), max_frames))
        for moire, target in moire_clip(images, seed, cfg, motion):
            path = moire_w.write(moire)
            clean_w.write(target)
            n += 1
            if on_pair is not None:
                on_pair(path)
        if n == 0:
            raise VideoReadError(f"{source}: no frames to synthesise moiré on")
    return SynthReport(pairs=n, out=out)
