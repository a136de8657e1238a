"""How rainy a photo looks, from its pixels alone: the measure behind `detect --restore auto`.

Rain streaks are thin bright lines that all fall in about one direction. The measure keeps
what is thin and bright (a white top-hat of the luminance with a 5x5 square, at most 640
pixels on the long side), then, for each candidate falling angle (within 30 degrees of
vertical, the range `clearsight synth rain` draws), averages that map along the angle and
across it (21-pixel line kernels) and compares the fine-scale energy (minus a Gaussian blur
of sigma 6) of the two. Streaks add up along their direction and wash out across it; edges,
texture and noise of a dry photo do neither in one preferred direction. The score is the
largest along/across energy ratio over the angles: about 1 on dry photos, several times that
under rain.

`RAIN_THRESHOLD` was set on COCO128 (never the scored sets) with the package's own rain:
over its 128 clean photos and their `light`/`heavy` rainy copies (seed 0), docs/guides/detect.md
gives the spread. Photos scoring below it are detected as they are.
"""

from __future__ import annotations

import functools

import cv2
import numpy as np

__all__ = ["ANGLES", "RAIN_THRESHOLD", "streak_score"]

ANGLES = (-30.0, -20.0, -10.0, 0.0, 10.0, 20.0, 30.0)
"""Candidate falling angles, degrees from vertical."""
RAIN_THRESHOLD = 2.5
"""Scores at or above this are treated as rain (restored first)."""
LINE_LENGTH = 21
LONG_SIDE = 640
TOPHAT_SIZE = 5
FINE_SIGMA = 6.0


@functools.lru_cache(maxsize=32)
def _line_kernel(length: int, angle_deg: float) -> np.ndarray:
    """A normalised one-pixel line of `length` through the kernel's centre, `angle_deg`
    from vertical (positive leans right going down)."""
    k = np.zeros((length, length), np.float32)
    c = (length - 1) / 2
    t = np.deg2rad(angle_deg)
    for s in np.linspace(-c, c, 4 * length):
        k[int(round(c + s * np.cos(t))), int(round(c + s * np.sin(t)))] = 1.0
    return k / k.sum()


def _luminance(image: np.ndarray) -> np.ndarray:
    """The image as float32 grey in [0, 1] (uint8 or uint16 RGB), at most `LONG_SIDE` long."""
    scale = 65535.0 if image.dtype == np.uint16 else 255.0
    rgb = image.astype(np.float32) / scale if image.dtype != np.float32 else image
    grey = cv2.cvtColor(np.ascontiguousarray(rgb), cv2.COLOR_RGB2GRAY)
    s = LONG_SIDE / max(grey.shape)
    if s < 1.0:
        grey = cv2.resize(grey, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
    return grey


def _fine_energy(x: np.ndarray) -> float:
    d = x - cv2.GaussianBlur(x, (0, 0), FINE_SIGMA)
    return float((d * d).mean())


def streak_score(image: np.ndarray) -> float:
    """The rain-streak score of an HxWx3 RGB image (uint8, uint16 or float in [0, 1])."""
    if image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 RGB image, got shape {image.shape}")
    grey = _luminance(image)
    square = np.ones((TOPHAT_SIZE, TOPHAT_SIZE), np.uint8)
    thin = cv2.morphologyEx(grey, cv2.MORPH_TOPHAT, square)
    best = 0.0
    for angle in ANGLES:
        along = _fine_energy(cv2.filter2D(thin, -1, _line_kernel(LINE_LENGTH, angle)))
        across = _fine_energy(cv2.filter2D(thin, -1, _line_kernel(LINE_LENGTH, angle + 90.0)))
        best = max(best, along / (across + 1e-9))
    return best
