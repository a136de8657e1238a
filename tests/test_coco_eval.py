"""COCO box scoring: perfect predictions score 1.0, the two scorers agree, ids are checked."""

from __future__ import annotations

import math

import numpy as np
import pytest

from clearsight.errors import ClearsightError
from clearsight.metrics.coco_eval import SUMMARY_KEYS, evaluate_coco, image_rows
from tests.coco_utils import perfect_detections, tiny_coco

BACKENDS = ("faster-coco-eval", "pycocotools")


@pytest.mark.parametrize("backend", BACKENDS)
def test_predictions_equal_to_ground_truth_score_one(backend):
    gt = tiny_coco()
    res = evaluate_coco(gt, perfect_detections(gt), backend=backend)
    one = pytest.approx(1.0, abs=1e-9)
    assert (res.ap, res.ap50, res.ap75, res.ap_small, res.ap_medium) == (one,) * 5
    assert math.isnan(res.ap_large)  # no large object in this set: NaN, not COCO's -1
    assert res.per_class[1] == one and res.per_class[18] == one
    assert math.isnan(res.per_class[90])  # a category without ground truth


def _imperfect(gt, seed=0):
    rng = np.random.default_rng(seed)
    dets = []
    for d in perfect_detections(gt):
        x, y, w, h = d["bbox"]
        jitter = rng.normal(0, 2.5, 4)
        dets.append({**d, "bbox": [x + jitter[0], y + jitter[1], w + jitter[2], h + jitter[3]],
                     "score": float(rng.uniform(0.2, 1.0))})  # fmt: skip
    for im in gt["images"]:  # false positives, one inside the crowd region
        dets.append({"image_id": im["id"], "category_id": 1, "bbox": [40, 6, 15, 20],
                     "score": float(rng.uniform(0, 1))})  # fmt: skip
        dets.append({"image_id": im["id"], "category_id": 18, "bbox": [1, 30, 10, 10],
                     "score": float(rng.uniform(0, 1))})  # fmt: skip
    return dets


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_both_scorers_agree_on_imperfect_predictions(seed):
    gt = tiny_coco()
    dets = _imperfect(gt, seed)
    a, b = (evaluate_coco(gt, dets, backend=be) for be in BACKENDS)
    for k in SUMMARY_KEYS:
        va, vb = getattr(a, k), getattr(b, k)
        assert (math.isnan(va) and math.isnan(vb)) or va == pytest.approx(vb, abs=1e-6), k
    assert 0.0 < a.ap < 1.0  # the predictions really are imperfect
    assert a.per_class.keys() == b.per_class.keys()


def test_contiguous_labels_instead_of_category_ids_are_refused():
    gt = tiny_coco()
    dets = perfect_detections(gt)
    dets[0]["category_id"] = 17  # label 17 is COCO id 18: the classic off-by-one
    with pytest.raises(ClearsightError, match="category id 17"):
        evaluate_coco(gt, dets)


def test_no_detections_score_zero_and_unknown_backend_is_named():
    gt = tiny_coco()
    assert evaluate_coco(gt, []).ap == 0.0
    with pytest.raises(ClearsightError, match="unknown COCO scorer"):
        evaluate_coco(gt, perfect_detections(gt), backend="nope")


def test_image_rows_count_matches_misses_and_ignore_crowd_hits():
    gt = tiny_coco()
    dets = perfect_detections(gt)[1:]  # miss person 1 of image 7
    dets.append({"image_id": 7, "category_id": 18, "bbox": [0, 0, 5, 5], "score": 0.8})  # FP
    dets.append({"image_id": 11, "category_id": 1, "bbox": [40, 6, 15, 20], "score": 0.8})  # crowd
    dets.append({"image_id": 12, "category_id": 1, "bbox": [1, 1, 9, 9], "score": 0.1})  # low
    rows = {r["image_id"]: r for r in image_rows(gt, dets, score_threshold=0.3)}
    assert rows[7] == {"image_id": 7, "file_name": "a.png", "ground_truth": 3, "detections": 3,
                       "matches": 2, "false_positives": 1, "misses": 1}  # fmt: skip
    assert rows[11]["ground_truth"] == 1 and rows[11]["matches"] == 1
    assert rows[11]["false_positives"] == 0  # the crowd hit is ignored
    assert rows[12]["detections"] == 0 and rows[12]["ground_truth"] == 0
