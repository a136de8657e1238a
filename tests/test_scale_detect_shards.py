"""`detect --engine ray`'s shards and merged results without a Ray cluster: the worker's
batches run in this process (`run_ray` replaced), so reruns, a worker that died between
its drawn copies and its shard, and `overwrite` are checked in seconds (docs/scale.md).
`tests/test_scale_detect_ray.py` runs the same on a real Ray.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from clearsight.engine.detector import Detector
from clearsight.errors import ClearsightError
from clearsight.io import read_image, write_image
from clearsight.scale import detect_ray, ray_engine
from clearsight.scale.detect_ray import (
    COVERAGE_SUFFIX,
    SHARDS_DIR,
    detect_files_ray,
)
from tests.scale_utils import BAD, REPO_ROOT, drawn_files, make_detect_inputs, sorted_results


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_detect_inputs(tmp_path_factory.mktemp("detect"))


@pytest.fixture
def in_process(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Run the workers' batches here, one loaded task, and record each batch's sources."""
    batches: list[list[str]] = []

    def run_ray(task, items, *, batch_size=8, on_result=None, **_kw):
        run = task.load()
        results = []
        for start in range(0, len(items), batch_size):
            chunk = list(items[start : start + batch_size])
            batches.append([i.source for i in chunk])
            for r in run(chunk):
                results.append(r)
                if on_result is not None:
                    on_result(r)
        return results

    monkeypatch.setattr(ray_engine, "run_ray", run_ray)
    monkeypatch.setattr(ray_engine, "_connect", lambda address: False)
    return batches


def test_shards_merge_into_the_local_results_and_a_rerun_keeps_them(in_process, inputs, tmp_path):
    good, mixed, reference = inputs
    out = tmp_path / "out"
    summary = detect_files_ray([mixed], out, batch_size=2)
    assert (len(summary.done), len(summary.skipped), len(summary.failed)) == (6, 0, 2)
    assert drawn_files(out) == drawn_files(reference)  # byte for byte, same names
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")
    assert summary.detections == len(json.loads((reference / "detections.json").read_text())) > 4
    # in fact in the same order too: the plan's, each image's detections best first
    assert (out / "detections.json").read_bytes() == (reference / "detections.json").read_bytes()
    # one results file and one list of images per batch that drew anything
    shards = out / SHARDS_DIR
    lists = sorted(shards.glob(f"*{COVERAGE_SUFFIX}"))
    assert len(lists) == 4 and len(list(shards.glob("*.json"))) == 8
    covered = [c["output"] for p in lists for c in json.loads(p.read_text())]
    assert sorted(covered) == sorted(drawn_files(good))  # the grey image too: no detections

    # a rerun does nothing but the two bad files, and the merged file is still complete
    in_process.clear()
    again = detect_files_ray([mixed], out, batch_size=2)
    assert (len(again.done), len(again.skipped), len(again.failed)) == (0, 6, 2)
    assert sorted(s for b in in_process for s in b) == sorted(str(mixed / r) for r in BAD)
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")
    assert len(list(shards.glob("*.json"))) == 8  # the failed batches wrote no shard


def test_images_drawn_by_a_worker_that_died_before_its_shard_are_redone(
    in_process, inputs, tmp_path
):
    good, mixed, reference = inputs
    out = tmp_path / "out"
    detect_files_ray([mixed], out, batch_size=3)
    # the worker of one batch died after drawing its images, before its list of them
    victim = sorted((out / SHARDS_DIR).glob(f"*{COVERAGE_SUFFIX}"))[0]
    lost = sorted(c["output"] for c in json.loads(victim.read_text()))
    victim.unlink()
    in_process.clear()
    rerun = detect_files_ray([mixed], out, batch_size=3)
    redone = sorted(Path(r.output).relative_to(out).as_posix() for r in rerun.done)
    assert redone == lost and len(rerun.skipped) == 6 - len(lost)
    results = [p for p in (out / SHARDS_DIR).glob("*.json") if COVERAGE_SUFFIX not in p.name]
    assert all(p.with_suffix(COVERAGE_SUFFIX).is_file() for p in results)  # no orphan left
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")
    assert drawn_files(out) == drawn_files(reference)


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
def test_overwrite_redoes_everything_and_records_each_image_once(in_process, inputs, tmp_path):
    good, mixed, reference = inputs
    out = tmp_path / "out"
    detect_files_ray([mixed], out, batch_size=2)
    again = detect_files_ray([mixed], out, batch_size=4, overwrite=True)  # other batches
    assert (len(again.done), len(again.skipped)) == (6, 0)
    lists = (out / SHARDS_DIR).glob(f"*{COVERAGE_SUFFIX}")
    covered = [c["output"] for p in lists for c in json.loads(p.read_text())]
    assert sorted(covered) == sorted(drawn_files(good))  # old shards gave their images up
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")


