"""The architecture refactor changed no output: the samples restored and detected
today equal the files the tree before it produced (tests/golden/README.md)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.io import read_image

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden"
runner = CliRunner()


def _level_diff(a: Path, b: Path) -> tuple[int, float]:
    x, y = read_image(a).astype(int), read_image(b).astype(int)
    assert x.shape == y.shape
    d = np.abs(x - y)
    return int(d.max()), float(d.mean())


@pytest.mark.parametrize(
    ("command", "sample", "golden"),
    [("derain", "rainy-coffee.png", "derained-coffee.png"),
     ("demoire", "moire-astronaut.png", "demoired-astronaut.png")],
)  # fmt: skip
def test_restored_samples_equal_the_outputs_before_the_refactor(
    command: str, sample: str, golden: str, tmp_path: Path
) -> None:
    res = runner.invoke(app, [command, str(ROOT / "examples" / sample), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    worst, mean = _level_diff(tmp_path / sample, GOLDEN / golden)
    assert worst <= 1 and mean < 0.01, (worst, mean)  # identical up to one level of rounding


def test_detections_on_the_sample_equal_those_before_the_refactor(tmp_path: Path) -> None:
    res = runner.invoke(app, ["detect", str(ROOT / "examples" / "coffee.jpg"), "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "detections.json").read_text())
    want = json.loads((GOLDEN / "detections-coffee.json").read_text())
    assert [d["category_id"] for d in got] == [d["category_id"] for d in want]
    for g, w in zip(got, want, strict=True):
        assert g["bbox"] == pytest.approx(w["bbox"], abs=0.5)
        assert g["score"] == pytest.approx(w["score"], abs=1e-3)
    worst, mean = _level_diff(tmp_path / "coffee.jpg", GOLDEN / "detected-coffee.jpg")
    assert mean < 0.5, (worst, mean)  # the same boxes drawn (JPEG may round differently)
