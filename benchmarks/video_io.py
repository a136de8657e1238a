"""Video pipeline: memory flat in the video's length, streams intact, speed against PNG files.

    python benchmarks/video_io.py [--width 1920] [--height 1080] [--fps 25]
                                  [--seconds 10 60] [--png-frames 20] [--json FILE]

1. A synthetic clip per length in `--seconds` (`--width`x`--height` at `--fps`, H.264
   ultrafast yuv420p, with an AAC stereo audio stream), made with PyAV.
2. Each clip goes through `clearsight.video.restore.restore_video` with the identity frame
   function (decode, queue, encode: the pipeline without a model) in a fresh process; that
   process reports its peak resident set (VmHWM) and its resident set before the run. The
   target: the longest clip's peak within 10% of the shortest's.
3. The output is checked against the source without decoding: the audio packets' bytes are
   identical, and the video packets carry the same number of timestamps with the same
   values (seconds).
4. `--png-frames N`: the first N frames of the shortest clip, restored by the identity
   `Restorer` as a video (`restore_video`) and as PNG files (`restore_files`, the loop behind
   `clearsight restore`); milliseconds per frame for each, interleaved over `--runs` rounds
   (median). The PNGs are written before timing.

`--nturain DIR` instead scores a folder pair DIR/a1_Rain, DIR/a1_GT (NTURain's layout) with
the warping error (flow from the clean frames, frames `--first`..`--last`): the rainy
input, the clean frames, the clean frames blurred, and with `--model M` the model per frame
with and without `temporal` (the same model outputs, blended afterwards), with PSNR/SSIM
(y-matlab). A measurement only: nothing is tuned on it.

Every figure is from this machine in this run; on a shared CPU the seconds move, the
memory figures much less.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from fractions import Fraction
from pathlib import Path
from typing import Any

import av
import numpy as np

REPO = Path(__file__).resolve().parents[1]


def make_clip(path: Path, width: int, height: int, fps: int, seconds: float) -> int:
    """Write the synthetic clip; return its frame count."""
    n = int(round(seconds * fps))
    yy, xx = np.mgrid[0:height, 0:width]
    base = np.stack(
        [(xx * 255 // max(1, width - 1)), (yy * 255 // max(1, height - 1)), (xx + yy) % 256],
        axis=2,
    ).astype(np.uint8)
    rng = np.random.default_rng(0)
    grain = rng.integers(0, 24, size=(height, width, 1), dtype=np.uint8)
    with av.open(str(path), "w") as c:
        v = c.add_stream("libx264", rate=fps)
        v.width, v.height, v.pix_fmt = width, height, "yuv420p"
        v.options = {"preset": "ultrafast", "crf": "23"}
        a = c.add_stream("aac", rate=48000)
        a.layout = "stereo"
        for i in range(n):
            img = np.roll(base, 8 * i, axis=1) + np.roll(grain, i, axis=0)
            f = av.VideoFrame.from_ndarray(img, format="rgb24")
            f.pts, f.time_base = i, Fraction(1, fps)
            for p in v.encode(f):
                c.mux(p)
        for p in v.encode():
            c.mux(p)
        total, t, fs = int(48000 * n / fps), 0, a.codec_context.frame_size or 1024
        while t < total:
            k = min(fs, total - t)
            wave = (np.sin(np.arange(t, t + k) / 20.0) * 0.2).astype(np.float32)
            fr = av.AudioFrame.from_ndarray(np.stack([wave, wave]), format="fltp", layout="stereo")
            fr.sample_rate, fr.pts = 48000, t
            for p in a.encode(fr):
                c.mux(p)
            t += k
        for p in a.encode():
            c.mux(p)
    return n


def stream_digest(path: Path) -> dict[str, Any]:
    """Video packet timestamps (seconds, sorted) and the audio packets' bytes, by demuxing."""
    times: list[float] = []
    audio = hashlib.sha256()
    audio_bytes = 0
    with av.open(str(path)) as c:
        for p in c.demux():
            if p.size == 0:
                continue
            if p.stream.type == "video" and p.pts is not None:
                times.append(round(float(p.pts * p.time_base), 6))
            elif p.stream.type == "audio":
                audio.update(bytes(p))
                audio_bytes += p.size
    return {"times": sorted(times), "audio_sha256": audio.hexdigest(), "audio_bytes": audio_bytes}


