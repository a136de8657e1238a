"""COCO-format detection sets: an instances JSON plus a folder of images.

Loading checks everything a scorer would otherwise trip over later, or silently score wrong,
and stops at the first problem with one line that names the file and the entry: a missing
image file, an annotation whose image or category id is unknown, a box of zero area or one
outside its image (a tolerance of `BOX_TOLERANCE` pixels allows the float rounding found in
real annotation files). Crowd regions are kept and flagged (scorers ignore matches to them);
images without annotations are kept (they still count false positives).

Images are read through `clearsight.io.read_image`: RGB, grayscale replicated to three
channels, EXIF orientation applied. COCO itself annotated the stored pixels, not the
EXIF-rotated view, so where the rotated image's size is the JSON's with width and height
swapped, `CocoDataset.image` returns the stored layout instead, the one the boxes refer to.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from clearsight.errors import ClearsightError
from clearsight.io import apply_exif_orientation, image_size, read_image

__all__ = ["BOX_TOLERANCE", "CocoFormatError", "CocoDataset", "CocoImage", "load_coco"]

BOX_TOLERANCE = 1.0
# The EXIF orientation that undoes each orientation (5 and 7 are their own inverses).
_INVERSE_ORIENTATION = {1: 1, 2: 2, 3: 3, 4: 4, 5: 5, 6: 8, 7: 7, 8: 6}


class CocoFormatError(ClearsightError):
    """A COCO annotation file or its images do not fit together."""


@dataclass
class CocoImage:
    """One image and its annotations; boxes are xyxy in pixels, category ids as in the file."""

    id: int
    file_name: str
    path: Path
    width: int
    height: int
    boxes: np.ndarray  # [K, 4] float64 xyxy
    category_ids: np.ndarray  # [K] int64
    iscrowd: np.ndarray  # [K] bool
    annotation_ids: np.ndarray  # [K] int64


@dataclass
class CocoDataset:
    """A loaded, checked COCO set. `raw` is the annotation JSON as read (for scorers)."""

    annotation_file: Path
    image_dir: Path
    images: list[CocoImage]
    categories: dict[int, str]
    raw: dict[str, Any] = field(repr=False, default_factory=dict)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> CocoImage:
        return self.images[i]

    def image(self, i: int) -> np.ndarray:
        """Pixels of image `i` (HxWx3 RGB) in the layout its boxes refer to."""
        entry = self.images[i]
        img = read_image(entry.path)
        h, w = img.shape[:2]
        if (h, w) == (entry.height, entry.width):
            return img
        if (h, w) == (entry.width, entry.height):
            with Image.open(entry.path) as im:
                orientation = int(im.getexif().get(0x0112, 1))
            return apply_exif_orientation(img, _INVERSE_ORIENTATION.get(orientation, 1))
        raise CocoFormatError(
            f"{entry.path}: image is {w}x{h} but {self.annotation_file.name} says "
            f"{entry.width}x{entry.height}"
        )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise CocoFormatError(f"annotation file not found: {path}")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CocoFormatError(f"{path}: invalid JSON ({exc})") from None
    if not isinstance(data, dict):
        raise CocoFormatError(f"{path}: expected a JSON object with images/annotations/categories")
    for key in ("images", "annotations", "categories"):
        if not isinstance(data.get(key), list):
            raise CocoFormatError(f"{path}: missing or malformed {key!r} list")
    return data


def _entry(path: Path, kind: str, item: Any, keys: tuple[str, ...]) -> None:
    if not isinstance(item, dict) or any(k not in item for k in keys):
        ident = item.get("id") if isinstance(item, dict) else item
        raise CocoFormatError(f"{path}: {kind} {ident!r} lacks one of {', '.join(keys)}")


def _int(where: str, key: str, value: Any, low: int | None = None) -> int:
    """A JSON integer (not a bool, not a float), at least `low`."""
    if isinstance(value, bool) or not isinstance(value, int) or (low is not None and value < low):
        need = "an integer" if low is None else f"an integer >= {low}"
        raise CocoFormatError(f"{where}: {key} must be {need}, got {value!r}")
    return value


def _bbox(where: str, bbox: Any) -> tuple[float, float, float, float]:
    ok = (
        isinstance(bbox, list)
        and len(bbox) == 4
        and all(isinstance(v, int | float) and not isinstance(v, bool) for v in bbox)
        and all(math.isfinite(v) for v in bbox)
    )
    if not ok:
        raise CocoFormatError(f"{where}: bbox must be 4 finite numbers (x, y, w, h), got {bbox!r}")
    x, y, w, h = (float(v) for v in bbox)
    return x, y, w, h


def _image_path(image_dir: Path, im: dict[str, Any], ann_path: Path) -> Path:
    """`image_dir / file_name`, refused unless it resolves (symlinks followed) inside
    `image_dir`: an annotation file must not make a scorer read, and a report embed, a file
    from elsewhere (`../../other/c.png`, an absolute path, a link out)."""
    name = im["file_name"]
    where = f"{ann_path}: image {im['id']!r}"
    if not isinstance(name, str) or not name or "\x00" in name:
        raise CocoFormatError(f"{where}: file_name must be a non-empty string, got {name!r}")
    path = image_dir / name
    base = image_dir.resolve()
    if not path.resolve().is_relative_to(base):
        raise CocoFormatError(
            f"{where}: file_name {name!r} resolves outside the image folder {image_dir}"
        )
    return path


def load_coco(
    annotations: str | os.PathLike[str],
    images: str | os.PathLike[str] | None = None,
    *,
    check_files: bool = True,
) -> CocoDataset:
    """Load and check the COCO instances file `annotations`, its images in the folder `images`
    (None: the JSON's own folder). `check_files=False` skips the per-image file checks (not
    the check that each image path stays inside the folder)."""
    ann_path = Path(annotations)
    data = _read_json(ann_path)
    image_dir = Path(images) if images is not None else ann_path.parent
    categories: dict[int, str] = {}
    for c in data["categories"]:
        _entry(ann_path, "category", c, ("id", "name"))
        cid = _int(f"{ann_path}: category {c['id']!r}", "id", c["id"])
        if cid in categories:
            raise CocoFormatError(f"{ann_path}: category id {cid} appears twice")
        categories[cid] = str(c["name"])
    by_id: dict[int, dict[str, Any]] = {}
    paths: dict[int, Path] = {}
    for im in data["images"]:
        _entry(ann_path, "image", im, ("id", "file_name", "width", "height"))
        where = f"{ann_path}: image {im['id']!r}"
        img_id = _int(where, "id", im["id"])
        _int(where, "width", im["width"], 1)
        _int(where, "height", im["height"], 1)
        if img_id in by_id:
            raise CocoFormatError(f"{ann_path}: image id {img_id} appears twice")
        by_id[img_id] = im
        paths[img_id] = _image_path(image_dir, im, ann_path)
    per_image: dict[int, list[dict[str, Any]]] = {i: [] for i in by_id}
    ann_ids: set[int] = set()
    for a in data["annotations"]:
        _entry(ann_path, "annotation", a, ("id", "image_id", "category_id", "bbox"))
        where = f"{ann_path}: annotation {a['id']!r}"
        ann_id = _int(where, "id", a["id"])
        if ann_id in ann_ids:
            raise CocoFormatError(f"{ann_path}: annotation id {ann_id} appears twice")
        ann_ids.add(ann_id)
        im = by_id.get(_int(where, "image_id", a["image_id"]))
        if im is None:
            raise CocoFormatError(f"{where} refers to unknown image id {a['image_id']}")
        where += f" (image {im['file_name']})"
        if _int(where, "category_id", a["category_id"]) not in categories:
            raise CocoFormatError(f"{where} has unknown category id {a['category_id']}")
        bbox = a["bbox"]
        x, y, w, h = _bbox(where, bbox)
        if w <= 0 or h <= 0:
            raise CocoFormatError(f"{where}: zero-area box {bbox}")
        W, H = float(im["width"]), float(im["height"])  # noqa: N806
        t = BOX_TOLERANCE
        if x < -t or y < -t or x + w > W + t or y + h > H + t:
            raise CocoFormatError(
                f"{where}: box {bbox} lies outside the {im['width']}x{im['height']} image"
            )
        if not isinstance(a.get("iscrowd", 0), int | bool):
            raise CocoFormatError(f"{where}: iscrowd must be 0 or 1, got {a['iscrowd']!r}")
        per_image[int(im["id"])].append(a)
    entries = []
    for img_id, im in by_id.items():
        anns = per_image[img_id]
        path = paths[img_id]
        if check_files:
            _check_image_file(path, int(im["width"]), int(im["height"]), ann_path)
        boxes = np.array(
            [[a["bbox"][0], a["bbox"][1], a["bbox"][0] + a["bbox"][2], a["bbox"][1] + a["bbox"][3]]
             for a in anns],
            dtype=np.float64,
        ).reshape(-1, 4)  # fmt: skip
        entries.append(
            CocoImage(
                id=img_id,
                file_name=str(im["file_name"]),
                path=path,
                width=int(im["width"]),
                height=int(im["height"]),
                boxes=boxes,
                category_ids=np.array([int(a["category_id"]) for a in anns], dtype=np.int64),
                iscrowd=np.array([bool(a.get("iscrowd", 0)) for a in anns], dtype=bool),
                annotation_ids=np.array([int(a["id"]) for a in anns], dtype=np.int64),
            )
        )
    return CocoDataset(ann_path, image_dir, entries, categories, raw=data)


def _check_image_file(path: Path, width: int, height: int, ann_path: Path) -> None:
    if not path.is_file():
        raise CocoFormatError(f"{path}: image listed in {ann_path.name} is missing")
    w, h = image_size(path)
    if (w, h) not in ((width, height), (height, width)):
        raise CocoFormatError(f"{path}: image is {w}x{h} but {ann_path.name} says {width}x{height}")
