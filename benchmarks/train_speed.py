"""Training-step time of the official RESCAN code beside clearsight's trainer, in one run.

One step = forward, loss, backward and an Adam update on a fixed batch (batch 16 of 64x64
for RESCAN, GRU, 24 channels, 4 stages, as in the official settings; `--mbcnn-batch` of
`--mbcnn-patch` for mbcnn-light). The official step is the official model
(`../shared/peers/rescan_official/model.py`, imported as is; skipped with a message where
absent) with its loss (sum over stages of MSE against the rain layer) and Adam. clearsight's
step is the trainer's own `train_step`, run under each setting:

- before: contiguous fp32, what the trainer did before channels-last and native-bf16 defaults
- channels-last fp32
- bf16 autocast, and channels-last + bf16 (only on a CPU with native bf16, see
  `clearsight.cpu_features`; elsewhere bf16 is emulated and slower: skipped with a message,
  `--force-bf16` times it anyway)
- torch.compile (`train.compile: on`), fp32 and (with native bf16) bf16, for the
  architectures named by `--compile` (default rescan; `none` skips them); the compile itself
  (minutes) happens in the warm-up rounds and is not timed
- auto: what `train.amp`, `train.memory_format` and `train.compile: auto` choose on this
  machine for a long run

Steps of all variants are interleaved round by round (after 2 warm-up rounds), so a burst of
other work on the machine slows every variant alike; each row is the median of `--steps`.
The last line reads `speed-up vs official: A.AAx (fp32) B.BBx (fastest)` (RESCAN).

    python benchmarks/train_speed.py [--steps 5] [--threads N] [--only rescan,mbcnn-light]
                                     [--compile rescan,mbcnn-light|none]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from clearsight.cpu_features import detect_cpu_features
from clearsight.engine.train_config import config_from_dict
from clearsight.engine.train_stream import Dist
from clearsight.engine.trainer import _Run

REPO = Path(__file__).resolve().parents[1]
OFFICIAL_DIR = REPO.parent / "shared" / "peers" / "rescan_official"
BATCH, PATCH = 16, 64

Step = Callable[[], None]


@dataclass
class Variant:
    arch: str
    name: str
    step: Step
    fp32: bool
    times: list[float]


def load_official(folder: Path) -> Any:
    """The official RESCAN model module (its `settings` must import as a top-level name)."""
    sys.path.insert(0, str(folder))
    try:
        importlib.import_module("settings")
        spec = importlib.util.spec_from_file_location("rescan_official_model", folder / "model.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(folder))


def official_step(folder: Path, batch: tuple[torch.Tensor, torch.Tensor]) -> Step:
    """The official code's training step: its model, MSE per stage against O - B, Adam."""
    module = load_official(folder)
    torch.manual_seed(0)
    net = module.RESCAN()
    opt = torch.optim.Adam(net.parameters(), lr=5e-3)
    inp, tgt = batch

    def step() -> None:
        rain = inp - tgt
        loss = sum(F.mse_loss(o, rain) for o in net(inp))
        opt.zero_grad()
        loss.backward()  # type: ignore[union-attr]
        opt.step()

    return step


def make_data(root: Path, size: int) -> Path:
    """A few generated pairs: the trainer needs a folder; the timed steps use a fixed batch."""
    sys.path.insert(0, str(REPO))
    from tests.train_utils import make_pairs

    return make_pairs(root, n=8, size=size)


def trainer_step(
    arch: str, data: Path, run_dir: Path, batch: tuple[torch.Tensor, torch.Tensor], **train: object
) -> tuple[Step, Any]:
    """clearsight's `_Run.train_step` on `batch` under the `train` section settings."""
    bsz, patch = batch[0].shape[0], batch[0].shape[-1]
    raw = {
        "model": {"arch": arch},
        "data": {"train": str(data), "patch_size": patch, "batch_size": bsz, "repeat": 8},
        "optim": {"lr": 5e-3 if arch.startswith("rescan") else 5e-4},
        "loss": {"name": "rescan" if arch.startswith("rescan") else "mbcnn"},
        "train": {"device": "cpu", "tensorboard": False, **train},
    }
    run = _Run(config_from_dict(raw), run_dir, Dist(), overfit=True)
    return (lambda: run.train_step(batch)), run.speed


