"""The spread of the rain-streak score (`clearsight.detection.rain_measure`) on clean photos
and their synthetic rainy copies: how `RAIN_THRESHOLD` was chosen, and how often it is right.

    python benchmarks/rain_gate.py [--images ../shared/data/detection/coco128/train2017]
        [--limit N] [--seed 0]

Prints, per condition (clean, light, heavy), the 0/5/50/95/100th percentiles of the score and
the share of photos at or above the threshold (restored by `--restore auto`). Calibrate on
training photos only (COCO128), never on the set the AP is reported on.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from clearsight.data.synth_rain import rain_pair
from clearsight.detection.rain_measure import RAIN_THRESHOLD, streak_score
from clearsight.io import list_images, read_image


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", default="../shared/data/detection/coco128/train2017")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    files = list_images(Path(args.images))[: args.limit]
    print(f"{len(files)} photos from {args.images}; threshold {RAIN_THRESHOLD}")
    for condition in ("clean", "light", "heavy"):
        scores = []
        for f in files:
            img = read_image(f)
            if img.dtype != np.uint8:
                img = (img / 257).round().astype(np.uint8)
            if condition != "clean":
                img = rain_pair(img, args.seed, f.name, 0, condition)
            scores.append(streak_score(img))
        s = np.array(scores)
        pct = " ".join(f"{v:.2f}" for v in np.percentile(s, [0, 5, 50, 95, 100]))
        share = 100 * (s >= RAIN_THRESHOLD).mean()
        print(f"{condition:6s} p0/5/50/95/100 {pct}  restored {share:.1f}%")


if __name__ == "__main__":
    main()
