"""Comparing two models image by image under one metric preset.

Averages hide where a model fails (docs/architecture.md §6): `compare` evaluates both models
on the same pairs under the same preset and keeps, for every image, B's score minus A's, so
the largest gains and losses, and how many images got better, worse or stayed equal, can be
shown.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from clearsight.data.pairs import ImagePair
from clearsight.engine.evaluate import EvalResult, ImageResult, ImagesHook, evaluate
from clearsight.engine.inference import Restorer
from clearsight.errors import ClearsightError
from clearsight.metrics.presets import MetricPreset

DEFAULT_TOLERANCE = {"psnr": 0.01, "ssim": 1e-4, "ms_ssim": 1e-4, "score": 1e-4}
"""Deltas within these are counted as equal."""


def _delta(a: float, b: float) -> float:
    if math.isinf(a) and math.isinf(b) and (a > 0) == (b > 0):
        return 0.0  # both identical to the target
    return b - a


@dataclass
class ImageDelta:
    name: str
    a: dict[str, float]
    b: dict[str, float]
    delta: dict[str, float]
    """b - a per metric: positive means B did better."""
    latency_a: float
    latency_b: float


@dataclass
class Comparison:
    preset: MetricPreset
    model_a: str
    model_b: str
    data: str
    result_a: EvalResult
    result_b: EvalResult
    deltas: list[ImageDelta] = field(default_factory=list)
    tolerance: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_TOLERANCE))

    @property
    def metric_names(self) -> list[str]:
        return self.result_a.metric_names

    def counts(self, metric: str = "psnr") -> dict[str, Any]:
        """How many images B made better, worse or equal (within the tolerance), and the mean
        delta over the finite deltas."""
        tol = self.tolerance.get(metric, 0.0)
        ds = [d.delta[metric] for d in self.deltas]
        finite = [v for v in ds if math.isfinite(v)]
        return {
            "better": sum(1 for v in ds if v > tol),
            "worse": sum(1 for v in ds if v < -tol),
            "equal": sum(1 for v in ds if abs(v) <= tol),
            "mean_delta": statistics.fmean(finite) if finite else None,
            "n_infinite": len(ds) - len(finite),
        }

    def ranked(self, metric: str = "psnr") -> list[ImageDelta]:
        """Images from the largest loss to the largest gain."""
        return sorted(self.deltas, key=lambda d: (d.delta[metric], d.name))

    def gains(self, k: int, metric: str = "psnr") -> list[ImageDelta]:
        """The `k` largest improvements beyond the tolerance, largest first."""
        tol = self.tolerance.get(metric, 0.0)
        return [d for d in reversed(self.ranked(metric)) if d.delta[metric] > tol][:k]

    def losses(self, k: int, metric: str = "psnr") -> list[ImageDelta]:
        """The `k` largest losses beyond the tolerance, largest first."""
        tol = self.tolerance.get(metric, 0.0)
        return [d for d in self.ranked(metric) if d.delta[metric] < -tol][:k]

    def summary(self) -> dict[str, Any]:
        sa, sb = self.result_a.summary(), self.result_b.summary()
        out: dict[str, Any] = {
            "preset": self.preset.name,
            "model_a": self.model_a,
            "model_b": self.model_b,
            "data": self.data,
            "n": len(self.deltas),
            "mean_a": {m: sa[m]["mean"] for m in self.metric_names},
            "mean_b": {m: sb[m]["mean"] for m in self.metric_names},
        }
        for m in self.metric_names:
            out[m] = self.counts(m)
        return out


def compare_results(a: EvalResult, b: EvalResult) -> Comparison:
    """Pair two evaluations of the same images under the same preset."""
    if a.preset.summary != b.preset.summary:
        raise ClearsightError(
            f"cannot compare results under different presets: {a.preset} vs {b.preset}"
        )
    names_a = [r.name for r in a.images]
    if names_a != [r.name for r in b.images]:
        raise ClearsightError("cannot compare results on different images")
    cmp = Comparison(
        preset=a.preset, model_a=a.model, model_b=b.model, data=a.data, result_a=a, result_b=b
    )
    for ra, rb in zip(a.images, b.images, strict=True):
        cmp.deltas.append(
            ImageDelta(
                name=ra.name,
                a=dict(ra.metrics),
                b=dict(rb.metrics),
                delta={m: _delta(ra.metrics[m], rb.metrics[m]) for m in ra.metrics},
                latency_a=ra.latency_ms,
                latency_b=rb.latency_ms,
            )
        )
    return cmp


def compare(
    restorer_a: Restorer,
    restorer_b: Restorer,
    pairs: Sequence[ImagePair],
    preset: MetricPreset,
    *,
    model_a: str = "A",
    model_b: str = "B",
    data_name: str = "",
    max_pixels: int | None = None,
    ms_ssim: bool = False,
    on_image: Callable[[ImageResult], None] | None = None,
    on_images_a: ImagesHook | None = None,
    on_images_b: ImagesHook | None = None,
) -> Comparison:
    """Evaluate A then B on `pairs` under `preset` and pair their per-image scores."""
    common: dict[str, Any] = {
        "data_name": data_name,
        "max_pixels": max_pixels,
        "ms_ssim": ms_ssim,
        "on_image": on_image,
    }
    ra = evaluate(restorer_a, pairs, preset, model_name=model_a, on_images=on_images_a, **common)
    rb = evaluate(restorer_b, pairs, preset, model_name=model_b, on_images=on_images_b, **common)
    return compare_results(ra, rb)
