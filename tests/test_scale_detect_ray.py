"""`detect --engine ray` on a local Ray of 2 CPUs: the local engine's drawn bytes, names and
merged COCO results; a rerun that skips finished images; bad files in `failures.csv`; a
worker killed mid-run whose images are redone (docs/scale.md). The shard bookkeeping on its
own is `tests/test_scale_detect_shards.py`, without Ray.

One Ray for the module; the bundled detector on a few small images.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'clearsight[scale]')")

from clearsight.cli import app  # noqa: E402
from clearsight.detection.detector import Detector, image_ids  # noqa: E402
from clearsight.scale.detect_ray import (  # noqa: E402
    COVERAGE_SUFFIX,
    SHARDS_DIR,
    DetectTask,
    ShardIndex,
    detect_files_ray,
)
from clearsight.scale.inputs import WorkItem, plan_inputs  # noqa: E402
from clearsight.scale.ray_engine import BatchFn, ItemResult, run_plan_ray  # noqa: E402
from tests.test_scale_detect_shards import (  # noqa: E402
    BAD,
    drawn_files,
    make_detect_inputs,
    sorted_results,
)

N_GOOD = 6


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    # the test's slow task below travels to the workers by value (tests/ is not importable)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(good, mixed, reference): the inputs and what the local engine writes for `mixed`."""
    root = tmp_path_factory.mktemp("detect_ray")
    good, mixed = make_detect_inputs(root)
    reference = root / "reference"
    Detector.from_pretrained("default-detect").detect_files([mixed], reference)
    return good, mixed, reference


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
        run = super().load()
        Path(self.pid_dir, str(os.getpid())).touch()

        def slow(items: list[WorkItem]) -> list[ItemResult]:
            time.sleep(0.5 * len(items))
            return run(items)

        return slow


def test_a_killed_worker_is_replaced_and_its_images_redone(local_ray, inputs, tmp_path):
    good, mixed, reference = inputs
    out, pid_dir = tmp_path / "out", tmp_path / "pids"
    pid_dir.mkdir()
    # detect_files_ray's steps with the slow task (plan, number, run); a rerun then merges
    plan = plan_inputs([mixed], out)
    stems = [Path(i.source).stem for i in plan]
    ids = dict(zip((i.source for i in plan), image_ids(stems), strict=True))
    task = SlowRecordedDetect("default-detect", str(out), ids, pid_dir=str(pid_dir))
    outcome: dict[str, object] = {}

    def run() -> None:
        try:
            outcome["summary"] = run_plan_ray(
                task, plan, [], out, workers=2, batch_size=2, threads=torch.get_num_threads()
            )
        except BaseException as exc:  # surfaced by the assertions below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    victim = None
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        # kill a worker once work is under way: it holds a batch, or is about to
        pids = sorted(pid_dir.iterdir())
        if pids and any(out.rglob("*.*g")):
            victim = int(pids[0].name)
            os.kill(victim, signal.SIGKILL)
        time.sleep(0.05)
    thread.join(timeout=180)
    assert not thread.is_alive(), "the Ray run did not finish"
    assert "error" not in outcome, outcome.get("error")
    assert victim is not None, "no worker was killed: the run ended before"
    summary = outcome["summary"]
    sources = [r.source for r in summary.done]  # type: ignore[attr-defined]
    assert len(sources) == len(set(sources)) == N_GOOD  # each good image once
    # every image is drawn and recorded once: the merged shards are the local results
    index = ShardIndex.read(out)
    assert sorted(index.covers) == sorted(drawn_files(good))
    assert drawn_files(out) == drawn_files(reference)
    merged = sorted(index.merged(plan, ids, out), key=lambda r: json.dumps(r, sort_keys=True))
    assert merged == sorted_results(reference / "detections.json")
