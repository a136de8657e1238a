"""Detector export to ONNX (decoded and Astar layouts), the ONNX Runtime detector backend, the
ONNX MAdds count, and the one-line errors between detection and restoration models."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from torch import nn
from typer.testing import CliRunner

from clearsight.api import load_model
from clearsight.artifact import LoadedModel, save_artifact
from clearsight.cli import app
from clearsight.detection.astar import ContestAdapter, astar_score, contest_preprocess
from clearsight.engine.detector import Detections, Detector
from clearsight.export.onnx import export_onnx
from clearsight.export.onnx_detect import synthetic_scene
from clearsight.io import write_image
from clearsight.measure.madds import count_madds, count_madds_onnx
from clearsight.runtime.ort_detect import OrtDetector
from tests.helpers import TinyConvNet, loaded, tiny_ssd

runner = CliRunner()


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> tuple[LoadedModel, Path, Path]:
    """The tiny SSD, its artifact folder and its decoded-layout export."""
    lm = tiny_ssd()
    root = tmp_path_factory.mktemp("det")
    art = save_artifact(lm.model, root / "tiny-ssd", lm.config)
    path, parity = export_onnx(lm, root / "tiny.onnx")
    assert parity.max_abs_diff <= 1e-4 and parity.detections is not None
    return lm, art, path


def _same(a: Detections, b: Detections, box_tol: float = 1e-3) -> None:
    assert len(a) == len(b) > 0
    for box, score, label in zip(a.boxes, a.scores, a.labels, strict=True):
        d = (b.boxes - box).abs().amax(dim=1)
        hit = (d <= box_tol) & (b.labels == label) & ((b.scores - score).abs() <= 1e-4)
        assert hit.any(), f"no ONNX Runtime match for label {int(label)} at {box.tolist()}"


def test_decoded_export_has_dynamic_batch_metadata_and_same_detections(tiny):
    lm, _, path = tiny
    proto = onnx.load(str(path))
    dims = {
        o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
        for o in proto.graph.output
    }
    assert list(dims) == ["boxes", "scores", "raw0", "raw1"]
    anchors = int(lm.model.anchors.shape[0])
    assert dims["boxes"] == ["N", anchors, 4] and dims["scores"] == ["N", anchors, 5]
    inp = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert inp == ["N", 3, 128, 128]
    meta = {p.key: json.loads(p.value) for p in proto.metadata_props}
    assert meta["clearsight_preprocess"]["size"] == [128, 128]
    assert meta["clearsight_preprocess"]["mean"] == [128.0] * 3
    assert meta["clearsight_classes"]["class_ids"] == [1, 18, 44, 90]
    assert meta["clearsight_export"]["layout"] == "decoded"

    ort = load_model(path)
    assert isinstance(ort.model, OrtDetector) and ort.config.task == "detect"
    img = synthetic_scene(90, 140, seed=3)
    torch_dets = Detector(lm).detect(img, score_threshold=0.3)
    ort_dets = Detector(ort).detect(img, score_threshold=0.3)
    _same(torch_dets, ort_dets)
    assert ort_dets.category_ids == torch_dets.category_ids
    # the decoded outputs are the PyTorch decode, for a batch of three
    x = torch.rand(3, 3, 128, 128) * 2 - 1
    got = ort.model.run_all(x)
    with torch.no_grad():
        boxes, scores = lm.model.decode(lm.model(x))
    assert torch.allclose(got["boxes"], boxes, atol=1e-3)
    assert torch.allclose(got["scores"], scores, atol=1e-5)


def test_detect_cli_runs_an_exported_detector(tiny, tmp_path):
    lm, _, path = tiny
    img = synthetic_scene(64, 96, seed=5)
    write_image(tmp_path / "in" / "7.png", img)
    r = runner.invoke(
        app, ["detect", str(tmp_path / "in"), "--model", str(path), "-o", str(tmp_path / "o")]
    )
    assert r.exit_code == 0, r.output
    results = json.loads((tmp_path / "o" / "detections.json").read_text())
    want = Detector(lm).detect(img).to_coco(7)
    assert [d["category_id"] for d in results] == [d["category_id"] for d in want]
    assert np.allclose([d["bbox"] for d in results], [d["bbox"] for d in want], atol=0.02)


def test_detect_cli_backend_onnxruntime_matches_torch(tiny, tmp_path):
    """`detect --backend onnxruntime` on an artifact exports it in memory and runs ONNX
    Runtime: the same detections as the PyTorch run; an unknown backend is one line."""
    _, art, _ = tiny
    write_image(tmp_path / "in" / "3.png", synthetic_scene(64, 96, seed=6))
    found = {}
    for backend in ("torch", "onnxruntime"):
        out = tmp_path / backend
        args = ["detect", str(tmp_path / "in"), "--model", str(art), "-o", str(out)]
        r = runner.invoke(app, [*args, "--backend", backend])
        assert r.exit_code == 0, r.output
        found[backend] = json.loads((out / "detections.json").read_text())
    assert len(found["torch"]) > 0
    assert [d["category_id"] for d in found["onnxruntime"]] == [
        d["category_id"] for d in found["torch"]
    ]
    assert np.allclose(
        [d["bbox"] for d in found["onnxruntime"]], [d["bbox"] for d in found["torch"]], atol=0.02
    )
    assert isinstance(Detector.from_pretrained(str(art), backend="onnxruntime").model, OrtDetector)
    r = runner.invoke(app, ["detect", str(tmp_path / "in"), "--model", str(art), "--backend", "x"])
    assert r.exit_code != 0 and "unknown backend 'x'" in r.output


def _contest_coco(root: Path) -> Path:
    """Three annotated synthetic scenes in the contest's folder layout."""
    images, anns = [], []
    for i in range(3):
        img = synthetic_scene(96, 128, seed=10 + i)
        write_image(root / "val2017" / f"{i + 1:012d}.jpg", img)
        images.append({"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": 128, "height": 96})
        anns.append(
            {"id": i + 1, "image_id": i + 1, "category_id": 18, "bbox": [10, 10, 50, 40],
             "area": 2000.0, "iscrowd": 0}
        )  # fmt: skip
    gt = {"images": images, "annotations": anns, "categories": [{"id": 18, "name": "dog"}]}
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(gt))
    return root


