"""PSNR, SSIM and MS-SSIM on arrays with values in [0, data_range] (float64 or anything
that converts to it). Images are HxW (gray) or HxWxC (channels last); multi-channel values are
the mean over channels.

SSIM is computed in float64 and equals scikit-image's `structural_similarity(
gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=..., channel_axis=-1)`.
MS-SSIM is `pytorch_msssim.ms_ssim` itself.
"""

from __future__ import annotations

import math

import cv2
import numpy as np
import pytorch_msssim
import torch

from clearsight.metrics._errors import MetricInputError, ShapeMismatchError

SSIM_WIN_SIZE = 11
SSIM_SIGMA = 1.5
MS_SSIM_WEIGHTS = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)
# Four halvings must leave more than one window: the smaller side must exceed 10 * 2**4 = 160.
MS_SSIM_MIN_SIDE = (SSIM_WIN_SIZE - 1) * 2 ** (len(MS_SSIM_WEIGHTS) - 1) + 1


def _check_pair(a: np.ndarray, b: np.ndarray, metric: str) -> tuple[np.ndarray, np.ndarray]:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        raise ShapeMismatchError(f"{metric}: images differ in shape: {a.shape} vs {b.shape}")
    if a.ndim not in (2, 3) or a.size == 0:
        raise MetricInputError(f"{metric}: expected an HxW or HxWxC image, got shape {a.shape}")
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise MetricInputError(f"{metric}: image contains NaN or infinite values")
    return a, b


def _to_nchw(a: np.ndarray) -> torch.Tensor:
    """HxW or HxWxC array -> 1xCxHxW float32 tensor (pytorch_msssim's layout)."""
    t = torch.from_numpy(np.ascontiguousarray(a, dtype=np.float32))
    t = t.unsqueeze(0) if t.ndim == 2 else t.permute(2, 0, 1)
    return t.unsqueeze(0).contiguous()


def _gaussian_window() -> np.ndarray:
    """The normalised 1-D Gaussian of SSIM (11 taps, sigma 1.5) in float64."""
    x = np.arange(SSIM_WIN_SIZE, dtype=np.float64) - SSIM_WIN_SIZE // 2
    g = np.exp(-(x**2) / (2 * SSIM_SIGMA**2))
    return g / g.sum()


_WINDOW = _gaussian_window()


def psnr_from_mse(mse: float, data_range: float = 255.0) -> float:
    """PSNR in dB of a mean squared error at peak `data_range`; inf for an error of 0.

    The one PSNR formula: `psnr` measures through it, and so does code that already has
    the error (the data audit's shifted comparisons, the rain synthesiser's statistics).
    """
    return math.inf if mse <= 0.0 else 10.0 * math.log10(data_range**2 / mse)


def psnr(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Peak signal-to-noise ratio in dB over all pixels and channels; inf for identical images."""
    a, b = _check_pair(a, b, "psnr")
    return psnr_from_mse(float(np.mean(np.square(a - b))), data_range)


def ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Mean SSIM (Wang et al. 2004): 11x11 Gaussian window sigma 1.5, K1 0.01, K2 0.03,
    population covariance, mean over the valid region, then over channels; float64 throughout.

    Equals scikit-image's `structural_similarity(gaussian_weights=True, sigma=1.5,
    use_sample_covariance=False)` and `pytorch_msssim.ssim` given a float64 window (both are
    tested). The separable filtering is OpenCV's: torch's float64 convolution, which
    pytorch_msssim would use, is 3-10x slower on CPU, and float32 loses ~1e-5 of SSIM to
    cancellation in E[x^2] - mu^2 near 255. Raises MetricInputError for sides under 11 px.
    """
    a, b = _check_pair(a, b, "ssim")
    h, w = a.shape[:2]
    r = SSIM_WIN_SIZE // 2
    if min(h, w) < SSIM_WIN_SIZE:
        raise MetricInputError(
            f"ssim needs images of at least {SSIM_WIN_SIZE}x{SSIM_WIN_SIZE} pixels, got {h}x{w}"
        )
    c1 = (0.01 * data_range) ** 2
    c2 = (0.03 * data_range) ** 2
    a3 = a.reshape(h, w, -1)
    b3 = b.reshape(h, w, -1)
    total = 0.0
    for ch in range(a3.shape[2]):
        x = a3[..., ch]
        y = b3[..., ch]
        # The five planes are stacked vertically and filtered in one call; rows within r of a
        # plane's edge (the only ones that see a neighbouring plane) fall outside the valid
        # region and are cropped.
        planes = np.concatenate([x, y, x * x, y * y, x * y], axis=0)
        f = cv2.sepFilter2D(planes, cv2.CV_64F, _WINDOW, _WINDOW).reshape(5, h, w)
        mx, my, mxx, myy, mxy = f[:, r : h - r, r : w - r]
        mx_my = mx * my
        mx2 = mx * mx
        my2 = my * my
        num = (2.0 * mx_my + c1) * (2.0 * (mxy - mx_my) + c2)
        den = (mx2 + my2 + c1) * ((mxx - mx2) + (myy - my2) + c2)
        total += float(np.mean(num / den))
    return total / a3.shape[2]


def ms_ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    """Multi-scale SSIM: `pytorch_msssim.ms_ssim(data_range=...)` itself (5 scales, weights
    MS_SSIM_WEIGHTS, 11x11 Gaussian sigma 1.5, 2x2 average pooling between scales).

    It runs in float32, as the library is used by challenge scorers: float64 goes through
    torch's slow double convolution (about 5x the time; minutes for a 4K test set) and moves
    the value by less than 2e-5 even on flat, saturated images.

    Five scales need the smaller side to exceed 160 pixels; smaller images raise
    MetricInputError (a ValueError) rather than returning a number from fewer scales.
    """
    a, b = _check_pair(a, b, "ms_ssim")
    h, w = a.shape[:2]
    if min(h, w) < MS_SSIM_MIN_SIDE:
        raise MetricInputError(
            f"ms_ssim needs both sides larger than {MS_SSIM_MIN_SIDE - 1} pixels for its "
            f"{len(MS_SSIM_WEIGHTS)} scales, got {h}x{w}"
        )
    with torch.no_grad():
        value = pytorch_msssim.ms_ssim(
            _to_nchw(a), _to_nchw(b), data_range=data_range, weights=list(MS_SSIM_WEIGHTS)
        )
    return float(value)
