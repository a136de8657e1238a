"""Helpers of the scale tests (`test_scale_ray.py`, `test_scale_detect_*.py`): detection
inputs with their local-engine reference, a worker task slowed down and recording its pid,
and a run during which one worker is killed.

Workers cannot import `tests/`: a module using these registers this one with
`ray.cloudpickle.register_pickle_by_value`, so the helpers travel by value.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np

from clearsight.engine.detector import Detector
from clearsight.io import read_image, write_image
from clearsight.scale.detect_ray import SHARDS_DIR
from clearsight.scale.inputs import WorkItem
from clearsight.scale.ray_engine import BatchFn, ItemResult

REPO_ROOT = Path(__file__).resolve().parents[1]
RAY_NICENESS = "RAY_worker_niceness"  # Ray's spelling of its config variable
BAD = {"broken.png": b"\x89PNG\r\n\x1a\n truncated", "sub/text.jpg": b"not a jpeg at all"}


@contextmanager
def local_ray(test_module: str) -> Iterator[None]:
    """A local Ray of 2 CPUs for one test module, whose own tasks travel to the workers by
    value (tests/ is not importable there). Its workers run at the tests' priority: Ray starts
    them at nice 15, and beside another busy test process (`pytest -n`) they starve."""
    import ray

    with mock.patch.dict(os.environ, {RAY_NICENESS: "0"}):  # read by the raylet ray.init starts
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[test_module])
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    try:
        yield
    finally:
        ray.shutdown()


def make_detect_inputs(root: Path) -> tuple[Path, Path, Path]:
    """(good, mixed, reference): nested crops and flips of the example photo (cups and a
    table) and a plain grey image without detections; the same plus two unreadable files;
    and what the local engine writes for `mixed`."""
    photo = read_image(REPO_ROOT / "examples" / "coffee.jpg")
    views = {
        "whole.jpg": photo,
        "sub/left.png": photo[:, :320],
        "sub/right.jpg": photo[:, 280:],
        "sub/deep/flipped.png": photo[:, ::-1],
        "sub/deep/grey.png": np.full((48, 64, 3), 128, np.uint8),
        "top.png": photo[:220],
    }
    good = root / "good"
    for rel, img in views.items():
        write_image(good / rel, np.ascontiguousarray(img))
    mixed = root / "mixed"
    shutil.copytree(good, mixed)
    for rel, data in BAD.items():
        (mixed / rel).write_bytes(data)
    reference = root / "reference"
    Detector.from_pretrained("default-detect").detect_files([mixed], reference)
    return good, mixed, reference


def sorted_results(path: Path) -> list[dict]:
    return sorted(json.loads(path.read_text()), key=lambda r: json.dumps(r, sort_keys=True))


def drawn_files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` but the run's lists: the drawn copies, by relative path."""
    skip = {"detections.json", "failures.csv"}
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file() and p.name not in skip and SHARDS_DIR not in p.parts
    }


def slow_recorded(run: BatchFn, pid_dir: str, seconds_per_image: float) -> BatchFn:
    """`run` in a worker that has left its pid in `pid_dir` and takes its time per batch, so
    a test can kill it while it holds one."""
    Path(pid_dir, str(os.getpid())).touch()

    def slow(items: list[WorkItem]) -> list[ItemResult]:
        time.sleep(seconds_per_image * len(items))
        return run(items)

    return slow


def run_killing_a_worker(
    start: Callable[[], Any], pid_dir: Path, out: Path, *, kill_within: float, finish_within: float
) -> tuple[Any, int]:
    """Run `start()` in a thread and SIGKILL one worker (the first pid in `pid_dir`) once an
    image has been written under `out` (within `kill_within` seconds): it holds a batch,
    or is about to. `finish_within`: seconds the run has after that. Returns what
    `start` returned and the killed pid; fails the test if the run raised, hung, or ended
    before a worker could be killed."""
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["result"] = start()
        except BaseException as exc:  # surfaced by the assertions below
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    deadline = time.monotonic() + kill_within
    victim = None
    while victim is None and time.monotonic() < deadline and thread.is_alive():
        pids = sorted(pid_dir.iterdir())
        if pids and any(out.rglob("*.*g")):
            victim = int(pids[0].name)
            os.kill(victim, signal.SIGKILL)
        time.sleep(0.05)
    thread.join(timeout=finish_within)
    assert not thread.is_alive(), "the Ray run did not finish"
    assert "error" not in outcome, outcome.get("error")
    assert victim is not None, "no worker was killed: the run ended before"
    return outcome["result"], victim
