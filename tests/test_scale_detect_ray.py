"""`detect --engine ray` on a local Ray of 2 CPUs: the local engine's drawn bytes, names and
merged COCO results; a rerun that skips finished images; bad files in `failures.csv`; a
worker killed mid-run whose images are redone (docs/scale.md). The shard bookkeeping on its
own is `tests/test_scale_detect_shards.py`, without Ray.

One Ray for the module; the bundled detector on a few small images.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from tests.optional import need

ray = need("ray")

from clearsight.cli import app  # noqa: E402
from clearsight.engine.detector import image_ids  # noqa: E402
from clearsight.scale.detect_ray import (  # noqa: E402
    COVERAGE_SUFFIX,
    SHARDS_DIR,
    DetectTask,
    ShardIndex,
    detect_files_ray,
)
from clearsight.scale.inputs import plan_inputs  # noqa: E402
from clearsight.scale.ray_engine import BatchFn, run_plan_ray  # noqa: E402
from tests import scale_utils  # noqa: E402
from tests.scale_utils import (  # noqa: E402  # noqa: E402
    BAD,
    drawn_files,
    make_detect_inputs,
    run_killing_a_worker,
    slow_recorded,
    sorted_results,
)

N_GOOD = 6


@pytest.fixture(scope="module")
def local_ray():
    with scale_utils.local_ray(__name__):
        yield


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    return make_detect_inputs(tmp_path_factory.mktemp("detect_ray"))


def _assert_matches_reference(out: Path, reference: Path) -> None:
    assert drawn_files(out) == drawn_files(reference)  # byte for byte, same paths, no temps
    assert sorted_results(out / "detections.json") == sorted_results(reference / "detections.json")
    rows = (out / "failures.csv").read_text().splitlines()
    assert rows[0] == "file,output,reason" and len(rows) == 1 + len(BAD)


def test_ray_outputs_equal_the_local_engine_and_a_rerun_skips_them(local_ray, inputs, tmp_path):
    good, mixed, reference = inputs
    out = tmp_path / "out"
    # the workers on this process's thread count: the same convolution sums, the same bytes
    threads = torch.get_num_threads()
    summary = detect_files_ray([mixed], out, workers=2, batch_size=2, threads=threads)
    assert (len(summary.done), len(summary.skipped), len(summary.failed)) == (N_GOOD, 0, 2)
    assert sorted(Path(r.source).name for r in summary.failed) == ["broken.png", "text.jpg"]
    _assert_matches_reference(out, reference)
    assert len(list((out / SHARDS_DIR).glob(f"*{COVERAGE_SUFFIX}"))) == 4  # one per batch

    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.*g")}
    args = ["detect", str(mixed), "-o", str(out), "--engine", "ray", "--workers", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 3, result.output  # the bad files failed again
    assert f"done 0, skipped {N_GOOD}, failed 2" in result.output
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.*g")} == stamps
    _assert_matches_reference(out, reference)


@dataclass(frozen=True)
class SlowRecordedDetect(DetectTask):
    """DetectTask that records each worker's pid and takes its time, so a test can kill a
    worker while it holds a batch."""

    pid_dir: str = ""

    def load(self) -> BatchFn:
        return slow_recorded(super().load(), self.pid_dir, 0.5)


def test_a_killed_worker_is_replaced_and_its_images_redone(local_ray, inputs, tmp_path):
    good, mixed, reference = inputs
    out, pid_dir = tmp_path / "out", tmp_path / "pids"
    pid_dir.mkdir()
    # detect_files_ray's steps with the slow task: plan, number, run, merge
    plan = plan_inputs([mixed], out)
    stems = [Path(i.source).stem for i in plan]
    ids = dict(zip((i.source for i in plan), image_ids(stems), strict=True))
    task = SlowRecordedDetect("default-detect", str(out), ids, pid_dir=str(pid_dir))
    threads = torch.get_num_threads()
    summary, _ = run_killing_a_worker(
        lambda: run_plan_ray(task, plan, [], out, workers=2, batch_size=2, threads=threads),
        pid_dir,
        out,
        kill_within=120,
        finish_within=180,
    )
    sources = [r.source for r in summary.done]
    assert len(sources) == len(set(sources)) == N_GOOD  # each good image once
    # every image is drawn and recorded once: the merged shards are the local results
    index = ShardIndex.read(out)
    assert sorted(index.covers) == sorted(drawn_files(good))
    assert drawn_files(out) == drawn_files(reference)
    merged = sorted(index.merged(plan, ids, out), key=lambda r: json.dumps(r, sort_keys=True))
    assert merged == sorted_results(reference / "detections.json")