def _shards(out: Path) -> dict[str, tuple[list[dict], list[dict]]]:
    """{key: (results, listed images)} of every shard under `out`."""
    folder = out / SHARDS_DIR
    return {
        p.name[: -len(COVERAGE_SUFFIX)]: (
            json.loads(p.with_name(p.name.replace(COVERAGE_SUFFIX, ".json")).read_text()),
            json.loads(p.read_text()),
        )
        for p in folder.glob(f"*{COVERAGE_SUFFIX}")
    }


def test_an_image_whose_drawing_was_deleted_leaves_its_shard_and_is_redone(
    in_process, inputs, tmp_path
):
    good, mixed, reference = inputs
    out = tmp_path / "out"
    detect_files_ray([mixed], out, batch_size=4)
    (out / "whole.jpg").unlink()  # shares a shard with other images
    rerun = detect_files_ray([mixed], out, batch_size=4)
    assert [Path(r.output).name for r in rerun.done] == ["whole.jpg"]
    listed = [c["output"] for _, covered in _shards(out).values() for c in covered]
    assert sorted(listed) == sorted(drawn_files(good))  # whole.jpg once, in its new shard
    for results, covered in _shards(out).values():  # each shard holds only what it lists
        assert {r["image_id"] for r in results} <= {c["image_id"] for c in covered}
    assert (out / "detections.json").read_bytes() == (reference / "detections.json").read_bytes()


def test_image_ids_follow_the_whole_run_on_a_rerun_with_more_inputs(in_process, tmp_path):
    """Positional ids (non-numeric names) shift when inputs are added; the merged file
    numbers every image as the local engine would for the new run."""
    folder = tmp_path / "in"
    photo = read_image(REPO_ROOT / "examples" / "coffee.jpg")
    write_image(folder / "b.jpg", photo)
    out = tmp_path / "out"
    detect_files_ray([folder], out)
    write_image(folder / "a.jpg", photo[:, ::-1])  # sorts first: b.jpg becomes image 1
    rerun = detect_files_ray([folder], out)
    assert len(rerun.skipped) == 1 and len(rerun.done) == 1
    reference = tmp_path / "reference"
    Detector.from_pretrained("default-detect").detect_files([folder], reference)
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")


def test_a_restoration_model_is_refused_before_any_worker(in_process, inputs, tmp_path):
    with pytest.raises(ClearsightError, match="not a detector"):
        detect_files_ray([inputs[0]], tmp_path / "out", "identity")
    assert not in_process and not (tmp_path / "out").exists()


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
def test_the_command_resumes_with_engine_ray(in_process, inputs, tmp_path):
    from typer.testing import CliRunner

    from clearsight.cli import app

    good, mixed, reference = inputs
    out = tmp_path / "out"
    args = ["detect", str(mixed), "-o", str(out), "--engine", "ray", "--batch-size", "4"]
    first = CliRunner().invoke(app, args)
    assert first.exit_code == 3, first.output  # two inputs failed
    assert "done 6, skipped 0, failed 2" in first.output
    second = CliRunner().invoke(app, [*args, "--overwrite"])
    assert "done 6, skipped 0, failed 2" in second.output
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")
    local = CliRunner().invoke(app, ["detect", str(good), "-o", str(out), "--skip-existing"])
    assert local.exit_code != 0 and "--engine ray" in local.output


def test_the_shard_name_depends_on_every_member():
    assert detect_ray.shard_key(["a.png", "b.png"]) == detect_ray.shard_key(["a.png", "b.png"])
    assert detect_ray.shard_key(["a.png", "b.png"]) != detect_ray.shard_key(["a.png", "c.png"])
