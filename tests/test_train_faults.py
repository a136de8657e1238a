"""A real `clearsight train` process killed in the middle of a checkpoint save loses nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch
import yaml

from clearsight.engine.checkpoint import PAUSE_ENV, CheckpointError, load_checkpoint
from tests.train_utils import make_pairs, tiny_raw


def _run_cli(*args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "clearsight", "train", *args, "--no-progress"],
        env={**os.environ, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _saving(run: Path) -> bool:
    for p in run.glob(".checkpoint.*.tmp.pt"):
        try:
            if p.stat().st_size > 0:
                return True
        except FileNotFoundError:  # renamed away between glob and stat
            continue
    return False


def _saved_step(run: Path) -> int | None:
    try:
        return int(load_checkpoint(run)["step"])
    except CheckpointError:  # none yet
        return None


def test_kill_during_save_keeps_previous_checkpoint_and_resumes(tmp_path: Path) -> None:
    data = make_pairs(tmp_path / "data")
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_raw(data)))
    run = tmp_path / "run"
    # saves: 1 at step 0, 2 at step 4, 3 at step 8 -> pause (and die) inside the third
    proc = _run_cli(str(cfg_path), "--run-dir", str(run), env={PAUSE_ENV: "3:120"})
    try:
        deadline = time.monotonic() + 90
        # The earlier saves' temporary files also show for an instant, so wait for the state
        # the third save holds for 120 s: its temporary file beside the step-4 checkpoint.
        while not (_saving(run) and _saved_step(run) == 4):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the third save never started"
            time.sleep(0.1)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == -signal.SIGKILL
    state = load_checkpoint(run)  # the previous checkpoint is whole
    assert state["step"] == 4

    resumed = _run_cli("--resume", str(run))
    out, _ = resumed.communicate(timeout=120)
    assert resumed.returncode == 0, out
    assert "trained 8 steps" in out
    assert not list(run.glob(".checkpoint.*.tmp.pt"))

    # the uninterrupted run goes through the same CLI, so it gets the same thread settings as
    # the killed and resumed ones (the in-process trainer may run under another thread count,
    # whose reduction order differs in the last bit on some CPUs)
    straight = _run_cli(str(cfg_path), "--run-dir", str(tmp_path / "straight"))
    out, _ = straight.communicate(timeout=120)
    assert straight.returncode == 0, out
    want, got = load_checkpoint(tmp_path / "straight"), load_checkpoint(run)
    assert got["step"] == 8
    for key, value in want["model"].items():
        assert torch.equal(value, got["model"][key]), key


def test_cli_errors_are_one_line(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "clearsight", "train", "--resume", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1
    assert out.stderr.strip().startswith("error:") and "checkpoint" in out.stderr
    assert "Traceback" not in out.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("train: {steps: ten}\n")
    out = subprocess.run(
        [sys.executable, "-m", "clearsight", "train", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "train.steps: expected int, got str" in out.stderr
    out = subprocess.run(
        [sys.executable, "-m", "clearsight", "train", str(tmp_path / "missing.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 1 and "config file not found" in out.stderr


def test_cli_overfit_batch_exit_code(tmp_path: Path) -> None:
    data = make_pairs(tmp_path / "data")
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(tiny_raw(data)))
    base = [sys.executable, "-m", "clearsight", "train", str(cfg_path), "--overfit-batch"]
    base += ["--run-dir", str(tmp_path / "run"), "--no-progress", "--set", "schedule.milestones=[]"]
    ok = subprocess.run(
        [*base, "--set", "train.steps=40", "--set", "optim.lr=0.01"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert ok.returncode == 0, ok.stderr
    assert "first loss" in ok.stdout and "the loss fell" in ok.stdout
    bad = subprocess.run(
        [*base, "--set", "train.steps=3", "--set", "optim.lr=1e-9"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert bad.returncode == 1 and "did not fall" in bad.stderr
