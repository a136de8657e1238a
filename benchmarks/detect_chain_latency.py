"""Latency of restore + detect per 640x480 image, against detect alone.

    python benchmarks/detect_chain_latency.py [--restore default-derain] [--model default-detect]
        [--runs 5] [--threads N] [--json FILE]

One 640x480 photo (examples/coffee.jpg resized, with the package's heavy rain over it) goes
through, end to end as `clearsight detect` runs it in memory:

- `detect`: `Detector.detect_batch` (letterbox, network, NMS, boxes back to image pixels);
- `chain`: `Pipeline.detect_batch` with `--restore` (the restorer's default tiling, then the
  same detector);
- `auto, rainy` / `auto, dry`: the `auto` chain on the rainy photo (gate + restore + detect)
  and on the clean one (gate + detect: what `--restore auto` costs a dry photo).

Rounds alternate the runs so a change in the machine's load hits all alike; each figure is the
median of `--runs` rounds after one warm-up. The load average is printed before and after: on
a shared machine the ratio to `detect` is the figure to quote, not the milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import cv2
import torch

from clearsight.data.synth_rain import rain_pair
from clearsight.engine.detector import Detector
from clearsight.engine.pipeline import Pipeline
from clearsight.io import read_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import interleaved, print_table  # noqa: E402 - beside this script

PHOTO = Path(__file__).resolve().parents[1] / "examples" / "coffee.jpg"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default-detect")
    ap.add_argument("--restore", default="default-derain")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    dry = cv2.resize(read_image(PHOTO), (640, 480), interpolation=cv2.INTER_AREA)
    rainy = rain_pair(dry, 0, PHOTO.name, 0, "heavy")
    detector = Detector.from_pretrained(args.model)
    chain = Pipeline.around(detector, args.restore)
    auto = Pipeline.around(detector, f"auto:{args.restore}")
    load_before = os.getloadavg()[0]
    runs = {
        "detect": lambda: detector.detect_batch([rainy]),
        "chain": lambda: chain.detect_batch([rainy]),
        "auto, rainy": lambda: auto.detect_batch([rainy]),
        "auto, dry": lambda: auto.detect_batch([dry]),
    }
    seconds = interleaved(list(runs.values()), args.runs)
    load_after = os.getloadavg()[0]
    base = seconds[0]
    rows = [[name, f"{1000 * s:.0f}", f"{s / base:.1f}x"]
            for name, s in zip(runs, seconds, strict=True)]  # fmt: skip
    title = (f"{args.restore} + {args.model}, 640x480, {torch.get_num_threads()} threads, "
             f"load {load_before:.1f} -> {load_after:.1f}")  # fmt: skip
    print_table(title, ["run", "ms (median)", "vs detect"], rows)
    if args.json:
        Path(args.json).write_text(json.dumps({
            "restore": args.restore, "model": args.model, "threads": torch.get_num_threads(),
            "load": [load_before, load_after],
            "ms": {n: 1000 * s for n, s in zip(runs, seconds, strict=True)},
        }, indent=2) + "\n")  # fmt: skip


if __name__ == "__main__":
    main()
