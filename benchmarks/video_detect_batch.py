"""detect_video with one frame per detector call against several: time and box agreement.

    python benchmarks/video_detect_batch.py [--width 640] [--frames 24] [--batch 4]
                                            [--runs 2] [--device cpu]

The clip is the example photo (examples/coffee.jpg) scaled to `--width` and panning 5 px a
frame, as numbered PNGs at 25 fps; `default-detect` runs over it with `batch_size=1` and
`--batch`, the two alternating over `--runs` rounds after one warm-up, and the best time of
each is printed with the number of frames whose JSON lines differ (float rounding of the
batched convolution) and the largest box-coordinate and score difference. docs/video.md.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

from clearsight.engine.detector import Detector
from clearsight.io import read_image, write_image
from clearsight.video.detect import detect_video, read_jsonl

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "coffee.jpg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--width", type=int, default=640)
    ap.add_argument("--frames", type=int, default=24)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args()
    photo = read_image(EXAMPLE)
    small = cv2.resize(photo, (args.width, round(args.width * photo.shape[0] / photo.shape[1])))
    tmp = Path(tempfile.mkdtemp())
    clip = tmp / "pan"
    for i in range(args.frames):
        write_image(clip / f"{i + 1:05d}.png", np.roll(small, 5 * i, axis=1))
    det = Detector.from_pretrained("default-detect", device=args.device)
    detect_video(det, clip, tmp / "warm", fps=25, batch_size=args.batch)
    print(f"load average before: {os.getloadavg()[0]:.1f}")
    times: dict[int, list[float]] = {1: [], args.batch: []}
    for _ in range(args.runs):
        for b in times:
            t0 = time.perf_counter()
            detect_video(det, clip, tmp / f"b{b}", fps=25, batch_size=b)
            times[b].append(time.perf_counter() - t0)
    one, many = (
        read_jsonl(tmp / "b1" / "pan.jsonl"),
        read_jsonl(tmp / f"b{args.batch}" / "pan.jsonl"),
    )
    differ = sum(a != b for a, b in zip(one, many, strict=True))
    box = score = 0.0
    for a, b in zip(one, many, strict=True):
        if len(a["detections"]) != len(b["detections"]):
            print(
                f"frame {a['frame']}: {len(a['detections'])} boxes against {len(b['detections'])}"
            )
            continue
        for x, y in zip(a["detections"], b["detections"], strict=True):
            box = max(box, *(abs(p - q) for p, q in zip(x["bbox"], y["bbox"], strict=True)))
            score = max(score, abs(x["score"] - y["score"]))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print(
        f"{args.device} {small.shape[1]}x{small.shape[0]}, {args.frames} frames: batch 1 "
        f"{min(times[1]):.2f} s, batch {args.batch} {min(times[args.batch]):.2f} s (best of "
        f"{args.runs}); JSON lines differing: {differ} of {len(one)} frames, largest box "
        f"difference {box:.2f} px, score {score:.5f}"
    )


if __name__ == "__main__":
    main()
