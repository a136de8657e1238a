"""The video family on a lent GPU, in one short call (docs/training-on-device.md, "Video").

1. `video-derain` (S2VD) restores one synthetic clip in its official windows on the CPU and
   on CUDA (untiled, and tiled): how far apart the outputs are and the time per frame,
   side by side in this one run.
2. A short S2VD fine-tune on CUDA through the shared trainer (synthetic clips made here,
   never a public test set): the loss, the validation PSNR before and after, steps per
   second, then a resume that must continue from the saved step.

Needs no PyAV (the device image has none): frames are arrays and PNG folders. Writes
`report.json` to `--out` and prints it. `--dry-run` shrinks everything to run on a CPU.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image


def synthetic_clip(n: int, h: int, w: int, seed: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(rainy, clean) uint8 RGB frames: a drifting textured scene and streaks falling
    5 px a frame along a fixed slant (rain that moves coherently, as in real footage)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    f = rng.uniform(6, 20, 3)
    streak = np.zeros((h, w), np.float32)
    for _ in range(h * w // 300):
        r, c, length = rng.integers(0, h), rng.integers(0, w), rng.integers(6, 16)
        for k in range(length):
            streak[(r + k) % h, (c + k // 4) % w] = 1.0
    rain, clean = [], []
    for t in range(n):
        img = np.stack(
            [np.sin((x + 2 * t) / f[0]), np.cos((y - t) / f[1]), np.sin((x + y + t) / f[2])], 2
        )
        c = np.clip(img * 70 + 120 + rng.normal(0, 3, (h, w, 3)), 0, 255)
        s = np.roll(streak, 5 * t, axis=0)[..., None] * 80.0
        clean.append(c.astype(np.uint8))
        rain.append(np.clip(c + s, 0, 255).astype(np.uint8))
    return rain, clean


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0**2 / mse)


def check_windows(device: str, n: int, h: int, w: int, runs: int) -> dict[str, Any]:
    from clearsight.api import load_model
    from clearsight.engine.video_window import Windowed, restore_frames

    rain, clean = synthetic_clip(n, h, w, seed=1)
    loaded = load_model("video-derain")
    result: dict[str, Any] = {"frames": n, "size": [w, h]}
    outs: dict[str, list[np.ndarray]] = {}
    runs_of = (("cpu", "cpu", 0), (device, device, 0), (f"{device}-tiled", device, 128))
    for name, dev, tile in runs_of:
        model = Windowed(loaded, device=dev, tile=tile)
        times = []
        for _ in range(runs):
            t0 = time.perf_counter()
            outs[name] = list(restore_frames(iter(rain), model))
            if dev.startswith("cuda"):
                torch.cuda.synchronize()
            times.append(time.perf_counter() - t0)
        result[f"{name}_ms_per_frame"] = round(statistics.median(times) / n * 1000, 2)
        result[f"{name}_psnr_vs_clean"] = round(
            statistics.fmean(_psnr(o, c) for o, c in zip(outs[name], clean, strict=True)), 3
        )
    for name in (device, f"{device}-tiled"):
        diff = max(
            int(np.abs(a.astype(int) - b.astype(int)).max())
            for a, b in zip(outs["cpu"], outs[name], strict=True)
        )
        result[f"max_abs_diff_cpu_vs_{name}_uint8"] = diff
    result["input_psnr_vs_clean"] = round(
        statistics.fmean(_psnr(r, c) for r, c in zip(rain, clean, strict=True)), 3
    )
    result[f"speedup_{device}_vs_cpu"] = round(
        result["cpu_ms_per_frame"] / result[f"{device}_ms_per_frame"], 2
    )
    return result


def write_clips(root: Path, clips: int, n: int, size: int) -> None:
    for i in range(clips):
        rain, clean = synthetic_clip(n, size, size, seed=10 + i)
        for side, frames in (("rain", rain), ("clean", clean)):
            (root / f"clip{i}" / side).mkdir(parents=True, exist_ok=True)
            for t, frame in enumerate(frames):
                Image.fromarray(frame).save(root / f"clip{i}" / side / f"{t:05d}.png")


def check_training(device: str, steps: int, size: int, tmp: Path) -> dict[str, Any]:
    from clearsight.engine.checkpoint import load_checkpoint
    from clearsight.engine.train_config import config_from_dict
    from clearsight.engine.trainer import train

    write_clips(tmp / "train", clips=4, n=24, size=size)
    write_clips(tmp / "val", clips=1, n=24, size=size)
    raw: dict[str, Any] = {
        "model": {"arch": "s2vd", "init": "video-derain"},
        "data": {"train": str(tmp / "train"), "val": str(tmp / "val"), "patch_size": 64,
                 "frames": 12, "batch_size": 4, "workers": 0, "cache": "memory"},
        "optim": {"name": "adam", "lr": 1e-4},
        "schedule": {"name": "cosine", "warmup_steps": 10, "min_lr": 1e-6},
        "loss": {"name": "charbonnier"},
        "train": {"steps": steps, "log_every": max(1, steps // 4), "val_every": steps,
                  "ckpt_every": max(1, steps // 2), "device": device, "tensorboard": False,
                  "compile": "off", "amp": "off"},
    }  # fmt: skip
    t0 = time.perf_counter()
    res = train(config_from_dict(raw), tmp / "run", progress=False)
    seconds = time.perf_counter() - t0
    more = {**raw, "train": {**raw["train"], "steps": steps + max(1, steps // 4)}}
    resumed = train(config_from_dict(more), tmp / "run", resume=True, progress=False)
    return {
        "steps": res.steps,
        "seconds": round(seconds, 1),
        "steps_per_s": round(res.steps / seconds, 2),
        "first_loss": res.first_loss,
        "last_loss": res.last_loss,
        "val_psnr_after": res.val_metrics.get("psnr"),
        "resumed_to_step": load_checkpoint(tmp / "run" / "checkpoint.pt")["step"],
        "resumed_last_loss": resumed.last_loss,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path("device_out"))
    parser.add_argument("--dry-run", action="store_true", help="tiny sizes, on the CPU")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    device = "cpu" if args.dry_run else "cuda"
    if device == "cuda" and not torch.cuda.is_available():
        raise SystemExit("no CUDA device here; use --dry-run on a CPU")
    report: dict[str, Any] = {
        "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None,
    }

    def save() -> None:
        (args.out / "report.json").write_text(json.dumps(report, indent=2))

    small = args.dry_run
    report["windows"] = check_windows(
        device, n=8 if small else 50, h=64 if small else 240, w=96 if small else 320,
        runs=1 if small else 2,
    )  # fmt: skip
    save()
    with tempfile.TemporaryDirectory() as tmp:
        report["training"] = check_training(
            device, steps=2 if small else 300, size=64 if small else 96, tmp=Path(tmp)
        )
    save()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
