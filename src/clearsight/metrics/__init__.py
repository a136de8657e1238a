"""Image-quality metrics and their named conventions (presets).

Metric numbers are only comparable under one convention; see `clearsight.metrics.presets`.
"""

from clearsight.metrics._errors import MetricInputError, ShapeMismatchError
from clearsight.metrics.color import rgb_to_y
from clearsight.metrics.image_metrics import (
    MS_SSIM_MIN_SIDE,
    MS_SSIM_WEIGHTS,
    ms_ssim,
    psnr,
    psnr_from_mse,
    ssim,
)
from clearsight.metrics.presets import PRESETS, MetricPreset, get_preset, netdisk_score

__all__ = [
    "MS_SSIM_MIN_SIDE",
    "MS_SSIM_WEIGHTS",
    "PRESETS",
    "MetricInputError",
    "MetricPreset",
    "ShapeMismatchError",
    "get_preset",
    "ms_ssim",
    "netdisk_score",
    "psnr",
    "psnr_from_mse",
    "rgb_to_y",
    "ssim",
]
