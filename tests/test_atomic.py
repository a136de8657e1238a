"""Atomic outputs: modes follow the umask, and a killed writer's temporary files get swept."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import clearsight.atomic as atomic
from clearsight.artifact import make_config, save_artifact
from clearsight.engine.checkpoint import save_checkpoint
from clearsight.io import write_image
from clearsight.models.registry import build_model


@pytest.fixture(params=[0o022, 0o077], ids=["umask022", "umask077"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    """Run the test under a umask, restored afterwards (pytest runs tests in one thread)."""
    old = os.umask(request.param)
    try:
        yield request.param
    finally:
        os.umask(old)


def _mode(p: Path) -> int:
    return p.stat().st_mode & 0o777


def test_outputs_get_the_mode_a_plain_open_gives(tmp_path: Path, umask: int) -> None:
    file_mode, dir_mode = 0o666 & ~umask, 0o777 & ~umask
    plain = tmp_path / "plain.txt"
    plain.write_text("x")  # what the user's own tools would create
    assert _mode(plain) == file_mode

    atomic.atomic_write_text(tmp_path / "summary.json", "{}")
    write_image(tmp_path / "out" / "a.png", np.zeros((4, 4, 3), np.uint8))
    write_image(tmp_path / "out" / "b.tif", np.zeros((4, 4, 3), np.uint16), bit_depth=16)
    save_checkpoint({"step": 0}, tmp_path / "run" / "checkpoint.pt")
    model = build_model("rescan", channels=2, depth=3, stages=1)
    cfg = make_config(model, "rescan", {"channels": 2, "depth": 3, "stages": 1})
    save_artifact(model, tmp_path / "run" / "best", cfg)
    save_artifact(model, tmp_path / "run" / "best", cfg)  # overwriting keeps the mode too
    save_artifact(model, tmp_path / "m.safetensors", cfg)

    files = [
        tmp_path / "summary.json",
        tmp_path / "out" / "a.png",
        tmp_path / "out" / "b.tif",
        tmp_path / "run" / "checkpoint.pt",
        tmp_path / "run" / "best" / "model.safetensors",
        tmp_path / "run" / "best" / "config.json",
        tmp_path / "m.safetensors",
    ]
    folders = [tmp_path / "out", tmp_path / "run", tmp_path / "run" / "best"]
    assert {str(p.relative_to(tmp_path)): oct(_mode(p)) for p in files + folders} == {
        **{str(p.relative_to(tmp_path)): oct(file_mode) for p in files},
        **{str(p.relative_to(tmp_path)): oct(dir_mode) for p in folders},
    }


_WRITER = """
import sys, numpy as np
from clearsight.io import write_image
out = sys.argv[1]
img = np.random.default_rng(0).integers(0, 256, (768, 768, 3), dtype=np.uint8)
print("ready", flush=True)
for i in range(100000):
    write_image(f"{out}/{i % 50:03d}.png", img)
"""

_SWEEPER = """
import sys
from clearsight.atomic import sweep_leftovers
print(len(sweep_leftovers(sys.argv[1])))
"""


def _leftovers(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if ".tmp" in p.name)


def test_kill_9_mid_write_leaves_nothing_after_the_next_run(tmp_path: Path) -> None:
    out = tmp_path / "restored"
    out.mkdir()
    killed_with_leftovers = 0
    for _attempt in range(6):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, str(out)], stdout=subprocess.PIPE, text=True
        )
        try:
            assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
            time.sleep(0.8)  # a few images in; most of the time is spent encoding one
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
        killed_with_leftovers += bool(_leftovers(out))
        if killed_with_leftovers >= 2:
            break
    assert killed_with_leftovers, "no kill landed mid-write: the test proved nothing"
    left = _leftovers(out)

    done = subprocess.run(
        [sys.executable, "-c", _SWEEPER, str(out)], capture_output=True, text=True, timeout=120
    )
    assert _leftovers(out) == [], done.stderr[-300:]  # the next run removed them all
    assert done.returncode == 0 and int(done.stdout) == len(left)
    assert all(atomic.is_leftover(p.name) for p in left), left
    assert list(out.glob("*.png"))  # finished images are untouched


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_sweep_removes_only_old_leftovers_of_dead_writers(tmp_path: Path) -> None:
    dead = _dead_pid()
    old = time.time() - 3600

    def make(name: str, mtime: float, *, folder: bool = False) -> Path:
        p = tmp_path / name
        if folder:
            p.mkdir()
            (p / "model.safetensors").write_bytes(b"x")
        else:
            p.write_bytes(b"x")
        os.utime(p, (mtime, mtime))
        return p

    stale = make(f".a.clearsight-{dead}-0123abcd.tmp.png", old)
    stale_dir = make(f".best.clearsight-{dead}-0123abcd.tmp", old, folder=True)
    fresh = make(f".b.clearsight-{dead}-0123abcd.tmp.png", time.time() + 60)  # newer than run
    live = make(f".c.clearsight-{os.getpid()}-0123abcd.tmp.png", old)  # a live writer's
    foreign = make(".d.ab12cd.tmp.png", old)  # not ours: never touched
    user = make("e.clearsight-1-x.tmp.png", old)  # not hidden: a user's file
    kept = [fresh, live, foreign, user]

    removed = atomic.sweep_leftovers(tmp_path, before=time.time())
    assert sorted(removed) == sorted([stale, stale_dir])
    assert not stale.exists() and not stale_dir.exists()
    assert all(p.exists() for p in kept)


def test_temp_names_are_recognisable_and_keep_the_suffix(tmp_path: Path) -> None:
    tmp = atomic.temp_path_for(tmp_path / "img.0001.png")
    assert tmp.parent == tmp_path and tmp.suffix == ".png"
    assert tmp.name.startswith(".img.0001.clearsight-") and atomic.is_leftover(tmp.name)
    assert not atomic.is_leftover("img.0001.png") and not atomic.is_leftover(".img.abc.tmp.png")


def test_training_sweeps_its_run_folder_of_dead_runs_leftovers(tmp_path: Path) -> None:
    from clearsight.engine.trainer import train
    from tests.train_utils import make_pairs, tiny_config

    run = tmp_path / "run"
    run.mkdir()
    old = time.time() - 3600
    stale = run / f".checkpoint.clearsight-{_dead_pid()}-0badc0de.tmp.pt"
    foreign = run / ".notes.tmp.txt"
    for p in (stale, foreign):
        p.write_bytes(b"half a checkpoint")
        os.utime(p, (old, old))
    train(tiny_config(make_pairs(tmp_path / "data", n=4)), run, progress=False)
    assert not stale.exists() and foreign.exists()
    assert not [p for p in run.iterdir() if atomic.is_leftover(p.name)]
