"""RESCAN restore speed and memory: untiled `restore` vs exact tiled `restore_tiled`.

    python benchmarks/restore_speed.py [--sizes 256 512 1024] [--runs 3] [--tile 128]
                                       [--threads N]

Default GRU architecture, random weights (seeded). Latency is the median of `--runs` runs
after one warm-up run at the same size. Peak memory of the largest size is measured for each
path in a fresh subprocess: peak RSS (ru_maxrss) minus the peak after imports and model
build, plus the absolute peak. The official code's figures on this 2-core CPU (DESIGN.md 4)
are shown for comparison. The load average is printed because the CPU may be shared: a busy
machine makes every figure slower.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import time

import torch

from clearsight.models.rescan import RESCAN

OFFICIAL_S = {512: 2.85, 1024: 26.1}  # official code, fp32, 2 threads, this CPU
OFFICIAL_PEAK_GB = 2.1  # one 1024x1024 forward
DEFAULT_TILE = 128


def _cpu() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()}"
    except OSError:
        pass
    return f"{platform.machine()} x{os.cpu_count()}"


def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def _model() -> RESCAN:
    torch.manual_seed(0)
    return RESCAN().eval()


def _image(size: int) -> torch.Tensor:
    return torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(size))


def _run(model: RESCAN, x: torch.Tensor, path: str, tile: int) -> torch.Tensor:
    if path == "tiled":
        return model.restore_tiled(x, tile=tile)
    with torch.inference_mode():
        return model.restore(x)


def _time(
    model: RESCAN, x: torch.Tensor, path: str, tile: int, runs: int
) -> tuple[float, torch.Tensor]:
    y = _run(model, x, path, tile)  # warm-up
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        y = _run(model, x, path, tile)
        times.append(time.perf_counter() - t0)
    return statistics.median(times), y


def _memory_probe(path: str, size: int, tile: int) -> None:
    """Subprocess body: one run, then print the RSS figures as JSON."""
    model = _model()
    base = _peak_rss_mb()
    x = _image(size)
    t0 = time.perf_counter()
    _run(model, x, path, tile)
    seconds = time.perf_counter() - t0
    peak = _peak_rss_mb()
    print(json.dumps({"base_mb": base, "peak_mb": peak, "seconds": seconds}))


def _memory(path: str, size: int, tile: int, threads: int) -> dict[str, float]:
    cmd = [
        sys.executable,
        __file__,
        "--probe",
        path,
        "--sizes",
        str(size),
        "--tile",
        str(tile),
        "--threads",
        str(threads),
    ]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def _table(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        print(title)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        return
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=140).print(table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tile", type=int, default=DEFAULT_TILE)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--probe", choices=["untiled", "tiled"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.probe:
        _memory_probe(args.probe, args.sizes[0], args.tile)
        return

    print(
        f"RESCAN (GRU, 24 ch, 4 stages, 149,823 params, random weights) | torch {torch.__version__}"
        f" | {args.threads} threads (restore_tiled: as many tile workers) | tile {args.tile}"
        f" | {_cpu()}"
        f" | load average {os.getloadavg()[0]:.2f} at start"
    )
    # Memory first, while this process is still small: a child inherits its parent's
    # ru_maxrss high-water mark through fork/exec on Linux.
    big = max(args.sizes)
    mem_rows = []
    for path in ("untiled", "tiled"):
        m = _memory(path, big, args.tile, args.threads)
        growth = m["peak_mb"] - m["base_mb"]
        mem_rows.append(
            [
                "restore" if path == "untiled" else f"restore_tiled (tile {args.tile})",
                f"{growth:.0f}",
                f"{m['peak_mb']:.0f}",
                f"{OFFICIAL_PEAK_GB * 1024 / growth:.1f}x" if growth > 0 else "-",
            ]
        )
    model = _model()
    rows = []
    for size in args.sizes:
        x = _image(size)
        t_untiled, y_untiled = _time(model, x, "untiled", args.tile, args.runs)
        t_tiled, y_tiled = _time(model, x, "tiled", args.tile, args.runs)
        diff = (y_tiled - y_untiled).abs().max().item()
        official = OFFICIAL_S.get(size)
        rows.append(
            [
                f"{size}x{size}",
                f"{t_untiled:.2f}",
                f"{t_tiled:.2f}",
                f"{diff:.1e}",
                f"{official:.2f}" if official else "-",
                f"{official / t_untiled:.1f}x" if official else "-",
                f"{official / t_tiled:.1f}x" if official else "-",
            ]
        )
    _table(
        f"Latency, median of {args.runs} runs after a warm-up (seconds)",
        [
            "size",
            "restore",
            "restore_tiled",
            "max |diff|",
            "official",
            "official/restore",
            "official/tiled",
        ],
        rows,
    )
    _table(
        f"Peak memory at {big}x{big}, fresh process (MB)",
        ["path", "RSS growth", "absolute peak RSS", "official 2.1 GB / growth"],
        mem_rows,
    )
    print(
        f"Official code (DESIGN.md 4, same CPU, 2 threads): 26.1 s at 1024x1024, 2.85 s at 512x512,"
        f" about {OFFICIAL_PEAK_GB} GB peak. Load average {os.getloadavg()[0]:.2f} at the end."
    )


if __name__ == "__main__":
    main()
