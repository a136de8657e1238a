"""Restoration before detection: `Pipeline`, `detect --restore`, `eval --restore`, the
rain gate and `synth rain|moire --coco`."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight import api
from clearsight.cli import app
from clearsight.data.synth_rain import rain_pair
from clearsight.detection.rain_measure import RAIN_THRESHOLD, streak_score
from clearsight.engine.detector import Detector
from clearsight.engine.pipeline import Pipeline, parse_restore
from clearsight.errors import OptionError
from clearsight.io import read_image, write_image
from tests.helpers import random_image, tiny_ssd
from tests.optional import need

REPO_ROOT = Path(__file__).resolve().parents[1]
COFFEE = REPO_ROOT / "examples" / "coffee.jpg"


class Blank:
    """A restorer that paints the image grey and counts its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def restore_image(self, image: np.ndarray) -> np.ndarray:
        self.calls += 1
        return np.full_like(image, 114)


class FailsOnWide:
    """A restorer that fails on images 48 pixels wide and returns the others as they are."""

    def restore_image(self, image: np.ndarray) -> np.ndarray:
        if image.shape[1] == 48:
            raise RuntimeError("restorer ran out of memory")
        return image


def _boxes(dets: object) -> list[list[float]]:
    return [[round(v, 3) for v in box] for box in dets.boxes.tolist()]  # type: ignore[attr-defined]


def test_the_chain_detects_what_the_restorer_returns() -> None:
    img = random_image(64, 96, seed=3)
    plain = Detector(tiny_ssd()).detect_batch([img])[0]
    blank = Blank()
    chained = Pipeline(tiny_ssd(), restorer=blank).detect_batch([img])[0]
    grey = Detector(tiny_ssd()).detect_batch([np.full_like(img, 114)])[0]
    assert blank.calls == 1
    assert _boxes(chained) == _boxes(grey) and _boxes(chained) != _boxes(plain)


def test_an_identity_restorer_gives_the_detector_its_own_boxes() -> None:
    img = random_image(64, 96, seed=4)
    plain = Detector(tiny_ssd()).detect_batch([img])[0]
    chain = Pipeline.around(Detector(tiny_ssd()), "identity")
    assert _boxes(chain.detect_batch([img])[0]) == _boxes(plain)
    assert chain.last_restored == [True] and chain.last_scores == [None]


def test_the_gate_restores_rain_and_leaves_a_dry_photo_alone() -> None:
    dry = read_image(COFFEE)
    rainy = rain_pair(dry, 0, "coffee.jpg", 0, "heavy")
    assert streak_score(dry) < RAIN_THRESHOLD <= streak_score(rainy)
    blank = Blank()
    chain = Pipeline(tiny_ssd(), restorer=blank, gated=True)
    chain.detect_batch([dry, rainy])
    assert chain.last_restored == [False, True] and blank.calls == 1
    assert chain.last_scores[0] < RAIN_THRESHOLD <= chain.last_scores[1]  # type: ignore[operator]


def test_restore_values_parse_and_bad_ones_are_one_line() -> None:
    assert parse_restore("auto") == ("default-derain", True)
    assert parse_restore("auto:identity") == ("identity", True)
    assert parse_restore("default-demoire") == ("default-demoire", False)
    with pytest.raises(OptionError, match="restore"):
        parse_restore("auto:")
    with pytest.raises(OptionError, match="detector"):
        Pipeline.around(Detector(tiny_ssd()), "default-detect")
    with pytest.raises(OptionError, match="video model"):
        Pipeline.around(Detector(tiny_ssd()), "video-derain")


def test_a_failing_restore_step_fails_only_its_image(tmp_path: Path) -> None:
    src = tmp_path / "in"
    write_image(src / "a.png", random_image(32, 40, seed=1))
    write_image(src / "b.png", random_image(32, 48, seed=2))  # the restorer fails on this one
    write_image(src / "c.png", random_image(32, 40, seed=3))
    chain = Pipeline(tiny_ssd(), restorer=FailsOnWide())
    run = api.detect_files(chain, [src], tmp_path / "out")
    assert [s.name for s, _, _ in run.items] == ["a.png", "c.png"]
    assert [f.source.name for f in run.failed] == ["b.png"]
    rows = (tmp_path / "out" / "failures.csv").read_text().splitlines()
    assert len(rows) == 2 and "b.png" in rows[1] and "out of memory" in rows[1]
    assert (tmp_path / "out" / "a.png").is_file() and not (tmp_path / "out" / "b.png").exists()
    results = json.loads((tmp_path / "out" / "detections.json").read_text())
    assert {r["file_name"] for r in results} <= {"a.png", "c.png"}