def build_variants(args: argparse.Namespace, data: Path, tmp: Path) -> list[Variant]:
    native = detect_cpu_features().native_bf16
    bf16 = native or args.force_bf16
    if not bf16:
        print(f"bf16 variants skipped: {detect_cpu_features().describe()} (bf16 emulated)")
    out: list[Variant] = []
    for arch in args.only.split(","):
        bsz, patch = (
            (BATCH, PATCH) if arch.startswith("rescan") else (args.mbcnn_batch, args.mbcnn_patch)
        )
        g = torch.Generator().manual_seed(0)
        batch = (
            torch.rand(bsz, 3, patch, patch, generator=g),
            torch.rand(bsz, 3, patch, patch, generator=g),
        )
        if arch == "rescan":
            if OFFICIAL_DIR.is_dir():
                out.append(
                    Variant(
                        arch, "official code, fp32", official_step(OFFICIAL_DIR, batch), True, []
                    )
                )
            else:
                print(f"official RESCAN code skipped: {OFFICIAL_DIR} is absent")
        settings = [("before: contiguous, fp32", "contiguous", "off", "off", True)]
        settings.append(("channels-last, fp32", "channels_last", "off", "off", True))
        # mbcnn-light measured 1.04x compiled, so timing its minutes of compiling is opt-in
        compiled_rows = arch in args.compile.split(",")
        if compiled_rows:
            settings.append(("contiguous, fp32, compiled", "contiguous", "off", "on", True))
        if bf16:
            settings.append(("contiguous, bf16 autocast", "contiguous", "bf16", "off", False))
            settings.append(("channels-last, bf16 autocast", "channels_last", "bf16", "off", False))
            if compiled_rows:
                settings.append(("contiguous, bf16, compiled", "contiguous", "bf16", "on", False))
        for name, fmt, amp, comp, fp32 in settings:
            step, _ = trainer_step(
                arch,
                data,
                tmp / f"{arch}-{fmt}-{amp}-{comp}",
                batch,
                memory_format=fmt,
                amp=amp,
                compile=comp,
            )
            out.append(Variant(arch, name, step, fp32, []))
        # "auto" as a long run resolves it (train.steps decides whether compiling pays off)
        extra = {} if compiled_rows else {"compile": "off"}
        step, chosen = trainer_step(arch, data, tmp / f"{arch}-auto", batch, steps=100_000, **extra)
        layout = "channels-last" if chosen.channels_last else "contiguous"
        layout += ", compiled" if chosen.compiled else ""
        label = f"auto ({'bf16' if chosen.amp else 'fp32'}, {layout})"
        out.append(Variant(arch, label, step, not chosen.amp, []))
    return out


def run_rounds(variants: list[Variant], steps: int, warmup: int = 2) -> None:
    for r in range(warmup + steps):
        for v in variants:
            t0 = time.perf_counter()
            v.step()
            if r >= warmup:
                v.times.append(time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--only", default="rescan,mbcnn-light")
    ap.add_argument("--mbcnn-batch", type=int, default=4)
    ap.add_argument("--mbcnn-patch", type=int, default=128)
    ap.add_argument("--force-bf16", action="store_true", help="time bf16 without native support")
    ap.add_argument(
        "--compile", default="rescan", help="architectures to time compiled too, or none"
    )
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    cpu = detect_cpu_features().describe()
    print(f"CPU: {cpu}; torch {torch.__version__}, {args.threads} threads")
    with tempfile.TemporaryDirectory() as tmp:
        data = make_data(Path(tmp) / "pairs", max(PATCH, args.mbcnn_patch) + 8)
        variants = build_variants(args, data, Path(tmp))
        run_rounds(variants, args.steps)
    report(variants, args.steps)


def report(variants: list[Variant], steps: int) -> None:
    """The table, then the one line that scripts read."""
    print(f"median of {steps} interleaved steps after 2 warm-up rounds")
    print(f"{'model':<13}{'variant':<34}{'s/step':>8}{'vs before':>11}{'vs official':>13}")
    med = {id(v): statistics.median(v.times) for v in variants}
    official = next((med[id(v)] for v in variants if v.name.startswith("official")), None)
    for arch in dict.fromkeys(v.arch for v in variants):
        rows = [v for v in variants if v.arch == arch]
        before = next(med[id(v)] for v in rows if v.name.startswith("before"))
        for v in rows:
            s = med[id(v)]
            vs_off = f"{official / s:.2f}x" if official and arch == "rescan" else "-"
            print(f"{arch:<13}{v.name:<34}{s:>8.3f}{before / s:>10.2f}x{vs_off:>13}")
    ours = [v for v in variants if v.arch == "rescan" and not v.name.startswith("official")]
    if official is None or not ours:
        print("speed-up vs official: n/a (official code or RESCAN not run)")
        return
    fp32 = min(med[id(v)] for v in ours if v.fp32)
    fastest = min(med[id(v)] for v in ours)
    print(
        f"speed-up vs official: {official / fp32:.2f}x (fp32) {official / fastest:.2f}x (fastest)"
    )


if __name__ == "__main__":
    main()
