"""A detector scored on a COCO-format set: detections for every image, then COCO AP.

Scoring uses a low score threshold (0.001) and up to 100 detections per image, the COCO
convention every published AP uses; a higher threshold lowers AP by cutting the
low-confidence tail of the precision-recall curve.

A detector may know more classes than a set annotates (an 80-class COCO model on a set of
people): detections of classes the set does not list are not scored, as pycocotools would
ignore them, and are counted (`dropped_detections`). A detector none of whose class ids the
set lists is refused before any image runs: its labels are not the set's ids.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from clearsight.atomic import atomic_write_text
from clearsight.data.coco import CocoDataset, find_coco_set, load_coco
from clearsight.engine.detector import Detections, Detector
from clearsight.metrics.coco_eval import (
    Backend,
    CocoEvalResult,
    check_class_ids,
    evaluate_coco,
    image_rows,
    listed_detections,
)

__all__ = [
    "EVAL_SCORE_THRESHOLD",
    "DetectionEvalResult",
    "detect_dataset",
    "evaluate_coco_set",
    "evaluate_detector",
]

EVAL_SCORE_THRESHOLD = 0.001


def detect_dataset(
    detector: Detector,
    dataset: CocoDataset,
    *,
    score_threshold: float = EVAL_SCORE_THRESHOLD,
    max_detections: int = 100,
    on_image: Callable[[int, Detections], None] | None = None,
) -> list[dict[str, Any]]:
    """COCO results for every image of `dataset` (image ids and category ids as in its file)."""
    results: list[dict[str, Any]] = []
    for i, entry in enumerate(dataset.images):
        dets = detector.detect_batch(
            [dataset.image(i)], score_threshold=score_threshold, max_detections=max_detections
        )[0]
        results.extend(dets.to_coco(entry.id))
        if on_image is not None:
            on_image(i, dets)
    return results


def evaluate_detector(
    detector: Detector,
    dataset: CocoDataset,
    *,
    backend: Backend | str = "faster-coco-eval",
    max_detections: int = 100,
    on_image: Callable[[int, Detections], None] | None = None,
) -> tuple[CocoEvalResult, list[dict[str, Any]]]:
    """COCO bbox AP of `detector` on `dataset`, and the detections it was computed from;
    `on_image(index, detections)` after each image."""
    check_class_ids(dataset.raw, detector.class_ids, str(dataset.annotation_file))
    results = detect_dataset(detector, dataset, max_detections=max_detections, on_image=on_image)
    coco = evaluate_coco(
        dataset.raw,
        results,
        backend=backend,
        max_detections=max_detections,
        class_ids=detector.class_ids,
    )
    return coco, listed_detections(dataset.raw, results, detector.class_ids)


METRIC_KEYS = {
    "AP": "ap",
    "AP50": "ap50",
    "AP75": "ap75",
    "APs": "ap_small",
    "APm": "ap_medium",
    "APl": "ap_large",
}  # summary.json's names -> CocoEvalResult's fields


@dataclass
class DetectionEvalResult:
    """A detector scored on a COCO-format set: the COCO figures, per-image rows and timing."""

    model_name: str
    data_name: str
    coco: CocoEvalResult
    rows: list[dict[str, Any]]
    results: list[dict[str, Any]] = field(repr=False, default_factory=list)

    def summary(self) -> dict[str, Any]:
        lat = [r["latency_ms"] for r in self.rows]
        return {
            "model": self.model_name,
            "data": self.data_name,
            "task": "detect",
            "n": len(self.rows),
            "metrics": {k: _json_float(getattr(self.coco, f)) for k, f in METRIC_KEYS.items()},
            "per_class": {str(k): _json_float(v) for k, v in self.coco.per_class.items()},
            "evaluator": self.coco.backend,
            "detections": self.coco.num_detections,
            "dropped_detections": self.coco.dropped_detections,
            "latency_ms": {"mean": statistics.fmean(lat), "median": statistics.median(lat)}
            if lat
            else None,
        }

    def per_image_csv(self) -> str:
        buf = io.StringIO()
        cols = [
            "file_name",
            "image_id",
            "ground_truth",
            "detections",
            "matches",
            "false_positives",
            "misses",
            "latency_ms",
        ]
        writer = csv.DictWriter(buf, cols, lineterminator="\n", extrasaction="ignore")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({**r, "latency_ms": f"{r['latency_ms']:.2f}"})
        return buf.getvalue()

    def write(self, out_dir: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write `per_image.csv` and `summary.json` atomically (as restoration eval does)."""
        out = Path(out_dir)
        out.mkdir(parents=True, exist_ok=True)
        csv_path, json_path = out / "per_image.csv", out / "summary.json"
        atomic_write_text(csv_path, self.per_image_csv())
        atomic_write_text(json_path, json.dumps(self.summary(), indent=2) + "\n")
        return csv_path, json_path


def _json_float(v: float) -> float | None:
    return v if math.isfinite(v) else None


def evaluate_coco_set(
    detector: Detector,
    data: str | os.PathLike[str],
    *,
    model_name: str = "",
    backend: Backend | str = "faster-coco-eval",
    max_detections: int = 100,
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[int, Detections], None] | None = None,
) -> DetectionEvalResult:
    """Detect on every image of the COCO-format folder `data` (timed), then score it."""
    ann, images = find_coco_set(data)
    dataset = load_coco(ann, images)
    check_class_ids(dataset.raw, detector.class_ids, str(ann))  # before any image is run
    if on_start is not None:
        on_start(len(dataset.images))
    latency: dict[int, float] = {}
    t0 = [time.perf_counter()]

    def timed(i: int, dets: Detections) -> None:
        now = time.perf_counter()
        latency[dataset.images[i].id] = (now - t0[0]) * 1000.0
        t0[0] = now
        if on_image is not None:
            on_image(i, dets)

    coco, results = evaluate_detector(
        detector, dataset, backend=backend, max_detections=max_detections, on_image=timed
    )
    rows = [
        {**r, "latency_ms": latency.get(r["image_id"], 0.0)}
        for r in image_rows(dataset.raw, results)
    ]
    return DetectionEvalResult(model_name, str(data), coco, rows, results)
