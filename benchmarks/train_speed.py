"""RESCAN training-step time on this CPU beside the official code's 1.28 s/step.

One step = forward of all stages, RESCAN's loss, backward and an Adam update, at batch 16
of 64x64 patches (GRU RESCAN, 24 channels, 4 stages). Reported: median of several timed
steps after warm-up, on a fixed batch ("model only") and fed by the real DataLoader over
Rain100L (or generated pairs where it is absent). Variants try CPU settings that keep the
math the same (channels_last memory format, thread count); keep only what helps.

    python benchmarks/train_speed.py [--steps 8] [--threads N] [--data DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from clearsight.data.paired import PairedFolderDataset
from clearsight.losses import rescan_loss
from clearsight.models.registry import build_model

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "derain" / "Rain100L"
OFFICIAL_S = 1.28
TARGET_S = 0.8
BATCH, PATCH = 16, 64


def _generated(root: Path) -> Path:
    import sys

    sys.path.insert(0, str(REPO))
    from tests.train_utils import make_pairs

    return make_pairs(root, n=32, size=96)


def _batches(data: Path) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    ds = PairedFolderDataset(data, patch_size=PATCH, cache="memory", repeat=64)
    loader = DataLoader(ds, BATCH, shuffle=True, drop_last=True, num_workers=0)
    it = iter(loader)
    return lambda: next(it)


def time_steps(
    steps: int, next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]], channels_last: bool
) -> float:
    """Median seconds per training step (2 warm-up steps not counted)."""
    torch.manual_seed(0)
    model = build_model("rescan")
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    model = model.to(memory_format=fmt)
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    times = []
    for i in range(steps + 2):
        t0 = time.perf_counter()
        inp, tgt = next_batch()
        inp, tgt = inp.to(memory_format=fmt), tgt.to(memory_format=fmt)
        loss = rescan_loss(model(inp), inp, tgt)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data if args.data.is_dir() else _generated(Path(tmp))
        fixed = (torch.rand(BATCH, 3, PATCH, PATCH), torch.rand(BATCH, 3, PATCH, PATCH))
        rows = []
        for cl in (False, True):
            layout = "channels_last" if cl else "contiguous"
            rows.append((f"model only, {layout}", time_steps(args.steps, lambda: fixed, cl)))
            rows.append((f"with data loader, {layout}", time_steps(args.steps, _batches(data), cl)))
    print(f"RESCAN GRU training step, batch {BATCH} x {PATCH}x{PATCH}, {args.threads} threads,")
    print(f"median of {args.steps} steps; data: {data if args.data.is_dir() else 'generated'}")
    print(f"{'variant':<34}{'s/step':>8}{'official':>10}{'speed-up':>10}{'<= 0.8 s':>10}")
    for name, s in rows:
        ok = "yes" if s <= TARGET_S else "no"
        print(f"{name:<34}{s:>8.3f}{OFFICIAL_S:>10.2f}{OFFICIAL_S / s:>9.2f}x{ok:>10}")


if __name__ == "__main__":
    main()
