"""An image into a detector's input, and its boxes back into the image.

A detector sees a fixed-size tensor made by stretching (`resize="fixed"`) or letterboxing
(`resize="letterbox"`: long side to the input size, aspect kept, padded) the image; what it
predicts is in that tensor's pixels. `prepare` does the resize exactly as the artifact's
`PreprocessSpec` says and returns the `Transform` that maps boxes back, so no caller
re-derives scales or pad offsets (a box off by the pad is the classic letterbox bug).

Letterbox options live in `PreprocessSpec.extra`: "pad_value" (in 0-255 pixel units, default
114), "interpolation" ("bilinear", "nearest", "bicubic"; default "bilinear"), "antialias"
(default true) and "letterbox_anchor" ("top-left" or "center"; default "center").
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torchvision.transforms import InterpolationMode
from torchvision.transforms.v2 import functional as TF

from clearsight.errors import ArtifactError, ClearsightError
from clearsight.preprocess import PreprocessSpec

__all__ = ["Transform", "prepare", "resized_size"]

_INTERPOLATION = {
    "bilinear": InterpolationMode.BILINEAR,
    "nearest": InterpolationMode.NEAREST,
    "bicubic": InterpolationMode.BICUBIC,
}
_ANCHORS = ("top-left", "center")


@dataclass(frozen=True)
class Transform:
    """Where an image of `image_size` (H, W) sits in a network input of `input_size`:
    input = image * scale + pad, per axis."""

    image_size: tuple[int, int]
    input_size: tuple[int, int]
    scale_x: float = 1.0
    scale_y: float = 1.0
    pad_x: float = 0.0
    pad_y: float = 0.0

    def _affine(self, boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        scale = torch.tensor(
            [self.scale_x, self.scale_y, self.scale_x, self.scale_y],
            dtype=boxes.dtype, device=boxes.device,
        )  # fmt: skip
        pad = torch.tensor(
            [self.pad_x, self.pad_y, self.pad_x, self.pad_y], dtype=boxes.dtype, device=boxes.device
        )
        return scale, pad

    def boxes_to_image(self, boxes: torch.Tensor) -> torch.Tensor:
        """[K,4] xyxy in network-input pixels -> image pixels, clipped to the image."""
        boxes = boxes.float() if not boxes.is_floating_point() else boxes
        scale, pad = self._affine(boxes)
        out = (boxes - pad) / scale
        h, w = self.image_size
        out[:, 0::2] = out[:, 0::2].clamp(0, w)
        out[:, 1::2] = out[:, 1::2].clamp(0, h)
        return out

    def boxes_to_input(self, boxes: torch.Tensor) -> torch.Tensor:
        """[K,4] xyxy in image pixels -> network-input pixels (targets for training)."""
        boxes = boxes.float() if not boxes.is_floating_point() else boxes
        scale, pad = self._affine(boxes)
        return boxes * scale + pad


def resized_size(image_size: tuple[int, int], input_size: tuple[int, int]) -> tuple[int, int]:
    """(H, W) of the image inside a letterbox: long side fitted, aspect kept, truncated to
    whole pixels (as YOLOX does), at least one pixel."""
    h, w = image_size
    r = min(input_size[0] / h, input_size[1] / w)
    return max(1, int(h * r)), max(1, int(w * r))


def _as_uint8_chw(image: np.ndarray | torch.Tensor) -> torch.Tensor:
    """HxWx3 / HxW uint8 (or uint16, reduced to 8 bits) -> [3,H,W] uint8 tensor."""
    arr = image.numpy() if isinstance(image, torch.Tensor) else np.asarray(image)
    if arr.ndim == 2:
        arr = np.repeat(arr[:, :, None], 3, axis=2)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise ClearsightError(f"expected an HxWx3 RGB image, got shape {arr.shape}")
    if arr.dtype == np.uint16:
        arr = np.rint(arr / 257.0).astype(np.uint8)
    elif arr.dtype != np.uint8:
        raise ClearsightError(f"expected uint8 or uint16 image data, got {arr.dtype}")
    return torch.from_numpy(np.ascontiguousarray(arr.transpose(2, 0, 1)))


def _option(spec: PreprocessSpec, key: str, default: object, allowed: tuple[object, ...]) -> object:
    value = spec.extra.get(key, default)
    if value not in allowed:
        raise ArtifactError(
            f"preprocess extra {key!r} must be one of {', '.join(map(str, allowed))}, got {value!r}"
        )
    return value


def prepare(
    image: np.ndarray | torch.Tensor, spec: PreprocessSpec
) -> tuple[torch.Tensor, Transform]:
    """RGB HxWx3 image (uint8) -> the network input [3,H,W] float tensor and its `Transform`."""
    t = _as_uint8_chw(image)
    h, w = t.shape[-2:]
    interp = _INTERPOLATION[str(_option(spec, "interpolation", "bilinear", tuple(_INTERPOLATION)))]
    antialias = bool(_option(spec, "antialias", True, (True, False)))
    if spec.resize == "none":
        transform = Transform(image_size=(h, w), input_size=(h, w))
    else:
        if spec.size is None:
            raise ArtifactError(f"preprocess resize {spec.resize!r} needs a size")
        sh, sw = spec.size
        if spec.resize == "fixed":
            nh, nw = sh, sw
        else:
            nh, nw = resized_size((h, w), (sh, sw))
        if (nh, nw) != (h, w):
            t = TF.resize(t, [nh, nw], interpolation=interp, antialias=antialias)
        pad_x = pad_y = 0
        if (nh, nw) != (sh, sw):
            anchor = _option(spec, "letterbox_anchor", "center", _ANCHORS)
            if anchor == "center":
                pad_y, pad_x = (sh - nh) // 2, (sw - nw) // 2
            fill = int(spec.extra.get("pad_value", 114))
            canvas = torch.full((3, sh, sw), fill, dtype=torch.uint8)
            canvas[:, pad_y : pad_y + nh, pad_x : pad_x + nw] = t
            t = canvas
        transform = Transform(
            image_size=(h, w), input_size=(sh, sw),
            scale_x=nw / w, scale_y=nh / h, pad_x=float(pad_x), pad_y=float(pad_y),
        )  # fmt: skip
    x = spec.to_model(t.unsqueeze(0).float() / 255.0)[0]
    return x, transform
