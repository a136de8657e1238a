"""How much of a restoration's error is global tone? The oracle tone fit.

Demoiréing targets (UHDM, the Netdisk challenge) differ from their inputs by a global tone
change as well as by the moiré. `tone_fitted` maps an output onto its target with the best
per-channel gain and offset (least squares), so that PSNR after the fit measures what the
model got wrong apart from global tone, and the difference to plain PSNR measures the tone
error alone. It uses the target, so it is a diagnostic, never a way to restore an image.
"""

from __future__ import annotations

import numpy as np

from clearsight.metrics._errors import MetricInputError
from clearsight.metrics.image_metrics import _check_pair


def tone_fitted(output: np.ndarray, target: np.ndarray, data_range: float = 255.0) -> np.ndarray:
    """`output` after the per-channel affine map (gain, offset) closest to `target` in least
    squares, clipped to [0, data_range]; float64 of the output's shape (HxW or HxWxC)."""
    a, b = _check_pair(output, target, "tone_fitted")
    if data_range <= 0:
        raise MetricInputError(f"tone_fitted: data_range must be positive, got {data_range}")
    a3 = a[..., None] if a.ndim == 2 else a
    b3 = b[..., None] if b.ndim == 2 else b
    fitted = np.empty_like(a3)
    for c in range(a3.shape[-1]):
        x, y = a3[..., c].ravel(), b3[..., c].ravel()
        var = float(np.var(x))
        # a flat channel has no gain to fit: only the offset (mean) can move
        gain = float(np.mean((x - x.mean()) * (y - y.mean()))) / var if var > 0 else 0.0
        fitted[..., c] = gain * (a3[..., c] - x.mean()) + y.mean()
    np.clip(fitted, 0.0, data_range, out=fitted)
    return fitted[..., 0] if a.ndim == 2 else fitted


def mean_level_shift(a: np.ndarray, b: np.ndarray) -> float:
    """Mean of `b` minus mean of `a` over all pixels and channels (in their units)."""
    a, b = _check_pair(a, b, "mean_level_shift")
    return float(b.mean() - a.mean())
