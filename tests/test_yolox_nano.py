"""YOLOX-Nano: decoding and NMS, the ONNX converter's checks, parity with ONNX Runtime and the
bundled default-detect artifact."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from clearsight.artifact import load_artifact, make_config, save_artifact
from clearsight.convert.yolox_onnx import ConversionError, convert_yolox_onnx
from clearsight.data.coco import CocoDataset, load_coco
from clearsight.detection.coco_classes import COCO_IDS, COCO_NAMES
from clearsight.detection.preprocess import prepare
from clearsight.engine.detect_evaluate import detect_dataset
from clearsight.engine.detector import Detector
from clearsight.metrics.coco_eval import evaluate_coco
from clearsight.models.registry import count_parameters, get_spec
from clearsight.models.yolox_nano import YOLOXNano
from clearsight.zoo import bundled_models, resolve_model

ANCHORS = 52 * 52 + 26 * 26 + 13 * 13


def _raw(*anchors: tuple[int, tuple[float, float, float, float], float, int, float]):
    """A raw head output with the given anchors set: (index, (dx, dy, log w, log h), obj,
    class, class score); every other score is zero."""
    raw = torch.zeros(1, ANCHORS, 85)
    for i, reg, obj, cls, score in anchors:
        raw[0, i, :4] = torch.tensor(reg)
        raw[0, i, 4] = obj
        raw[0, i, 5 + cls] = score
    return raw


def test_decoding_uses_grid_offsets_exp_sizes_and_the_level_stride():
    m = YOLOXNano()
    at_8 = 2 * 52 + 3  # stride 8, grid cell x=3, y=2
    at_32 = 52 * 52 + 26 * 26 + 5 * 13 + 7  # stride 32, x=7, y=5
    raw = _raw((at_8, (0.5, 0.5, 0.0, 0.0), 0.9, 5, 0.8),
               (at_32, (0.0, 0.0, float(np.log(2.0)), 0.0), 0.5, 0, 1.0))  # fmt: skip
    boxes = m.decode_boxes(raw)[0]
    assert torch.allclose(boxes[at_8], torch.tensor([24.0, 16.0, 32.0, 24.0]))
    assert torch.allclose(boxes[at_32], torch.tensor([7 * 32 - 32, 5 * 32 - 16, 7 * 32 + 32,
                                                       5 * 32 + 16.0]))  # fmt: skip
    (out,) = m.postprocess(raw, score_threshold=0.1)
    assert out["labels"].tolist() == [5, 0]
    assert torch.allclose(out["scores"], torch.tensor([0.72, 0.5]))  # obj x class score


def test_nms_is_per_class():
    m = YOLOXNano()
    a, b, c = 2 * 52 + 3, 2 * 52 + 4, 30 * 52 + 30  # a, b: 32 px boxes 8 px apart, IoU 0.6
    big = (0.0, 0.0, float(np.log(4.0)), float(np.log(4.0)))
    raw = _raw((a, big, 0.9, 1, 0.9), (b, big, 0.9, 1, 0.8), (c, big, 0.9, 1, 0.7))
    assert len(m.postprocess(raw, iou_threshold=0.5)[0]["scores"]) == 2  # b suppressed
    raw = _raw((a, big, 0.9, 1, 0.9), (b, big, 0.9, 2, 0.8))
    assert m.postprocess(raw, iou_threshold=0.5)[0]["labels"].tolist() == [1, 2]
    assert len(m.postprocess(raw, max_detections=1)[0]["scores"]) == 1


def test_registered_with_its_preprocessing_and_round_trips_with_the_class_map(tmp_path):
    spec = get_spec("yolox-nano")
    assert spec.task == "detect" and spec.preprocess.resize == "letterbox"
    assert spec.preprocess.color_order == "BGR" and spec.preprocess.value_range == (0.0, 255.0)
    torch.manual_seed(0)
    model = YOLOXNano().eval()
    assert count_parameters(model) == 904_463
    cfg = make_config(model, "yolox-nano", {"num_classes": 80}, name="t")
    cfg.class_ids, cfg.class_names = list(COCO_IDS), list(COCO_NAMES)
    loaded = load_artifact(save_artifact(model, tmp_path / "a", cfg))
    assert loaded.config.class_ids == list(COCO_IDS)
    assert loaded.config.class_names[-1] == "toothbrush"
    det = Detector(loaded)
    assert det.class_ids[11] == 13 and det.class_names[11] == "stop sign"  # id 12 unused
    x = torch.rand(1, 3, 64, 64) * 255  # any multiple of 32: 8x8 + 4x4 + 2x2 anchors
    with torch.inference_mode():
        out = loaded.model(x)
        assert torch.equal(out, model(x))
    assert out.shape == (1, 84, 85)


# --------------------------------------------------------------------------- real data


@pytest.fixture(scope="module")
def onnx_path(shared_data):
    p = shared_data / "detection" / "pretrained" / "yolox_nano_coco.onnx"
    if not p.is_file():
        pytest.skip(f"{p} not found")
    return p


@pytest.fixture(scope="module")
def mini_val(shared_data) -> CocoDataset:
    root = shared_data / "detection" / "coco_mini_val"
    if not root.is_dir():
        pytest.skip(f"{root} not found")
    return load_coco(root / "annotations" / "instances_val2017.json", root / "val2017")


def _ort(onnx_path):
    import onnxruntime as ort

    return ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])


@pytest.mark.realdata
def test_outputs_match_onnx_runtime_on_coco_images(onnx_path, mini_val):
    """Scores within 1e-4 of ONNX Runtime; the box regressions (grid offsets and log sizes,
    up to about 4) within 1e-3, i.e. 0.03 px at stride 32. Float32 rounding alone moves them
    by 2-4e-4 on these images: PyTorch and ONNX Runtime each differ that much from a float64
    run of the same weights, so 1e-4 is below what two float32 kernels agree to."""
    model = convert_yolox_onnx(onnx_path)
    session = _ort(onnx_path)
    spec = get_spec("yolox-nano").preprocess
    for i in (0, 1, 2):
        x, _ = prepare(mini_val.image(i), spec)
        with torch.inference_mode():
            ours = model(x[None])
        ref = torch.from_numpy(session.run(None, {"images": x[None].numpy()})[0])
        assert ours.shape == ref.shape == (1, ANCHORS, 85)
        name = mini_val[i].file_name
        assert (ours[..., 4:] - ref[..., 4:]).abs().max() < 1e-4, name
        assert (ours[..., :4] - ref[..., :4]).abs().max() < 1e-3, name
        confident = ref[0, :, 4] * ref[0, :, 5:].max(dim=1).values > 0.05
        pixels = (model.decode_boxes(ours) - model.decode_boxes(ref))[0, confident].abs().max()
        assert confident.sum() > 5 and pixels < 0.05, name


@pytest.mark.realdata
def test_bundled_default_detect_holds_the_converted_weights(onnx_path):
    assert "default-detect" in bundled_models()
    loaded = resolve_model("default-detect")
    assert loaded.config.task == "detect" and loaded.config.architecture == "yolox-nano"
    assert loaded.config.class_ids == list(COCO_IDS)
    assert loaded.config.class_names == list(COCO_NAMES)
    assert loaded.config.preprocess == get_spec("yolox-nano").preprocess
    fresh = convert_yolox_onnx(onnx_path).state_dict()
    for k, v in loaded.model.state_dict().items():
        assert torch.equal(v, fresh[k]), k


def _save_edited(onnx_path, tmp_path, edit):
    import onnx

    proto = onnx.load(str(onnx_path))
    edit(proto.graph)
    out = tmp_path / "edited.onnx"
    onnx.save(proto, str(out))
    return out


@pytest.mark.realdata
def test_converter_refuses_a_miswired_graph_and_names_stray_weights(onnx_path, tmp_path):
    def swap_first_concat(graph):
        node = next(n for n in graph.node if n.op_type == "Concat" and len(n.input) == 2)
        a, b = list(node.input)
        del node.input[:]
        node.input.extend([b, a])

    with pytest.raises(ConversionError, match="differs in producers"):
        convert_yolox_onnx(_save_edited(onnx_path, tmp_path, swap_first_concat))

    def add_stray(graph):
        stray = copy.deepcopy(graph.initializer[0])
        stray.name = "stray_weight"
        graph.initializer.append(stray)

    with pytest.raises(ConversionError, match="not mapped to any layer: \\['stray_weight'\\]"):
        convert_yolox_onnx(_save_edited(onnx_path, tmp_path, add_stray))
    with pytest.raises(ConversionError, match="not found"):
        convert_yolox_onnx(tmp_path / "none.onnx")


class _OrtForward(torch.nn.Module):
    def __init__(self, session) -> None:
        super().__init__()
        self.session = session

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.from_numpy(self.session.run(None, {"images": x.numpy()})[0])


@pytest.mark.realdata
def test_ap_matches_the_onnx_runtime_reference_on_a_subset(onnx_path, mini_val):
    """Ten images through the whole pipeline (letterbox, decode, NMS, COCO scorer): the port's
    AP equals ONNX Runtime's. The full 78-image figures are in the default-detect card
    (`benchmarks/detect_coco.py`)."""
    subset = CocoDataset(mini_val.annotation_file, mini_val.image_dir, mini_val.images[:10],
                         mini_val.categories)  # fmt: skip
    ids = {im.id for im in subset.images}
    gt = dict(mini_val.raw)
    gt["images"] = [im for im in gt["images"] if im["id"] in ids]
    gt["annotations"] = [a for a in gt["annotations"] if a["image_id"] in ids]
    ours = Detector.from_pretrained("default-detect")
    ref = Detector(
        type(ours.loaded)(_OrtForward(_ort(onnx_path)), ours.loaded.config, str(onnx_path))
    )
    ap_ours = evaluate_coco(gt, detect_dataset(ours, subset))
    ap_ref = evaluate_coco(gt, detect_dataset(ref, subset))
    assert ap_ours.ap == pytest.approx(ap_ref.ap, abs=0.005)
    assert ap_ours.ap50 == pytest.approx(ap_ref.ap50, abs=0.005)
    assert ap_ours.ap > 0.2  # a working detector, not merely two equal broken ones
