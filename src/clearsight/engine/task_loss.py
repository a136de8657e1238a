"""A restoration loss that also asks a frozen detector: task-driven restoration.

A derainer trained on pixels alone removes what PSNR sees; a detector needs the edges and
textures its features respond to, which a smooth, high-PSNR output can lose. Following Liu
et al., "When Image Denoising Meets High-Level Vision Tasks: A Deep Learning Approach"
(IJCAI 2018), which trains the restorer through a fixed high-level network's loss, and the
perceptual (feature-space) losses of Johnson et al. (ECCV 2016), the loss here is

    pixel_loss(outputs, inputs, clean) + w * sum over levels of
        mean |F_l(restored) - F_l(clean)| / mean |F_l(clean)|

where F_l are the frozen detector's feature maps (YOLOX's PAFPN levels at strides 8, 16 and
32: what its head reads), computed on the restored and the clean image under the detector's
own preprocessing (colour order, value range). Each level is normalised by the clean
features' magnitude so every level weighs alike. The detector never changes (no gradient
reaches it, it stays in eval mode); only the restorer learns.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from clearsight.errors import ClearsightError
from clearsight.preprocess import PreprocessSpec

__all__ = ["DetectorFeatureLoss", "detector_features"]

EPS = 1e-6


def detector_features(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The feature maps a detector's head reads: its `backbone` output (a tensor or a tuple
    of pyramid levels), for an input already in the detector's convention."""
    backbone = getattr(model, "backbone", None)
    if backbone is None:
        raise ClearsightError(f"{type(model).__name__} has no backbone to take features from")
    out = backbone(x)
    return list(out) if isinstance(out, list | tuple) else [out]


class DetectorFeatureLoss(nn.Module):
    """`pixel` plus `weight` x the frozen detector's normalised feature distance between the
    restored and the clean image (see the module's docstring)."""

    def __init__(
        self,
        pixel: Callable[..., torch.Tensor],
        detector: nn.Module,
        detector_spec: PreprocessSpec,
        restore_spec: PreprocessSpec,
        *,
        weight: float,
        residual: bool,
    ) -> None:
        super().__init__()
        self.pixel = pixel
        self.detector = detector.eval()
        for p in self.detector.parameters():
            p.requires_grad_(False)
        self.detector_spec, self.restore_spec = detector_spec, restore_spec
        self.weight, self.residual = float(weight), residual
        self.last_terms: dict[str, float] = {}
        """The two terms of the last call (pixel, feature), for the training log."""

    def train(self, mode: bool = True) -> DetectorFeatureLoss:
        super().train(mode)
        self.detector.eval()  # frozen: batch-norm statistics never move
        return self

    def _features(self, model_space: torch.Tensor) -> list[torch.Tensor]:
        rgb01 = self.restore_spec.from_model(model_space).clamp(0.0, 1.0)
        return detector_features(self.detector, self.detector_spec.to_model(rgb01))

    def forward(
        self, outputs: torch.Tensor | Sequence[torch.Tensor], inputs: torch.Tensor, targets: Any
    ) -> torch.Tensor:
        pixel = self.pixel(outputs, inputs, targets)
        last = outputs[-1] if isinstance(outputs, list | tuple) else outputs
        restored = inputs - last if self.residual else last
        with torch.no_grad():
            clean = [f.detach() for f in self._features(targets)]
        seen = self._features(restored)
        feature = sum(
            (s - c).abs().mean() / (c.abs().mean() + EPS) for s, c in zip(seen, clean, strict=True)
        )
        assert isinstance(feature, torch.Tensor)
        self.last_terms = {"pixel": float(pixel.detach()), "feature": float(feature.detach())}
        return pixel + self.weight * feature


def build_task_loss(
    pixel: Callable[..., torch.Tensor],
    detector_ref: str,
    restore_spec: PreprocessSpec,
    *,
    weight: float,
    residual: bool,
    device: str | torch.device = "cpu",
) -> DetectorFeatureLoss:
    """`DetectorFeatureLoss` with the detector `detector_ref` loaded (and frozen) on `device`."""
    from clearsight.zoo import resolve_model

    loaded = resolve_model(detector_ref, device=device)
    if not loaded.is_detector:
        raise ClearsightError(
            f"loss.detector: {detector_ref} is a {loaded.config.task!r} model, not a detector"
        )
    detector = loaded.model.to(device)
    return DetectorFeatureLoss(pixel, detector, loaded.config.preprocess, restore_spec,
                               weight=weight, residual=residual)  # fmt: skip
