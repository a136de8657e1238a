"""The detection eval report: worst images first (misses + false positives), each drawn with
ground truth and predictions in distinct colours, and `eval --report` on a detector."""

from __future__ import annotations

import base64
import io
import json
import re
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from clearsight.artifact import LoadedModel, ModelConfig
from clearsight.cli import app
from clearsight.data.coco import find_coco_set, load_coco
from clearsight.engine.detect_evaluate import evaluate_coco_set
from clearsight.engine.detector import Detector
from clearsight.io import write_image
from clearsight.preprocess import PreprocessSpec
from clearsight.report.detection import GT_COLOUR, PRED_COLOUR, render_detection_report
from tests.coco_utils import CATEGORIES, tiny_coco


class OneBox(nn.Module):
    """A stand-in detector: one "person" box [0, 0, 32, 16] (input pixels), score 0.9."""

    task = "detect"
    num_classes = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(1, 2, 3))

    def postprocess(self, raw, score_threshold=0.0, iou_threshold=0.5, max_detections=100):
        one = {"boxes": torch.tensor([[0.0, 0.0, 32.0, 16.0]]), "scores": torch.tensor([0.9]),
               "labels": torch.tensor([0])}  # fmt: skip
        return [one for _ in raw]


def _detector() -> Detector:
    extra = {"pad_value": 114, "interpolation": "bilinear", "antialias": False,
             "letterbox_anchor": "top-left"}  # fmt: skip
    spec = PreprocessSpec(resize="letterbox", size=(64, 64), extra=extra)
    config = ModelConfig(
        architecture="yolox-nano", arch_args={}, task="detect", preprocess=spec,
        metric_preset="coco-bbox", class_ids=[c["id"] for c in CATEGORIES],
        class_names=[c["name"] for c in CATEGORIES],
    )  # fmt: skip
    return Detector(LoadedModel(OneBox(), config, "one-box"))


def _coco_set(root: Path) -> Path:
    """tiny_coco() on flat grey images, in the COCO layout `eval` reads."""
    gt = tiny_coco()
    for im in gt["images"]:
        grey = np.full((im["height"], im["width"], 3), 128, np.uint8)
        write_image(root / "images" / im["file_name"], grey)
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val.json").write_text(json.dumps(gt))
    return root


def _cards(html: str) -> list[tuple[str, list[tuple[str, np.ndarray]]]]:
    """(image name, [(label, decoded picture)]) per gallery card, in page order."""
    cards = []
    for m in re.finditer(r'<div class="item"[^>]*data-name="([^"]+)">(.*?)</div></div>', html):
        found = re.findall(r'src="data:image/jpeg;base64,([^"]+)" alt="([^"]+)"', m[2])
        pics = [
            (label, np.asarray(Image.open(io.BytesIO(base64.b64decode(data))).convert("RGB")))
            for data, label in found
        ]
        cards.append((m[1], pics))
    return cards


def _near(img: np.ndarray, colour: tuple[int, int, int]) -> np.ndarray:
    return np.abs(img.astype(int) - colour).max(axis=-1) < 50


def test_worst_images_come_first_drawn_with_truth_and_predictions_apart(tmp_path: Path):
    data = _coco_set(tmp_path / "coco")
    result = evaluate_coco_set(_detector(), data, model_name="one-box")
    html = render_detection_report(result, load_coco(*find_coco_set(data)))
    assert "misses + false positives" in html
    cards = _cards(html)
    # a.png: 3 people/dogs, 1 box found at most -> most errors; c.png: nothing there, 1 false
    errors = {r["file_name"]: r["misses"] + r["false_positives"] for r in result.rows}
    assert [name for name, _ in cards] == sorted(errors, key=lambda n: -errors[n])
    assert errors[cards[0][0]] > errors[cards[-1][0]]
    name, pics = cards[0]
    drawn = dict(pics)
    assert set(drawn) == {"ground truth", "predictions", "both"}
    truth, preds, both = drawn["ground truth"], drawn["predictions"], drawn["both"]
    # each drawing has its own colour only; the overlay has both
    assert _near(truth, GT_COLOUR).sum() > 200 and _near(truth, PRED_COLOUR).sum() == 0
    assert _near(preds, PRED_COLOUR).sum() > 200 and _near(preds, GT_COLOUR).sum() == 0
    assert _near(both, GT_COLOUR).sum() > 200 and _near(both, PRED_COLOUR).sum() > 200
    # and where the boxes are: a.png (128x96) drawn at 512 wide, scale 4; its first ground
    # truth box is [2, 3, 40, 60] -> left edge x 8..10 (3 px), y 12..252
    assert name == "a.png" and truth.shape[:2] == (384, 512)
    assert _near(truth[100:240, 8:11], GT_COLOUR).all()
    assert not _near(preds[100:240, 8:11], GT_COLOUR).any()


def test_eval_report_on_a_detector_through_the_command_line(tmp_path: Path):
    data = _coco_set(tmp_path / "coco")
    report = tmp_path / "r" / "report.html"
    res = CliRunner().invoke(
        app,
        ["eval", "--model", "default-detect", "--data", str(data), "--out", str(tmp_path / "o"),
         "--report", str(report), "--report-k", "2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    html = report.read_text()
    assert "yolox-nano" in html and "AP50" in html  # the model card and the COCO figures
    rows = (tmp_path / "o" / "per_image.csv").read_text().splitlines()
    assert len(rows) == 4 and len(_cards(html)) == 3  # a small set shows every image
    assert [n for n, _ in _cards(html)][0] == "a.png"  # three boxes, the most missed
