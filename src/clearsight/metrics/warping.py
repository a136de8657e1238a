"""Temporal consistency of a video: the warping error of Lai et al. (ECCV 2018), and flicker.

Warping error (Lai et al., "Learning Blind Video Temporal Consistency", ECCV 2018): for each
pair of consecutive frames, optical flow between the *guide* frames (the clean targets; the
input when there are none) tells where each pixel of frame t was in frame t-1; the previous
output is warped onto the current one along it, and the squared difference is averaged over
the pixels (and RGB channels, values in [0, 1]) that pass the occlusion tests: forward-
backward consistency and motion boundaries, with Lai et al.'s thresholds. The figure is the
mean over the pairs. Lai et al. used FlowNet2; this uses OpenCV's DIS flow (medium preset) on
the guides' luma, so figures compare with each other, not with a paper's.

`flicker` is the same measure with the flow from the input video, for outputs without ground
truth. `score_frames` scores a restored clip per frame against clean frames under a metric
preset (PSNR/SSIM) and adds the warping error. Everything streams: two frames are held at a
time, whatever the clip's length. docs/video.md.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from clearsight.errors import library_reason
from clearsight.metrics._errors import MetricInputError, ShapeMismatchError
from clearsight.metrics.presets import get_preset

FLOW_PRESETS = {
    "ultrafast": cv2.DISOPTICAL_FLOW_PRESET_ULTRAFAST,
    "fast": cv2.DISOPTICAL_FLOW_PRESET_FAST,
    "medium": cv2.DISOPTICAL_FLOW_PRESET_MEDIUM,
}
DEFAULT_FLOW_PRESET = "medium"

# Lai et al.'s occlusion thresholds (after Ruder et al. 2016), on squared flow magnitudes.
FB_RELATIVE, FB_ABSOLUTE = 0.01, 0.5
MB_RELATIVE, MB_ABSOLUTE = 0.01, 0.002
FLOW_MIN_LONG_SIDE = 12
"""DIS refuses frames whose longer side is under 12 pixels (and whose shorter side is under
its patch size, 8 in every preset here); measured on OpenCV 5.1, pinned by a test."""


def _unit(img: np.ndarray) -> np.ndarray:
    """HxWx3 uint8/uint16/float [0,1] -> float32 in [0, 1]."""
    arr = np.asarray(img)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise MetricInputError(f"expected an HxWx3 RGB frame, got shape {arr.shape}")
    if arr.dtype == np.uint8:
        return arr.astype(np.float32) / 255.0
    if arr.dtype == np.uint16:
        return arr.astype(np.float32) / 65535.0
    if arr.dtype.kind == "f":
        return arr.astype(np.float32)
    raise MetricInputError(f"unsupported frame dtype {arr.dtype}")


def _gray8(img: np.ndarray) -> np.ndarray:
    """Luma as uint8, what DIS flow runs on."""
    u8 = np.clip(np.rint(_unit(img) * 255.0), 0, 255).astype(np.uint8)
    return cv2.cvtColor(u8, cv2.COLOR_RGB2GRAY)


class FlowTooSmallError(MetricInputError):
    """Frames too small for the optical flow: the warping error and flicker of such a clip
    cannot be computed (the temporal blend passes them through instead)."""


class FlowEstimator:
    """OpenCV DIS optical flow (one instance reused: it keeps its buffers). Frames it cannot
    run on are a `FlowTooSmallError` (`too_small` says so beforehand), and any other OpenCV
    failure a one-line `MetricInputError`, never OpenCV's own multi-line error."""

    def __init__(self, preset: str = DEFAULT_FLOW_PRESET) -> None:
        if preset not in FLOW_PRESETS:
            raise MetricInputError(
                f"unknown flow preset {preset!r}; known: {', '.join(FLOW_PRESETS)}"
            )
        self.preset = preset
        self._dis = cv2.DISOpticalFlow_create(FLOW_PRESETS[preset])
        self.min_side = int(self._dis.getPatchSize())

    def too_small(self, height: int, width: int) -> str | None:
        """Why frames of this size cannot have a flow (None when they can), in words."""
        if min(height, width) >= self.min_side and max(height, width) >= FLOW_MIN_LONG_SIDE:
            return None
        return (
            f"frames of {width}x{height} are too small for optical flow (it needs at least "
            f"{self.min_side} pixels on each side and {FLOW_MIN_LONG_SIDE} on the longer one)"
        )

    def __call__(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray:
        """HxWx2 float32 flow with src(x) ~ dst(x + flow(x)); src/dst are RGB frames or
        uint8 gray planes."""
        a = src if src.ndim == 2 else _gray8(src)
        b = dst if dst.ndim == 2 else _gray8(dst)
        problem = self.too_small(*a.shape[:2])
        if problem is not None:
            raise FlowTooSmallError(problem)
        try:
            return self._dis.calc(a, b, None)
        except cv2.error as exc:
            h, w = a.shape[:2]
            raise MetricInputError(
                f"optical flow failed on {w}x{h} frames ({library_reason(exc)})"
            ) from exc


def warp(img: np.ndarray, flow: np.ndarray) -> np.ndarray:
    """`img` sampled at x + flow(x) (bilinear; outside the frame, the nearest edge pixel as
    in Lai et al.'s resampler)."""
    h, w = flow.shape[:2]
    gx, gy = np.meshgrid(np.arange(w, dtype=np.float32), np.arange(h, dtype=np.float32))
    return cv2.remap(
        img,
        gx + flow[..., 0],
        gy + flow[..., 1],
        interpolation=cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REPLICATE,
    )


def valid_mask(flow: np.ndarray, back: np.ndarray) -> np.ndarray:
    """Pixels (HxW bool) where `flow` (current -> previous frame) can be trusted: the flow
    back from the previous frame returns to the start (forward-backward test), and the pixel
    is not on a motion boundary. Lai et al.'s tests and thresholds."""
    back_w = warp(back, flow)
    fb = flow + back_w
    fb_mag = (fb**2).sum(-1)
    flow_mag = (flow**2).sum(-1)
    occluded = fb_mag > FB_RELATIVE * ((back_w**2).sum(-1) + flow_mag) + FB_ABSOLUTE
    du = np.zeros_like(flow)
    dv = np.zeros_like(flow)
    du[:, :-1] = flow[:, :-1] - flow[:, 1:]
    dv[:-1, :] = flow[:-1, :] - flow[1:, :]
    boundary = (du**2).sum(-1) + (dv**2).sum(-1) > MB_RELATIVE * flow_mag + MB_ABSOLUTE
    return ~(occluded | boundary)


def pair_warping_error(
    prev_out: np.ndarray, out: np.ndarray, flow: np.ndarray, back: np.ndarray
) -> float:
    """Mean squared difference (values in [0,1], over RGB) between `out` and `prev_out`
    warped along `flow`, over the valid pixels (all pixels when none is valid)."""
    a, b = _unit(out), _unit(prev_out)
    if a.shape != b.shape or a.shape[:2] != flow.shape[:2]:
        raise ShapeMismatchError(
            f"warping error: frames differ in size: {b.shape} then {a.shape} (flow {flow.shape})"
        )
    sq = (a - warp(b, flow)) ** 2
    mask = valid_mask(flow, back)
    n = int(mask.sum())
    if n == 0:
        return float(sq.mean())
    return float(sq[mask].sum() / (3 * n))


@dataclass
class WarpingResult:
    """Per pair (frame t against t-1, t >= 1) and the mean over pairs."""

    per_frame: list[float] = field(default_factory=list)

    @property
    def mean(self) -> float:
        return float(np.mean(self.per_frame)) if self.per_frame else math.nan


def _lockstep(a: Iterable[Any], b: Iterable[Any], what: str) -> Iterator[tuple[Any, Any]]:
    """Items of `a` and `b` in pairs, streamed; a length mismatch is a ShapeMismatchError
    (`what`, and after how many frames)."""
    sentinel = object()
    ia, ib = iter(a), iter(b)
    n = 0
    while True:
        x, y = next(ia, sentinel), next(ib, sentinel)
        if x is sentinel and y is sentinel:
            return
        if x is sentinel or y is sentinel:
            raise ShapeMismatchError(f"{what} (mismatch after {n} frames)")
        yield x, y
        n += 1


class _ConsecutiveWarp:
    """`step(output, guide)`: the warping error of this output against the previous one,
    along the flow between their guides (None for the first frame). Holds only the previous
    output and guide luma, so a clip streams through."""

    def __init__(self, flow_preset: str) -> None:
        self.est = FlowEstimator(flow_preset)
        self.prev_out: np.ndarray | None = None
        self.prev_gray: np.ndarray | None = None

    def __call__(self, out: np.ndarray, guide: np.ndarray) -> float | None:
        gray = _gray8(guide)
        error = None
        if self.prev_out is not None and self.prev_gray is not None:
            flow, back = self.est(gray, self.prev_gray), self.est(self.prev_gray, gray)
            error = pair_warping_error(self.prev_out, out, flow, back)
        self.prev_out, self.prev_gray = out, gray
        return error


def warping_error(
    outputs: Iterable[np.ndarray],
    guides: Iterable[np.ndarray],
    *,
    flow_preset: str = DEFAULT_FLOW_PRESET,
) -> WarpingResult:
    """Lai et al.'s warping error of `outputs`, flow computed on `guides` (the clean frames,
    or the input for `flicker`). Both are sequences of HxWx3 RGB frames of one size; a
    length mismatch is an error."""
    step = _ConsecutiveWarp(flow_preset)
    result = WarpingResult()
    what = "warping error: outputs and guides differ in length"
    for o, g in _lockstep(outputs, guides, what):
        error = step(o, g)
        if error is not None:
            result.per_frame.append(error)
    return result


def flicker(
    outputs: Iterable[np.ndarray],
    inputs: Iterable[np.ndarray],
    *,
    flow_preset: str = DEFAULT_FLOW_PRESET,
) -> WarpingResult:
    """Warping error without ground truth: flow from the `inputs` the outputs came from."""
    return warping_error(outputs, inputs, flow_preset=flow_preset)


@dataclass
class ClipScore:
    """Per-frame rows (frame, psnr, ssim, warping_error from the second frame) and the
    summary {"psnr.mean", "ssim.mean", "warping_error.mean"} under `preset`."""

    rows: list[dict[str, float]]
    summary: dict[str, float]
    preset: str


def score_frames(
    outputs: Iterable[np.ndarray],
    targets: Iterable[np.ndarray],
    *,
    preset: str = "y-matlab",
    crop_border: int | None = None,
    flow_preset: str = DEFAULT_FLOW_PRESET,
) -> ClipScore:
    """Score a restored clip against its clean frames, frame by frame: PSNR and SSIM under
    the metric `preset` (default y-matlab) and Lai et al.'s warping error with the flow
    from the clean frames."""
    mp = get_preset(preset, crop_border=crop_border)
    step = _ConsecutiveWarp(flow_preset)
    rows: list[dict[str, float]] = []
    warp_errs: list[float] = []
    what = "clip score: the restored clip and the clean frames differ in length"
    for i, (o, t) in enumerate(_lockstep(outputs, targets, what)):
        row: dict[str, float] = {"frame": i, **mp.compute(o, t)}
        error = step(o, t)
        if error is not None:
            row["warping_error"] = error
            warp_errs.append(error)
        rows.append(row)
    if not rows:
        raise MetricInputError("clip score: no frames to score")
    summary = {
        "psnr.mean": float(np.mean([r["psnr"] for r in rows])),
        "ssim.mean": float(np.mean([r["ssim"] for r in rows])),
        "warping_error.mean": float(np.mean(warp_errs)) if warp_errs else math.nan,
        "frames": float(len(rows)),
    }
    return ClipScore(rows, summary, mp.name)
