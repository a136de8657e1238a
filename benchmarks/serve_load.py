"""Load test for `clearsight serve`: many concurrent clients on loopback, bounded in count
and time, against the CLI's per-image time for the same model and image size.

    python benchmarks/serve_load.py [--model identity] [--requests 200] [--clients 16]
                                    [--size 256] [--workers N] [--max-in-flight M]
                                    [--time-limit 600] [--cli-images 10]

Starts `clearsight serve` on a free 127.0.0.1 port (nothing leaves the machine), warms it
up with sequential requests, then `--clients` threads send `--requests` POST /v1/restore
requests of random `--size`x`--size` PNGs in total; a 503 (the bounded queue saying "busy")
is counted and retried after about `--retry-wait` seconds. It prints p50/p95 latency per
request (first try to answer), the throughput, status counts, and the server's resident
memory after warm-up and after the run (read from /proc: Linux only), then times
`clearsight restore`'s per-file loop on `--cli-images` images of the same size (median per
image, the command's start-up left out) to show what the server adds.

Exit status 1 when a 5xx other than 503 was answered or the memory after the run is more
than 10% above the memory after warm-up. The default model is `identity`, so the figures
measure the server itself; pass `--model default-derain` for a real model (seconds per
image on a small CPU). The load average is printed: a shared CPU slows every figure.
"""

from __future__ import annotations

