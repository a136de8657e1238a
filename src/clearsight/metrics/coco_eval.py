"""COCO box scoring: the standard AP figures, per-class AP and per-image rows.

The AP figures come from an established COCO scorer, never from our own integration, so they
compare with published numbers: faster-coco-eval (C++; the default) or pycocotools (the
reference implementation); `tests/test_coco_eval.py` checks that the two agree on our output.
All figures are fractions (0.5 = 50 AP); a figure with no ground truth in its range (e.g.
APs on a set without small objects) is NaN rather than COCO's -1.

Per-image rows (`image_rows`) are our own, simpler bookkeeping for reports: detections at or
above a score threshold greedily matched, best score first, to unmatched ground truth of the
same category at IoU >= 0.5; a detection lying mostly (>= 0.5 of its area) inside a crowd
region of its category is neither a hit nor a false positive, as in COCO.
"""

from __future__ import annotations

import contextlib
import copy
import io
import math
from collections.abc import Collection, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import numpy as np
import torch
from torchvision.ops import box_iou

from clearsight.errors import ClearsightError

__all__ = [
    "Backend",
    "CocoEvalResult",
    "check_class_ids",
    "evaluate_coco",
    "image_rows",
    "listed_detections",
    "with_scorer_defaults",
]

Backend = Literal["faster-coco-eval", "pycocotools"]
BACKENDS: tuple[str, ...] = ("faster-coco-eval", "pycocotools")
SUMMARY_KEYS = ("ap", "ap50", "ap75", "ap_small", "ap_medium", "ap_large")


@dataclass
class CocoEvalResult:
    """COCO bbox figures as fractions; `per_class` maps category id -> AP@[.5:.95]."""

    ap: float
    ap50: float
    ap75: float
    ap_small: float
    ap_medium: float
    ap_large: float
    per_class: dict[int, float] = field(default_factory=dict)
    backend: str = "faster-coco-eval"
    num_images: int = 0
    num_detections: int = 0
    # Detections of the model's classes that the ground truth does not list: not scored
    # (pycocotools ignores them too), counted so the report can say so.
    dropped_detections: int = 0

    def summary(self) -> dict[str, float]:
        return {k: getattr(self, k) for k in SUMMARY_KEYS}

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["per_class"] = {str(k): v for k, v in self.per_class.items()}
        return d


def with_scorer_defaults(gt: dict[str, Any]) -> dict[str, Any]:
    """A copy of the ground truth with the fields the scorers require filled in."""
    gt = copy.deepcopy(gt)
    for a in gt["annotations"]:
        a.setdefault("iscrowd", 0)
        if "area" not in a:
            a["area"] = float(a["bbox"][2]) * float(a["bbox"][3])
    gt.setdefault("info", {})
    gt.setdefault("licenses", [])
    return gt


def _check_detections(detections: Sequence[dict[str, Any]], gt: dict[str, Any]) -> None:
    image_ids = {im["id"] for im in gt["images"]}
    cat_ids = {c["id"] for c in gt["categories"]}
    for i, d in enumerate(detections):
        if not {"image_id", "category_id", "bbox", "score"} <= set(d):
            raise ClearsightError(f"detection #{i} lacks image_id, category_id, bbox or score")
        if d["image_id"] not in image_ids:
            raise ClearsightError(f"detection #{i} refers to unknown image id {d['image_id']}")
        if d["category_id"] not in cat_ids:
            raise ClearsightError(
                f"detection #{i} has category id {d['category_id']}, not in the ground truth "
                "(contiguous labels given instead of dataset ids?)"
            )


def _preview(ids: Collection[int]) -> str:
    shown = sorted(ids)
    return ", ".join(map(str, shown[:4])) + (f", ... {shown[-1]}" if len(shown) > 4 else "")


def check_class_ids(gt: dict[str, Any], class_ids: Collection[int], source: str) -> None:
    """Refuse a model none of whose class ids is a category of `gt` (`source` names it):
    its labels are not this dataset's ids at all, e.g. contiguous labels 0..N-1."""
    listed = {c["id"] for c in gt["categories"]}
    if class_ids and not listed & set(class_ids):
        raise ClearsightError(
            f"{source}: none of the model's {len(set(class_ids))} class ids "
            f"({_preview(set(class_ids))}) is a category id there ({_preview(listed)}); "
            "contiguous labels given instead of dataset ids?"
        )


def listed_detections(
    gt: dict[str, Any], detections: Sequence[dict[str, Any]], class_ids: Collection[int]
) -> list[dict[str, Any]]:
    """`detections` without those of the model's classes (`class_ids`) that `gt` does not
    list: a model may well know more classes than a dataset annotates."""
    listed = {c["id"] for c in gt["categories"]}
    unlisted = set(class_ids) - listed
    return [d for d in detections if d.get("category_id") not in unlisted]


def _coco_api(backend: str) -> tuple[Any, Any]:
    if backend == "faster-coco-eval":
        from faster_coco_eval import COCO, COCOeval_faster

        return COCO, COCOeval_faster
    if backend == "pycocotools":
        from pycocotools.coco import COCO
        from pycocotools.cocoeval import COCOeval

        return COCO, COCOeval
    raise ClearsightError(f"unknown COCO scorer {backend!r}; known: {', '.join(BACKENDS)}")


def _nan_if_missing(v: float) -> float:
    return float("nan") if v < 0 else float(v)


