"""COCO box AP of the SSD-MobileNet-v1 port against the LiteRT reference, on one evaluation.

    python benchmarks/detect_ap.py [--data ../shared/data/detection/coco_mini_val]
        [--tflite ../shared/data/detection/pretrained/ssd_mobilenet_v1_coco_quant.tflite]
        [--model ARTIFACT] [--limit N] [--json FILE]

Every image is read as RGB and stretched to 300x300 once (OpenCV INTER_LINEAR: bilinear
without antialiasing, which reproduces the reference AP; PIL's antialiased bilinear gives
LiteRT 21.0 / 38.1 instead of 21.9 / 39.1 with 10 detections); the same uint8
array feeds the LiteRT interpreter (the int8 file) and the fp32 port ((x - 128) / 128).
Both keep the TFLite op's settings (one class per box, NMS at IoU 0.6 across classes, score
> 1e-8) with 10 detections (the file's limit) or 100 (the op's option patched); the port
also runs per-class NMS (scores > 0.01). Boxes are scaled back to the original size, label
k is COCO id k + 1, and pycocotools' COCOeval gives AP (0.50:0.95) and AP50 over every image of the
annotation file. The port is the converted artifact (`--model`) or, by default, the TFLite
file converted in memory.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
from pathlib import Path

import cv2
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tables import print_table  # noqa: E402

SHARED = Path(__file__).resolve().parents[2] / "shared" / "data" / "detection"


def _image(path: Path) -> tuple[np.ndarray, tuple[int, int]]:
    from clearsight.io import read_image

    rgb = read_image(path)  # uint8 RGB, EXIF orientation applied (none in COCO)
    h, w = rgb.shape[:2]
    return cv2.resize(rgb, (300, 300), interpolation=cv2.INTER_LINEAR), (w, h)


def _coco_dets(image_id, size, boxes_xyxy_300, labels, scores, class_ids) -> list[dict]:
    w, h = size
    out = []
    for (x0, y0, x1, y1), lab, s in zip(boxes_xyxy_300, labels, scores, strict=True):
        x0, x1 = x0 * w / 300, x1 * w / 300
        y0, y1 = y0 * h / 300, y1 * h / 300
        out.append(
            {
                "image_id": image_id,
                "category_id": int(class_ids[int(lab)]),
                "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                "score": float(s),
            }
        )
    return out


def _evaluate(coco, dets: list[dict]) -> tuple[float, float]:
    from pycocotools.cocoeval import COCOeval

    if not dets:
        return 0.0, 0.0
    with contextlib.redirect_stdout(io.StringIO()):
        ev = COCOeval(coco, coco.loadRes(dets), "bbox")
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0]), float(ev.stats[1])


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", type=Path, default=SHARED / "coco_mini_val")
    p.add_argument(
        "--tflite", type=Path, default=SHARED / "pretrained/ssd_mobilenet_v1_coco_quant.tflite"
    )
    p.add_argument("--model", default=None, help="the converted artifact (default: convert now)")
    p.add_argument("--limit", type=int, default=None, help="only the first N images")
    p.add_argument("--json", type=Path, default=None, help="also write the figures here")
    a = p.parse_args()

    from pycocotools.coco import COCO

    from clearsight.convert.tflite_reference import LiteRTReference
    from clearsight.convert.tflite_ssd import load_tflite_ssd

    torch.set_num_threads(2)
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO(str(a.data / "annotations" / "instances_val2017.json"))
    if a.model:
        from clearsight.zoo import resolve_model

        loaded = resolve_model(a.model)
        model, class_ids = loaded.model.eval(), loaded.config.class_ids
    else:
        model, _ = load_tflite_ssd(a.tflite)
        class_ids = list(range(1, 91))
    refs = {10: LiteRTReference(a.tflite), 100: LiteRTReference(a.tflite, max_detections=100)}
    runs: dict[str, list[dict]] = {
        k: []
        for k in (
            "LiteRT int8, 10 dets",
            "LiteRT int8, 100 dets",
            "port fp32, 10 dets",
            "port fp32, 100 dets",
            "port fp32, per-class NMS (score > 0.01), 100 dets",
        )
    }
    ids = sorted(coco.imgs)[: a.limit]
    for image_id in ids:
        info = coco.imgs[image_id]
        arr, size = _image(a.data / "val2017" / info["file_name"])
        for n, ref in refs.items():
            r = ref(arr)
            runs[f"LiteRT int8, {n} dets"] += _coco_dets(
                image_id, size, r.boxes[:, [1, 0, 3, 2]] * 300, r.classes, r.scores, class_ids
            )
        x = torch.from_numpy(arr.copy()).permute(2, 0, 1)[None].float().sub(128).div(128)
        with torch.no_grad():
            raw = model(x)
        for name, kw in (
            ("port fp32, 10 dets", {"max_detections": 10}),
            ("port fp32, 100 dets", {"max_detections": 100}),
            (
                "port fp32, per-class NMS (score > 0.01), 100 dets",
                {"class_agnostic": False, "score_threshold": 0.01},
            ),
        ):
            kw = {"score_threshold": 1e-8, **kw}
            d = model.postprocess(raw, **kw)[0]
            runs[name] += _coco_dets(
                image_id, size, d["boxes"].tolist(), d["labels"], d["scores"].tolist(), class_ids
            )
    figures = {}
    for name, dets in runs.items():
        ap, ap50 = _evaluate(coco, dets)
        figures[name] = {"ap": round(100 * ap, 2), "ap50": round(100 * ap50, 2)}
    rows = [[k, f"{v['ap']:.1f}", f"{v['ap50']:.1f}"] for k, v in figures.items()]
    print_table(f"COCO box AP, {a.data.name} ({len(ids)} images)", ["run", "AP", "AP50"], rows)
    if a.json:
        a.json.write_text(json.dumps({"images": len(ids), "runs": figures}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
