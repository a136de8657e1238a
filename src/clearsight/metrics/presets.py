"""Metric conventions as named presets.

The same restored image scores differently under different conventions: PSNR on RGB or on the
luma Y, Y rounded to integers (MATLAB) or not (BasicSR), outputs rounded to uint8 or kept in
float, a border cropped or not, SSIM with a Gaussian or a uniform window. These choices move
results by more than 1 dB (Rain100L rainy inputs: 25.52 dB on RGB, 26.90 dB on Y), so a number
without its convention cannot be compared with anything. Each convention is therefore a named,
frozen `MetricPreset` whose one-line `summary` is printed in every report and whose name and
crop are stored with every result.

Every preset measures uint8 images with peak 255: float outputs in [0, 1] are rounded to uint8
first (as saved images are), uint16 images are reduced to uint8. A preset with a combined
score (a challenge formula) adds one entry with `score` and `needs_ms_ssim`; see `netdisk`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from clearsight.errors import UnknownNameError
from clearsight.io import to_uint8
from clearsight.metrics._errors import MetricInputError, ShapeMismatchError
from clearsight.metrics.color import rgb_to_y
from clearsight.metrics.image_metrics import ms_ssim as ms_ssim_index
from clearsight.metrics.image_metrics import psnr, ssim

PEAK = 255.0

ScoreFn = Callable[[Mapping[str, float]], float]


@dataclass(frozen=True)
class MetricPreset:
    """A metric convention: colour space, rounding of Y, border crop, optional combined score.

    `description` is one line saying the colour space, rounding, peak and SSIM variant;
    `summary` adds the name and the border crop and is what reports print. `score`, when set,
    turns the metrics dict (psnr, ssim, ms_ssim) into one number stored under "score";
    `needs_ms_ssim` makes `compute` always measure MS-SSIM.
    """

    name: str
    description: str
    space: Literal["rgb", "y"]
    round_y: bool
    crop_border: int = 0
    score: ScoreFn | None = None
    needs_ms_ssim: bool = False

    def __post_init__(self) -> None:
        if self.space not in ("rgb", "y"):
            raise MetricInputError(f"preset {self.name!r}: space must be 'rgb' or 'y'")
        if self.round_y and self.space != "y":
            raise MetricInputError(f"preset {self.name!r}: round_y applies to space 'y' only")
        if isinstance(self.crop_border, bool) or not isinstance(self.crop_border, int | np.integer):
            raise MetricInputError(f"crop_border must be an integer, got {self.crop_border!r}")
        if self.crop_border < 0:
            raise MetricInputError(f"crop_border must be >= 0, got {self.crop_border}")
        if "\n" in self.description:
            raise MetricInputError(f"preset {self.name!r}: description must be one line")
        object.__setattr__(self, "crop_border", int(self.crop_border))

    @property
    def summary(self) -> str:
        """One line for reports: name, convention and border crop."""
        return f"{self.name}: {self.description}; border crop {self.crop_border} px"

    def __str__(self) -> str:
        return self.summary

    def to_dict(self) -> dict[str, Any]:
        """What to store beside a result (the score function is identified by the name)."""
        return {
            "name": self.name,
            "description": self.description,
            "space": self.space,
            "round_y": self.round_y,
            "crop_border": self.crop_border,
            "summary": self.summary,
        }

    def with_crop(self, n: int) -> MetricPreset:
        """The same convention with `n` pixels cropped from each side before measuring."""
        return dataclasses.replace(self, crop_border=n)

    def prepare(self, img: np.ndarray) -> np.ndarray:
        """An HxWx3 RGB image (uint8, uint16 or float in [0, 1]) as this preset measures it:
        rounded to uint8 levels, converted to the preset's space, border cropped; float64."""
        arr = np.asarray(img)
        if arr.ndim != 3 or arr.shape[2] != 3:
            raise MetricInputError(f"expected an HxWx3 RGB image, got shape {arr.shape}")
        if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
            raise MetricInputError("image contains NaN or infinite values")
        if arr.dtype not in (np.uint8, np.uint16) and not np.issubdtype(arr.dtype, np.floating):
            raise MetricInputError(
                f"unsupported image dtype {arr.dtype}: expected uint8, uint16 or float in [0, 1]"
            )
        rgb = to_uint8(arr).astype(np.float64)
        out = rgb_to_y(rgb, round_y=self.round_y) if self.space == "y" else rgb
        c = self.crop_border
        if c:
            h, w = out.shape[:2]
            if h <= 2 * c or w <= 2 * c:
                raise MetricInputError(f"border crop of {c} px leaves nothing of a {h}x{w} image")
            out = out[c:-c, c:-c]
        return out

    def compute(
        self, output: np.ndarray, target: np.ndarray, *, ms_ssim: bool = False
    ) -> dict[str, float]:
        """psnr, ssim (and ms_ssim when asked or needed, and score when the preset has one)
        of `output` against `target` under this convention."""
        if np.shape(output) != np.shape(target):
            raise ShapeMismatchError(
                f"output and target differ in shape: output {np.shape(output)}, "
                f"target {np.shape(target)}"
            )
        x, y = self.prepare(output), self.prepare(target)
        result = {"psnr": psnr(x, y, PEAK), "ssim": ssim(x, y, PEAK)}
        if ms_ssim or self.needs_ms_ssim:
            result["ms_ssim"] = ms_ssim_index(x, y, PEAK)
        if self.score is not None:
            result["score"] = float(self.score(result))
        return result


def netdisk_score(m: Mapping[str, float]) -> float:
    """Baidu Netdisk demoire challenge: 0.5 * PSNR / 100 + 0.5 * MS-SSIM (inf if PSNR is)."""
    return 0.5 * m["psnr"] / 100.0 + 0.5 * m["ms_ssim"]


_SSIM = "SSIM Gaussian 11x11 sigma 1.5"

PRESETS: dict[str, MetricPreset] = {
    p.name: p
    for p in (
        MetricPreset(
            "rgb",
            f"RGB, outputs rounded to uint8, peak 255; {_SSIM}, mean over channels",
            space="rgb",
            round_y=False,
        ),
        MetricPreset(
            "y-basicsr",
            "Y (BT.601, MATLAB rgb2ycbcr) of uint8-rounded RGB, Y not rounded (BasicSR), "
            f"peak 255; {_SSIM}",
            space="y",
            round_y=False,
        ),
        MetricPreset(
            "y-matlab",
            "Y (BT.601, MATLAB rgb2ycbcr) of uint8-rounded RGB, Y rounded to integers "
            f"(MATLAB uint8), peak 255; {_SSIM}",
            space="y",
            round_y=True,
        ),
        MetricPreset(
            "netdisk",
            "RGB, outputs rounded to uint8, peak 255; score = 0.5*PSNR/100 + 0.5*MS-SSIM "
            "(5 scales, pytorch_msssim), Baidu Netdisk demoire; needs sides > 160 px",
            space="rgb",
            round_y=False,
            score=netdisk_score,
            needs_ms_ssim=True,
        ),
    )
}


def get_preset(name: str, crop_border: int | None = None) -> MetricPreset:
    """The preset called `name`, with `crop_border` replacing its crop when given."""
    try:
        preset = PRESETS[name]
    except (KeyError, TypeError):
        known = ", ".join(sorted(PRESETS))
        raise UnknownNameError(f"unknown metric preset {name!r}; known presets: {known}") from None
    return preset if crop_border is None else preset.with_crop(crop_border)