def _vm(key: str) -> int:
    """A /proc/self/status figure in KiB (VmRSS, VmHWM)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def child(src: str, dst: str) -> None:
    """Run the pipeline once in this process and print its memory as JSON."""
    from clearsight.video.restore import restore_video

    rss_before = _vm("VmRSS")
    t0 = time.perf_counter()
    result = restore_video(lambda img: img, src, dst)
    print(
        json.dumps(
            {
                "frames": result.frames,
                "wall_s": time.perf_counter() - t0,
                "rss_before_mib": rss_before / 1024,
                "peak_rss_mib": _vm("VmHWM") / 1024,
            }
        )
    )


def run_child(src: Path, dst: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    out = subprocess.run(
        [sys.executable, __file__, "--child", str(src), str(dst)],
        check=True,
        capture_output=True,
        text=True,
        env=env,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def png_speed(src: Path, n: int, runs: int, work: Path) -> dict[str, float]:
    """ms per frame: restore_video on the first n frames against restore_files on them."""
    from clearsight.engine.inference import Restorer
    from clearsight.engine.restore_files import restore_files
    from clearsight.video.frames import FrameFolderWriter
    from clearsight.video.io import VideoReader
    from clearsight.video.restore import restore_video

    restorer = Restorer.from_pretrained("identity")
    pngs = work / "pngs"
    with VideoReader(src) as r, FrameFolderWriter(pngs) as w:
        for f in r.frames():
            if f.index >= n:
                break
            w.write(f.image)
    rate = 1 / float(VideoReader(src).info.rate or 25)
    video_ms, png_ms = [], []
    for i in range(runs):
        t0 = time.perf_counter()
        res = restore_video(restorer, src, work / f"v{i}.mp4", duration=n * rate - rate / 2)
        video_ms.append((time.perf_counter() - t0) * 1000 / res.frames)
        t0 = time.perf_counter()
        done = restore_files(restorer, [pngs], work / f"p{i}")
        png_ms.append((time.perf_counter() - t0) * 1000 / len(done))
    return {
        "frames": n,
        "video_ms_per_frame": statistics.median(video_ms),
        "png_ms_per_frame": statistics.median(png_ms),
    }


def nturain(root: Path, first: int, last: int, model: str | None) -> dict[str, Any]:
    """Warping errors (x1e-3) on an NTURain clip; see the module docstring."""
    import cv2

    from clearsight.io import read_image
    from clearsight.metrics.warping import score_frames, warping_error
    from clearsight.video.temporal import TemporalBlend

    names = [f"{i:05d}.jpg" for i in range(first, last + 1)]
    rain_dir = next(root.glob("*_Rain"))
    gt_dir = rain_dir.with_name(rain_dir.name.replace("_Rain", "_GT"))

    def clean() -> Any:
        return (read_image(gt_dir / n) for n in names)

    def rainy() -> Any:
        return (read_image(rain_dir / n) for n in names)

    out: dict[str, Any] = {"clip": rain_dir.name, "frames": f"{first}-{last}"}
    out["rainy"] = warping_error(rainy(), clean()).mean * 1e3
    out["clean"] = warping_error(clean(), clean()).mean * 1e3
    blurred = (cv2.GaussianBlur(f, (3, 3), 1.0) for f in clean())
    out["clean_blur3"] = warping_error(blurred, clean()).mean * 1e3
    print(json.dumps(out), flush=True)
    if model is not None:
        from clearsight.engine.inference import Restorer

        restorer = Restorer.from_pretrained(model)
        t0 = time.perf_counter()
        restored = [restorer.restore_image(f) for f in rainy()]
        out["model_ms_per_frame"] = (time.perf_counter() - t0) * 1000 / len(restored)
        blend = TemporalBlend()
        blended = [blend(f) for f in restored]
        for key, frames in (("per_frame", restored), ("temporal", blended)):
            score = score_frames(frames, list(clean()))
            out[f"{model}_{key}"] = {
                "warping_error_x1e3": score.summary["warping_error.mean"] * 1e3,
                "psnr_y": score.summary["psnr.mean"],
                "ssim_y": score.summary["ssim.mean"],
            }
        print(json.dumps(out), flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--width", type=int, default=1920)
    ap.add_argument("--height", type=int, default=1080)
    ap.add_argument("--fps", type=int, default=25)
    ap.add_argument("--seconds", type=float, nargs="+", default=[10.0, 60.0])
    ap.add_argument("--png-frames", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", type=Path)
    ap.add_argument("--nturain", type=Path, help="score DIR/*_Rain against DIR/*_GT instead")
    ap.add_argument("--first", type=int, default=3)
    ap.add_argument("--last", type=int, default=166)
    ap.add_argument("--model", help="with --nturain: also restore with this model")
    ap.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(*args.child)
        return
    if args.nturain:
        result = nturain(args.nturain, args.first, args.last, args.model)
        if args.json:
            args.json.write_text(json.dumps(result, indent=2) + "\n")
        return
    print(f"load average: {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs", flush=True)
    report: dict[str, Any] = {
        "clip": f"{args.width}x{args.height} at {args.fps} fps, H.264 + AAC",
        "lengths": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        clips = []
        for s in args.seconds:
            src = work / f"clip{int(s)}s.mp4"
            t0 = time.perf_counter()
            n = make_clip(src, args.width, args.height, args.fps, s)
            print(f"made {src.name}: {n} frames in {time.perf_counter() - t0:.0f} s", flush=True)
            clips.append(src)
            dst = work / f"out{int(s)}s.mp4"
            mem = run_child(src, dst)
            a, b = stream_digest(src), stream_digest(dst)
            row = {
                "seconds": s,
                **mem,
                "fps": mem["frames"] / mem["wall_s"],
                "frames_match": len(a["times"]) == len(b["times"]) == mem["frames"],
                "timestamps_match": a["times"] == b["times"],
                "audio_identical": a["audio_sha256"] == b["audio_sha256"] and a["audio_bytes"] > 0,
                "audio_bytes": b["audio_bytes"],
            }
            report["lengths"].append(row)
            print(json.dumps(row), flush=True)
            dst.unlink()
        peaks = [r["peak_rss_mib"] for r in report["lengths"]]
        report["peak_ratio_longest_to_shortest"] = peaks[-1] / peaks[0]
        print(f"peak RSS, longest / shortest: {peaks[-1] / peaks[0]:.3f}", flush=True)
        if args.png_frames > 0:
            report["png_speed"] = png_speed(clips[0], args.png_frames, args.runs, work)
            print(json.dumps(report["png_speed"]), flush=True)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")


if __name__ == "__main__":
    main()
