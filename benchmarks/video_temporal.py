"""Demoiré with `--temporal` on a synthetic moiré video: per frame against the flow-guided
blend, the tone smoothing, and both (the target: warping error down at least 30%
against per frame, PSNR down at most 0.1 dB).

    python benchmarks/video_temporal.py [--photo examples/coffee.jpg] [--frames 40]
        [--width 192] [--height 144] [--seed 0] [--model default-demoire] [--threads 1]
        [--strength 0.5] [--max-change 0.06] [--stats-weight 0.3] [--json FILE]

The clip is made here, the same for the same arguments: a clean "video" of a camera panning
and zooming slowly over one still photo (bilinear crops along sinusoids: a few pixels a
frame), then `clearsight.data.synth_moire_video.moire_clip` films each frame off a screen
with a moving camera (the moiré drifts coherently; the target is the clean frame). The model
runs once per frame as `clearsight demoire` runs it on a video (`Restorer`, torch, untiled),
and the rows are:

* `per frame`: the model alone;
* `blend (--temporal)`: those outputs through `TemporalBlend` (flow-warped previous output,
  Lai et al.'s occlusion tests, `--strength`, `--max-change`): what `--temporal` runs;
* `tone smoothing`: the model with its five global tone vectors averaged over frames
  (`StatsSmoother`, `--stats-weight` for the new frame; `restore_video(smooth_tone=True)`);
* `blend + tone smoothing`: both;
* the moiré input and the clean frames themselves, for scale.

PSNR and SSIM are per-frame means under the y-matlab preset; the warping error (x1e-3) is
Lai et al.'s with the DIS flow of the clean frames (`clearsight.metrics.warping`), its ratio
to the per-frame row last. docs/video.md has the figures.

`--threads 1` by default: on two cores shared with other jobs, two torch threads ran the
model about ten times slower than one (their workers wait on each other).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import cv2
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _tables import print_table  # noqa: E402

from clearsight.atomic import atomic_write_text  # noqa: E402
from clearsight.data.synth_moire_video import moire_clip  # noqa: E402
from clearsight.engine.inference import Restorer  # noqa: E402
from clearsight.io import image_to_tensor, read_image, tensor_to_image, to_uint8  # noqa: E402
from clearsight.metrics.warping import score_frames  # noqa: E402
from clearsight.video.temporal import (  # noqa: E402
    DEFAULT_MAX_CHANGE,
    DEFAULT_STATS_WEIGHT,
    DEFAULT_STRENGTH,
    StatsSmoother,
    TemporalBlend,
)

ROOT = Path(__file__).resolve().parents[1]


def pan_clip(photo: np.ndarray, n: int, width: int, height: int) -> Iterator[np.ndarray]:
    """`n` frames of a camera panning and zooming over `photo`: each frame a bilinear crop
    whose centre and scale follow slow sinusoids (periods of 80-120 frames)."""
    ph, pw = photo.shape[:2]
    fit = min(pw / width, ph / height) / 1.25  # the crop at its largest leaves room to pan
    for t in range(n):
        s = fit * (1.0 + 0.06 * np.sin(2 * np.pi * t / 80))
        cx = pw / 2 + 0.08 * pw * np.sin(2 * np.pi * t / 120 + 0.5)
        cy = ph / 2 + 0.06 * ph * np.sin(2 * np.pi * t / 90 + 1.0)
        m = np.array([[1 / s, 0, width / 2 - cx / s], [0, 1 / s, height / 2 - cy / s]])
        yield cv2.warpAffine(
            photo, m, (width, height), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT
        )


def restore_all(fn, frames: list[np.ndarray]) -> tuple[list[np.ndarray], float]:  # noqa: ANN001
    """The outputs of a uint8 frame function and its median seconds per frame."""
    out, secs = [], []
    for f in frames:
        t0 = time.perf_counter()
        out.append(fn(f))
        secs.append(time.perf_counter() - t0)
    return out, float(np.median(secs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--photo", type=Path, default=ROOT / "examples" / "coffee.jpg")
    ap.add_argument("--frames", type=int, default=40)
    ap.add_argument("--width", type=int, default=192)
    ap.add_argument("--height", type=int, default=144)
    ap.add_argument("--seed", type=int, default=0, help="the moiré clip's seed")
    ap.add_argument("--model", default="default-demoire")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--strength", type=float, default=DEFAULT_STRENGTH)
    ap.add_argument("--max-change", type=float, default=DEFAULT_MAX_CHANGE)
    ap.add_argument("--stats-weight", type=float, default=DEFAULT_STATS_WEIGHT)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    t_start = time.perf_counter()

    photo = to_uint8(read_image(args.photo))
    clean_in = list(pan_clip(photo, args.frames, args.width, args.height))
    pairs = list(moire_clip(iter(clean_in), args.seed))
    moire = [p[0] for p in pairs]
    clean = [p[1] for p in pairs]

    restorer = Restorer.from_pretrained(args.model)
    per_frame, t_frame = restore_all(restorer.restore_image, moire)
    smoother = StatsSmoother(restorer.net, restorer.restore, args.stats_weight)
    toned, t_toned = restore_all(lambda img: tensor_to_image(smoother(image_to_tensor(img))), moire)

    def blended(frames: list[np.ndarray]) -> list[np.ndarray]:
        blend = TemporalBlend(strength=args.strength, max_change=args.max_change)
        return [blend(f) for f in frames]

    runs = {
        "moiré input": (moire, None),
        "per frame": (per_frame, t_frame),
        "blend (--temporal)": (blended(per_frame), None),
        "tone smoothing": (toned, t_toned),
        "blend + tone smoothing": (blended(toned), None),
        "clean frames": (clean, None),
    }
    scores = {k: score_frames(iter(v[0]), iter(clean)).summary for k, v in runs.items()}
    ref = scores["per frame"]
    rows = []
    for name, s in scores.items():
        we = s["warping_error.mean"] * 1e3
        psnr = "" if name == "clean frames" else f"{s['psnr.mean']:.3f}"
        d_psnr = (
            ""
            if name in ("moiré input", "clean frames")
            else (f"{s['psnr.mean'] - ref['psnr.mean']:+.3f}")
        )
        rows.append([name, psnr, d_psnr, f"{s['ssim.mean']:.4f}", f"{we:.4f}",
                     f"{s['warping_error.mean'] / ref['warping_error.mean']:.3f}"])  # fmt: skip
    wall = time.perf_counter() - t_start
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    title = (
        f"{args.model} on {args.photo.name} panned, {args.frames} frames {args.width}x"
        f"{args.height}, moiré seed {args.seed}; blend {args.strength}/{args.max_change}, "
        f"tone weight {args.stats_weight}; {t_frame:.2f} s/frame ({t_toned:.2f} smoothed), "
        f"load {load:.1f}, wall {wall:.0f} s"
    )
    header = ["run", "PSNR Y", "vs per frame", "SSIM Y", "warp err x1e-3", "ratio"]
    print_table(title, header, rows)
    if args.json:
        result = {
            "command": " ".join(sys.argv),
            "rows": [dict(zip(header, r, strict=True)) for r in rows],
            "summaries": scores,
        }
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
