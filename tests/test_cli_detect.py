"""`clearsight detect`: drawn copies and a COCO results file, through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.io import read_image, write_image

REPO_ROOT = Path(__file__).resolve().parents[1]


def test_detect_writes_boxes_and_coco_results(tmp_path: Path):
    res = CliRunner().invoke(
        app, ["detect", str(REPO_ROOT / "examples" / "coffee.jpg"), "-o", str(tmp_path / "out")]
    )
    assert res.exit_code == 0, res.output
    results = json.loads((tmp_path / "out" / "detections.json").read_text())
    cup = [r for r in results if r["category_id"] == 47]
    assert cup and cup[0]["score"] >= 0.3 and cup[0]["file_name"] == "coffee.jpg"
    x, y, w, h = cup[0]["bbox"]
    assert 0 <= x < x + w <= 600 and 0 <= y < y + h <= 400  # image pixels, not 416x416
    drawn = read_image(tmp_path / "out" / "coffee.jpg")
    assert not (drawn == read_image(REPO_ROOT / "examples" / "coffee.jpg")).all()


def test_detect_refuses_a_restoration_model(tmp_path: Path):
    write_image(tmp_path / "a.png", np.zeros((16, 16, 3), np.uint8))
    res = CliRunner().invoke(app, ["detect", str(tmp_path / "a.png"), "--model", "identity"])
    assert res.exit_code != 0
    assert "detect" in res.output and "Traceback" not in res.output
