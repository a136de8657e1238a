"""Evaluation: restore every input of a paired set and score it under a named metric preset.

Scores are per image, then averaged (the field's convention, docs/architecture.md §3.3);
every result carries its preset. Latency is measured per image around the model call only.
"""

from __future__ import annotations

import csv
import io as _stdio
import json
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.atomic import atomic_write_text
from clearsight.data.pairs import ImagePair
from clearsight.engine.inference import Restorer
from clearsight.errors import PairingError
from clearsight.io import image_to_tensor, read_image, tensor_to_image, to_uint8, write_image
from clearsight.metrics.presets import MetricPreset


@dataclass
class ImageResult:
    name: str
    metrics: dict[str, float]
    latency_ms: float
    stages: float | None = None
    """Stages a multi-stage model used (with --stages other than all), else None."""


@dataclass
class EvalResult:
    preset: MetricPreset
    model: str
    data: str
    images: list[ImageResult] = field(default_factory=list)

    @property
    def metric_names(self) -> list[str]:
        return list(self.images[0].metrics) if self.images else []

    def summary(self, worst_k: int = 5) -> dict[str, Any]:
        """Aggregate figures: mean of per-image values, plus median/min and the worst images."""

        def stats(values: Sequence[float]) -> dict[str, float | None]:
            finite = [v for v in values if math.isfinite(v)]
            if len(finite) != len(values):
                # identical pairs give infinite PSNR; report them, average the rest
                return {
                    "mean": _finite_or_none(statistics.fmean(values)),
                    "median": _finite_or_none(statistics.median(values)),
                    "min": _finite_or_none(min(values)),
                    "max": _finite_or_none(max(values)),
                    "n_infinite": len(values) - len(finite),
                }
            return {
                "mean": statistics.fmean(values),
                "median": statistics.median(values),
                "min": min(values),
                "max": max(values),
            }

        out: dict[str, Any] = {
            "preset": self.preset.name,
            "preset_description": self.preset.description,
            "model": self.model,
            "data": self.data,
            "n": len(self.images),
        }
        for m in self.metric_names:
            out[m] = stats([r.metrics[m] for r in self.images])
        lat = [r.latency_ms for r in self.images]
        out["latency_ms"] = {"mean": statistics.fmean(lat), "median": statistics.median(lat)}
        if self.has_stages:
            out["stages"] = stats([float(r.stages or 0.0) for r in self.images])
        ranked = sorted(self.images, key=lambda r: r.metrics.get("psnr", 0.0))
        out["worst"] = [r.name for r in ranked[:worst_k]]
        out["best"] = [r.name for r in reversed(ranked[-worst_k:])]
        return out

    @property
    def has_stages(self) -> bool:
        return any(r.stages is not None for r in self.images)

    def per_image_csv(self) -> str:
        buf = _stdio.StringIO()
        writer = csv.writer(buf, lineterminator="\n")
        extra = ["stages"] if self.has_stages else []
        writer.writerow(["name", *self.metric_names, "latency_ms", *extra])
        for r in self.images:
            stages = [f"{r.stages:g}" if r.stages is not None else ""] if extra else []
            writer.writerow(
                [
                    r.name,
                    *(f"{r.metrics[m]:.6f}" for m in self.metric_names),
                    f"{r.latency_ms:.2f}",
                    *stages,
                ]
            )
        return buf.getvalue()

    def write(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write `per_image.csv` and `summary.json` atomically; returns their paths."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        csv_path, json_path = out / "per_image.csv", out / "summary.json"
        atomic_write_text(csv_path, self.per_image_csv())
        atomic_write_text(json_path, json.dumps(self.summary(), indent=2, allow_nan=False) + "\n")
        return csv_path, json_path


ImagesHook = Callable[[ImageResult, np.ndarray, np.ndarray, np.ndarray], None]
"""Called as hook(result, input, output, target) with HxWx3 uint8 images."""


def _finite_or_none(v: float) -> float | None:
    return v if math.isfinite(v) else None


def evaluate(
    restorer: Restorer,
    pairs: Sequence[ImagePair],
    preset: MetricPreset,
    *,
    model_name: str = "",
    data_name: str = "",
    save_dir: str | Path | None = None,
    max_pixels: int | None = None,
    on_image: Callable[[ImageResult], None] | None = None,
    ms_ssim: bool = False,
    on_images: ImagesHook | None = None,
) -> EvalResult:
    """Restore each pair's input, score it against its target, and collect the results.

    `on_images(result, input, output, target)` is called once per pair with the three
    HxWx3 uint8 images (e.g. to keep thumbnails for a report); nothing else keeps them, so
    memory stays at one pair whatever the set's size.
    """
    result = EvalResult(preset=preset, model=model_name, data=data_name)
    for pair in pairs:
        inp = read_image(pair.input, max_pixels=max_pixels)
        tgt = read_image(pair.target, max_pixels=max_pixels)
        if inp.shape != tgt.shape:
            raise PairingError(
                f"size mismatch: {pair.input} is {inp.shape[1]}x{inp.shape[0]} but "
                f"{pair.target} is {tgt.shape[1]}x{tgt.shape[0]}"
            )
        out, latency = restorer.timed_restore(image_to_tensor(inp))
        out_img = tensor_to_image(out, dtype=np.uint8)
        metrics = preset.compute(out_img, to_uint8(tgt), ms_ssim=ms_ssim)
        used = restorer.last_stages_used if restorer.options.stages != "all" else None
        stages = float(used[0]) if used else None
        r = ImageResult(name=pair.name, metrics=metrics, latency_ms=latency, stages=stages)
        result.images.append(r)
        if save_dir is not None:
            write_image(Path(save_dir) / f"{pair.name}.png", out_img)
        if on_images is not None:
            on_images(r, to_uint8(inp), out_img, to_uint8(tgt))
        if on_image is not None:
            on_image(r)
    return result
