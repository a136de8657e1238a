"""The bundled trained models: found by name, the right architecture, and they restore."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.data.synth_rain import rain_pair
from clearsight.io import read_image, write_image
from clearsight.metrics import psnr
from clearsight.zoo import bundled_models, resolve_model

runner = CliRunner()


@pytest.mark.parametrize(
    ("name", "arch", "params"),
    [
        ("default-derain", "rescan", 149_823),
        ("detect-derain", "rescan", 149_823),
        ("default-demoire", "mbcnn-light", 3_983_029),
        ("default-detect", "yolox-nano", 904_463),
    ],
)
def test_bundled_model_loads_by_name_with_its_card(name, arch, params):
    assert name in bundled_models()
    loaded = resolve_model(name)
    assert loaded.config.architecture == arch and loaded.config.name == name
    assert sum(p.numel() for p in loaded.model.parameters()) == params
    folder = bundled_models()[name]
    card = (folder / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "steps" in card and "licence" in card.lower()
    res = runner.invoke(app, ["models", "--json"])
    assert res.exit_code == 0
    listed = {m["name"]: m for m in json.loads(res.output)}
    assert listed[name]["params"] == params


def test_bundled_derain_weights_are_small():
    weights = bundled_models()["default-derain"] / "model.safetensors"
    assert weights.stat().st_size < 5 * 1024 * 1024


def _coffee(size: int = 96) -> np.ndarray:
    from skimage import data

    img = cv2.resize(data.coffee(), (360, 240), interpolation=cv2.INTER_AREA)
    return np.ascontiguousarray(img[80 : 80 + size, 120 : 120 + size])


def _command_restores_closer(
    tmp_path: Path, command: str, degraded: np.ndarray, clean: np.ndarray, gain_db: float,
    *options: str,
) -> str:  # fmt: skip
    """Run `clearsight COMMAND` on a folder holding `degraded`; the output keeps its size and
    is at least `gain_db` closer (PSNR) to `clean`. Returns the command's output."""
    write_image(tmp_path / "in" / "x.png", degraded)
    res = runner.invoke(app, [command, str(tmp_path / "in"), "-o", str(tmp_path / "out"), *options])
    assert res.exit_code == 0, res.output
    out = read_image(tmp_path / "out" / "x.png")
    assert out.shape == degraded.shape
    assert psnr(out, clean) > psnr(degraded, clean) + gain_db
    return res.output


def test_derain_end_to_end_removes_synthetic_rain(tmp_path):
    clean = _coffee()
    rainy = rain_pair(clean, 5, "coffee.png", 0, "light")
    output = _command_restores_closer(tmp_path, "derain", rainy, clean, 1.0, "--stages", "auto")
    assert "stages" in output  # the stages used are reported


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
@pytest.mark.realdata
def test_demoire_end_to_end_on_a_held_out_pair(shared_data, tmp_path):
    """Pair 0080 was never trained on; a 256x256 crop comes out closer to its ground truth."""
    root = shared_data / "moire" / "uhdm_700"
    crop = (slice(200, 456), slice(200, 456))
    moire, clean = (
        read_image(root / "moire" / "0080.jpg")[crop],
        read_image(root / "clean" / "0080.jpg")[crop],
    )
    _command_restores_closer(tmp_path, "demoire", moire, clean, 0.5)


@pytest.mark.realdata
def test_eval_reaches_the_bundled_derain_model_by_name(shared_data, tmp_path):
    src = shared_data / "derain" / "Rain100L"
    for sub in ("rain", "clean"):
        (tmp_path / "d" / sub).mkdir(parents=True)
        for n in ("001", "002"):
            (tmp_path / "d" / sub / f"{n}.png").symlink_to(src / sub / f"{n}.png")
    means = {}
    for model in ("default-derain", "identity"):
        out = tmp_path / model
        res = runner.invoke(
            app,
            ["eval", "--model", model, "--data", str(tmp_path / "d"), "--preset", "y-matlab",
             "--out", str(out)],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        means[model] = json.loads((out / "summary.json").read_text())["psnr"]["mean"]
    ours, inputs = means["default-derain"], means["identity"]
    assert ours > inputs + 0.5
