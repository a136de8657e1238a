"""A tiny synthetic COCO set (sparse category ids, a crowd box, an image without boxes)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.io import write_image

CATEGORIES = [
    {"id": 1, "name": "person"},
    {"id": 18, "name": "dog"},
    {"id": 90, "name": "toothbrush"},
]


def tiny_coco() -> dict[str, Any]:
    """Three images: two people (one medium-sized) and a dog, a dog beside a crowd, nothing."""
    images = [
        {"id": 7, "file_name": "a.png", "width": 128, "height": 96},
        {"id": 11, "file_name": "b.png", "width": 64, "height": 48},
        {"id": 12, "file_name": "c.png", "width": 64, "height": 48},
    ]
    anns = [
        {"id": 1, "image_id": 7, "category_id": 1, "bbox": [2, 3, 40, 60], "iscrowd": 0},
        {"id": 2, "image_id": 7, "category_id": 1, "bbox": [50, 4, 16, 40], "iscrowd": 0},
        {"id": 3, "image_id": 7, "category_id": 18, "bbox": [80, 60, 22, 16], "iscrowd": 0},
        {"id": 4, "image_id": 11, "category_id": 18, "bbox": [5, 5, 30, 20], "iscrowd": 0},
        {"id": 5, "image_id": 11, "category_id": 1, "bbox": [36, 2, 26, 40], "iscrowd": 1},
    ]
    for a in anns:
        a["area"] = float(a["bbox"][2] * a["bbox"][3])
    return {"images": images, "annotations": anns, "categories": copy.deepcopy(CATEGORIES)}


def perfect_detections(gt: dict[str, Any]) -> list[dict[str, Any]]:
    return [
        {"image_id": a["image_id"], "category_id": a["category_id"], "bbox": list(a["bbox"]),
         "score": 0.9}
        for a in gt["annotations"]
        if not a.get("iscrowd")
    ]  # fmt: skip


def write_coco(root: Path, gt: dict[str, Any] | None = None) -> tuple[Path, Path]:
    """Write `gt` (default `tiny_coco()`) and its images (grey noise) under `root`."""
    gt = gt if gt is not None else tiny_coco()
    img_dir = root / "images"
    rng = np.random.default_rng(0)
    for im in gt["images"]:
        noise = rng.integers(0, 255, (im["height"], im["width"], 3), dtype=np.uint8)
        write_image(img_dir / im["file_name"], noise)
    ann = root / "instances.json"
    ann.write_text(json.dumps(gt), encoding="utf-8")
    return ann, img_dir
