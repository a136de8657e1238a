"""Detection core: letterbox/stretch preprocessing, boxes back to the image, the Detector."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig
from clearsight.detection.preprocess import Transform, prepare
from clearsight.engine.detector import RESULTS_FILE, Detector
from clearsight.errors import ClearsightError
from clearsight.io import read_image, write_image
from clearsight.metrics.coco_eval import evaluate_coco
from clearsight.preprocess import PreprocessSpec
from clearsight.zoo import resolve_model
from tests.coco_utils import CATEGORIES


def _spec(resize="letterbox", anchor="top-left", size=(64, 64), **kw) -> PreprocessSpec:
    extra = {"pad_value": 114, "interpolation": kw.pop("interpolation", "bilinear"),
             "antialias": False, "letterbox_anchor": anchor}  # fmt: skip
    return PreprocessSpec(resize=resize, size=size, extra=extra, **kw)


def test_letterbox_top_left_keeps_aspect_pads_grey_and_swaps_to_bgr():
    red = np.zeros((30, 60, 3), np.uint8)
    red[..., 0] = 255
    x, t = prepare(red, _spec(color_order="BGR", value_range=(0.0, 255.0)))
    assert x.shape == (3, 64, 64)
    assert torch.allclose(x[2, :32], torch.tensor(255.0)) and x[0, :32].abs().max() < 1e-3
    assert torch.allclose(x[:, 32:], torch.tensor(114.0), atol=1e-3)
    assert (t.scale_x, t.scale_y, t.pad_x, t.pad_y) == (64 / 60, 32 / 30, 0.0, 0.0)


def test_letterbox_centre_and_stretch_offsets():
    img = np.full((30, 60, 3), 200, np.uint8)
    _, centre = prepare(img, _spec(anchor="center"))
    assert (centre.pad_x, centre.pad_y) == (0.0, 16.0)
    x, stretch = prepare(img, _spec(resize="fixed"))
    assert (stretch.scale_x, stretch.scale_y, stretch.pad_y) == (64 / 60, 64 / 30, 0.0)
    assert torch.allclose(x, torch.tensor(200 / 255))  # no padding anywhere


def test_normalisation_grayscale_and_sixteen_bit_inputs():
    spec = _spec(resize="fixed", mean=(0.5, 0.5, 0.5), std=(0.25, 0.25, 0.25))
    x, _ = prepare(np.full((8, 8), 255, np.uint8), spec)  # grayscale HxW
    assert torch.allclose(x, torch.tensor(2.0))
    x16, _ = prepare(np.full((8, 8, 3), 65535, np.uint16), spec)
    assert torch.allclose(x16, torch.tensor(2.0))


@pytest.mark.parametrize(
    ("resize", "anchor"), [("letterbox", "top-left"), ("letterbox", "center"), ("fixed", "center")]
)
def test_a_drawn_rectangle_maps_back_to_where_it_was(resize, anchor):
    """Find a white rectangle in the network input and map its box back: the geometry of
    resize and padding, checked on pixels rather than on the formulas themselves."""
    img = np.zeros((90, 150, 3), np.uint8)
    img[20:50, 40:100] = 255  # xyxy [40, 20, 100, 50]
    x, t = prepare(img, _spec(resize, anchor, size=(96, 96), interpolation="nearest"))
    ys, xs = torch.nonzero(x[0] > 0.5, as_tuple=True)
    found = torch.tensor([[xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]], dtype=torch.float32)
    back = t.boxes_to_image(found)[0]
    tol = 1.0 / min(t.scale_x, t.scale_y) + 1e-3  # one input pixel
    assert torch.allclose(back, torch.tensor([40.0, 20.0, 100.0, 50.0]), atol=tol)


@settings(max_examples=60, deadline=None)
@given(
    h=st.integers(1, 1500), w=st.integers(1, 1500),
    resize=st.sampled_from(["letterbox", "fixed"]), anchor=st.sampled_from(["top-left", "center"]),
    frac=st.lists(st.floats(0, 1), min_size=4, max_size=4),
)  # fmt: skip
def test_boxes_round_trip_through_the_network_input(h, w, resize, anchor, frac):
    img = np.zeros((h, w, 3), np.uint8)
    spec = _spec(resize, anchor, size=(48, 80))
    _, t = prepare(img, spec)
    x0, x1 = sorted((frac[0] * w, frac[1] * w))
    y0, y1 = sorted((frac[2] * h, frac[3] * h))
    box = torch.tensor([[x0, y0, x1, y1]], dtype=torch.float64)
    inp = t.boxes_to_input(box)
    sh, sw = spec.size
    assert (inp[0, 0::2] >= -1e-6).all() and (inp[0, 0::2] <= sw + 1e-6).all()
    assert (inp[0, 1::2] >= -1e-6).all() and (inp[0, 1::2] <= sh + 1e-6).all()
    assert torch.allclose(t.boxes_to_image(inp), box, atol=1e-6 * max(h, w))


def test_boxes_beyond_the_image_are_clipped_to_it():
    t = Transform(image_size=(30, 60), input_size=(64, 64), scale_x=64 / 60, scale_y=32 / 30)
    out = t.boxes_to_image(torch.tensor([[-5.0, -5.0, 70.0, 60.0]]))
    assert out.tolist() == [[0.0, 0.0, 60.0, 30.0]]


class FixedBoxes(nn.Module):
    """A stand-in detector: one box [0, 0, 32, 16] in input pixels, label 2, score 0.9."""

    task = "detect"
    input_size = (64, 64)
    num_classes = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(1, 2, 3))

    def postprocess(self, raw, score_threshold=0.0, iou_threshold=0.5, max_detections=100):
        box = torch.tensor([[0.0, 0.0, 32.0, 16.0]])
        keep = score_threshold < 0.9
        return [
            {"boxes": box[:keep], "scores": torch.tensor([0.9])[:keep],
             "labels": torch.tensor([2])[:keep]}
            for _ in raw
        ]  # fmt: skip


def _fixed_detector() -> Detector:
    config = ModelConfig(
        architecture="yolox-nano", arch_args={}, task="detect", preprocess=_spec(),
        metric_preset="coco-bbox", class_ids=[c["id"] for c in CATEGORIES],
        class_names=[c["name"] for c in CATEGORIES],
    )  # fmt: skip
    return Detector(LoadedModel(FixedBoxes(), config, "fixed"))


def test_detector_maps_boxes_to_image_pixels_and_labels_to_dataset_ids():
    dets = _fixed_detector().detect(np.zeros((64, 128, 3), np.uint8))  # scale 0.5
    assert dets.boxes.tolist() == [[0.0, 0.0, 64.0, 32.0]]
    assert dets.category_ids == [90] and dets.names == ["toothbrush"]
    assert dets.to_coco(5) == [
        {"image_id": 5, "category_id": 90, "bbox": [0.0, 0.0, 64.0, 32.0], "score": 0.9}
    ]
    assert len(_fixed_detector().detect(np.zeros((8, 8, 3), np.uint8), score_threshold=0.95)) == 0
    with pytest.raises(ClearsightError, match=r"score_threshold: must be in \[0, 1\]"):
        _fixed_detector().detect(np.zeros((8, 8, 3), np.uint8), score_threshold=2.0)


def test_detect_files_draws_copies_and_writes_scorable_coco_results(tmp_path):
    for n in ("000000000007", "000000000011"):
        write_image(tmp_path / "in" / f"{n}.png", np.zeros((64, 128, 3), np.uint8))
    run = _fixed_detector().detect_files([tmp_path / "in"], tmp_path / "out")
    assert run.results_path == tmp_path / "out" / RESULTS_FILE
    results = json.loads(run.results_path.read_text())
    assert [r["image_id"] for r in results] == [7, 11]
    assert results[0]["file_name"] == "000000000007.png" and results[0]["category_id"] == 90
    drawn = read_image(tmp_path / "out" / "000000000007.png")
    assert drawn.shape == (64, 128, 3) and drawn[0, 10].max() > 0 and drawn[50, 100].max() == 0
    gt = {
        "images": [{"id": i, "file_name": f"{i:012d}.png", "width": 128, "height": 64}
                   for i in (7, 11)],
        "annotations": [{"id": i, "image_id": i, "category_id": 90, "bbox": [0, 0, 64, 32],
                         "area": 2048, "iscrowd": 0} for i in (7, 11)],
        "categories": CATEGORIES,
    }  # fmt: skip
    assert evaluate_coco(gt, results).ap == pytest.approx(1.0)


def test_a_restoration_model_is_not_a_detector():
    with pytest.raises(ClearsightError, match="not a detector"):
        Detector(resolve_model("identity"))
