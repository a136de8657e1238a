"""Restore speed and memory: RESCAN untiled vs exact tiled, and MBCNN / mbcnn-light.

    python benchmarks/restore_speed.py [--sizes 256 512 1024] [--runs 3] [--tile 128]
                                       [--threads N] [--mbcnn-sizes 1024] [--no-mbcnn]

MBCNN rows go through the `Restorer` with its defaults (the model's own auto-tiling: untiled
up to 1 MP, tone-consistent 512 tiles above), random weights; the public PyTorch MBCNN port
takes 12.5 s at 1024x1024 on this CPU (the demoiré issue). The 3840x2160 mbcnn-light peak
memory is measured in a fresh process.

Default GRU architecture, random weights (seeded). Latency is the median of `--runs` runs
after one warm-up run at the same size. Peak memory of the largest size is measured for each
path in a fresh subprocess: peak RSS (ru_maxrss) minus the peak after imports and model
build, plus the absolute peak. The official code's figures on this 2-core CPU
(docs/architecture.md §5.4) are shown for comparison. The load average is printed because
the CPU may be shared: a busy machine makes every figure slower.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
import warnings
from functools import partial

import torch

from clearsight.models.rescan import RESCAN

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import median_time  # noqa: E402 - beside this script
from _tables import print_table as _table  # noqa: E402 - beside this script

OFFICIAL_S = {512: 2.85, 1024: 26.1}  # official code, fp32, 2 threads, this CPU
OFFICIAL_PEAK_GB = 2.1  # one 1024x1024 forward
PUBLIC_MBCNN_1024_S = 12.5  # public PyTorch MBCNN port, 1024x1024, this CPU
UHD = (2160, 3840)
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
    return median_time(partial(_run, model, x, path, tile), runs)


def _restorer(arch: str):  # noqa: ANN202 - keeps clearsight imports out of the module top
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.zoo import resolve_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # random weights: speed and memory only
        return Restorer(resolve_model(arch), InferenceOptions())


def _memory_probe(path: str, size: int, tile: int) -> None:
    """Subprocess body: one run, then print the RSS figures as JSON."""
    if path == "mbcnn-light-uhd":
        restorer = _restorer("mbcnn-light")
        base = _peak_rss_mb()
        x = torch.rand(1, 3, *UHD, generator=torch.Generator().manual_seed(0))
        t0 = time.perf_counter()
        restorer.restore(x)
        seconds = time.perf_counter() - t0
        print(json.dumps({"base_mb": base, "peak_mb": _peak_rss_mb(), "seconds": seconds}))
        return
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--tile", type=int, default=DEFAULT_TILE)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--mbcnn-sizes", type=int, nargs="+", default=[1024])
    ap.add_argument("--no-mbcnn", action="store_true", help="RESCAN rows only.")
    ap.add_argument(
        "--probe", choices=["untiled", "tiled", "mbcnn-light-uhd"], help=argparse.SUPPRESS
    )
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
    if not args.no_mbcnn:
        m = _memory("mbcnn-light-uhd", 0, args.tile, args.threads)
        mem_rows.append(
            [
                "mbcnn-light, 3840x2160 (Restorer defaults)",
                f"{m['peak_mb'] - m['base_mb']:.0f}",
                f"{m['peak_mb']:.0f}",
                f"{m['seconds']:.1f} s",
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
    if not args.no_mbcnn:
        mb_rows = []
        for arch in ("mbcnn", "mbcnn-light"):
            restorer = _restorer(arch)
            for size in args.mbcnn_sizes:
                x = _image(size)
                t, _ = median_time(partial(restorer.restore, x), args.runs)
                ref = PUBLIC_MBCNN_1024_S if (arch == "mbcnn" and size == 1024) else None
                mb_rows.append(
                    [arch, f"{size}x{size}", f"{t:.2f}", f"{ref / t:.1f}x" if ref else "-"]
                )
        _table(
            f"MBCNN via Restorer, median of {args.runs} runs after a warm-up (seconds)",
            ["model", "size", "seconds", "public port 12.5 s / ours"],
            mb_rows,
        )
    _table(
        f"Peak memory at {big}x{big}, fresh process (MB)",
        ["path", "RSS growth", "absolute peak RSS", "official 2.1 GB / growth (or time)"],
        mem_rows,
    )
    print(
        "Official code (docs/architecture.md §5.4, same CPU, 2 threads): "
        f"26.1 s at 1024x1024, 2.85 s at 512x512, about {OFFICIAL_PEAK_GB} GB peak. "
        f"Load average {os.getloadavg()[0]:.2f} at the end."
    )


if __name__ == "__main__":
    main()
