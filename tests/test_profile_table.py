"""`clearsight profile A B ...`: the before/after table (tiny models, tiny images)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from clearsight.artifact import make_config, save_artifact
from clearsight.cli import app
from clearsight.compress.quantize import QuantizeOptions, quantize_model, save_quantized
from clearsight.errors import ClearsightError
from clearsight.io import write_image
from clearsight.measure.macs import count_macs
from clearsight.models.registry import build_model
from clearsight.profile_table import COSTS, QUALITY, ModelRow, profile_models
from tests.helpers import random_image

runner = CliRunner()


def _artifact(path: Path, channels: int) -> Path:
    torch.manual_seed(channels)
    kw = {"channels": channels, "stages": 2}
    model = build_model("rescan", **kw).eval()
    return save_artifact(model, path, make_config(model, "rescan", kw, name=f"tiny-{channels}"))


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """A tiny RESCAN, a narrower one (the "after" of a compression) and the first's int8."""
    d = tmp_path_factory.mktemp("models")
    wide, narrow = _artifact(d / "wide", 6), _artifact(d / "narrow", 3)
    calib = d / "calib"
    for k in range(2):
        write_image(calib / f"{k}.png", random_image(40, 48, seed=k))
    from clearsight.zoo import resolve_model

    result = quantize_model(resolve_model(str(wide)), calib, QuantizeOptions(max_images=2, crop=32))
    int8 = d / "wide.int8.onnx"
    save_quantized(result, int8)
    return {"wide": wide, "narrow": narrow, "int8": int8}