def evaluate_coco(
    gt: dict[str, Any],
    detections: Sequence[dict[str, Any]],
    *,
    backend: Backend | str = "faster-coco-eval",
    max_detections: int = 100,
    class_ids: Collection[int] | None = None,
) -> CocoEvalResult:
    """Score COCO-results `detections` ({image_id, category_id, bbox [x,y,w,h], score})
    against the COCO ground-truth dict `gt`, over all of `gt`'s images.

    `class_ids`, the category ids the model can predict: detections of those `gt` does not
    list are dropped and counted (`dropped_detections`), and a model none of whose ids `gt`
    lists is refused. Any other category id not in `gt` is an error."""
    coco_cls, eval_cls = _coco_api(backend)
    dropped = 0
    if class_ids is not None:
        check_class_ids(gt, class_ids, "the ground truth")
        kept = listed_detections(gt, detections, class_ids)
        dropped, detections = len(detections) - len(kept), kept
    gt = with_scorer_defaults(gt)
    _check_detections(detections, gt)
    n_images = len(gt["images"])
    if not detections:
        nan_or_zero = {k: 0.0 for k in SUMMARY_KEYS}
        per_class = {int(c["id"]): 0.0 for c in gt["categories"]}
        return CocoEvalResult(**nan_or_zero, per_class=per_class, backend=backend,
                              num_images=n_images, dropped_detections=dropped)  # fmt: skip
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        coco_gt = coco_cls()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        coco_dt = coco_gt.loadRes([dict(d) for d in detections])
        ev = eval_cls(coco_gt, coco_dt, "bbox")
        ev.params.maxDets = [1, 10, max_detections]
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    stats = [_nan_if_missing(float(v)) for v in ev.stats[:6]]
    precision = np.asarray(ev.eval["precision"])  # [iou, recall, class, area, maxdet]
    per_class = {}
    for k, cat_id in enumerate(ev.params.catIds):
        p = precision[:, :, k, 0, -1]
        p = p[p > -1]
        per_class[int(cat_id)] = float(p.mean()) if p.size else math.nan
    return CocoEvalResult(
        *stats, per_class=per_class, backend=backend, num_images=n_images,
        num_detections=len(detections), dropped_detections=dropped,
    )  # fmt: skip


def _xywh_to_xyxy(b: Sequence[Sequence[float]]) -> torch.Tensor:
    t = torch.tensor(b, dtype=torch.float64).reshape(-1, 4)
    return torch.cat([t[:, :2], t[:, :2] + t[:, 2:]], dim=1)


PER_IMAGE_SCORE_THRESHOLD = 0.3
"""Detections counted in `image_rows` (per_image.csv): those a user would be shown."""
PER_IMAGE_IOU = 0.5


def image_rows(
    gt: dict[str, Any],
    detections: Sequence[dict[str, Any]],
    *,
    score_threshold: float = PER_IMAGE_SCORE_THRESHOLD,
    iou_threshold: float = PER_IMAGE_IOU,
) -> list[dict[str, Any]]:
    """Per image: file name, ground-truth boxes (crowd excluded), detections at or above
    `score_threshold`, matches at `iou_threshold`, false positives and misses."""
    dets_by_image: dict[int, list[dict[str, Any]]] = {}
    for d in detections:
        if d["score"] >= score_threshold:
            dets_by_image.setdefault(d["image_id"], []).append(d)
    gts_by_image: dict[int, list[dict[str, Any]]] = {}
    for a in gt["annotations"]:
        gts_by_image.setdefault(a["image_id"], []).append(a)
    rows = []
    for im in gt["images"]:
        dets = sorted(dets_by_image.get(im["id"], []), key=lambda d: -d["score"])
        anns = gts_by_image.get(im["id"], [])
        crowd = [bool(a.get("iscrowd", 0)) for a in anns]
        matched, ignored = _greedy_match(dets, anns, crowd, iou_threshold)
        n_gt = sum(not c for c in crowd)
        rows.append(
            {
                "image_id": im["id"],
                "file_name": im["file_name"],
                "ground_truth": n_gt,
                "detections": len(dets),
                "matches": matched,
                "false_positives": len(dets) - matched - ignored,
                "misses": n_gt - matched,
            }
        )
    return rows


def _greedy_match(
    dets: list[dict[str, Any]], anns: list[dict[str, Any]], crowd: list[bool], thr: float
) -> tuple[int, int]:
    """(matched detections, detections that only hit crowd regions)."""
    if not dets or not anns:
        return 0, 0
    det_boxes = _xywh_to_xyxy([d["bbox"] for d in dets])
    gt_boxes = _xywh_to_xyxy([a["bbox"] for a in anns])
    iou = box_iou(det_boxes, gt_boxes)
    # Crowd regions count the share of the detection inside them, as COCO does.
    lt = torch.max(det_boxes[:, None, :2], gt_boxes[None, :, :2])
    rb = torch.min(det_boxes[:, None, 2:], gt_boxes[None, :, 2:])
    inter = (rb - lt).clamp(min=0).prod(dim=2)
    ioa = inter / (det_boxes[:, 2:] - det_boxes[:, :2]).prod(dim=1, keepdim=True).clamp(min=1e-9)
    taken = [False] * len(anns)
    matched = ignored = 0
    for i, d in enumerate(dets):
        best, best_j = thr, -1
        for j, a in enumerate(anns):
            if crowd[j] or taken[j] or a["category_id"] != d["category_id"]:
                continue
            if iou[i, j] >= best:
                best, best_j = float(iou[i, j]), j
        if best_j >= 0:
            taken[best_j] = True
            matched += 1
        elif any(
            crowd[j] and anns[j]["category_id"] == d["category_id"] and ioa[i, j] >= thr
            for j in range(len(anns))
        ):
            ignored += 1
    return matched, ignored
