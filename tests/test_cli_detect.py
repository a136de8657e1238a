"""`clearsight detect`: drawn copies and a COCO results file, through the command line."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
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


def _tiny_coco(root: Path) -> None:
    """Two images with one box each: enough for eval's plumbing (not its AP)."""
    (root / "annotations").mkdir(parents=True)
    (root / "val2017").mkdir()
    images, anns = [], []
    for i in (1, 2):
        write_image(root / "val2017" / f"{i:012d}.jpg", np.full((40, 60, 3), 90 * i, np.uint8))
        images.append({"id": i, "file_name": f"{i:012d}.jpg", "width": 60, "height": 40})
        anns.append(
            {
                "id": i,
                "image_id": i,
                "category_id": 1,
                "bbox": [5, 5, 20, 20],
                "area": 400,
                "iscrowd": 0,
            }
        )
    cats = [{"id": 1, "name": "person"}]
    data = {"images": images, "annotations": anns, "categories": cats}
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(data))


def test_eval_routes_a_detector_to_coco_scoring(tmp_path: Path):
    _tiny_coco(tmp_path / "coco")
    res = CliRunner().invoke(
        app,
        [
            "eval",
            "--model",
            "default-detect",
            "--data",
            str(tmp_path / "coco"),
            "--out",
            str(tmp_path / "out"),
        ],
    )
    assert res.exit_code == 0, res.output
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["task"] == "detect" and summary["n"] == 2
    assert set(summary["metrics"]) == {"AP", "AP50", "AP75", "APs", "APm", "APl"}
    rows = (tmp_path / "out" / "per_image.csv").read_text().splitlines()
    assert rows[0].startswith("file_name,image_id,ground_truth") and len(rows) == 3


def test_eval_on_a_folder_without_coco_annotations_is_one_line(tmp_path: Path):
    (tmp_path / "empty").mkdir()
    res = CliRunner().invoke(
        app, ["eval", "--model", "default-detect", "--data", str(tmp_path / "empty")]
    )
    assert res.exit_code != 0 and "instances_*.json" in res.output


def test_detect_keeps_going_past_bad_files(tmp_path: Path):
    src = tmp_path / "in"
    src.mkdir()
    for name in ("a", "c"):
        write_image(src / f"{name}.png", np.full((32, 32, 3), 120, np.uint8))
    (src / "b.png").write_bytes(b"not an image")
    res = CliRunner().invoke(app, ["detect", str(src), "-o", str(tmp_path / "out")])
    assert res.exit_code == 3, res.output
    assert (tmp_path / "out" / "a.png").is_file() and (tmp_path / "out" / "c.png").is_file()
    failures = (tmp_path / "out" / "failures.csv").read_text().splitlines()
    assert len(failures) == 2 and "b.png" in failures[1]
    assert "2 done, 1 failed" in res.output
    res = CliRunner().invoke(app, ["detect", str(src), "-o", str(tmp_path / "o2"), "--fail-fast"])
    assert res.exit_code == 1 and not (tmp_path / "o2" / "c.png").exists()


@pytest.mark.realdata
def test_astar_score_command_prints_and_writes_the_contest_figures(
    shared_data: Path, tmp_path: Path
):
    data = shared_data / "detection" / "coco_mini_val"
    res = CliRunner().invoke(
        app,
        ["astar-score", "ssd-mobilenet-v1-coco", "--data", str(data), "--limit", "3",
         "--json", str(tmp_path / "a.json")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    result = json.loads((tmp_path / "a.json").read_text())
    assert result["images"] == 3 and 700 < result["madds"] < 800  # fp32 SSD at 300x300
    assert result["quirks"]["nms_plus_one"] is True
    assert f"score {result['score']:.2f}" in res.output