def test_detect_restore_cli_saves_what_the_detector_saw(tmp_path: Path) -> None:
    src = tmp_path / "in"
    img = random_image(40, 56, seed=5)
    write_image(src / "sub" / "a.png", img)
    res = CliRunner().invoke(
        app,
        ["detect", str(src), "-o", str(tmp_path / "out"), "--restore", "identity",
         "--save-restored", str(tmp_path / "seen")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert (read_image(tmp_path / "seen" / "sub" / "a.png") == img).all()
    assert (tmp_path / "out" / "sub" / "a.png").is_file()
    plain = CliRunner().invoke(app, ["detect", str(src), "-o", str(tmp_path / "plain")])
    assert plain.exit_code == 0, plain.output
    assert json.loads((tmp_path / "out" / "detections.json").read_text()) == json.loads(
        (tmp_path / "plain" / "detections.json").read_text()
    )


def test_save_restored_without_restore_and_a_detector_as_restorer_are_refused(
    tmp_path: Path,
) -> None:
    write_image(tmp_path / "a.png", random_image(16, 16))
    res = CliRunner().invoke(
        app, ["detect", str(tmp_path / "a.png"), "--save-restored", str(tmp_path / "s")]
    )
    assert res.exit_code == 1 and "--restore" in res.output and "Traceback" not in res.output
    res = CliRunner().invoke(
        app, ["detect", str(tmp_path / "a.png"), "-o", str(tmp_path / "o"),
              "--restore", "default-detect"],
    )  # fmt: skip
    assert res.exit_code == 1 and "detector" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o" / "a.png").exists()


def _tiny_coco(root: Path) -> None:
    """Two textured images with one box each: eval's and synth's plumbing, not AP."""
    (root / "annotations").mkdir(parents=True)
    images, anns = [], []
    for i in (1, 2):
        write_image(root / "val2017" / f"{i:012d}.png", random_image(40, 60, seed=i))
        images.append({"id": i, "file_name": f"{i:012d}.png", "width": 60, "height": 40})
        anns.append({"id": i, "image_id": i, "category_id": 1, "bbox": [5, 5, 20, 20],
                     "area": 400, "iscrowd": 0})  # fmt: skip
    data = {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "person"}]}
    (root / "annotations" / "instances_val2017.json").write_text(json.dumps(data))


def test_eval_restore_scores_the_chain(tmp_path: Path) -> None:
    _tiny_coco(tmp_path / "coco")
    args = ["eval", "--model", "default-detect", "--data", str(tmp_path / "coco")]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, [*args, "--restore", "identity", "--out", str(tmp_path / "b")])
    assert res.exit_code == 0, res.output
    plain = json.loads((tmp_path / "a" / "summary.json").read_text())
    chain = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert chain["model"] == "identity -> default-detect" and chain["n"] == 2
    assert chain["metrics"] == plain["metrics"] and chain["detections"] == plain["detections"]
    res = CliRunner().invoke(
        app, ["eval", "--model", "identity", "--data", str(tmp_path / "coco"),
              "--restore", "identity"],
    )  # fmt: skip
    assert res.exit_code == 1 and "detector" in res.output


