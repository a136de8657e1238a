"""`clearsight compress input-size`: a detector rebuilt for another input size keeps its
weights, records the new size and preprocessing, and costs fewer MAdds."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from clearsight.artifact import load_artifact, make_config, save_artifact
from clearsight.cli import app
from clearsight.compress.input_size import change_input_size
from clearsight.errors import ClearsightError
from clearsight.models.registry import build_model


def _yolox(tmp: Path, size: int = 96) -> Path:
    torch.manual_seed(0)
    model = build_model("yolox-nano", num_classes=2, input_size=size)
    args = {"num_classes": 2, "input_size": size}
    cfg = make_config(model, "yolox-nano", args)
    cfg.class_ids, cfg.class_names = [1, 2], ["a", "b"]
    return save_artifact(model, tmp / "src", cfg)


def test_rebuilt_detector_keeps_its_weights_at_the_new_size(tmp_path: Path) -> None:
    src = _yolox(tmp_path)
    r = change_input_size(src, tmp_path / "small", 64, "fixed")
    before, after = load_artifact(src), load_artifact(r.path)
    assert tuple(after.model.input_size) == (64, 64) and r.size_before == (96, 96)
    assert after.config.arch_args["input_size"] == 64
    assert after.config.preprocess.size == (64, 64)
    assert after.config.preprocess.resize == "fixed"
    assert after.config.preprocess.extra["antialias"] is True
    assert after.config.class_ids == [1, 2]
    for key, value in before.model.state_dict().items():
        assert torch.equal(value, after.model.state_dict()[key]), key
    # MAdds scale with the pixels: (64/96)^2 of the convolutions
    assert r.madds_after == pytest.approx(r.madds_before * (64 / 96) ** 2, rel=0.02)
    raw = after.model(torch.rand(1, 3, 64, 64))
    boxes, _ = after.model.decode(raw)
    assert boxes.shape[1] == (8 * 8 + 4 * 4 + 2 * 2)  # anchors of a 64x64 input


def test_bad_requests_are_one_line_errors(tmp_path: Path) -> None:
    src = _yolox(tmp_path)
    with pytest.raises(ClearsightError, match="multiple of 32"):
        change_input_size(src, tmp_path / "a", 80)
    with pytest.raises(ClearsightError, match="resize"):
        change_input_size(src, tmp_path / "b", 64, "crop")
    res = CliRunner().invoke(
        app, ["compress", "input-size", "rescan", "--size", "64", "-o", str(tmp_path / "c")]
    )
    assert res.exit_code != 0 and "any image size" in res.output
    assert not (tmp_path / "a").exists() and not (tmp_path / "c").exists()
