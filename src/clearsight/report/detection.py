"""The HTML report of a detector's evaluation (`clearsight eval --report` on a detector).

The page restoration reports use (`report/html.py`): the model card, the COCO figures, a
histogram, a sortable per-image table and a gallery. Each gallery image is drawn twice,
ground truth (green, labelled with the class) and the detector's predictions (magenta,
"class score"), plus both overlaid; clicking a card slides between the two drawings.

The gallery is ranked worst first by **errors = misses + false positives**, the two columns
of `per_image.csv` (detections scoring at least 0.3, matched to ground truth at IoU 0.5):
it counts what a user of the detector sees go wrong in an image, needs no per-image AP
(undefined for an image without ground truth, noisy for one with a single box), and ties
are broken by more misses, then by more ground truth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import cv2
import numpy as np
from PIL import Image, ImageDraw, ImageFont

from clearsight.engine.detect_evaluate import DetectionEvalResult
from clearsight.metrics.coco_eval import PER_IMAGE_IOU, PER_IMAGE_SCORE_THRESHOLD
from clearsight.report.html import (
    DEFAULT_K,
    Column,
    GalleryItem,
    Page,
    _kv_table,
    _pick,
    histogram_svg,
    render_page,
)
from clearsight.report.thumbs import encode_jpeg

if TYPE_CHECKING:
    from clearsight.data.coco import CocoDataset

GT_COLOUR = (0, 200, 0)
PRED_COLOUR = (230, 0, 200)
THUMB_SIDE = 512
"""Drawings are scaled (up or down) to this longer side: labels stay legible on small images."""
BADNESS = (
    f"errors = misses + false positives (detections scoring >= {PER_IMAGE_SCORE_THRESHOLD}, "
    f"matched at IoU {PER_IMAGE_IOU})"
)


def errors(row: dict[str, Any]) -> int:
    """An image's badness: ground-truth boxes missed plus detections matching nothing."""
    return int(row["misses"]) + int(row["false_positives"])


def _font(size: int) -> ImageFont.ImageFont | ImageFont.FreeTypeFont:
    try:
        return ImageFont.load_default(size=size)  # Pillow >= 10.1: a scalable bundled font
    except TypeError:
        return ImageFont.load_default()


def draw_boxes(
    img: np.ndarray,
    boxes: Sequence[Sequence[float]],
    labels: Sequence[str],
    colour: tuple[int, int, int],
) -> np.ndarray:
    """`img` (uint8 RGB) with xywh `boxes` outlined in `colour`, each labelled on a filled
    tag in that colour. Pillow draws it: torchvision's `draw_bounding_boxes` sizes label
    text only with a font file, and no font file is guaranteed on every system."""
    pil = Image.fromarray(np.ascontiguousarray(img))
    draw = ImageDraw.Draw(pil)
    width = max(2, round(max(img.shape[:2]) / 200))
    font = _font(max(11, round(max(img.shape[:2]) / 36)))
    for (x, y, w, h), text in zip(boxes, labels, strict=True):
        draw.rectangle([x, y, x + w, y + h], outline=colour, width=width)
        left, top, right, bottom = draw.textbbox((0, 0), text, font=font)
        tw, th = right - left + 4, bottom - top + 4
        ty = y - th if y - th >= 0 else y  # above the box where there is room
        draw.rectangle([x, ty, x + tw, ty + th], fill=colour)
        draw.text((x + 2 - left, ty + 2 - top), text, fill=(255, 255, 255), font=font)
    return np.asarray(pil)


def _scaled(img: np.ndarray, side: int) -> tuple[np.ndarray, float]:
    h, w = img.shape[:2]
    scale = side / max(h, w)
    size = (max(1, round(w * scale)), max(1, round(h * scale)))
    interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
    return cv2.resize(img, size, interpolation=interp), scale


def detection_thumbs(
    img: np.ndarray,
    truth: Sequence[dict[str, Any]],
    predictions: Sequence[dict[str, Any]],
    names: dict[int, str],
    side: int = THUMB_SIDE,
    *,
    seen: np.ndarray | None = None,
    clean: np.ndarray | None = None,
) -> dict[str, bytes]:
    """JPEG drawings of one image: "ground truth", "predictions" and "both" (COCO entries;
    crowd regions are drawn as ground truth marked "crowd"). A chain's evaluation also
    gives `seen`, the restored image the detector saw (predictions are drawn on it), and,
    for a set made by `synth --coco`, `clean`, the image before the rain: drawn first, with
    the ground truth, so clean, rainy and restored stand side by side."""
    small, scale = _scaled(img, side)
    shown = small if seen is None else _scaled(seen, side)[0]

    def boxes(entries: Sequence[dict[str, Any]]) -> list[list[float]]:
        return [[v * scale for v in e["bbox"]] for e in entries]

    gt_labels = [
        names.get(a["category_id"], str(a["category_id"])) + (" crowd" if a.get("iscrowd") else "")
        for a in truth
    ]
    pred_labels = [
        f"{names.get(d['category_id'], str(d['category_id']))} {d['score']:.2f}"
        for d in predictions
    ]
    gt = draw_boxes(small, boxes(truth), gt_labels, GT_COLOUR)
    pred = draw_boxes(shown, boxes(predictions), pred_labels, PRED_COLOUR)
    both = draw_boxes(
        gt if seen is None else draw_boxes(shown, boxes(truth), gt_labels, GT_COLOUR),
        boxes(predictions), pred_labels, PRED_COLOUR,
    )  # fmt: skip
    out: dict[str, bytes] = {}
    if clean is not None:
        clean_small = _scaled(clean, side)[0]
        out["clean"] = encode_jpeg(draw_boxes(clean_small, boxes(truth), gt_labels, GT_COLOUR), 85)
    out["ground truth"] = encode_jpeg(gt, 85)
    out["predictions"] = encode_jpeg(pred, 85)
    out["both"] = encode_jpeg(both, 85)
    return out


