"""MAC counting, `profile` and `benchmark` (tiny models, small images: fast)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from clearsight.artifact import LoadedModel, make_config, save_artifact
from clearsight.cli import app
from clearsight.errors import ClearsightError
from clearsight.measure.macs import count_macs
from clearsight.models.registry import build_model
from clearsight.profile import parse_sizes, profile_model
from tests.helpers import random_image

runner = CliRunner()


class HandCounted(nn.Module):
    """Every layer type the counter knows, with MACs easy to count by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.grouped = nn.Conv2d(8, 8, 3, padding=1, groups=4)
        self.fc = nn.Linear(8, 4)
        self.up = nn.ConvTranspose2d(8, 2, 2, stride=2)

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        y = self.grouped(self.conv(x))
        self.fc(y.mean(dim=(2, 3)))
        return self.up(y)


def test_mac_count_by_hand():
    macs = count_macs(HandCounted(), 10, 12)
    px = 10 * 12
    assert macs.by_type == {
        "Conv2d": 8 * px * 3 * 9 + 8 * px * 2 * 9,  # out elems x in/groups x kh x kw
        "Linear": 4 * 8,
        "ConvTranspose2d": 8 * px * 2 * 4,  # in elems x out/groups x kh x kw
    }
    assert macs.total == sum(macs.by_type.values())
    assert macs.per_pixel == macs.total / px


def test_rescan_macs_per_pixel_match_design_figure():
    per_px = count_macs(build_model("rescan").eval(), 64, 64).per_pixel
    assert abs(per_px - 489.5e3) < 100  # docs/architecture.md §5.2: 489.5 k MACs per pixel


def test_mbcnn_macs_per_pixel_near_design_figure():
    per_px = count_macs(build_model("mbcnn").eval(), 64, 64).per_pixel
    assert abs(per_px - 1022e3) / 1022e3 < 0.01  # docs/architecture.md §5.2: about 1,022 k


def _tiny() -> LoadedModel:
    torch.manual_seed(0)
    kw = {"channels": 4, "stages": 2}
    model = build_model("rescan", **kw).eval()
    return LoadedModel(model, make_config(model, "rescan", kw), "tiny")


def test_profile_in_process_both_backends():
    rep = profile_model(
        _tiny(), sizes=[(24, 40)], backends=("torch", "onnxruntime"), runs=1, memory=False
    )
    assert rep.params == sum(p.numel() for p in _tiny().model.parameters())
    assert set(rep.latency) == {"torch", "onnxruntime"}
    assert all(r[0]["latency_ms"] > 0 and r[0]["size"] == "24x40" for r in rep.latency.values())


def test_profile_cli_json_with_memory(tmp_path):
    lm = _tiny()
    model_dir = save_artifact(lm.model, tmp_path / "m", lm.config)
    args = ["profile", str(model_dir), "--sizes", "32", "--backend", "torch,onnxruntime"]
    r = runner.invoke(app, [*args, "--runs", "1", "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["architecture"] == "rescan" and rep["macs_per_pixel"] > 0
    for backend in ("torch", "onnxruntime"):
        (row,) = rep["latency"][backend]
        assert row["size"] == "32x32" and row["peak_mb"] >= 0


def test_profile_of_an_onnx_file_counts_the_structure(tmp_path):
    from clearsight.export.onnx import export_onnx
    from clearsight.zoo import resolve_model

    lm = _tiny()
    path, _ = export_onnx(lm, tmp_path / "m.onnx", parity_sizes=((16, 16),))
    rep = profile_model(resolve_model(str(path)), sizes=[(16, 16)], runs=1, memory=False)
    assert list(rep.latency) == ["onnxruntime"]
    with pytest.raises(ClearsightError, match="is an ONNX model"):
        profile_model(resolve_model(str(path)), backends=["torch"], memory=False)
    assert rep.macs_per_pixel == pytest.approx(count_macs(lm.model, 256, 256).per_pixel)


def test_bad_sizes_and_backend_are_clear_errors():
    assert parse_sizes("256, 321x481") == [(256, 256), (321, 481)]
    with pytest.raises(ClearsightError, match="bad size 'abc'"):
        parse_sizes("256,abc")
    with pytest.raises(ClearsightError, match="unknown backend 'tvm'"):
        profile_model(_tiny(), backends=("tvm",), memory=False)


def test_benchmark_quick(tmp_path):
    lm = _tiny()
    model_dir = save_artifact(lm.model, tmp_path / "m", lm.config)
    data = tmp_path / "data"
    for i in range(3):
        clean = random_image(24, 32, seed=i)
        noisy = np.clip(clean.astype(int) + 9, 0, 255).astype(np.uint8)
        for folder, img in (("rain", noisy), ("clean", clean)):
            (data / folder).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(data / folder / f"{i}.png")
    args = ["benchmark", str(model_dir), "--data", str(data), "--sizes", "32,48", "--quick"]
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 0, r.output
    rep = json.loads(r.output)
    assert rep["n_images"] == 2 and rep["preset"] == "y-matlab"
    names = [row["name"] for row in rep["rows"]]
    assert names == ["PyTorch eager", "PyTorch tuned (channels_last)", "ONNX Runtime fp32"]
    for row in rep["rows"]:
        assert abs(row["psnr_diff"]) < 1e-3 and set(row["latency_ms"]) == {"32x32", "48x48"}
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and "ONNX" in r.output and "eager" in r.output


def test_profile_worker_cli_error_for_unknown_model():
    r = runner.invoke(app, ["profile", "no-such-model"])
    assert r.exit_code == 1 and "unknown model 'no-such-model'" in r.output


def test_peak_rss_of_a_child_is_its_own_not_its_parents():
    """The memory figures are measured in subprocesses of the (large) command process: a
    child's peak must not start at its parent's RSS, as ru_maxrss does after fork or vfork."""
    import subprocess
    import sys

    from clearsight.profile import peak_rss_mb

    ballast = np.ones(1536 * 2**20, np.uint8)  # 1.5 GiB, every page touched
    parent = peak_rss_mb()
    code = "from clearsight.profile import peak_rss_mb; print(peak_rss_mb())"
    child = float(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        ).stdout
    )
    assert ballast[-1] == 1 and parent >= 1536
    assert 10 < child < parent - 1024, (child, parent)
