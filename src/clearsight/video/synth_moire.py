"""Moiré/clean frame pairs from a video: `clearsight.data.synth_moire_video`'s moving camera.

OUT/moire/ and OUT/clean/ are numbered PNG folders matched by name, the paired-frames layout
that `clearsight eval --video` reads; the clean side is each decoded frame written losslessly
(or, with `match_tone`, with the capture's tone change).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from clearsight.data.synth_common import SynthReport
from clearsight.data.synth_moire import MoireConfig
from clearsight.data.synth_moire_video import CameraMotion, moire_clip
from clearsight.video.frames import write_clip_pairs


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
    out = Path(out)
    cfg = MoireConfig(match_tone=match_tone)
    n = write_clip_pairs(
        source, out, "moire", lambda images: moire_clip(images, seed, cfg, motion),
        what="moiré", fps=fps, max_frames=max_frames, max_pixels=max_pixels, on_pair=on_pair,
    )  # fmt: skip
    return SynthReport(pairs=n, out=out)
