"""Scoring a restored clip from files: per-frame PSNR/SSIM and the warping error, or flicker.

Both clips are read frame by frame (`open_source`: a video file, or a folder of numbered
frames), so a long clip is scored in constant memory. The measures are in
`clearsight.metrics.warping`; docs/video.md.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np

from clearsight.metrics.warping import (
    DEFAULT_FLOW_PRESET,
    ClipScore,
    WarpingResult,
    score_frames,
    warping_error,
)
from clearsight.video.io import open_source


def _images(path: str | Path, fps: float | None, max_pixels: int | None) -> Iterator[np.ndarray]:
    with open_source(path, fps=fps or 25.0, max_pixels=max_pixels) as reader:
        for frame in reader.frames():
            yield frame.image


def score_video(
    output: str | Path,
    clean: str | Path,
    *,
    preset: str = "y-matlab",
    crop_border: int | None = None,
    fps: float | None = None,
    max_pixels: int | None = None,
    flow_preset: str = DEFAULT_FLOW_PRESET,
) -> ClipScore:
    """Score the restored clip `output` against the clean frames `clean` (videos or frame
    folders, frame i against frame i): PSNR/SSIM under `preset` per frame and the warping
    error with the flow from the clean frames; `summary` holds the means. Frame folders
    need no real `fps` here (frames are matched by position)."""
    return score_frames(
        _images(output, fps, max_pixels),
        _images(clean, fps, max_pixels),
        preset=preset,
        crop_border=crop_border,
        flow_preset=flow_preset,
    )


def flicker_video(
    output: str | Path,
    source: str | Path,
    *,
    fps: float | None = None,
    max_pixels: int | None = None,
    flow_preset: str = DEFAULT_FLOW_PRESET,
) -> WarpingResult:
    """Flicker of `output` without ground truth: its warping error with the flow from
    `source`, the input it was restored from."""
    return warping_error(
        _images(output, fps, max_pixels),
        _images(source, fps, max_pixels),
        flow_preset=flow_preset,
    )
