"""Colour conversion for metrics: the luma (Y) of BT.601 exactly as MATLAB's `rgb2ycbcr`."""

from __future__ import annotations

import numpy as np

from clearsight.metrics._errors import MetricInputError

# MATLAB rgb2ycbcr, first row of its matrix, for R, G, B in [0, 255]; Y lies in [16, 235].
_Y_WEIGHTS = (65.481, 128.553, 24.966)
_Y_OFFSET = 16.0


def rgb_to_y(img: np.ndarray, *, round_y: bool) -> np.ndarray:
    """Y of an HxWx3 RGB image with values in [0, 255], as float64 HxW.

    Y = 16 + (65.481 R + 128.553 G + 24.966 B) / 255. With `round_y`, Y is rounded to integers
    the way MATLAB converts to uint8 (half away from zero, saturating to [0, 255]), which is what
    `rgb2ycbcr` returns for uint8 input. Without it, Y keeps its fraction (BasicSR's
    `rgb2ycbcr(y_only=True)` on float input). An exact half can only arise for 194 of the 2^24
    uint8 colours; there the last bit of the float arithmetic decides, as it does in MATLAB.
    """
    arr = np.asarray(img, dtype=np.float64)
    if arr.ndim != 3 or arr.shape[2] != 3:
        raise MetricInputError(f"rgb_to_y expects an HxWx3 RGB image, got shape {arr.shape}")
    wr, wg, wb = _Y_WEIGHTS
    y = _Y_OFFSET + (wr * arr[..., 0] + wg * arr[..., 1] + wb * arr[..., 2]) / 255.0
    if round_y:
        # floor(y + 0.5) is half-away-from-zero for y >= 0; the clip is uint8 saturation
        # (any negative y saturates to 0, so its rounding direction does not matter).
        y = np.clip(np.floor(y + 0.5), 0.0, 255.0)
    return y
