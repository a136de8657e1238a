"""Frames per second restoring one video: the local engine against `--engine ray`, one run.

    python benchmarks/scale_video.py [--frames 240] [--width 64] [--height 48] [--gop 12]
                                     [--model default-demoire] [--workers 1 2] [--threads 1]

One synthetic clip (PyAV, libx264 with a keyframe every `gop` frames, AAC audio) goes
through `clearsight.api.restore_video` (the local engine, this process) and
`clearsight.scale.video_ray.restore_videos_ray` on a local Ray started once for the script
(`ray.init` is timed apart). With W workers the one video is cut into W segments (fewer when
it is too short: 48 frames at least each), restored in parallel and stitched by this
process. Every output is written losslessly (FFV1, RGB, in .mkv), so "frames" can say
whether each run's frames are the local engine's exactly (libx264 would differ from run to
run on its own; docs/scale.md). Runs are timed from the call to its return: model loading,
starting the actors, and the driver's stitching count. `--threads` sets torch's threads in
this process and in every worker (compare engines at the same value). The local engine runs
again last, to show how much the machine's load moved meanwhile.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import warnings
from fractions import Fraction
from pathlib import Path

import av
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script

LOSSLESS = {"codec": "ffv1", "pix_fmt": "bgr0"}


def make_clip(path: Path, frames: int, width: int, height: int, gop: int) -> None:
    """A moving gradient with noise at 25 fps, a keyframe every `gop` frames, and a tone."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:height, 0:width] / max(width, height)
    ms = Fraction(1, 1000)
    with av.open(str(path), "w") as c:
        v = c.add_stream("libx264", rate=25)
        v.width, v.height, v.pix_fmt = width, height, "yuv420p"
        v.time_base = v.codec_context.time_base = ms
        v.options = {"g": str(gop), "keyint_min": str(gop), "sc_threshold": "0"}
        a = c.add_stream("aac", rate=48000)
        a.layout = "mono"
        for i in range(frames):
            base = np.stack([xx + i / frames, yy, (xx + yy) / 2], axis=-1) % 1.0 * 200
            img = np.clip(base + rng.normal(0, 20, base.shape), 0, 255).astype(np.uint8)
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = 40 * i, ms
            for p in v.encode(f):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        fs, t, total = a.codec_context.frame_size or 1024, 0, 48 * 40 * frames
        while t < total:
            k = min(fs, total - t)
            wave = (np.sin(np.arange(t, t + k) / 15.0) * 0.2).astype(np.float32)[None]
            af = av.AudioFrame.from_ndarray(wave, format="fltp", layout="mono")
            af.sample_rate, af.pts = 48000, t
            for p in a.encode(af):
                c.mux(p)
            t += k
        for p in a.encode():
            c.mux(p)


def decoded(path: Path) -> list[np.ndarray]:
    with av.open(str(path)) as c:
        return [f.to_ndarray(format="rgb24") for f in c.decode(video=0)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=int, default=240)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--height", type=int, default=48)
    ap.add_argument("--gop", type=int, default=12)
    ap.add_argument("--model", default="default-demoire")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    warnings.simplefilter("ignore")

    import ray
    import torch

    from clearsight.api import restore_video
    from clearsight.scale.video_ray import restore_videos_ray

    torch.set_num_threads(args.threads)
    work = Path(tempfile.mkdtemp(prefix="scale-video-bench-"))
    try:
        clip = work / "clip.mp4"
        make_clip(clip, args.frames, args.width, args.height, args.gop)
        cpus = os.cpu_count() or 1
        print(
            f"{args.frames} frames of {args.width}x{args.height} (keyframe every {args.gop}), "
            f"{args.model}, {cpus} CPUs, torch threads {args.threads}, "
            f"load average {os.getloadavg()[0]:.1f}"
        )

        def local(name: str) -> tuple[str, int, float, Path]:
            out = work / name / "clip.mkv"
            t0 = time.perf_counter()
            restore_video(args.model, clip, out, **LOSSLESS)
            return "local engine", 1, time.perf_counter() - t0, out

        runs = [local("local")]
        t0 = time.perf_counter()
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
        print(f"ray.init: {time.perf_counter() - t0:.1f} s (once, not counted below)")
        try:
            for n in args.workers:
                folder = work / f"ray{n}"
                t0 = time.perf_counter()
                summary = restore_videos_ray(
                    args.model, [(clip, folder / "clip.mkv")], folder, workers=n,
                    threads=args.threads, **LOSSLESS,
                )  # fmt: skip
                secs = time.perf_counter() - t0
                if summary.failed:
                    raise SystemExit(f"ray, {n} workers: {summary.failed[0].reason}")
                name = f"ray, {n} worker{'s' if n > 1 else ''}"
                runs.append((name, summary.done[0].segments, secs, folder / "clip.mkv"))
        finally:
            ray.shutdown()
        runs.append(local("local-again"))
        runs[-1] = ("local engine, again", *runs[-1][1:])
        want = decoded(runs[0][3])
        base = runs[0][2]
        rows = []
        for i, (name, segments, secs, out) in enumerate(runs):
            got = decoded(out)
            same = len(got) == len(want) and all(
                np.array_equal(a, b) for a, b in zip(got, want, strict=True)
            )
            rows.append([
                name, str(segments), f"{secs:.1f}", f"{args.frames / secs:.2f}",
                "-" if i == 0 else f"{base / secs:.2f}x", "identical" if same else "DIFFERENT",
            ])  # fmt: skip
        print_table(
            "one video, restored (speed-up: local engine's seconds / this run's)",
            ["engine", "segments", "run s", "frames/s", "speed-up", "frames"],
            rows,
        )
        print(f"load average after: {os.getloadavg()[0]:.1f}")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
