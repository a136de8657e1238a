"""`--engine ray` on a local Ray of 2 CPUs: the local engine's bytes and names, a rerun that
skips every finished output, bad files in `failures.csv`, and a worker killed mid-run that
still leaves every good image written once (docs/scale.md).

One Ray for the module; tiny images and the `identity` model keep it near a minute.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from tests.optional import need

ray = need("ray")

from clearsight.cli import app  # noqa: E402
from clearsight.engine.inference import InferenceOptions, Restorer  # noqa: E402
from clearsight.engine.restore_files import restore_files  # noqa: E402
from clearsight.io import write_image  # noqa: E402
from clearsight.scale.ray_engine import BatchFn, RestoreTask, restore_files_ray  # noqa: E402
from tests import scale_utils  # noqa: E402
from tests.scale_utils import run_killing_a_worker, slow_recorded  # noqa: E402

BAD = {"broken.png": b"\x89PNG\r\n\x1a\n truncated", "sub/text.jpg": b"not a jpeg at all"}


@pytest.fixture(scope="module")
def local_ray():
    with scale_utils.local_ray(__name__):
        yield


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(good, mixed, reference): nested good images, the same plus bad files, and what
    the local engine writes for the good ones."""
    root = tmp_path_factory.mktemp("scale")
    rng = np.random.default_rng(7)
    good = root / "good"
    for i in range(9):
        rel = ["", "sub/", "sub/deep/"][i % 3] + f"img{i}" + [".png", ".jpg", ".png"][i % 3]
        write_image(good / rel, rng.integers(0, 256, (12 + i, 10, 3), dtype=np.uint8))
    write_image(good / "sub" / "sixteen.png", rng.integers(0, 65536, (9, 7, 3), dtype=np.uint16))
    mixed = root / "mixed"
    shutil.copytree(good, mixed)
    for rel, data in BAD.items():
        (mixed / rel).write_bytes(data)
    reference = root / "reference"
    restore_files(Restorer.from_pretrained("identity"), [good], reference)
    return good, mixed, reference


def _files(folder: Path) -> dict[str, bytes]:
    return {
        p.relative_to(folder).as_posix(): p.read_bytes()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


def _assert_matches_reference(out: Path, reference: Path) -> None:
    written = _files(out)
    assert written.pop("failures.csv").decode().splitlines()[0] == "file,output,reason"
    assert written == _files(reference)  # byte for byte, same relative paths, no temp files


def test_outputs_equal_the_local_engine_and_a_rerun_skips_them(local_ray, folders, tmp_path):
    good, mixed, reference = folders
    out = tmp_path / "out"
    summary = restore_files_ray("identity", [mixed], out, workers=2, batch_size=2)
    n_good = len(_files(good))
    assert len(summary.done) == n_good and not summary.skipped
    assert sorted(Path(r.source).name for r in summary.failed) == ["broken.png", "text.jpg"]
    _assert_matches_reference(out, reference)
    rows = (out / "failures.csv").read_text().splitlines()[1:]
    assert len(rows) == 2 and all("cannot read image" in r for r in rows)
    assert rows[0].startswith(str(mixed / "broken.png") + ",")

    stamps = {p: p.stat().st_mtime_ns for p in out.rglob("*.*g")}
    result = CliRunner().invoke(
        app,
        [
            "restore",
            str(mixed),
            "--model",
            "identity",
            "--out",
            str(out),
            "--engine",
            "ray",
            "--workers",
            "2",
            "--batch-size",
            "2",
        ],
    )
    # a bad image makes the exit code 3 (some inputs failed), after the run; no good one redone
    assert result.exit_code == 3, result.output
    assert f"done 0, skipped {n_good}, failed 2" in result.output
    assert {p: p.stat().st_mtime_ns for p in out.rglob("*.*g")} == stamps


@dataclass(frozen=True)
class SlowRecordedTask(RestoreTask):
    """RestoreTask that records each worker's pid and takes its time, so a test can kill a
    worker while it holds a batch."""

    pid_dir: str = ""

    def load(self) -> BatchFn:
        return slow_recorded(super().load(), self.pid_dir, 0.4)


def test_a_killed_worker_is_replaced_and_its_images_redone(local_ray, folders, tmp_path):
    good, mixed, reference = folders
    out, pid_dir = tmp_path / "out", tmp_path / "pids"
    pid_dir.mkdir()
    task = SlowRecordedTask("identity", InferenceOptions(), None, str(pid_dir))
    from clearsight.scale.ray_engine import run_files_ray

    summary, _ = run_killing_a_worker(
        lambda: run_files_ray(task, [mixed], out, workers=2, batch_size=2),
        pid_dir,
        out,
        kill_within=90,
        finish_within=120,
    )
    sources = [r.source for r in summary.done]
    assert len(sources) == len(set(sources)) == len(_files(good))  # each good image once
    assert len(summary.failed) == 2
    _assert_matches_reference(out, reference)
