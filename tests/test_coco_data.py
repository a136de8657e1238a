"""The COCO loader: a good set loads; each kind of bad entry stops with a line naming it."""

from __future__ import annotations

import json

import numpy as np
import pytest
from PIL import Image

from clearsight.data.coco import CocoFormatError, load_coco
from tests.coco_utils import tiny_coco, write_coco


def test_loads_boxes_crowds_and_images_without_annotations(tmp_path):
    ann, imgs = write_coco(tmp_path)
    ds = load_coco(ann, imgs)
    assert len(ds) == 3 and ds.categories == {1: "person", 18: "dog", 90: "toothbrush"}
    a, b, c = ds.images
    assert a.boxes.tolist()[0] == [2, 3, 42, 63]  # xywh -> xyxy
    assert a.category_ids.tolist() == [1, 1, 18]
    assert b.iscrowd.tolist() == [False, True]
    assert c.boxes.shape == (0, 4) and c.category_ids.shape == (0,)
    assert ds.image(0).shape == (96, 128, 3)


def _broken(tmp_path, edit):
    gt = tiny_coco()
    edit(gt)
    return write_coco(tmp_path, gt)


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda g: g["annotations"][2].update(category_id=17),
         r"annotation 3 \(image a.png\) has unknown category id 17"),
        (lambda g: g["annotations"][0].update(bbox=[100, 3, 40, 60]),
         r"annotation 1 \(image a.png\): box \[100, 3, 40, 60\] lies outside the 128x96 image"),
        (lambda g: g["annotations"][1].update(bbox=[5, 5, 0, 10]),
         r"annotation 2 \(image a.png\): zero-area box"),
        (lambda g: g["annotations"][3].update(image_id=99), "refers to unknown image id 99"),
        (lambda g: g["images"].append(dict(g["images"][0])), "image id 7 appears twice"),
        (lambda g: g.pop("categories"), "missing or malformed 'categories'"),
    ],
)  # fmt: skip
def test_bad_entries_are_named(tmp_path, edit, message):
    ann, imgs = _broken(tmp_path, edit)
    with pytest.raises(CocoFormatError, match=message) as err:
        load_coco(ann, imgs)
    assert "\n" not in str(err.value) and str(ann) in str(err.value)


def test_missing_or_resized_image_files_are_named(tmp_path):
    ann, imgs = write_coco(tmp_path)
    (imgs / "b.png").unlink()
    with pytest.raises(CocoFormatError, match=r"b.png: image listed in instances.json is missing"):
        load_coco(ann, imgs)
    Image.new("RGB", (10, 10)).save(imgs / "b.png")
    with pytest.raises(CocoFormatError, match=r"b.png: image is 10x10 but .* says 64x48"):
        load_coco(ann, imgs)
    assert len(load_coco(ann, imgs, check_files=False)) == 3


def test_bad_json_is_named(tmp_path):
    p = tmp_path / "x.json"
    p.write_text("{not json")
    with pytest.raises(CocoFormatError, match="x.json: invalid JSON"):
        load_coco(p)
    with pytest.raises(CocoFormatError, match="annotation file not found"):
        load_coco(tmp_path / "none.json")


def test_grayscale_images_come_as_rgb(tmp_path):
    ann, imgs = write_coco(tmp_path)
    Image.fromarray(np.full((48, 64), 77, np.uint8), mode="L").save(imgs / "b.png")
    img = load_coco(ann, imgs).image(1)
    assert img.shape == (48, 64, 3) and (img == 77).all()


@pytest.mark.parametrize("annotated", ["stored", "displayed"])
def test_exif_rotated_images_match_the_frame_their_annotations_use(tmp_path, annotated):
    """A 64x48 JPEG stored with EXIF orientation 6 displays as 48x64. COCO annotated stored
    pixels; other tools annotate what they display. Either way the pixels returned are in the
    frame of the JSON's width/height, so the boxes land on what they were drawn on."""
    gt = tiny_coco()
    gt["images"], gt["annotations"] = gt["images"][1:2], gt["annotations"][3:4]
    ann, imgs = write_coco(tmp_path, gt)
    stored = np.zeros((48, 64, 3), np.uint8)
    stored[:, :32] = 255  # left half white in the stored frame
    exif = Image.Exif()
    exif[0x0112] = 6
    Image.fromarray(stored).save(imgs / "b.jpg", exif=exif.tobytes(), quality=95)
    if annotated == "displayed":
        gt["images"][0].update(width=48, height=64)
        gt["annotations"][0]["bbox"] = [5, 5, 20, 30]
    gt["images"][0]["file_name"] = "b.jpg"
    ann.write_text(json.dumps(gt))
    img = load_coco(ann, imgs).image(0)
    if annotated == "stored":
        assert img.shape == (48, 64, 3) and img[:, :28].mean() > 240 and img[:, 36:].mean() < 15
    else:
        assert img.shape == (64, 48, 3) and img[:28].mean() > 240 and img[36:].mean() < 15
