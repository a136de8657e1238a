"""detect_video on tiny frames with spinning against sleeping compute threads, side by side.

    python benchmarks/thread_contention.py [--frames 6] [--size 64x48] [--runs 3] [--busy 0]

Idle OpenMP (PyTorch) and ONNX Runtime threads spin by default; on a loaded machine the
spinning thread takes the core from the sibling it waits for (`clearsight.runtime.threads`).
Two worker processes start at once, one without `OMP_WAIT_POLICY` (OpenMP's default: spin a
while, then sleep; ONNX Runtime's threads spinning, as they did before) and one with
`PASSIVE` (what the `clearsight` command sets); each loads `default-detect` on PyTorch and
on ONNX Runtime. (Not ACTIVE for the first: its idle threads would spin through the other
worker's turns and slow it.)
The parent then asks them in turn, round after round, to run `detect_video` over the same
numbered tiny frames (a panning bar), so both see the same load; a two-frame warm-up each. Printed:
the median wall and CPU seconds per configuration over `--runs` rounds, and each one's wall
time as a ratio of the spinning PyTorch default, measured in this one run. `--busy N` adds N
spinning processes for the length of the run (a loaded machine made on purpose; the load
average before and after is printed either way). docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tables import print_table  # noqa: E402 - beside this script

# (worker policy, backend, torch threads, label)
CONFIGS = [
    ("default", "torch", 0, "PyTorch, OpenMP default wait (before)"),
    ("PASSIVE", "torch", 0, "PyTorch, threads sleep (clearsight command)"),
    ("PASSIVE", "torch", 1, "PyTorch, one thread"),
    ("default", "onnxruntime", 0, "ONNX Runtime, threads spin (before)"),
    ("PASSIVE", "onnxruntime", 0, "ONNX Runtime, threads sleep (now)"),
]


def _worker(clip: str, out: str, policy: str) -> None:
    """Load both detectors, then answer "backend threads" lines with {"wall", "cpu"}."""
    import torch

    import clearsight.runtime.ort_backend as ort_backend
    from clearsight.engine.detector import Detector
    from clearsight.video.detect import detect_video

    if policy == "default":  # ONNX Runtime's threads spin, as before
        ort_backend.spinning_allowed = lambda: True  # type: ignore[assignment]

    threads = torch.get_num_threads()
    detectors = {
        b: Detector.from_pretrained("default-detect", backend=b) for b in ("torch", "onnxruntime")
    }
    for d in detectors.values():
        detect_video(d, clip, out, fps=25, duration=0.08)  # warm-up: two frames
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        backend, n = line.split()
        torch.set_num_threads(int(n) or threads)
        u0 = resource.getrusage(resource.RUSAGE_SELF)
        t0 = time.perf_counter()
        detect_video(detectors[backend], clip, out, fps=25)
        wall = time.perf_counter() - t0
        u1 = resource.getrusage(resource.RUSAGE_SELF)
        cpu = (u1.ru_utime - u0.ru_utime) + (u1.ru_stime - u0.ru_stime)
        print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


def _spin() -> None:
    while True:
        pass


def _frames(folder: Path, n: int, w: int, h: int) -> None:
    import numpy as np

    from clearsight.io import write_image

    for i in range(n):
        img = np.full((h, w, 3), (40 + 9 * i) % 200, np.uint8)
        img[:, (3 * i) % max(1, w - 4) :][:, :4] = 240
        write_image(folder / f"{i + 1:05d}.png", img)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=6)
    ap.add_argument("--size", default="64x48", help="WxH of the frames")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--busy", type=int, default=0, help="extra spinning processes")
    ap.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        _worker(*args.worker)
        return
    w, h = (int(v) for v in args.size.lower().split("x"))
    tmp = Path(tempfile.mkdtemp())
    clip = tmp / "clip"
    clip.mkdir()
    _frames(clip, args.frames, w, h)
    busy = [multiprocessing.Process(target=_spin, daemon=True) for _ in range(args.busy)]
    for p in busy:
        p.start()
    print(
        f"{os.cpu_count()} cores, load average before: {os.getloadavg()[0]:.1f}, busy: {args.busy}"
    )
    workers = {}
    for policy in ("default", "PASSIVE"):
        env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
        if policy != "default":
            env["OMP_WAIT_POLICY"] = policy
        argv = [sys.executable, __file__, "--worker", str(clip), str(tmp / policy), policy]
        workers[policy] = subprocess.Popen(
            argv, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
    for proc in workers.values():
        assert proc.stdout is not None and json.loads(proc.stdout.readline())["ready"]
    results: dict[str, list[dict[str, float]]] = {c[3]: [] for c in CONFIGS}
    try:
        for _ in range(args.runs):
            for policy, backend, threads, label in CONFIGS:
                proc = workers[policy]
                assert proc.stdin is not None and proc.stdout is not None
                proc.stdin.write(f"{backend} {threads}\n")
                proc.stdin.flush()
                results[label].append(json.loads(proc.stdout.readline()))
    finally:
        for proc in workers.values():
            if proc.stdin is not None:
                proc.stdin.close()
            proc.wait()
        for p in busy:
            p.terminate()
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    base = statistics.median(r["wall"] for r in results[CONFIGS[0][3]])
    rows = []
    for *_, label in CONFIGS:
        wall = statistics.median(r["wall"] for r in results[label])
        cpu = statistics.median(r["cpu"] for r in results[label])
        rows.append([label, f"{wall:.2f}", f"{cpu:.2f}", f"{wall / base:.2f}x"])
    print_table(
        f"detect_video, {args.frames} frames of {w}x{h}, median of {args.runs}",
        ["configuration", "wall s", "CPU s", "wall vs the first"],
        rows,
    )


if __name__ == "__main__":
    main()