@pytest.mark.parametrize("kind", ["rain", "moire"])
def test_synth_coco_degrades_images_and_keeps_annotations(tmp_path: Path, kind: str) -> None:
    _tiny_coco(tmp_path / "coco")
    runs = []
    for name in ("x", "y"):
        res = CliRunner().invoke(
            app, ["synth", kind, "--coco", str(tmp_path / "coco"), "-o", str(tmp_path / name),
                  "--seed", "7"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
        runs.append(tmp_path / name)
    source = json.loads((tmp_path / "coco" / "annotations" / "instances_val2017.json").read_text())
    copy = json.loads((runs[0] / "annotations" / "instances_val2017.json").read_text())
    assert copy["annotations"] == source["annotations"] and copy["images"] == source["images"]
    assert copy["info"]["clearsight_synth"]["kind"] == kind
    for entry in source["images"]:
        clean = read_image(tmp_path / "coco" / "val2017" / entry["file_name"])
        made = read_image(runs[0] / "val2017" / entry["file_name"])
        assert made.shape == clean.shape and np.abs(made.astype(int) - clean).mean() > 1
        assert (made == read_image(runs[1] / "val2017" / entry["file_name"])).all()  # seeded
    dataset = api.evaluate_detection("default-detect", runs[0])  # a COCO set as it stands
    assert len(dataset.rows) == 2


def test_synth_needs_exactly_one_source(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["synth", "rain", "-o", str(tmp_path / "o")])
    assert res.exit_code == 1 and "--coco" in res.output


def test_detect_video_restores_the_frames_it_detects_on(tmp_path: Path) -> None:
    from clearsight.video.detect import detect_video, read_jsonl
    from tests.video_utils import make_video

    src = tmp_path / "clip.mp4"
    make_video(src, w=64, h=48, n=4, audio=None)
    plain = detect_video(Detector(tiny_ssd()), src, tmp_path / "plain", score_threshold=0.3)
    chained = detect_video(Detector(tiny_ssd()), src, tmp_path / "chain", score_threshold=0.3,
                           restore="identity", save_restored=tmp_path / "seen")  # fmt: skip
    assert read_jsonl(chained.jsonl) == read_jsonl(plain.jsonl)
    assert sorted(p.name for p in (tmp_path / "seen" / "clip").iterdir()) == [
        f"{i:05d}.png" for i in range(1, 5)
    ]
    with pytest.raises(OptionError, match="detector"):
        detect_video(Detector(tiny_ssd()), src, tmp_path / "x", restore="default-detect")


def test_the_ray_task_chains_its_workers_detector(tmp_path: Path) -> None:
    from clearsight.scale.detect_ray import DetectTask
    from clearsight.scale.inputs import WorkItem

    write_image(tmp_path / "in" / "a.png", random_image(32, 40, seed=1))
    task = DetectTask("default-detect", str(tmp_path / "out"), {str(tmp_path / "in" / "a.png"): 0},
                      restore="identity", save_restored=str(tmp_path / "seen"))  # fmt: skip
    batch = task.load()
    item = WorkItem(str(tmp_path / "in" / "a.png"), str(tmp_path / "out" / "a.png"))
    [result] = batch([item])
    assert result.status == "done", result.reason
    assert (tmp_path / "seen" / "a.png").is_file() and (tmp_path / "out" / "a.png").is_file()


def test_serve_detect_takes_a_served_restorer(tmp_path: Path) -> None:
    need("fastapi")
    from fastapi.testclient import TestClient

    from clearsight.serve import ServeLimits, create_app

    with TestClient(create_app(["identity", "default-detect"], ServeLimits(workers=1))) as c:
        data = COFFEE.read_bytes()

        def post(**fields: str) -> object:
            return c.post("/v1/detect", files={"image": ("x.jpg", data)},
                          data={"model": "default-detect", **fields})  # fmt: skip

        plain, chained = post(), post(restore="identity")
        assert chained.status_code == 200, chained.text  # type: ignore[attr-defined]
        assert chained.json()["results"] == plain.json()["results"]  # type: ignore[attr-defined]
        assert chained.json()["restored"] is True  # type: ignore[attr-defined]
        gated = post(restore="auto:identity").json()  # type: ignore[attr-defined]
        assert gated["restored"] is False  # a dry photo is detected as it is
        for bad in ("default-detect", "default-derain"):  # a detector; a model not served
            answer = post(restore=bad)
            assert answer.status_code == 422 and "restore" in answer.json()["error"]  # type: ignore[attr-defined]


def test_a_detection_job_takes_a_served_restorer(tmp_path: Path) -> None:
    need("fastapi")
    from fastapi.testclient import TestClient
    from torch import nn

    from clearsight.serve import ServeLimits, create_app
    from tests.helpers import loaded
    from tests.test_serve_jobs import finished, queued, submit
    from tests.video_utils import make_video

    clip = tmp_path / "clip.mp4"
    make_video(clip, n=4)
    models = {"id": loaded(nn.Identity()), "ssd": tiny_ssd()}
    with TestClient(create_app(models, ServeLimits(workers=1))) as client:
        lines = []
        for fields in ({}, {"restore": "id"}):
            job = queued(client, clip, "ssd", **fields)
            assert finished(client, job)["status"] == "done"
            lines.append(client.get(f"/v1/jobs/{job}/result", params={"part": "detections"}).text)
        assert lines[0] == lines[1] and lines[0]
        refused = submit(client, clip, "ssd", restore="ssd")
        assert refused.status_code == 422 and "restore" in refused.json()["error"]


def test_the_chain_report_shows_clean_rainy_and_restored(tmp_path: Path) -> None:
    _tiny_coco(tmp_path / "coco")
    res = CliRunner().invoke(
        app, ["synth", "rain", "--coco", str(tmp_path / "coco"), "-o", str(tmp_path / "rain")]
    )
    assert res.exit_code == 0, res.output
    page = tmp_path / "r.html"
    res = CliRunner().invoke(
        app, ["eval", "--model", "default-detect", "--data", str(tmp_path / "rain"),
              "--restore", "identity", "--report", str(page), "--report-k", "2"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert "identity -&gt; default-detect" in html or "identity -> default-detect" in html
    assert html.count(">clean<") >= 2 and html.count(">ground truth<") >= 2


def test_detection_thumbs_draw_predictions_on_what_the_detector_saw() -> None:
    from clearsight.report.detection import detection_thumbs

    img = np.zeros((40, 60, 3), np.uint8)
    seen = np.full((40, 60, 3), 200, np.uint8)
    pred = [{"bbox": [5, 5, 10, 10], "category_id": 1, "score": 0.9}]
    plain = detection_thumbs(img, [], pred, {1: "person"})
    chained = detection_thumbs(img, [], pred, {1: "person"}, seen=seen, clean=img)
    assert list(plain) == ["ground truth", "predictions", "both"]
    assert list(chained) == ["clean", "ground truth", "predictions", "both"]
    assert chained["predictions"] != plain["predictions"]  # drawn on the restored image
    assert chained["ground truth"] == plain["ground truth"]  # the input, as before
