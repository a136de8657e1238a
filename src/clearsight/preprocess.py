"""The preprocessing spec: stored once in every artifact, read by every consumer.

Training, evaluation, inference and export all take colour order, value range,
normalisation and padding from here; none of them re-declares it (docs/architecture.md §3.2).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import torch

from clearsight.errors import ArtifactError

__all__ = ["PreprocessSpec", "downscale_to_pixels", "pad_to_multiple", "resize_antialiased"]

ColorOrder = Literal["RGB", "BGR"]
# "fixed": stretch to `size`, aspect ignored; "letterbox": scale the long side to `size`, keep the
# aspect and pad (detection; `extra` may hold "pad_value" and "interpolation").
ResizePolicy = Literal["none", "fixed", "letterbox"]
RESIZE_POLICIES = ("none", "fixed", "letterbox")


@dataclass(frozen=True)
class PreprocessSpec:
    """How an image in [0, 255] RGB becomes the model's input tensor, and back."""

    color_order: ColorOrder = "RGB"
    value_range: tuple[float, float] = (0.0, 1.0)
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)
    resize: ResizePolicy = "none"
    size: tuple[int, int] | None = None
    pad_multiple: int = 1
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["value_range"] = list(self.value_range)
        d["mean"] = list(self.mean)
        d["std"] = list(self.std)
        d["size"] = list(self.size) if self.size is not None else None
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> PreprocessSpec:
        known = set(cls.__dataclass_fields__)
        unknown = set(d) - known
        if unknown:
            raise ArtifactError(f"preprocess spec has unknown keys: {sorted(unknown)}")
        kw = dict(d)
        for key in ("value_range", "mean", "std"):
            if key in kw:
                kw[key] = tuple(float(v) for v in kw[key])
        if kw.get("size") is not None:
            kw["size"] = tuple(int(v) for v in kw["size"])
        if kw.get("color_order", "RGB") not in ("RGB", "BGR"):
            raise ArtifactError(
                f"preprocess color_order must be RGB or BGR, got {kw['color_order']!r}"
            )
        if kw.get("resize", "none") not in RESIZE_POLICIES:
            raise ArtifactError(
                f"preprocess resize must be one of {', '.join(RESIZE_POLICIES)}, "
                f"got {kw['resize']!r}"
            )
        return cls(**kw)

    def to_model(self, rgb01: torch.Tensor) -> torch.Tensor:
        """Map a [B,3,H,W] RGB tensor in [0,1] to the model's input convention."""
        x = rgb01
        if self.color_order == "BGR":
            x = x.flip(1)
        lo, hi = self.value_range
        if (lo, hi) != (0.0, 1.0):
            x = x * (hi - lo) + lo
        if self.mean != (0.0, 0.0, 0.0) or self.std != (1.0, 1.0, 1.0):
            mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            std = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            x = (x - mean) / std
        return x

    def from_model(self, y: torch.Tensor) -> torch.Tensor:
        """Inverse of `to_model` for image outputs: back to RGB in [0,1] (not clamped)."""
        x = y
        if self.mean != (0.0, 0.0, 0.0) or self.std != (1.0, 1.0, 1.0):
            mean = torch.tensor(self.mean, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            std = torch.tensor(self.std, dtype=x.dtype, device=x.device).view(1, 3, 1, 1)
            x = x * std + mean
        lo, hi = self.value_range
        if (lo, hi) != (0.0, 1.0):
            x = (x - lo) / (hi - lo)
        if self.color_order == "BGR":
            x = x.flip(1)
        return x


def pad_to_multiple(x: torch.Tensor, m: int) -> torch.Tensor:
    """Pad [...,H,W] bottom/right to multiples of `m`: reflect, or replicate where the image
    is too small to reflect. Callers crop the output back to H x W."""
    h, w = x.shape[-2:]
    ph, pw = (-h) % m, (-w) % m
    if ph or pw:
        mode = "reflect" if ph < h and pw < w else "replicate"
        x = torch.nn.functional.pad(x, (0, pw, 0, ph), mode=mode)
    return x


def resize_antialiased(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    """[...,H,W] resized to `size` by antialiased bicubic interpolation (a no-op if equal)."""
    if tuple(x.shape[-2:]) == tuple(size):
        return x
    return torch.nn.functional.interpolate(
        x, size=size, mode="bicubic", antialias=True, align_corners=False
    )


def downscale_to_pixels(x: torch.Tensor, max_pixels: int | None, multiple: int) -> torch.Tensor:
    """`x` unchanged within `max_pixels` pixels (None: no limit), else downscaled to about
    that budget with its aspect kept and each side at least `multiple`: how whole-image
    statistics of a large image are computed cheaply."""
    h, w = x.shape[-2:]
    if max_pixels is None or h * w <= max_pixels:
        return x
    s = math.sqrt(max_pixels / (h * w))
    return resize_antialiased(x, (max(multiple, round(h * s)), max(multiple, round(w * s))))
