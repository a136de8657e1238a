"""Images per second: the local engine against `--engine ray` with 1 and 2 workers, one run.

    python benchmarks/scale_throughput.py [--count 200] [--size 32] [--model default-demoire]
                                          [--workers 1 2] [--batch-size 8] [--threads T]
                                          [--task restore|detect] [--json FILE]

The same `count` synthetic RGB images (size x size PNGs, nested in two folders) go through
`clearsight.restore_files` (the local engine: this process, torch's default threads) and
`clearsight.restore_files_ray` on a local Ray started once for the script (`ray.init`'s time
is printed apart: a cluster is started once, not per run). Each run writes into an empty
folder and is timed from the call to its return, so model loading and, for Ray, starting
the actors count. "steady" is the rate between the first and the last finished image, which
leaves the fixed start-up out; "overhead" compares each run with the local engine. On CPU a
worker gets an equal share of the CPUs (one worker: all of them, as the local engine).
`--threads T` sets torch's threads in the local engine and in every worker alike (default:
each engine's own default, the CPUs of the machine). The load average is printed because
the CPU may be shared: on a busy machine, threads that wait for each other can make a
multi-threaded run of small images many times slower than a single-threaded one, so compare
engines at the same `--threads`. `--task detect` times `detect` instead (the model defaults
to `default-detect`): drawn copies compared byte for byte and the merged results file against
the local engine's.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from clearsight.engine.inference import Restorer
from clearsight.engine.restore_files import restore_files
from clearsight.io import write_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script


def make_images(folder: Path, count: int, size: int) -> None:
    """Smooth gradients with noise: cheap to make, not trivially compressible."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:size, 0:size] / max(size - 1, 1)
    for i in range(count):
        base = np.stack([xx, yy, (xx + yy) / 2], axis=-1) * 200
        img = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
        write_image(folder / f"part{i % 2}" / f"img{i:04d}.png", img)


def rates(stamps: list[float], start: float, end: float) -> tuple[float, float]:
    """(images/s over the whole run, images/s after the first result): Ray hands results
    back a batch at a time, so the images that arrived with the first one are left out."""
    whole = len(stamps) / (end - start)
    later = [t for t in stamps if t > stamps[0]]
    steady = len(later) / (stamps[-1] - stamps[0]) if later else whole
    return whole, steady


def same_results(reference: Path, folder: Path) -> str:
    """', same detections' when both detections.json hold the same entries (any order)."""
    if not (reference / "detections.json").is_file():
        return ""

    def load(p: Path) -> list[str]:
        return sorted(json.dumps(r, sort_keys=True) for r in json.loads(p.read_text()))

    same = load(reference / "detections.json") == load(folder / "detections.json")
    return ", same detections" if same else ", DIFFERENT detections"


def compare(reference: Path, folder: Path) -> str:
    """Whether `folder` holds the same files as `reference`, byte for byte."""
    from clearsight.io import read_image

    files = sorted(p.relative_to(folder) for p in folder.rglob("*.png"))
    differ = [f for f in files if (reference / f).read_bytes() != (folder / f).read_bytes()]
    if not differ:
        return (
            f"{len(files)} outputs identical to the local engine's{same_results(reference, folder)}"
        )
    worst = max(
        int(np.abs(read_image(reference / f).astype(int) - read_image(folder / f)).max())
        for f in differ
    )
    return (
        f"{len(differ)} of {len(files)} outputs differ (at most {worst} levels), e.g. {differ[0]}"
    )


def run_local(model: str, src: Path, out: Path, task: str) -> tuple[float, float, float]:
    stamps: list[float] = []
    start = time.perf_counter()
    if task == "detect":
        from clearsight.engine.detector import Detector

        detector = Detector.from_pretrained(model)
        detector.detect_files([src], out, on_image=lambda *_a: stamps.append(time.perf_counter()))
    else:
        restorer = Restorer.from_pretrained(model)
        restore_files(restorer, [src], out, on_file=lambda _r: stamps.append(time.perf_counter()))
    end = time.perf_counter()
    return end - start, *rates(stamps, start, end)


def run_ray(
    model: str,
    src: Path,
    out: Path,
    workers: int,
    batch_size: int,
    threads: int | None,
    task: str,
) -> tuple[float, float, float]:
    from clearsight.scale.detect_ray import detect_files_ray
    from clearsight.scale.ray_engine import restore_files_ray

    stamps: list[float] = []
    start = time.perf_counter()
    summary = (detect_files_ray if task == "detect" else restore_files_ray)(
        *(([src], out, model) if task == "detect" else (model, [src], out)),
        workers=workers,
        batch_size=batch_size,
        threads=threads,
        on_result=lambda _r: stamps.append(time.perf_counter()),
    )
    end = time.perf_counter()
    if summary.failed:
        raise SystemExit(f"{len(summary.failed)} image(s) failed: {summary.failed[0].reason}")
    return end - start, *rates(stamps, start, end)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--size", type=int, default=32)
    ap.add_argument("--model", default=None, help="default-demoire (restore), default-detect")
    ap.add_argument("--task", choices=["restore", "detect"], default="restore")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    args.model = args.model or ("default-detect" if args.task == "detect" else "default-demoire")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)

    import ray

    work = Path(tempfile.mkdtemp(prefix="scale-bench-"))
    try:
        src = work / "in"
        make_images(src, args.count, args.size)
        cpus = os.cpu_count() or 1
        import torch

        print(
            f"{args.count} images of {args.size}x{args.size}, {args.task} with {args.model}, "
            f"{cpus} CPUs, "
            f"torch threads {args.threads or 'default'} ({torch.get_num_threads()} here), "
            f"load average {os.getloadavg()[0]:.1f}"
        )
        runs: list[tuple[str, float, float, float]] = []
        secs, whole, steady = run_local(args.model, src, work / "local", args.task)
        runs.append(("local engine", secs, whole, steady))
        t0 = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        print(f"ray.init: {time.perf_counter() - t0:.1f} s (once, not counted below)")
        try:
            for n in args.workers:
                secs, whole, steady = run_ray(
                    args.model, src, work / f"ray{n}", n, args.batch_size, args.threads, args.task
                )
                runs.append((f"ray, {n} worker{'s' if n > 1 else ''}", secs, whole, steady))
        finally:
            ray.shutdown()
        # the local engine once more, last: how much the machine's load moved meanwhile
        secs, whole, steady = run_local(args.model, src, work / "local-again", args.task)
        runs.append(("local engine, again", secs, whole, steady))
        for name in sorted(os.listdir(work)):
            if name.startswith(("ray", "local-")):
                print(f"{name}: {compare(work / 'local', work / name)}")
        local_rate, local_steady = runs[0][2], runs[0][3]
        rows = [
            [
                name,
                f"{secs:.1f}",
                f"{whole:.2f}",
                f"{steady:.2f}",
                "-" if i == 0 else f"{100 * (1 - whole / local_rate):+.0f}%",
                "-" if i == 0 else f"{100 * (1 - steady / local_steady):+.0f}%",
            ]
            for i, (name, secs, whole, steady) in enumerate(runs)
        ]
        print_table(
            f"{args.task} throughput (overhead: how much slower than the local engine)",
            ["engine", "run s", "images/s", "steady images/s", "overhead", "steady overhead"],
            rows,
        )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
        if args.json:
            args.json.write_text(
                json.dumps(
                    [
                        dict(zip(["engine", "seconds", "ips", "steady_ips"], r, strict=True))
                        for r in runs
                    ],
                    indent=2,
                )
            )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
