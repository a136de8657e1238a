"""Int8 quantization of detectors (`compress quantize DETECTOR [--layout decoded|astar]`)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from typer.testing import CliRunner

from clearsight.api import load_model
from clearsight.artifact import LoadedModel, make_config, save_artifact
from clearsight.cli import app
from clearsight.compress.quant_report_detect import detect_quant_report, matched
from clearsight.compress.quantize import (
    QuantizeOptions,
    input_path_nodes,
    output_path_nodes,
    prepare_detection_image,
    quantize_model,
    save_quantized,
)
from clearsight.detection.astar import contest_preprocess
from clearsight.detection.preprocess import prepare
from clearsight.engine.detector import Detector
from clearsight.export.onnx_detect import synthetic_scene
from clearsight.io import read_image, write_image
from clearsight.measure.madds import count_madds_onnx
from clearsight.models.registry import build_model
from clearsight.onnx_meta import CLASSES_KEY, CONFIG_KEY, EXPORT_KEY, PRECISION_KEY, PREPROCESS_KEY
from clearsight.runtime.ort_backend import load_onnx
from clearsight.runtime.ort_detect import OrtDetector
from clearsight.zoo import default_int8_output
from tests.helpers import tiny_ssd
from tests.optional import need

runner = CliRunner()
OPTS = QuantizeOptions(max_images=3)


def _props(data: bytes) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load_from_string(data).metadata_props}


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("det-calib")
    for k, (h, w) in enumerate([(96, 128), (120, 90), (100, 100), (80, 140)]):
        write_image(d / f"{k:02d}.png", synthetic_scene(h, w, seed=k))
    return d


@pytest.fixture(scope="module")
def ssd_int8(images) -> dict[str, tuple[LoadedModel, object]]:
    """The tiny SSD quantized in each layout."""
    lm = tiny_ssd()
    return {
        layout: (lm, quantize_model(lm, images, replace(OPTS, layout=layout)))
        for layout in ("decoded", "astar")
    }


@pytest.mark.parametrize("layout", ["decoded", "astar"])
def test_int8_detector_keeps_the_fp32_metadata_plus_its_precision(ssd_int8, layout, tmp_path):
    _, result = ssd_int8[layout]
    fp32, int8 = _props(result.fp32_data), _props(result.data)
    for key in (CONFIG_KEY, PREPROCESS_KEY, CLASSES_KEY):
        assert json.loads(int8[key]) == json.loads(fp32[key])
    info32, info8 = json.loads(fp32[EXPORT_KEY]), json.loads(int8[EXPORT_KEY])
    assert {k: v for k, v in info8.items() if k not in ("precision", "quantization")} == info32
    assert info8["layout"] == layout and info8["precision"] == int8[PRECISION_KEY] == "int8"
    q = info8["quantization"]
    assert q["calibration"] == "percentile" and q["calibration_images"] == 3
    assert q["calibration_crop"] is None
    # the box decode and the stem stay fp32; the rest is int8
    kept = set(result.excluded)
    assert set(output_path_nodes(result.fp32_data)) <= kept
    assert set(input_path_nodes(result.fp32_data, 3)) <= kept
    ops = {n.op_type for n in onnx.load_from_string(result.data).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    path = save_quantized(result, tmp_path / f"tiny-{layout}.int8.onnx")
    loaded = load_model(path)
    assert isinstance(loaded.model, OrtDetector) and loaded.model.layout == layout


def test_calibration_inputs_are_prepared_as_each_layout_is_fed(images):
    lm = tiny_ssd()
    path = sorted(images.iterdir())[1]
    astar = prepare_detection_image(path, lm, "astar")
    np.testing.assert_array_equal(astar[0], contest_preprocess(path)[0])
    decoded = prepare_detection_image(path, lm, "decoded")
    want = prepare(read_image(path), lm.config.preprocess)[0].numpy()
    np.testing.assert_array_equal(decoded[0], want)
    assert astar.shape == (1, 3, 300, 300) and decoded.shape == (1, 3, 128, 128)


def test_int8_stays_close_to_fp32_and_halves_the_contest_madds(ssd_int8, images):
    for layout in ("decoded", "astar"):
        _, result = ssd_int8[layout]
        fp32, int8 = load_onnx(result.fp32_data), load_onnx(result.data)
        rep = detect_quant_report(
            fp32, int8, images, fp32_mb=1.0, int8_mb=0.5, runs=1, max_images=4
        )
        assert rep.n_images == 4 and rep.layout == layout
        scores = rep.output_max_abs_diff["scores"]
        assert 0 < scores <= 0.15 * rep.output_range["scores"], rep.output_max_abs_diff
        assert rep.detections_fp32 > 0 and rep.agreement is not None and rep.agreement >= 0.5
        assert rep.rows[1].latency_ms > 0 and rep.rows[0].accuracy is None
    _, astar = ssd_int8["astar"]
    c32, c8 = count_madds_onnx(astar.fp32_data), count_madds_onnx(astar.data)
    assert not c32.quantized and c8.quantized
    assert c8.madds == pytest.approx(c32.madds / 2, rel=1e-3)


def test_detections_match_by_label_and_overlap():
    box = np.array([0.0, 0.0, 10.0, 10.0])
    ref = [(1, 0.9, box), (2, 0.8, box)]
    assert matched(ref, [(1, 0.5, box + 1.0)]) == 1  # IoU 0.68, same label
    assert matched(ref, [(3, 0.9, box)]) == 0  # another label
    assert matched(ref, [(1, 0.9, box + 6.0)]) == 0  # IoU 0.09
    assert matched(ref, [(1, 0.9, box), (2, 0.1, box)]) == 2


def test_detect_precision_int8_runs_the_quantized_sibling(ssd_int8, images, tmp_path):
    lm, result = ssd_int8["decoded"]
    art = save_artifact(lm.model, tmp_path / "tiny-ssd", lm.config)
    save_quantized(result, tmp_path / "tiny-ssd.int8.onnx")
    det = Detector.from_pretrained(str(art), precision="int8")
    assert isinstance(det.model, OrtDetector)
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["detect", str(images), "--model", str(art), "--precision", "int8", "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert (out / "detections.json").is_file()
    res = runner.invoke(
        app, ["detect", str(images), "--model", str(tmp_path / "none"), "--precision", "int8"]
    )
    assert res.exit_code != 0 and "no int8 model" in res.output


def test_quantize_command_on_a_pruned_detector_artifact_in_the_astar_layout(images, tmp_path):
    need("torch_pruning")
    from clearsight.api import prune

    torch.manual_seed(0)
    args = {"num_classes": 3, "input_size": 64}
    model = build_model("yolox-nano", **args).eval()
    cfg = make_config(model, "yolox-nano", args)
    cfg.class_ids, cfg.class_names = [1, 3, 18], ["person", "car", "dog"]
    src = save_artifact(model, tmp_path / "yolox-src", cfg)
    pruned, _ = prune(src, tmp_path / "yolox-pruned", ratio=0.5)
    # random weights on 2 images leave a near-constant tensor: percentile's histogram fails
    # there (a one-line error, checked below), minmax does not
    out = tmp_path / "pruned-astar.int8.onnx"
    res = runner.invoke(
        app,
        [
            "compress", "quantize", str(pruned), "--calibration", str(images),
            "--layout", "astar", "-o", str(out), "--calibration-images", "2",
            "--max-images", "2", "--runs", "1", "--report", str(tmp_path / "r.json"),
            "--calibration-method", "minmax",
        ],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "int8" in res.output and "largest output differences" in res.output
    loaded = load_model(out)
    assert isinstance(loaded.model, OrtDetector) and loaded.model.layout == "astar"
    assert loaded.model.export_info["precision"] == "int8"
    rep = json.loads((tmp_path / "r.json").read_text())
    assert rep["layout"] == "astar" and rep["n_images"] == 2 and rep["detections_fp32"] >= 0
    # no --data: no accuracy; the MAdds halving is checked on the SSD above
    assert rep["rows"][1]["accuracy"] is None and rep["rows"][1]["latency_ms"] > 0


def test_bad_requests_fail_with_one_line(images, tmp_path):
    lm = tiny_ssd()
    art = save_artifact(lm.model, tmp_path / "tiny-ssd", lm.config)
    empty = tmp_path / "empty"
    empty.mkdir()
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "a.png").write_bytes(b"not an image")
    cases = [
        (["--calibration", str(tmp_path / "missing")], "--calibration"),
        (["--calibration", str(empty)], "no images found"),
        (["--calibration", str(tmp_path / "junk")], "a.png"),
        (["--calibration", str(images), "--layout", "sideways"], "layout"),
    ]
    for extra, needle in cases:
        res = runner.invoke(
            app, ["compress", "quantize", str(art), "-o", str(tmp_path / "x.onnx"), *extra]
        )
        assert res.exit_code != 0, extra
        errors = [line for line in res.output.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and needle in errors[0], res.output
        assert "Traceback" not in res.output, res.output
    assert not (tmp_path / "x.onnx").exists()


def test_default_output_names_the_contest_layout():
    assert default_int8_output("default-detect") == Path("default-detect.int8.onnx")
    assert default_int8_output("default-detect", "astar") == Path("default-detect-astar.int8.onnx")
    assert default_int8_output("m/x.onnx", "astar") == Path("m/x-astar.int8.onnx")
