"""Data-parallel training: two CPU processes (gloo) end with identical weights."""

from __future__ import annotations

import os
import socket
from collections.abc import Callable
from pathlib import Path

import torch
import torch.multiprocessing as mp

from clearsight.engine.trainer import TrainResult, train
from tests.train_utils import FakeClock, make_pairs, tiny_config, train_log


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _join(rank: int, world: int, port: int) -> None:
    """What torchrun sets for one rank; one thread each, as two ranks share the cores."""
    os.environ.update(
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
    )
    torch.set_num_threads(1)


def _save_result(res: TrainResult, out: str, rank: int) -> None:
    assert res.model is not None
    state = {k: v.clone() for k, v in res.model.state_dict().items()}
    payload = {"state": state, "val": res.val_metrics, "steps": res.steps}
    torch.save(payload, Path(out) / f"rank{rank}.pt")


def _worker(rank: int, world: int, port: int, data: str, out: str) -> None:
    _join(rank, world, port)
    cfg = tiny_config(Path(data), train={"steps": 4, "ema_decay": 0.5, "device": "cpu"})
    _save_result(train(cfg, Path(out) / "run", progress=False), out, rank)


def _run_two(tmp_path: Path, worker: Callable[..., None], seconds: int = 120) -> bool:
    """Run `worker` as two spawned ranks; False if they fail or outlast `seconds`."""
    data = make_pairs(tmp_path / "data")
    ctx = mp.start_processes(
        worker,
        args=(2, _free_port(), str(data), str(tmp_path)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    for _ in range(seconds):
        try:
            if ctx.join(timeout=1):
                return True
        except mp.ProcessException:
            break
    for p in ctx.processes:
        p.kill()
    return False


def test_two_ranks_hold_identical_weights(tmp_path: Path) -> None:
    assert _run_two(tmp_path, _worker), "DDP training failed or did not finish in 120 s"
    a = torch.load(tmp_path / "rank0.pt", weights_only=True)
    b = torch.load(tmp_path / "rank1.pt", weights_only=True)
    for key, value in a["state"].items():
        assert torch.equal(value, b["state"][key]), key
    assert a["val"] == b["val"]  # metrics reduced over ranks
    run = tmp_path / "run"
    assert (run / "checkpoint.pt").is_file() and (run / "best" / "config.json").is_file()
    # written by rank 0 only: one log line per log step
    assert len(train_log(run, "loss")) == 2


def _budget_worker(rank: int, world: int, port: int, data: str, out: str) -> None:
    from clearsight.engine import train_budget, trainer

    _join(rank, world, port)
    # rank 1's steps seem 1.5x slower: left alone, each rank would cut its own step count (or
    # hit the hard stop at its own step) and their collectives would no longer match
    trainer.time.perf_counter = FakeClock(1.0 if rank == 0 else 1.5)  # type: ignore[method-assign]
    train_budget.TIMING_STEPS = 2
    cfg = tiny_config(
        Path(data),
        train={"steps": 1000, "max_minutes": 0.5, "val_every": 1000, "device": "cpu"},
    )
    _save_result(train(cfg, Path(out) / "run", progress=False), out, rank)


def test_a_time_budget_stops_every_rank_at_the_same_step(tmp_path: Path) -> None:
    assert _run_two(tmp_path, _budget_worker), "ranks disagreed on the time budget (hang)"
    a = torch.load(tmp_path / "rank0.pt", weights_only=True)
    b = torch.load(tmp_path / "rank1.pt", weights_only=True)
    assert 2 < a["steps"] == b["steps"] < 1000
    for key, value in a["state"].items():
        assert torch.equal(value, b["state"][key]), key