def render_detection_report(
    result: DetectionEvalResult,
    dataset: CocoDataset,
    *,
    card: Sequence[tuple[str, str]] = (),
    k: int = DEFAULT_K,
    title: str | None = None,
    restore: Callable[[np.ndarray], np.ndarray] | None = None,
) -> str:
    """The report of one detection evaluation on `dataset` (the set it was scored on).
    `restore`: a chain's restore step (image -> what the detector saw), run again on the
    gallery's images to draw the predictions where they were found."""
    summary = result.summary()
    figures = [(key, _pct(v)) for key, v in summary["metrics"].items()]
    header = (
        '<div class="top"><div><h2>Model</h2>'
        + _kv_table(list(card) or [("model", result.model_name)])
        + "</div><div><h2>Evaluation</h2>"
        + _kv_table(
            [
                ("data set", result.data_name),
                ("images", str(summary["n"])),
                ("evaluator", str(summary["evaluator"])),
                ("detections", f"{summary['detections']} (all scores, as COCO AP counts them)"),
                ("gallery ranking", BADNESS),
            ]
        )
        + "<h2>COCO bbox (%)</h2>"
        + _kv_table(figures, cls="stats")
        + "</div></div>"
    )
    rows = [{**r, "name": r["file_name"], "errors": errors(r)} for r in result.rows]
    ranked = sorted(rows, key=lambda r: (-r["errors"], -r["misses"], -r["ground_truth"]))
    names, note = _pick([r["name"] for r in ranked], k)
    gallery = _gallery(result, dataset, {r["name"]: r for r in rows}, names, restore)
    columns = [Column("name", "image", numeric=False), Column("image_id", "id", digits=0)]
    columns += [
        Column(key, key.replace("_", " "), digits=0)
        for key in ("ground_truth", "detections", "matches", "false_positives", "misses")
    ]
    columns += [Column("errors", "errors", digits=0), Column("latency_ms", "latency ms", 1)]
    page = Page(
        title=title or f"clearsight eval: {result.model_name} on {result.data_name}",
        header_html=header,
        histogram=histogram_svg([float(r["errors"]) for r in rows], "per-image " + BADNESS),
        columns=columns,
        rows=rows,
        gallery=gallery,
        gallery_note=(
            f"{note} ({BADNESS}); ground truth in green, predictions scoring >= "
            f"{PER_IMAGE_SCORE_THRESHOLD} in magenta; click a card to slide between the two"
        ),
    )
    return render_page(page)


def _gallery(
    result: DetectionEvalResult,
    dataset: CocoDataset,
    rows: dict[str, dict[str, Any]],
    names: list[str],
    restore: Callable[[np.ndarray], np.ndarray] | None = None,
) -> list[GalleryItem]:
    index = {entry.file_name: i for i, entry in enumerate(dataset.images)}
    clean_set = _clean_source(dataset) if restore is not None else None
    truth: dict[int, list[dict[str, Any]]] = {}
    for a in dataset.raw.get("annotations", []):
        truth.setdefault(a["image_id"], []).append(a)
    shown: dict[int, list[dict[str, Any]]] = {}
    for d in result.results:
        if d["score"] >= PER_IMAGE_SCORE_THRESHOLD:
            shown.setdefault(d["image_id"], []).append(d)
    items = []
    for name in names:
        row, i = rows[name], index.get(name)
        if i is None:
            continue
        image_id = row["image_id"]
        preds = sorted(shown.get(image_id, []), key=lambda d: -d["score"])
        img = dataset.image(i)
        clean = None
        if clean_set is not None and name in clean_set[1]:
            clean = clean_set[0].image(clean_set[1][name])
        thumbs = detection_thumbs(
            img, truth.get(image_id, []), preds, dataset.categories,
            seen=restore(img) if restore is not None else None, clean=clean,
        )  # fmt: skip
        caption = (
            f"errors {row['errors']} · misses {row['misses']} · false positives "
            f"{row['false_positives']} · ground truth {row['ground_truth']} · "
            f"detections {row['detections']}"
        )
        items.append(
            GalleryItem(
                name=name,
                caption=caption,
                images=list(thumbs.items()),
                slider=("ground truth", "predictions"),
            )
        )
    return items


def _clean_source(dataset: CocoDataset) -> tuple[CocoDataset, dict[str, int]] | None:
    """The set a `synth --coco` set was made from (its JSON's `info.clearsight_synth`), with
    its images by file name; None for any other set, or when that set is not there."""
    from clearsight.data.coco import find_coco_set, load_coco
    from clearsight.errors import ClearsightError

    info = dataset.raw.get("info")
    made = info.get("clearsight_synth") if isinstance(info, dict) else None
    source = made.get("source") if isinstance(made, dict) else None
    if not isinstance(source, str):
        return None
    try:
        clean = load_coco(*find_coco_set(source))
    except ClearsightError:
        return None
    return clean, {e.file_name: i for i, e in enumerate(clean.images)}


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


__all__ = [
    "BADNESS",
    "GT_COLOUR",
    "PRED_COLOUR",
    "detection_thumbs",
    "draw_boxes",
    "errors",
    "render_detection_report",
]
