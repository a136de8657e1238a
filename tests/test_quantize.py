"""Int8 post-training quantization (`compress quantize`) and `--precision int8`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from typer.testing import CliRunner

from clearsight.artifact import LoadedModel, make_config, save_artifact
from clearsight.cli import app
from clearsight.compress.quant_report import quant_report
from clearsight.compress.quantize import (
    QuantizeError,
    QuantizeOptions,
    output_path_nodes,
    quantize_model,
    save_quantized,
)
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.errors import OptionError
from clearsight.io import write_image
from clearsight.models.registry import build_model
from clearsight.onnx_meta import CONFIG_KEY, EXPORT_KEY, PRECISION_KEY, PREPROCESS_KEY
from clearsight.runtime.ort_backend import load_onnx
from clearsight.zoo import find_int8, int8_path_for
from tests.helpers import random_image

runner = CliRunner()
OPTS = QuantizeOptions(max_images=3, crop=48)


def _tiny(name: str) -> LoadedModel:
    kw = {"channels": 4, "stages": 2} if name == "rescan" else {"n_filters": 4}
    torch.manual_seed(0)
    model = build_model(name, **kw).eval()
    cfg = make_config(model, name, kw, name=f"tiny-{name}")
    return LoadedModel(model=model, config=cfg, source=f"tiny-{name}")


def _smooth(h: int, w: int, seed: int) -> np.ndarray:
    """A photo-like image (smooth gradients plus some texture), uint8 RGB."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    base = np.stack([xx, yy, 1 - xx * yy], -1) * 180 + 30
    noise = random_image(h, w, seed).astype(np.float64) * 0.2
    return np.clip(base + noise + rng.normal(0, 3, (h, w, 3)), 0, 255).astype(np.uint8)


