"""A detector scored on a COCO-format set: detections for every image, then COCO AP.

Scoring uses a low score threshold (0.001) and up to 100 detections per image, the COCO
convention every published AP uses; a higher threshold lowers AP by cutting the
low-confidence tail of the precision-recall curve.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from clearsight.data.coco import CocoDataset
from clearsight.detection.detector import Detections, Detector
from clearsight.metrics.coco_eval import Backend, CocoEvalResult, evaluate_coco

__all__ = ["EVAL_SCORE_THRESHOLD", "detect_dataset", "evaluate_detector"]

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
) -> tuple[CocoEvalResult, list[dict[str, Any]]]:
    """COCO bbox AP of `detector` on `dataset`, and the detections it was computed from."""
    results = detect_dataset(detector, dataset, max_detections=max_detections)
    return evaluate_coco(
        dataset.raw, results, backend=backend, max_detections=max_detections
    ), results