def test_astar_layout_is_the_adapter_and_scores_like_pytorch(tiny, tmp_path):
    lm, _, _ = tiny
    path, parity = export_onnx(lm, tmp_path / "a.onnx", layout="astar")
    assert parity.max_abs_diff <= 1e-4
    ort = load_model(path)
    assert ort.model.layout == "astar"
    data = _contest_coco(tmp_path / "coco")
    x = torch.from_numpy(np.stack([contest_preprocess(p)[0] for p in data.glob("val2017/*")]))
    boxes, scores = ort.model.run_contest(x)
    assert boxes.shape[0] == 3 and boxes.shape[2] == 4 and scores.shape[:2] == (3, 81)
    with torch.no_grad():
        ref_boxes, ref_scores = ContestAdapter(lm.model, lm.config)(x)
    assert torch.allclose(boxes, ref_boxes, atol=1e-5)
    assert torch.allclose(scores, ref_scores, atol=1e-5)
    pt = astar_score(lm, data, drop_last_single=False)
    ox = astar_score(str(path), data, drop_last_single=False)
    assert ox.images == pt.images == 3 and ox.detections == pt.detections > 0
    assert ox.map == pytest.approx(pt.map, abs=1e-6)
    # the graph count also sees the decode's functional sigmoid, which hooks cannot
    assert pt.madds < ox.madds < pt.madds * 1.01


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_onnx_madds_count_matches_the_hook_count_and_halves_when_quantized(tmp_path):
    net = nn.Sequential(
        nn.Conv2d(3, 8, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False),
        nn.Sigmoid(),
        nn.Conv2d(8, 4, 1),
        nn.SiLU(),  # free in both counts
    ).eval()
    torch.onnx.export(
        net, (torch.zeros(1, 3, 32, 32),), str(tmp_path / "n.onnx"), dynamo=False,
        input_names=["input"], dynamic_axes={"input": {0: "N"}},
    )  # fmt: skip
    hooks = count_madds(net, (32, 32))
    graph = count_madds_onnx(str(tmp_path / "n.onnx"))
    hand = 2 * 16 * 16 * 8 * 28 + 16 * 16 * 8 + 8 * 8 * 8 * 4 + 2 * 8 * 8 * 8 * 9 + 8 * 8 * 8
    hand += 2 * 8 * 8 * 4 * 9
    assert graph.flops == hooks.flops == hand and not graph.quantized
    # a quantize/dequantize pair anywhere halves the total
    w = numpy_helper.from_array(np.ones((2, 3, 1, 1), np.float32), "w")
    s = numpy_helper.from_array(np.array(0.1, np.float32), "s")
    z = numpy_helper.from_array(np.array(0, np.uint8), "z")
    g = helper.make_graph(
        [
            helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            helper.make_node("DequantizeLinear", ["q", "s", "z"], ["d"]),
            helper.make_node("Conv", ["d", "w"], ["y"]),
        ],
        "q",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 4])],
        [w, s, z],
    )
    q = count_madds_onnx(helper.make_model(g).SerializeToString())
    assert q.quantized and q.flops == 2 * 16 * 2 * 3 and q.madds == q.flops / 4e6