@pytest.fixture(scope="module")
def images(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("calib")
    for k in range(4):
        write_image(d / f"{k:02d}.png", _smooth(56 + 8 * k, 64, k))
    return d


@pytest.fixture(scope="module")
def tiny_rescan_int8(images) -> tuple[LoadedModel, object]:
    lm = _tiny("rescan")
    return lm, quantize_model(lm, images, OPTS)


def _props(data: bytes) -> dict[str, str]:
    return {p.key: p.value for p in onnx.load_from_string(data).metadata_props}


def test_int8_keeps_the_fp32_metadata_and_adds_its_precision(tiny_rescan_int8):
    _, result = tiny_rescan_int8
    fp32, int8 = _props(result.fp32_data), _props(result.data)
    for key in (CONFIG_KEY, PREPROCESS_KEY):
        assert json.loads(int8[key]) == json.loads(fp32[key])
    info32, info8 = json.loads(fp32[EXPORT_KEY]), json.loads(int8[EXPORT_KEY])
    own = ("precision", "quantization", "shared_stats")
    assert {k: v for k, v in info8.items() if k not in own} == {
        k: v for k, v in info32.items() if k != "shared_stats"
    }
    # int8 RESCAN runs untiled up to 1 MP (faster, and exact), the rest of its tiling as fp32
    stats32, stats8 = info32["shared_stats"], info8["shared_stats"]
    assert stats8 == {**stats32, "max_untiled_pixels": 1024 * 1024}
    assert load_onnx(result.data).model.tiling.max_untiled_pixels == 1024 * 1024
    assert info8["precision"] == int8[PRECISION_KEY] == "int8"
    assert info8["quantization"]["calibration_images"] == 3
    ops = {n.op_type for n in onnx.load_from_string(result.data).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops


def test_int8_stays_close_to_fp32_on_a_tiny_model(tiny_rescan_int8, images, tmp_path):
    lm, result = tiny_rescan_int8
    fp32 = load_onnx(result.fp32_data)
    path = save_quantized(result, tmp_path / "t.int8.onnx")
    int8 = load_onnx(path)
    assert int8.config.to_dict() == lm.config.to_dict()
    x = torch.rand(1, 3, 96, 80, generator=torch.Generator().manual_seed(3))
    # RESCAN predicts the rain layer; bound the int8 error relative to that residual
    rain32, rain8 = x - fp32.model.restore(x), x - int8.model.restore(x)
    rel = float((rain8 - rain32).norm() / rain32.norm())
    assert 0 < rel < 0.05  # measured 0.003; a wrong scale or zero point is ~1
    # the shared-statistics tiles are derived from the int8 file too (docs/quantize.md)
    tiled = int8.model.restore_tiled(x, tile=48, stats_pixels=None)
    assert float((tiled - int8.model.restore(x)).abs().max()) < 1e-4  # halo covers it


def test_parity_report_bounds_int8_against_fp32(images):
    result = quantize_model(_tiny("mbcnn"), images, QuantizeOptions(max_images=2, crop=48))
    fp32, int8 = load_onnx(result.fp32_data), load_onnx(result.data)
    report = quant_report(fp32, int8, images, fp32_mb=1.0, int8_mb=0.5, sizes=(32,), runs=1)
    vs = report.rows[1].psnr_vs_fp32
    assert vs is not None and 30.0 < vs < float("inf")  # measured 61 dB
    assert report.rows[0].psnr is None  # no targets in a plain folder
    head, body = report.table()
    assert head[0] == "precision" and [r[0] for r in body] == ["fp32", "int8"]
    assert json.loads(json.dumps(report.to_dict()))["speedup"]["32x32"] > 0


def test_the_output_path_stays_fp32(tiny_rescan_int8):
    _, result = tiny_rescan_int8
    kept = output_path_nodes(result.fp32_data)
    assert kept and any("Conv" in n for n in kept)
    g = onnx.load_from_string(result.data).graph
    inits = {t.name: t for t in g.initializer}
    for node in g.node:
        if node.name in kept and node.op_type == "Conv":
            w = inits.get(node.input[1])
            assert w is not None and w.data_type == onnx.TensorProto.FLOAT


def test_bad_requests_fail_with_one_line(tiny_rescan_int8, images, tmp_path):
    lm, result = tiny_rescan_int8
    with pytest.raises(OptionError, match="no node named 'nope'"):
        quantize_model(lm, images, QuantizeOptions(exclude=("nope",)))
    with pytest.raises(OptionError, match="method"):
        QuantizeOptions(method="fp16")
    with pytest.raises(QuantizeError, match="already quantized"):
        quantize_model(load_onnx(result.data), images, OPTS)
    with pytest.raises(QuantizeError, match="not a folder"):
        quantize_model(lm, tmp_path / "missing", OPTS)


def test_precision_int8_runs_the_sibling_file(tiny_rescan_int8, images, tmp_path):
    lm, result = tiny_rescan_int8
    art = save_artifact(lm.model, tmp_path / "m.safetensors", lm.config)
    with pytest.raises(OptionError, match="no int8 model"):
        Restorer.from_pretrained(str(art), precision="int8")
    save_quantized(result, int8_path_for(art))
    assert find_int8(str(art)) == tmp_path / "m.int8.onnx"
    r = Restorer.from_pretrained(str(art), precision="int8")
    assert r.model.export_info["precision"] == "int8"
    with pytest.raises(OptionError, match="precision"):
        InferenceOptions(precision="int4")
    with pytest.raises(OptionError, match="stages"):
        InferenceOptions(precision="int8", stages=1)
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        ["restore", str(images / "00.png"), "-m", str(art), "--precision", "int8", "-o", str(out)],
    )
    assert res.exit_code == 0, res.output
    assert (out / "00.png").is_file()


def test_compress_quantize_command(images, tmp_path):
    lm = _tiny("rescan")
    art = save_artifact(lm.model, tmp_path / "m.safetensors", lm.config)
    rep = tmp_path / "r.json"
    args = ["compress", "quantize", str(art), "-c", str(images), "--calibration-images", "2"]
    args += ["--calibration-crop", "32", "--sizes", "32", "--runs", "1", "--report", str(rep)]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (tmp_path / "m.int8.onnx").is_file()
    assert "PSNR vs fp32" in res.output
    assert json.loads(rep.read_text())["rows"][1]["name"] == "int8"
    bad = runner.invoke(app, ["compress", "quantize", str(art), "-c", str(tmp_path / "none")])
    assert bad.exit_code == 1 and "not a folder" in bad.output