@pytest.fixture(scope="module")
def pairs(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("pairs")
    for i in range(3):
        clean = random_image(24, 32, seed=10 + i)
        rain = np.clip(clean.astype(int) + 12, 0, 255).astype(np.uint8)
        write_image(d / "rain" / f"{i}.png", rain)
        write_image(d / "clean" / f"{i}.png", clean)
    return d


def test_rows_ratios_and_recounted_macs(models):
    refs = [str(models["wide"]), str(models["narrow"])]
    rep = profile_models(refs, size=32, runs=1, memory=False)
    wide, narrow = rep.rows
    assert [r.model for r in rep.rows] == refs and rep.size == "32x32"
    assert wide.format == narrow.format == "pytorch"
    # each model recounted on its own structure: the narrow one does less work
    assert wide.macs_per_pixel == pytest.approx(
        count_macs(build_model("rescan", channels=6, stages=2).eval(), 256, 256).per_pixel
    )
    assert narrow.macs_per_pixel < wide.macs_per_pixel and narrow.params < wide.params
    assert narrow.ratios["params"] == pytest.approx(narrow.params / wide.params)
    assert narrow.ratios["macs_per_pixel"] == pytest.approx(
        narrow.macs_per_pixel / wide.macs_per_pixel
    )
    assert narrow.ratios["file_mb"] == pytest.approx(narrow.file_mb / wide.file_mb)
    assert all(r.torch_ms > 0 and r.onnxruntime_ms > 0 for r in rep.rows)
    assert wide.ratios == {} and narrow.madds_m is None  # no ratios for "before"
    # no --data: quality is a dash, never a number
    assert narrow.psnr is None and narrow.deltas["psnr"] is None
    head, body = rep.table()
    cells = {line[0]: line[1:] for line in body}
    assert head == ["", *refs] and cells["format"] == ["pytorch", "pytorch"]
    params = cells["parameters"]
    assert params[1] == f"{narrow.params:,} ({narrow.ratios['params']:.2f}x)"
    assert params[0] == f"{wide.params:,}" and cells["PSNR"] == ["-", "-"]


def test_int8_row_runs_only_in_onnxruntime_with_the_same_macs(models, pairs):
    refs = [str(models["wide"]), str(models["int8"])]
    rep = profile_models(refs, data=pairs, size=32, runs=1, memory=False, max_images=2)
    fp32, int8 = rep.rows
    assert int8.format == "onnx int8" and rep.n_images == 2 and rep.preset == "y-matlab"
    # restoration MACs per pixel count work, not precision: int8 equals fp32 (no halving,
    # which is the detection contest's rule only)
    assert int8.macs_per_pixel == fp32.macs_per_pixel and int8.params == fp32.params
    assert int8.torch_ms is None and int8.onnxruntime_ms > 0
    assert int8.ratios["torch_ms"] is None and int8.ratios["onnxruntime_ms"] > 0
    assert int8.file_mb == pytest.approx(models["int8"].stat().st_size / 2**20)
    for row in rep.rows:
        assert 0 < row.psnr < 100 and 0 < row.ssim <= 1
    assert int8.deltas["psnr"] == pytest.approx(int8.psnr - fp32.psnr)
    cells = {line[0]: line[1:] for line in rep.table()[1]}
    assert cells["PyTorch ms"][1] == "-"
    assert cells["PSNR"][1] == f"{int8.psnr:.3f} ({int8.deltas['psnr']:+.3f})"
    assert list(int8.runs_ms) == ["onnxruntime"] and len(int8.runs_ms["onnxruntime"]) == 1
    assert len(int8.load_average) == 3


def test_cli_table_and_json_report(models, pairs, tmp_path):
    out = tmp_path / "table.json"
    args = ["profile", str(models["wide"]), str(models["narrow"]), "--data", str(pairs)]
    args += ["--size", "32", "--runs", "1", "--no-memory", "--report", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    assert "kMACs/pixel" in r.output and "PSNR" in r.output and "x)" in r.output
    rep = json.loads(out.read_text())
    assert rep["model"] == str(models["wide"]) and rep["n_images"] == 3
    row = rep["rows"][1]
    assert set(row) == set(ModelRow.__dataclass_fields__)
    assert set(row["ratios"]) == set(COSTS) and set(row["deltas"]) == set(QUALITY)
    assert row["torch_peak_mb"] is None  # --no-memory: a dash, not a number
    assert row["psnr"] > 0 and row["macs_per_pixel"] < rep["rows"][0]["macs_per_pixel"]


def test_peak_memory_from_the_subprocess(models):
    (row,) = profile_models([str(models["int8"])], size=32, runs=1).rows
    assert row.onnxruntime_peak_mb >= 0 and row.onnxruntime_ms > 0 and row.torch_peak_mb is None


def test_mixed_tasks_and_single_model_options_are_one_line_errors(models):
    with pytest.raises(ClearsightError, match="detectors and restoration models in one table"):
        profile_models([str(models["wide"]), "default-detect"], runs=1, memory=False)
    r = runner.invoke(app, ["profile", str(models["wide"]), str(models["narrow"]), "--tile", "8"])
    assert r.exit_code == 1 and "--tile applies to one model" in r.output
    r = runner.invoke(app, ["profile", str(models["wide"]), "--max-images", "2"])
    assert r.exit_code == 1 and "--max-images limits --data" in r.output


def test_detectors_contest_madds_ap_and_astar_score(tmp_path):
    from clearsight.detection.astar import CONTEST_SIZE, ContestAdapter
    from clearsight.export.onnx import export_onnx
    from clearsight.measure.madds import count_madds
    from tests.helpers import tiny_ssd
    from tests.test_detect_export import _contest_coco

    lm = tiny_ssd()
    art = save_artifact(lm.model, tmp_path / "ssd", lm.config)
    decoded, _ = export_onnx(lm, tmp_path / "ssd.onnx")
    astar, _ = export_onnx(lm, tmp_path / "ssd-astar.onnx", layout="astar")
    data = _contest_coco(tmp_path / "coco")
    ann = data / "annotations" / "instances_val2017.json"
    gt = json.loads(ann.read_text())  # every class the model predicts, as a COCO set has
    gt["categories"] = [{"id": i, "name": f"c{i}"} for i in lm.config.class_ids]
    ann.write_text(json.dumps(gt))
    refs = [str(art), str(decoded), str(astar)]
    rep = profile_models(refs, data=data, runs=1, memory=False)
    pt, dec, ast = rep.rows
    assert rep.task == "detect" and rep.n_images == 3
    # each at its own input size: the contest layout takes the contest's 300x300
    assert [r.size for r in rep.rows] == ["128x128", "128x128", "300x300"]
    want = count_madds(ContestAdapter(lm.model, lm.config), CONTEST_SIZE).madds
    assert pt.madds_m == pytest.approx(want) and pt.madds_quantized is False
    # the graph count also sees the decode's functional sigmoid (as astar-score says)
    assert dec.madds_m is None or want <= dec.madds_m < want * 1.05
    assert want <= ast.madds_m < want * 1.05 and pt.macs_per_pixel is None
    assert dec.params == ast.params == pt.params > 0  # rebuilt from the files' configs
    assert 0 <= pt.ap <= 1 and dec.ap == pytest.approx(pt.ap, abs=1e-4)
    assert ast.ap is None and any("AP not measured" in n for n in ast.notes)
    assert pt.astar_score is not None and ast.astar_map == pytest.approx(pt.astar_map, abs=1e-6)
    assert dec.astar_score is None and any("--layout astar" in n for n in dec.notes)
    assert dec.torch_ms is None and dec.onnxruntime_ms > 0 and pt.torch_ms > 0
    cells = {line[0]: line[1:] for line in rep.table()[1]}
    assert "COCO AP" in cells and cells["COCO AP"][2] == "-" and "PSNR" not in cells


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
@pytest.mark.realdata
def test_bundled_derain_on_rain100l(shared_data):
    data = shared_data / "derain" / "Rain100L"
    if not data.is_dir():
        pytest.skip(f"{data} not found")
    rep = profile_models(["default-derain"], data=data, size=64, runs=1, memory=False, max_images=1)
    (row,) = rep.rows
    assert rep.n_images == 1 and rep.preset == "y-matlab" and row.file_mb > 0
    assert row.psnr > 28 and 0.8 < row.ssim <= 1  # first image: 30.46 dB, SSIM 0.888
    assert row.macs_per_pixel == pytest.approx(489.5e3, abs=100)  # docs/architecture.md §5.2
