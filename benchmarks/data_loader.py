"""Can the paired-data loader feed training? Loader samples/s beside the trainer's appetite.

Measures `PairedFolderDataset` through a DataLoader (64x64 patches, batch 16, shuffled) with
the decoded-image cache on and off and with 0 and 2 workers: one warm-up pass (it also starts
the persistent workers), then the median of several timed passes. The training step is taken
as 0.8 s per batch of 16 (20 samples/s); the ratio says how many times over the loader covers
it. Uses ../shared/data/derain/Rain100L, or 100 generated 481x321 pairs where that is absent.

    python benchmarks/data_loader.py [--data DIR] [--passes 5] [--samples 160]
"""

from __future__ import annotations

import argparse
import math
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader

from clearsight.data.paired import PairedFolderDataset
from clearsight.data.pairs import find_pairs

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data" / "derain" / "Rain100L"
STEP_S, STEP_BATCH = 0.8, 16


def _generate(root: Path, n: int = 100) -> Path:
    """Rain100L-like pairs: smooth content, streaky rain, 481x321 PNG."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[0:321, 0:481].astype(np.float32)
    for i in range(n):
        f = rng.uniform(10, 40, 3)
        clean = np.stack([128 + 100 * np.sin(x / f[0] + y / f[1]), x / 2, y / 1.5 + f[2]], 2)
        streaks = (rng.random((321, 481)) > 0.995).astype(np.float32) * 120
        rain = clean + np.maximum(streaks, np.roll(streaks, 1, 0))[:, :, None]
        for folder, img in (("rain", rain), ("clean", clean)):
            (root / folder).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img.clip(0, 255).astype(np.uint8)).save(root / folder / f"{i:03d}.png")
    return root


def _measure(ds: PairedFolderDataset, workers: int, passes: int, batch: int) -> list[float]:
    loader = DataLoader(
        ds,
        batch_size=batch,
        shuffle=True,
        drop_last=True,
        generator=torch.Generator().manual_seed(0),
        num_workers=workers,
        persistent_workers=workers > 0,
        multiprocessing_context="fork" if workers else None,
    )
    rates = []
    for epoch in range(passes + 1):  # pass 0 is the warm-up
        ds.set_epoch(epoch)
        start = time.perf_counter()
        n = sum(x.shape[0] for x, _ in loader)
        if epoch:
            rates.append(n / (time.perf_counter() - start))
    return rates


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--passes", type=int, default=5, help="timed passes per setting")
    ap.add_argument("--samples", type=int, default=160, help="samples per pass")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--patch", type=int, default=64)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        data = args.data if args.data.is_dir() else _generate(Path(tmp) / "pairs")
        need = STEP_BATCH / STEP_S
        print(f"data: {data}" + ("" if data == args.data else " (generated)"))
        print(
            f"patch {args.patch}x{args.patch}, batch {args.batch}, {args.samples} samples/pass, "
            f"median of {args.passes} passes after 1 warm-up; torch threads "
            f"{torch.get_num_threads()}; training consumes {need:.0f} samples/s "
            f"({STEP_S} s per batch-{STEP_BATCH} step)"
        )
        print()
        cols = ("workers", "open s", "samples/s", "min-max", "x need")
        head = "cache   " + " ".join(
            f"{c:>{w}}" for c, w in zip(cols, (7, 7, 10, 15, 8), strict=True)
        )
        print(head)
        print("-" * len(head))
        n_pairs = len(find_pairs(data))
        repeat = max(1, math.ceil(args.samples / n_pairs))
        cache_mb = 0.0
        for cache in ("memory", "none"):
            start = time.perf_counter()
            ds = PairedFolderDataset(data, patch_size=args.patch, cache=cache, repeat=repeat)  # type: ignore[arg-type]
            opened = time.perf_counter() - start
            cache_mb = max(cache_mb, ds.cache_nbytes / 1e6)
            for workers in (0, 2):
                rates = _measure(ds, workers, args.passes, args.batch)
                med = statistics.median(rates)
                spread = f"{min(rates):.0f}-{max(rates):.0f}"
                print(
                    f"{cache:<7} {workers:>7} {opened:>7.2f} {med:>10.0f} {spread:>15} "
                    f"{med / need:>7.1f}x"
                )
        print()
        print(f"memory cache: {cache_mb:.0f} MB of decoded pixels for {n_pairs} pairs")


if __name__ == "__main__":
    main()
