"""A tiny synthetic COCO set of coloured rectangles and a fast SSD config for the detector
training tests (seconds on 2 CPU cores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.engine.train_config import TrainConfig, config_from_dict
from clearsight.io import write_image

COLOURS = {1: (230, 40, 40), 2: (40, 80, 230)}  # category id -> RGB
CATEGORIES = [{"id": 1, "name": "red box"}, {"id": 2, "name": "blue box"}]


def make_rectangles(root: Path, n: int = 4, size: int = 96, seed: int = 0) -> Path:
    """`root/annotations/instances_train.json` + `root/train/*.png`: grey noise with one or
    two filled rectangles per image (categories 1 red, 2 blue)."""
    rng = np.random.default_rng(seed)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    images, anns = [], []
    for i in range(n):
        img = rng.integers(90, 140, (size, size, 3), dtype=np.uint8)
        for k in range(1 + i % 2):
            cat = 1 + (i + k) % 2
            w, h = (int(v) for v in rng.integers(size // 4, size // 2, 2))
            x = int(rng.integers(0, size - w)) if k == 0 else size - w - 1
            y = int(rng.integers(0, size - h)) if k == 0 else 1
            img[y : y + h, x : x + w] = COLOURS[cat]
            anns.append({"id": len(anns) + 1, "image_id": i + 1, "category_id": cat,
                         "bbox": [x, y, w, h], "area": w * h, "iscrowd": 0})  # fmt: skip
        write_image(root / "train" / f"{i:03d}.png", img)
        images.append({"id": i + 1, "file_name": f"{i:03d}.png", "width": size, "height": size})
    gt = {"images": images, "annotations": anns, "categories": CATEGORIES}
    (root / "annotations" / "instances_train.json").write_text(json.dumps(gt), encoding="utf-8")
    return root


def ssd_raw(root: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A narrow SSD-MobileNet-v1 (depth multiplier 0.125, 96x96 input, 2 classes)."""
    raw: dict[str, Any] = {
        "model": {
            "arch": "ssd-mobilenet-v1",
            "args": {"num_classes": 3, "depth_multiplier": 0.125, "input_size": 96},
        },
        "data": {"train": str(root), "val": str(root), "batch_size": 4},
        "optim": {"lr": 3e-3},
        "loss": {"name": "multibox"},
        "train": {
            "steps": 6,
            "log_every": 2,
            "val_every": 3,
            "ckpt_every": 3,
            "tensorboard": False,
            "amp": "off",
        },
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


def ssd_config(root: Path, **sections: dict[str, Any]) -> TrainConfig:
    return config_from_dict(ssd_raw(root, **sections))
