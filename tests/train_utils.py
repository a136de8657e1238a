"""Tiny paired data and configs for the training tests (fast on 2 CPU cores)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
from PIL import Image

from clearsight.engine.train_config import TrainConfig, config_from_dict


def make_pairs(root: Path, n: int = 8, size: int = 24, seed: int = 0) -> Path:
    """`root/rain` and `root/clean` with `n` PNG pairs: smooth images plus bright streaks."""
    rng = np.random.default_rng(seed)
    (root / "rain").mkdir(parents=True, exist_ok=True)
    (root / "clean").mkdir(parents=True, exist_ok=True)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    for i in range(n):
        f = rng.uniform(3, 8, 3)
        clean = np.stack([np.sin(x / f[0]), np.cos(y / f[1]), np.sin((x + y) / f[2])], 2)
        clean = (clean * 60 + 110).astype(np.float32)
        streaks = (rng.random((size, size)) < 0.08)[..., None] * 90.0
        rain = np.clip(clean + streaks, 0, 255)
        Image.fromarray(clean.astype(np.uint8)).save(root / "clean" / f"{i:03d}.png")
        Image.fromarray(rain.astype(np.uint8)).save(root / "rain" / f"{i:03d}.png")
    return root


def train_log(run: Path, key: str | None = None) -> list[dict[str, Any]]:
    """The records of `run/train_log.jsonl`, in order; with `key`, only those that carry it."""
    with (run / "train_log.jsonl").open() as f:
        return [r for r in map(json.loads, f) if key is None or key in r]


def tiny_raw(data: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    """A config dict for a 4-channel, 2-stage RESCAN on 16x16 patches of `data`."""
    raw: dict[str, Any] = {
        "model": {"arch": "rescan", "args": {"channels": 4, "stages": 2, "depth": 3}},
        "data": {"train": str(data), "val": str(data), "patch_size": 16, "batch_size": 4},
        "optim": {"lr": 2e-3},
        "schedule": {"milestones": [6]},
        "train": {
            "steps": 8,
            "log_every": 2,
            "val_every": 4,
            "ckpt_every": 4,
            "tensorboard": False,
            "compile": "off",  # logic tests; compiling (minutes) is tested in test_train_speed
        },
        "val": {"max_images": 2},
    }
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


def tiny_config(data: Path, **sections: dict[str, Any]) -> TrainConfig:
    return config_from_dict(tiny_raw(data, **sections))


class FakeClock:
    """A `time.perf_counter` that advances `tick` seconds per call, so that time-budget tests
    neither wait nor depend on the machine's speed (a training step costs ~1-3 calls)."""

    def __init__(self, tick: float = 1.0) -> None:
        self.t, self.tick = 0.0, tick

    def __call__(self) -> float:
        self.t += self.tick
        return self.t
