"""Thumbnails for reports, kept small while an evaluation runs.

`ThumbnailCollector` is an `evaluate(..., on_images=...)` hook: for each pair it keeps the
input, output and target downscaled to `max_side` pixels plus two amplified difference
maps (|output - target|, what is still wrong; |output - input|, what the model removed),
all encoded as JPEG bytes at once. Differences are taken at full resolution and then
downscaled, so thin rain streaks stay visible. Memory per image is a few tens of kB
whatever the image size.
"""

from __future__ import annotations

import io
from dataclasses import dataclass, field

import cv2
import numpy as np
from PIL import Image

from clearsight.engine.evaluate import ImageResult

DEFAULT_MAX_SIDE = 256
DEFAULT_GAIN = 4.0


def encode_jpeg(img: np.ndarray, quality: int = 85) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(img)).save(buf, format="JPEG", quality=quality)
    return buf.getvalue()


def shrink(img: np.ndarray, max_side: int) -> np.ndarray:
    """`img` scaled (area averaging) so its longer side is at most `max_side`."""
    h, w = img.shape[:2]
    scale = max_side / max(h, w)
    if scale >= 1.0:
        return img
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    return cv2.resize(img, size, interpolation=cv2.INTER_AREA)


def amplified_diff(a: np.ndarray, b: np.ndarray, gain: float = DEFAULT_GAIN) -> np.ndarray:
    """|a - b| per channel times `gain`, clipped to uint8."""
    d = np.abs(a.astype(np.int16) - b.astype(np.int16)).astype(np.float32) * gain
    return np.clip(d, 0, 255).astype(np.uint8)


@dataclass
class ThumbnailCollector:
    """Collects encoded thumbnails per image name: {name: {label: jpeg bytes}}."""

    max_side: int = DEFAULT_MAX_SIDE
    gain: float = DEFAULT_GAIN
    quality: int = 85
    thumbs: dict[str, dict[str, bytes]] = field(default_factory=dict)

    def _enc(self, img: np.ndarray) -> bytes:
        return encode_jpeg(shrink(img, self.max_side), self.quality)

    def __call__(self, r: ImageResult, inp: np.ndarray, out: np.ndarray, tgt: np.ndarray) -> None:
        self.thumbs[r.name] = {
            "input": self._enc(inp),
            "output": self._enc(out),
            "target": self._enc(tgt),
            "err": self._enc(amplified_diff(out, tgt, self.gain)),
            "removed": self._enc(amplified_diff(out, inp, self.gain)),
        }

    @property
    def nbytes(self) -> int:
        return sum(len(b) for d in self.thumbs.values() for b in d.values())
