"""Lower the flicker of a per-frame model without smearing motion (`restore_video(temporal=)`).

A per-frame model restores each frame on its own, so static areas shimmer from frame to
frame. `TemporalBlend` mixes each output with the previous (already blended) output, warped
onto it along the DIS optical flow between the two outputs, only where the flow is trusted
(Lai et al.'s forward-backward and motion-boundary tests, `metrics/warping.py`) and the
warped pixel is already close to the new one (`max_change`): moving edges, occlusions and
real changes keep the new frame as it is.

`StatsSmoother` is for models that pool over the whole image (MBCNN's five tone vectors,
`global_stats_hooks` in docs/architecture.md §3.4): each frame's statistics are averaged
with the previous frames' (an exponential moving average) before the model uses them, so a
model that estimates the global tone of every frame anew changes it only slowly
(`restore_video(smooth_tone=True)`, `with_smoothed_stats`). docs/video.md has what both
measured: the blend is what `temporal` runs, on by default for `clearsight demoire`; the
tone smoothing moved the warping error by under 0.3% on the clips there, so it is opt-in.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import cv2
import numpy as np
import torch

from clearsight.errors import OptionError
from clearsight.io import image_to_tensor, tensor_to_image
from clearsight.metrics.warping import FlowEstimator, _gray8, valid_mask, warp
from clearsight.models.contract import RestorationModel
from clearsight.preprocess import downscale_to_pixels

DEFAULT_STRENGTH = 0.5
DEFAULT_MAX_CHANGE = 0.06
DEFAULT_STATS_WEIGHT = 0.3
"""The weight of a new frame's own statistics in the moving average (1: no smoothing)."""
SMOOTHED_STATS = ("mbcnn-tone-vectors",)
"""The statistics `with_smoothed_stats` smooths (`stats_layout()["kind"]`): those it was
measured on (docs/video.md); RESCAN's squeeze-excitation gates are left as they are."""


class TemporalBlend:
    """Recursive, flow-guided blend of consecutive outputs (uint8 RGB frames in, out).

    Frames too small for the optical flow (`FlowEstimator.too_small`: under 8 pixels on a
    side, or 12 on the longer one) pass through unblended; the first such frame warns once,
    naming `source`, and `skipped` keeps the reason, so a run goes on with its other frames
    and inputs."""

    def __init__(
        self,
        strength: float = DEFAULT_STRENGTH,
        max_change: float = DEFAULT_MAX_CHANGE,
        flow_preset: str = "fast",
        source: object = None,
    ) -> None:
        if not 0.0 <= strength < 1.0:
            raise OptionError("temporal_strength", f"must be in [0, 1), got {strength}")
        if not max_change > 0.0:
            raise OptionError("temporal_max_change", f"must be > 0, got {max_change}")
        self.strength = float(strength)
        self.max_change = float(max_change)
        self.source = source
        self._flow = FlowEstimator(flow_preset)
        self._prev: np.ndarray | None = None
        self._prev_gray: np.ndarray | None = None
        self.blended_fraction: list[float] = []
        """Per frame (from the second), the fraction of pixels that were blended."""
        self.skipped: str | None = None
        """Why frames went through unblended (too small for the flow), or None."""

    def _too_small(self, out: np.ndarray) -> bool:
        problem = self._flow.too_small(*out.shape[:2])
        if problem is None:
            return False
        if self.skipped is None:
            self.skipped = problem
            where = f"{self.source}: " if self.source is not None else ""
            warnings.warn(f"{where}{problem}; the temporal blend is skipped", stacklevel=3)
        return True

    def __call__(self, out: np.ndarray) -> np.ndarray:
        if self._too_small(out):
            return out
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


TensorFn = Callable[[torch.Tensor], torch.Tensor]


class StatsSmoother:
    """`restore` ([1,3,H,W] in [0, 1] -> the same) with `net`'s global statistics averaged
    over the frames it has seen: state <- state + weight * (this frame's - state).

    Each frame costs one more forward: the frame's own statistics come from a first run
    (on a downscale to the model's `stats_pixels` budget when larger, as its tiles get them),
    then the frame is restored with the averaged ones (`global_stats_hooks(shared=)`). A
    model without global pooling sites, or one that records none (an ONNX Runtime graph),
    runs as it is.
    """

    def __init__(
        self, net: RestorationModel, restore: TensorFn, weight: float = DEFAULT_STATS_WEIGHT
    ) -> None:
        if not 0.0 < weight <= 1.0:
            raise OptionError("temporal_stats_weight", f"must be in (0, 1], got {weight}")
        self.net = net
        self.restore = restore
        self.weight = float(weight)
        self.layout = net.stats_layout()
        self.state: torch.Tensor | None = None
        self.own: list[torch.Tensor] = []
        """Per frame, its own [N, sites, C] statistics (for tests and plots)."""
        self.history: list[torch.Tensor] = []
        """Per frame, the [N, sites, C] statistics the model used: the moving average."""

    @torch.inference_mode()
    def __call__(self, x: torch.Tensor) -> torch.Tensor:
        if self.layout is None:
            return self.restore(x)
        sites = int(self.layout["sites"])
        small = downscale_to_pixels(x, self.layout.get("stats_pixels"), self.net.pad_multiple)
        with self.net.global_stats_hooks() as rec:
            self.restore(small)
        if len(rec) < sites:
            return self.restore(x)
        own = torch.stack(rec[:sites], dim=1)
        self.own.append(own.detach().cpu())
        if self.state is None or self.state.shape != own.shape:
            self.state = own
        else:
            self.state = self.state + self.weight * (own - self.state)
        self.history.append(self.state.detach().cpu())
        with self.net.global_stats_hooks(shared=self.state):
            return self.restore(x)


def with_smoothed_stats(model: Any, *, stats_weight: float = DEFAULT_STATS_WEIGHT) -> Any:
    """`model` (a `Restorer`, or an image model as `engine.video_window.PerFrame`) with its
    global statistics smoothed over frames (`StatsSmoother`) when they are of a kind in
    `SMOOTHED_STATS`; any other model (a window model, an ONNX Runtime graph, a plain frame
    function) as it is. A `Restorer` comes back as a uint8 RGB frame function."""
    from clearsight.engine.inference import Restorer
    from clearsight.engine.video_window import PerFrame

    def smoothed(net: RestorationModel | None) -> bool:
        layout = net.stats_layout() if net is not None else None
        return layout is not None and layout.get("kind") in SMOOTHED_STATS

    if isinstance(model, PerFrame) and smoothed(model.net):
        assert model.net is not None
        return PerFrame(StatsSmoother(model.net, model.restore, stats_weight), net=model.net)
    if isinstance(model, Restorer) and model.options.backend == "torch" and smoothed(model.net):
        smooth = StatsSmoother(model.net, model.restore, stats_weight)

        def frame(image: np.ndarray) -> np.ndarray:
            return tensor_to_image(smooth(image_to_tensor(image)))

        return frame
    return model