import argparse
import io
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import numpy as np
from PIL import Image


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def rss_mb(pid: int) -> float:
    """Resident memory of `pid` in MB (VmRSS)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS line")


def random_png(size: int, seed: int) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, "PNG")
    return buf.getvalue()


def start_server(args: argparse.Namespace) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    cmd = [sys.executable, "-m", "clearsight", "serve", "--host", "127.0.0.1"]
    cmd += ["--port", str(port), "--models", args.model, "--workers", str(args.workers)]
    cmd += ["--max-in-flight", str(args.max_in_flight), "--timeout", str(args.time_limit)]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"server exited: {proc.stderr.read().decode()}")  # type: ignore[union-attr]
        try:
            with urllib.request.urlopen(url + "/healthz", timeout=2):
                return proc, url
        except OSError:
            time.sleep(0.3)
    proc.kill()
    raise SystemExit("server did not start within 180 s")


def post(client: object, url: str, png: bytes, model: str) -> tuple[int, float]:
    t0 = time.perf_counter()
    resp = client.post(  # type: ignore[attr-defined]
        url + "/v1/restore", files={"image": ("x.png", png)}, data={"model": model}
    )
    return resp.status_code, time.perf_counter() - t0


def run_load(args: argparse.Namespace, url: str, images: list[bytes]) -> dict[str, object]:
    import httpx

    lock = threading.Lock()
    issued = refused = 0
    results: list[tuple[int, float]] = []
    stop_at = time.monotonic() + args.time_limit

    def client_loop() -> None:
        nonlocal issued, refused
        with httpx.Client(timeout=args.time_limit) as client:
            while True:
                with lock:
                    if issued >= args.requests or time.monotonic() > stop_at:
                        return
                    i = issued
                    issued += 1
                t0 = time.perf_counter()
                while True:  # a 503 is retried after a short wait, as a polite client does
                    try:
                        status, _ = post(client, url, images[i % len(images)], args.model)
                    except httpx.HTTPError:
                        status = -1
                    if status != 503 or time.monotonic() > stop_at:
                        break
                    with lock:
                        refused += 1
                    time.sleep(args.retry_wait * (0.5 + random.random()))
                with lock:
                    results.append((status, time.perf_counter() - t0))

    t0 = time.perf_counter()
    threads = [threading.Thread(target=client_loop) for _ in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return {"wall": time.perf_counter() - t0, "results": results, "refused": refused}


def cli_per_image(args: argparse.Namespace, images: list[bytes]) -> float:
    """Median seconds per image of what `clearsight restore` does for each file (read,
    restore, write: `restore_files`, the command's loop), timed in this process so the
    command's start-up (seconds of imports on a busy machine) does not blur it."""
    from clearsight.engine.inference import Restorer
    from clearsight.engine.restore_files import restore_files

    restorer = Restorer.from_pretrained(args.model)
    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "in"
        src.mkdir()
        for i in range(args.cli_images + 1):
            (src / f"{i:03d}.png").write_bytes(images[i % len(images)])
        stamps: list[float] = []
        restore_files(
            restorer, [src], Path(d) / "out", on_file=lambda _: stamps.append(time.perf_counter())
        )
    return statistics.median(np.diff(stamps))  # the first image is the warm-up


def pct(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) if values else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="identity")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--workers", type=int, default=0, help="server threads (0: its default)")
    ap.add_argument("--max-in-flight", type=int, default=0, help="0: the server's default")
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds for the load run")
    ap.add_argument("--warmup", type=int, default=8)
    ap.add_argument("--retry-wait", type=float, default=0.1, help="mean seconds before a retry")
    ap.add_argument("--cli-images", type=int, default=10)
    args = ap.parse_args()
    if not (1 <= args.requests <= 5000 and 1 <= args.clients <= 64 and args.cli_images >= 2):
        raise SystemExit("--requests 1..5000, --clients 1..64, --cli-images >= 2")

    import httpx

    images = [random_png(args.size, seed) for seed in range(8)]
    print(f"load average: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    proc, url = start_server(args)
    try:
        with httpx.Client(timeout=args.time_limit) as client:
            warm = [post(client, url, images[i % 8], args.model) for i in range(args.warmup)]
        if any(status != 200 for status, _ in warm):
            raise SystemExit(f"warm-up failed: {[s for s, _ in warm]}")
        single = statistics.median(s for _, s in warm[1:] or warm)
        rss_warm = rss_mb(proc.pid)
        run = run_load(args, url, images)
        rss_after = rss_mb(proc.pid)
    finally:
        proc.terminate()
        proc.wait(30)

    results: list[tuple[int, float]] = run["results"]  # type: ignore[assignment]
    wall: float = run["wall"]  # type: ignore[assignment]
    counts = Counter(status for status, _ in results)
    ok = [s for status, s in results if status == 200]
    bad_5xx = {k: v for k, v in counts.items() if k >= 500 and k != 503 or k < 0}
    growth = (rss_after - rss_warm) / rss_warm
    cli_s = cli_per_image(args, images)

    print(f"model {args.model}, {args.size}x{args.size} PNG, {len(results)} requests from "
          f"{args.clients} clients in {wall:.1f} s")  # fmt: skip
    print(f"final status counts: {dict(sorted(counts.items()))}; 503 answers (then retried): "
          f"{run['refused']}")  # fmt: skip
    print(f"latency per request (first try to answer, retries included): "
          f"p50 {pct(ok, 50) * 1000:.0f} ms, p95 {pct(ok, 95) * 1000:.0f} ms")  # fmt: skip
    print(f"throughput: {len(ok) / wall:.2f} images/s")
    print(f"server memory: {rss_warm:.0f} MB after warm-up, {rss_after:.0f} MB after the run "
          f"({growth * 100:+.1f}%)")  # fmt: skip
    print(f"one request at a time (warm-up median): {single * 1000:.0f} ms per image")
    print(f"clearsight restore's loop: {cli_s * 1000:.0f} ms per image (median, start-up excluded)")
    print(f"server overhead per sequential request: {(single - cli_s) * 1000:+.0f} ms")
    failed = []
    if bad_5xx:
        failed.append(f"unexpected errors {bad_5xx}")
    if growth > 0.10:
        failed.append(f"memory grew {growth * 100:.1f}% (> 10%)")
    print("FAIL: " + "; ".join(failed) if failed else "PASS: only 503s refused, memory within 10%")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