def test_detection_and_restoration_models_refuse_each_others_commands(tiny, tmp_path):
    lm, art, path = tiny
    img = tmp_path / "x.png"
    write_image(img, synthetic_scene(32, 32, seed=0))
    restoration_onnx = tmp_path / "r.onnx"
    export_onnx(loaded(TinyConvNet()), restoration_onnx, parity_sizes=((16, 16),))
    cases = [
        (["restore", str(img), "--model", str(path), "-o", str(tmp_path / "o1")], "is a detector"),
        (["restore", str(img), "--model", str(art), "-o", str(tmp_path / "o2")], "is a detector"),
        (["detect", str(img), "--model", str(restoration_onnx), "-o", str(tmp_path / "o3")],
         "not a detector"),
        (["astar-score", str(path), "--data", str(_contest_coco(tmp_path / "coco"))],
         "--layout astar"),
        (["export", str(art), "--layout", "yolo"], "unknown detection layout"),
    ]  # fmt: skip
    for args, words in cases:
        r = runner.invoke(app, args)
        assert r.exit_code != 0, args
        lines = [ln for ln in r.output.strip().splitlines() if ln.strip()]
        assert len(lines) == 1 and words in lines[0], (args, r.output)
    astar = tmp_path / "a.onnx"
    export_onnx(lm, astar, layout="astar")
    r = runner.invoke(app, ["detect", str(img), "--model", str(astar), "-o", str(tmp_path / "o")])
    assert r.exit_code != 0 and "astar-score" in r.output


# --- real data: the bundled detectors ---------------------------------------------------------


@pytest.mark.realdata
@pytest.mark.parametrize("name", ["default-detect", "ssd-mobilenet-v1-coco"])
def test_bundled_detector_onnx_gives_the_same_detections_on_a_coco_image(
    name, shared_data, tmp_path
):
    images = sorted((shared_data / "detection/coco_mini_val/val2017").glob("*.jpg"))
    if not images:
        pytest.skip("coco_mini_val not found")
    lm = load_model(name)
    path, parity = export_onnx(lm, tmp_path / "m.onnx")
    assert parity.max_abs_diff <= 1e-4
    torch_det, ort_det = Detector(lm), Detector(load_model(path))
    for img in images[:2]:
        a = torch_det.detect(img, score_threshold=0.3)
        b = ort_det.detect(img, score_threshold=0.3)
        _same(a, b, box_tol=0.05)


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
@pytest.mark.realdata
def test_yolox_contest_layout_onnx_scores_like_pytorch_on_coco_images(shared_data, tmp_path):
    data = shared_data / "detection/coco_mini_val"
    if not data.is_dir():
        pytest.skip("coco_mini_val not found")
    lm = load_model("default-detect")
    path, _ = export_onnx(lm, tmp_path / "yolox-astar.onnx", layout="astar")
    pt = astar_score(lm, data, limit=6)
    ox = astar_score(str(path), data, limit=6)
    assert ox.images == pt.images == 6 and ox.detections == pt.detections
    assert ox.map == pytest.approx(pt.map, abs=1e-4) and pt.map > 0.1
    assert ox.madds == pytest.approx(pt.madds, rel=1e-3) and 500 < pt.madds < 560


def test_adapter_converts_the_contest_input_where_it_cannot_fold(tiny):
    """A 128x128 model (YOLOX's case: not 300x300) gets the contest tensor converted to its
    own preprocessing of the same pixels, then resized, in front of an untouched network."""
    lm, _, _ = tiny
    adapter = ContestAdapter(lm.model, lm.config)
    assert "bilinear resize" in adapter.note
    rgb = torch.randint(0, 256, (1, 3, 300, 300)).float()
    contest = (rgb.flip(1) - 127.5) * 0.007843
    own = lm.config.preprocess.to_model(rgb / 255)
    want = torch.nn.functional.interpolate(own, size=(128, 128), mode="bilinear")
    assert torch.allclose(adapter.contest_input(contest), want, atol=1e-4)
    assert torch.equal(adapter.model.conv0[0].weight, lm.model.conv0[0].weight)
