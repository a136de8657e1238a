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
    def from_dict(cls, d: Any, source: str = "config") -> PreprocessSpec:
        """The spec in an artifact's config, every field checked against `BOUNDS` and the
        allowed names; errors name `source` and the field (`preprocess.pad_multiple`)."""
        if not isinstance(d, dict):
            raise ArtifactError(f"{source}: preprocess must be an object, got {d!r}")
        unknown = set(d) - set(cls.__dataclass_fields__)
        if unknown:
            raise ArtifactError(f"{source}: preprocess has unknown keys: {sorted(unknown)}")
        kw = dict(d)
        for key, n in (("value_range", 2), ("mean", 3), ("std", 3)):
            if key in kw:
                kw[key] = tuple(float(v) for v in _numbers(source, key, kw[key], n))
        lo, hi = kw.get("value_range", (0.0, 1.0))
        if not lo < hi:
            raise ArtifactError(f"{source}: preprocess.value_range {[lo, hi]} needs lo < hi")
        if kw.get("size") is not None:
            kw["size"] = _numbers(source, "size", kw["size"], 2)
        if "pad_multiple" in kw:
            kw["pad_multiple"] = _numbers(source, "pad_multiple", kw["pad_multiple"])
        for key, allowed in (("color_order", ("RGB", "BGR")), ("resize", RESIZE_POLICIES)):
            if kw.get(key, allowed[0]) not in allowed:
                raise ArtifactError(
                    f"{source}: preprocess.{key} must be one of {', '.join(allowed)}, "
                    f"got {kw[key]!r}"
                )
        if kw.get("resize", "none") != "none" and kw.get("size") is None:
            raise ArtifactError(f"{source}: preprocess.resize {kw['resize']!r} needs a size")
        kw["extra"] = _checked_extra(source, kw.get("extra", {}))
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


# Inclusive bounds of every number in a spec: an artifact's config is untrusted, and these
# scale memory and time (`pad_multiple` 1024 turns a 1x1 image into a 1024x1024 one) or make
# values meaningless (docs/reliability.md). `std` must also be > 0.
BOUNDS: dict[str, tuple[float, float]] = {
    "pad_multiple": (1, 128),  # the widest model here pads to 32 (YOLOX)
    "size": (1, 4096),  # a detector's input side; the bundled ones take 300 and 416
    "value_range": (-65535.0, 65535.0),
    "mean": (-65535.0, 65535.0),
    "std": (1e-6, 65535.0),
    "pad_value": (0.0, 255.0),  # letterbox fill, in 0-255 pixel units
}
INTERPOLATIONS = ("bilinear", "nearest", "bicubic", "lanczos")
LETTERBOX_ANCHORS = ("top-left", "center")


def _numbers(source: str, key: str, value: Any, n: int = 0, field: str = "") -> Any:
    """`value` as `n` finite numbers within `BOUNDS[key]` (a tuple; `n` 0: one number, not in
    a list), integers where the bound is one; else an `ArtifactError` naming the `field`
    (default `key`)."""
    low, high = BOUNDS[key]
    field = field or key
    integer = isinstance(low, int)
    items = [value] if n == 0 else value if isinstance(value, list | tuple) else None
    ok = (
        items is not None
        and len(items) == max(n, 1)
        and all(
            not isinstance(v, bool)
            and (isinstance(v, int) or (not integer and isinstance(v, float)))
            and math.isfinite(v)
            for v in items
        )
    )
    if not ok:
        kind = "integer" if integer else "number"
        what = f"{n} {kind}s" if n else f"an {kind}" if integer else f"a {kind}"
        raise ArtifactError(f"{source}: preprocess.{field} must be {what}, got {value!r}")
    if not all(low <= v <= high for v in items):  # type: ignore[union-attr]
        raise ArtifactError(f"{source}: preprocess.{field}={value!r} is outside {low}..{high}")
    return items[0] if n == 0 else tuple(items)  # type: ignore[index, arg-type]


def _checked_extra(source: str, extra: Any) -> dict[str, Any]:
    """`extra` with its known keys checked (others are kept: nothing reads them)."""
    if not isinstance(extra, dict):
        raise ArtifactError(f"{source}: preprocess.extra must be an object, got {extra!r}")
    if "pad_value" in extra:
        _numbers(source, "pad_value", extra["pad_value"], field="extra.pad_value")
    for key, allowed in (
        ("interpolation", INTERPOLATIONS),
        ("letterbox_anchor", LETTERBOX_ANCHORS),
        ("antialias", (True, False)),
    ):
        value = extra.get(key, allowed[0])
        if type(value) is not type(allowed[0]) or value not in allowed:
            raise ArtifactError(
                f"{source}: preprocess.extra.{key} must be one of "
                f"{', '.join(map(str, allowed))}, got {value!r}"
            )
    return dict(extra)


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
