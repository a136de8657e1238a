"""Does bf16 autocast train as well as fp32? Two short runs, same seed and data, compared.

The data is synthetic rain (`clearsight synth rain`, preset mixed) over BSDS clean photos
(`../shared/data/derain/bsds_clean`, which shares no image with Rain100L/Rain100H): the
first `--train-images` photos train, the next `--val-images` validate (never a test set).
Both runs train a small RESCAN (GRU, 12 channels, 2 stages, depth 5) for `--steps` steps
with the trainer's defaults otherwise; only `train.amp` differs. The last line reads
`bf16 - fp32 val PSNR: +D.DDD dB (target: within 0.1 dB)`.

Without native bf16 (see `clearsight.cpu_features`) the comparison is skipped with a message:
emulated bf16 would take far longer and says nothing about the machines `amp: auto` would
turn it on for; `--force-bf16` runs it anyway.

    python benchmarks/bf16_quality.py [--steps 300] [--train-images 24] [--val-images 8]
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from pathlib import Path

from clearsight.cpu_features import detect_cpu_features
from clearsight.data.synth_rain import synth_rain_folder
from clearsight.engine.train_config import config_from_dict
from clearsight.engine.trainer import train

REPO = Path(__file__).resolve().parents[1]
CLEAN = REPO.parent / "shared" / "data" / "derain" / "bsds_clean"


def make_split(clean: Path, out: Path, first: int, count: int, per_image: int) -> Path:
    """Rain pairs over photos [first, first + count) of `clean` (sorted by name)."""
    photos = sorted(p for p in clean.iterdir() if p.suffix.lower() in {".jpg", ".png"})
    src = out / "src"
    src.mkdir(parents=True)
    for p in photos[first : first + count]:
        shutil.copy(p, src / p.name)
    synth_rain_folder(src, out / "pairs", per_image=per_image, seed=first)
    return out / "pairs"


def run(amp: str, train_dir: Path, val_dir: Path, run_dir: Path, steps: int) -> float:
    raw = {
        "model": {"arch": "rescan", "args": {"channels": 12, "stages": 2, "depth": 5}},
        "data": {"train": str(train_dir), "val": str(val_dir), "patch_size": 48, "batch_size": 8},
        "optim": {"lr": 2e-3},
        "schedule": {"name": "cosine", "warmup_steps": steps // 10, "min_lr": 1e-5},
        "train": {"steps": steps, "amp": amp, "val_every": steps, "ckpt_every": steps},
        "val": {"preset": "y-matlab"},
    }
    raw["train"].update(device="cpu", seed=0, tensorboard=False, log_every=max(1, steps // 10))
    t0 = time.perf_counter()
    res = train(config_from_dict(raw), run_dir, progress=False)
    psnr = res.val_metrics["psnr"]
    print(f"amp {amp:<5} {steps} steps  {time.perf_counter() - t0:7.1f} s  val PSNR {psnr:.3f}")
    return psnr


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--train-images", type=int, default=24)
    ap.add_argument("--val-images", type=int, default=8)
    ap.add_argument("--clean", type=Path, default=CLEAN)
    ap.add_argument("--force-bf16", action="store_true")
    args = ap.parse_args()
    cpu = detect_cpu_features()
    print(f"CPU: {cpu.describe()}")
    if not (cpu.native_bf16 or args.force_bf16):
        print("skipped: this CPU has no native bf16, so amp: auto keeps fp32 here")
        return
    if not args.clean.is_dir():
        print(f"skipped: {args.clean} is absent")
        return
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        train_dir = make_split(args.clean, root / "train", 0, args.train_images, 4)
        val_dir = make_split(args.clean, root / "val", args.train_images, args.val_images, 1)
        fp32 = run("off", train_dir, val_dir, root / "fp32", args.steps)
        bf16 = run("bf16", train_dir, val_dir, root / "bf16", args.steps)
    print(f"bf16 - fp32 val PSNR: {bf16 - fp32:+.3f} dB (target: within 0.1 dB)")


if __name__ == "__main__":
    main()
