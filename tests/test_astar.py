"""The Astar 2019 scorer: its NMS quirk, MAdds count, score formula, data quirks, adapter."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from clearsight.artifact import LoadedModel, make_config
from clearsight.detection.astar import (
    AstarQuirks,
    ContestAdapter,
    contest_images,
    contest_iou,
    contest_nms,
    contest_score,
    madds_penalty,
)
from clearsight.detection.coco_classes import COCO_IDS
from clearsight.measure.madds import count_madds
from clearsight.models.registry import build_model
from tests.optional import need

# (box a, box b, true IoU, the contest's IoU with +1 on widths and heights)
WORKED = [
    ([0, 0, 0.2, 0.2], [0.181, 0, 0.381, 0.2], 0.05, 0.74),  # 0.2 boxes, slight overlap
    ([0, 0, 0.2, 0.2], [0.2, 0, 0.4, 0.2], 0.0, 0.71),  # touching only
    ([0, 0, 0.15, 0.5], [0.1, 0, 0.25, 0.5], 0.20, 0.84),  # 0.15 x 0.5 side by side
    ([0, 0, 1, 1], [0.45, 0.45, 0.55, 0.55], 0.01, 0.30),  # 0.1 box inside the image
]


@pytest.mark.parametrize(("a", "b", "true_iou", "contest"), WORKED)
def test_nms_iou_adds_one_to_widths_and_heights(a, b, true_iou, contest):
    a, b = np.array([a], dtype=np.float64), np.array([b], dtype=np.float64)
    assert contest_iou(a, b, plus_one=False)[0, 0] == pytest.approx(true_iou, abs=0.002)
    assert contest_iou(a, b, plus_one=True)[0, 0] == pytest.approx(contest, abs=0.005)
    assert contest_iou(b, a, plus_one=True)[0, 0] == pytest.approx(contest, abs=0.005)


def test_nms_suppression_decisions_follow_the_plus_one_iou():
    def kept(a, b, plus_one=True, labels=(1, 1)):
        boxes = np.array([a, b], dtype=np.float64)
        scores = np.zeros((81, 2))
        scores[labels[0], 0], scores[labels[1], 1] = 0.9, 0.8
        return [(lab, round(s, 2)) for lab, s, _ in contest_nms(boxes, scores, plus_one=plus_one)]

    for a, b, _, contest in WORKED:
        want = [(1, 0.9)] if contest > 0.45 else [(1, 0.9), (1, 0.8)]
        assert kept(a, b) == want
    # Without the quirk only the 0.05 / 0 / 0.2 / 0.01 true IoUs count: nothing is suppressed.
    assert all(len(kept(a, b, plus_one=False)) == 2 for a, b, _, _ in WORKED)
    # Another class never suppresses; a disjoint pair never does; the background row is skipped.
    assert kept(*WORKED[1][:2], labels=(1, 2)) == [(1, 0.9), (2, 0.8)]
    assert len(kept([0, 0, 0.2, 0.2], [0.3, 0, 0.5, 0.2])) == 2
    assert kept(*WORKED[1][:2], labels=(0, 0)) == []


def test_nms_score_threshold_is_strict_and_there_is_no_top_k():
    rng = np.random.default_rng(0)
    centers = rng.uniform(0, 1, size=(500, 2))
    boxes = np.concatenate([centers, centers + 1e-4], axis=1) * 1e3  # far apart: no overlaps
    scores = np.zeros((81, 500))
    scores[3] = np.linspace(0.02, 0.9, 500)
    scores[3, 0] = 0.01  # at the threshold: dropped (score > 0.01 is kept)
    out = contest_nms(boxes, scores, plus_one=False)
    assert len(out) == 499 and {lab for lab, _, _ in out} == {3}


class _HandNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1, bias=True),  # 2*16*16*8*(27+1) = 114688
            nn.BatchNorm2d(8),  # 2 * 8*16*16 = 4096
            nn.ReLU(),  # 2048
            nn.MaxPool2d(2),  # 8*8*8 * 2^2 = 2048
            nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),  # 2*8*8*8*9 = 9216
            nn.ReLU6(),  # free
            nn.AdaptiveAvgPool2d(1),  # 1*1*8 * 8^2 = 512
            nn.Flatten(),
        )
        self.fc = nn.Linear(8, 10)  # 8*10 = 80
        self.act = nn.Sigmoid()  # 10

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.fc(self.body(x))) + 1  # the add is free


HAND_FLOPS = 114688 + 4096 + 2048 + 2048 + 9216 + 512 + 80 + 10


def test_madds_counter_equals_a_hand_count():
    count = count_madds(_HandNet(), (16, 16))
    assert count.flops == HAND_FLOPS
    assert not count.quantized and count.madds == pytest.approx(HAND_FLOPS / 2e6)
    assert [t for _, t, _ in count.layers].count("ReLU6") == 0


@pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::UserWarning")
def test_madds_are_halved_for_a_quantized_graph():
    quantization = pytest.importorskip("torch.ao.quantization")
    q = quantization.quantize_dynamic(_HandNet().eval(), {nn.Linear}, dtype=torch.qint8)
    count = count_madds(q, (16, 16))
    assert count.quantized and count.flops == HAND_FLOPS
    assert count.madds == pytest.approx(HAND_FLOPS / 4e6)
    assert count_madds(q, (16, 16), halve_quantized=False).madds == pytest.approx(HAND_FLOPS / 2e6)


def test_score_formula_floor_and_ceiling():
    at_floor = 5.1249 * math.log(160) - 14.499
    assert madds_penalty(160) == pytest.approx(at_floor) == pytest.approx(11.5106, abs=1e-3)
    assert madds_penalty(50) == madds_penalty(160)  # below 160 counts as 160
    assert contest_score(0.25, 100) == pytest.approx(25 - at_floor)
    at_ceiling = 5.1249 * math.log(1300) - 14.499
    assert contest_score(0.25, 1300) == pytest.approx(25 - at_ceiling)
    assert at_ceiling == pytest.approx(22.2471, abs=1e-3)
    assert contest_score(0.25, 1300.01) == 0.0
    assert contest_score(0.25, 735.0) == pytest.approx(25 - (5.1249 * math.log(735) - 14.499))


class _FakeCoco:
    def __init__(self, annotated: int, unannotated: int) -> None:
        n = annotated + unannotated
        self.imgs = {i: {"id": i, "file_name": f"{i}.jpg"} for i in range(1, n + 1)}
        self._ann = {i: [i] if i <= annotated else [] for i in self.imgs}

    def getAnnIds(self, imgIds: int) -> list[int]:  # noqa: N802, N803 - pycocotools' names
        return self._ann[imgIds]


def test_drop_last_single_and_skip_unannotated_quirks():
    ids = [im["id"] for im in contest_images(_FakeCoco(33, 2), AstarQuirks())]
    assert ids == list(range(1, 33))  # 33 annotated: the last batch of one is dropped
    off = AstarQuirks(drop_last_single=False)
    assert len(contest_images(_FakeCoco(33, 2), off)) == 33
    assert len(contest_images(_FakeCoco(34, 0), AstarQuirks())) == 34  # last batch of two
    keep_all = AstarQuirks(skip_unannotated=False)
    assert len(contest_images(_FakeCoco(33, 2), keep_all)) == 35  # 35 = 32 + 3: nothing dropped
    assert len(contest_images(_FakeCoco(31, 2), keep_all)) == 32  # 33 -> 32


def _ssd_with_known_class_scores() -> LoadedModel:
    """An SSD whose raw class j scores sigmoid((j - 45) / 10) at every anchor."""
    model = build_model("ssd-mobilenet-v1").eval()
    with torch.no_grad():
        for head, a in zip(model.class_heads, model.boxes_per_location, strict=True):
            head.weight.zero_()
            head.bias.copy_(((torch.arange(91.0) - 45) / 10).repeat(a))
    config = make_config(model, "ssd-mobilenet-v1", name="toy")
    config.class_ids = list(range(1, 91))
    return LoadedModel(model, config, "toy")


def test_adapter_maps_91_raw_classes_to_the_contests_81_rows_and_back():
    loaded = _ssd_with_known_class_scores()
    adapter = ContestAdapter(loaded.model, loaded.config)
    with torch.no_grad():
        boxes, scores = adapter(torch.zeros(1, 3, 300, 300))
    assert boxes.shape == (1, 1917, 4) and scores.shape == (1, 81, 1917)
    assert 0 < float(boxes[0, :, 2].mean()) < 1  # normalized
    logit = torch.logit(scores[0, :, 0].double())
    raw_class = torch.round(logit * 10 + 45).long().tolist()
    assert raw_class[0] == 0  # row 0 is the background column
    assert raw_class[1:] == list(COCO_IDS)  # row r holds the model's score for COCO_IDS[r-1]
    # Through the contest's NMS and id map: the category written is the raw class again.
    out = contest_nms(boxes[0].numpy(), scores[0].numpy(), score_threshold=0.5, plus_one=False)
    assert {COCO_IDS[lab - 1] for lab, _, _ in out} == {i for i in COCO_IDS if i > 45}


def test_adapter_folds_the_contest_preprocessing_into_the_first_conv():
    torch.manual_seed(0)
    model = build_model("ssd-mobilenet-v1").eval()
    config = make_config(model, "ssd-mobilenet-v1")
    config.class_ids = list(range(1, 91))
    adapter = ContestAdapter(model, config)
    rgb = torch.randint(0, 256, (1, 3, 300, 300)).double()
    own = ((rgb - 128) / 128).float()  # the model's preprocessing
    contest = ((rgb.flip(1) - 127.5) * 0.007843).float()  # BGR, the contest's
    with torch.no_grad():
        want = model.conv0[0](own)
        got = adapter.model.conv0[0](contest)
    # Equal inside; the bottom/right border row differs by the folded offset through padding.
    assert torch.allclose(got[..., :-1, :-1], want[..., :-1, :-1], atol=1e-4)
    assert not torch.equal(model.conv0[0].weight, adapter.model.conv0[0].weight)  # a copy
    assert "folded" in adapter.note


@pytest.mark.realdata
def test_astar_score_on_a_few_real_images(shared_data: Path, tmp_path: Path):
    """End to end on 8 images of coco_mini_val with the converted SSD (a smoke check)."""
    need("tflite")
    from clearsight.convert.tflite_ssd import convert_tflite_ssd
    from clearsight.detection.astar import astar_score

    src = shared_data / "detection/pretrained/ssd_mobilenet_v1_coco_quant.tflite"
    data = shared_data / "detection/coco_mini_val"
    if not src.is_file() or not data.is_dir():
        pytest.skip("SSD file or coco_mini_val not found")
    art = convert_tflite_ssd(src, tmp_path / "ssd", name="ssd")
    r = astar_score(art, data, limit=8)
    d = r.to_dict()
    assert d["images"] == 8 and d["quirks"]["nms_plus_one"] is True
    assert 700 < d["madds"] < 770 and not d["quantized"]
    assert d["penalty"] == pytest.approx(5.1249 * math.log(d["madds"]) - 14.499)
    assert 0.1 < d["map"] < 0.6 and d["score"] == pytest.approx(100 * d["map"] - d["penalty"])
