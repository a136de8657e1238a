"""Lower the flicker of a per-frame model without smearing motion (`restore_video(temporal=)`).

A per-frame model restores each frame on its own, so static areas shimmer from frame to
frame. `TemporalBlend` mixes each output with the previous (already blended) output, warped
onto it along the DIS optical flow between the two outputs, only where the flow is trusted
(Lai et al.'s forward-backward and motion-boundary tests, `metrics/warping.py`) and the
warped pixel is already close to the new one (`max_change`): moving edges, occlusions and
real changes keep the new frame as it is. Off by default: docs/video.md has what it
measured.
"""

from __future__ import annotations

import cv2
import numpy as np

from clearsight.errors import OptionError
from clearsight.metrics.warping import FlowEstimator, _gray8, valid_mask, warp

DEFAULT_STRENGTH = 0.5
DEFAULT_MAX_CHANGE = 0.06


class TemporalBlend:
    """Recursive, flow-guided blend of consecutive outputs (uint8 RGB frames in, out)."""

    def __init__(
        self,
        strength: float = DEFAULT_STRENGTH,
        max_change: float = DEFAULT_MAX_CHANGE,
        flow_preset: str = "fast",
    ) -> None:
        if not 0.0 <= strength < 1.0:
            raise OptionError("temporal_strength", f"must be in [0, 1), got {strength}")
        if not max_change > 0.0:
            raise OptionError("temporal_max_change", f"must be > 0, got {max_change}")
        self.strength = float(strength)
        self.max_change = float(max_change)
        self._flow = FlowEstimator(flow_preset)
        self._prev: np.ndarray | None = None
        self._prev_gray: np.ndarray | None = None
        self.blended_fraction: list[float] = []
        """Per frame (from the second), the fraction of pixels that were blended."""

    def __call__(self, out: np.ndarray) -> np.ndarray:
        gray = _gray8(out)
        if self._prev is None or self._prev.shape != out.shape:
            self._prev, self._prev_gray = out, gray
            return out
        flow = self._flow(gray, self._prev_gray)
        back = self._flow(self._prev_gray, gray)
        cur = out.astype(np.float32)
        warped = warp(self._prev.astype(np.float32), flow)
        close = np.abs(warped - cur).max(axis=2) <= self.max_change * 255.0
        weight = (valid_mask(flow, back) & close).astype(np.float32)
        # a soft edge so blended and kept regions do not meet at a visible seam
        weight = cv2.blur(weight, (3, 3)) * self.strength
        self.blended_fraction.append(float((weight > 0).mean()))
        mixed = cur + weight[..., None] * (warped - cur)
        result = np.clip(np.rint(mixed), 0, 255).astype(np.uint8)
        self._prev, self._prev_gray = result, gray
        return result
