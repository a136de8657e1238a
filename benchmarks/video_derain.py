"""Video deraining on a frame folder: video-derain (S2VD, windows) against default-derain
(RESCAN, frame by frame) and the rainy input, in one run.

    python benchmarks/video_derain.py [--frames DIR] [--clean DIR] [--first 3] [--last 166]
                                      [--image-stride 1] [--threads 2] [--json FILE]
    python benchmarks/video_derain.py --tile-memory [--threads 2]

Defaults: NTURain's synthetic clip a1 as extracted from the S2VD repository
(`/work/data/s2vd/testsets/synthetic_NTURain/a1_Rain` and `a1_GT`, 168 jpg frames 640x480;
no data lives in the repository). Frames are read with OpenCV as the official test reads
them, in file-name order; clean frames are matched by name.

* `video-derain`: every frame of the clip goes through `engine.video_window` (24-frame
  windows, 2 frames of context each side, clamped to [0, 1]: the official test's windows),
  so frames near the measured range's ends keep their context;
* `default-derain`: clearsight's `Restorer` with its defaults (what `clearsight derain`
  runs), one frame at a time, on the measured frames (every `--image-stride`-th of them: at
  about 10-30 s a frame on two shared cores, all 164 frames take the better part of an
  hour; the video rows are then also given over the same subset);
* `rainy input`: the frame itself.

Measured frames: `--first` to `--last`, 1-based positions in the sorted folder (the
official test drops the clip's first and last two frames: 3..166 of 168). PSNR and SSIM are
means over those frames under the y-matlab preset (`clearsight.metrics.presets`).

Time per frame: video-derain's is each window's time over the frames it keeps (the median
over windows); default-derain's is the median over its frames. The two run interleaved
(each window, then the image frames it released), so a change in the machine's load hits
both; on a shared CPU the seconds vary from run to run, the ratio much less. The warping
error column (Lai et al.'s temporal consistency, flow on the clean frames) comes from
`clearsight.metrics.warping`; it reads n/a for rows whose frames are not consecutive.

`--tile-memory` measures something else: one window of 4 random 1280x720 frames through
`Windowed` untiled and in 256-pixel tiles, each in a fresh process, with its peak RSS, its
time and the largest difference between the two outputs (sampled every 8th pixel).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
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
from clearsight.engine.inference import Restorer  # noqa: E402
from clearsight.engine.video_window import (  # noqa: E402
    WindowSpec,
    restore_frames,
    video_model,
    window_spans,
)
from clearsight.metrics.presets import get_preset  # noqa: E402
from clearsight.metrics.warping import warping_error  # noqa: E402
from clearsight.zoo import resolve_model  # noqa: E402

NTURAIN = Path("/work/data/s2vd/testsets/synthetic_NTURain")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp"}


def list_frames(folder: Path) -> list[Path]:
    frames = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    if not frames:
        sys.exit(f"error: no frames in {folder}")
    return frames


def read_rgb(path: Path) -> np.ndarray:
    bgr = cv2.imread(str(path), cv2.IMREAD_COLOR)
    if bgr is None:
        sys.exit(f"error: cannot read {path}")
    return np.ascontiguousarray(bgr[:, :, ::-1])


def warping_column(restored: list[np.ndarray] | None, clean: list[np.ndarray] | None = None) -> str:
    """Lai et al.'s warping error of consecutive restored frames, flow on the clean frames;
    n/a for rows whose frames are not consecutive."""
    if restored is None or clean is None:
        return "n/a"
    return f"{warping_error(restored, clean).mean:.5f}"


class TimedWindows:
    """A video model that records the seconds each window took."""

    def __init__(self, model) -> None:  # noqa: ANN001 - any VideoModel
        self.model = model
        self.spec: WindowSpec = model.spec
        self.seconds: list[float] = []

    def __call__(self, window: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = self.model(window)
        self.seconds.append(time.perf_counter() - t0)
        return out


TILE_CHECK = (4, 720, 1280)  # frames, height, width of the tile-memory window


def tile_run(tile: int, model: str) -> None:
    """One window of random frames through `Windowed` at `tile` (0: untiled), in this fresh
    process: its peak RSS, seconds, and a subsample of the output for the comparison."""
    import resource

    from clearsight.engine.video_window import Windowed

    t, h, w = TILE_CHECK
    video = Windowed(resolve_model(model), tile=tile, spec=WindowSpec(t, 0))
    x = torch.rand(1, 3, t, h, w, generator=torch.Generator().manual_seed(0))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    y = video(x)
    seconds = time.perf_counter() - t0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    sample = y[..., ::8, ::8].flatten().tolist()
    print(json.dumps({"tile": tile, "peak_mib": peak, "before_mib": before, "s": seconds,
                      "sample": sample}))  # fmt: skip


def tile_memory(model: str, threads: int) -> None:
    """Untiled against 256-pixel tiles, each in a fresh process (peak RSS is per process)."""
    import subprocess

    runs = []
    for tile in (0, 256):
        cmd = [sys.executable, __file__, "--tile-run", str(tile), "--threads", str(threads),
               "--video-model", model]  # fmt: skip
        out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
        runs.append(json.loads(out.strip().splitlines()[-1]))
    diff = max(abs(a - b) for a, b in zip(runs[0]["sample"], runs[1]["sample"], strict=True))
    t, h, w = TILE_CHECK
    rows = [
        [str(r["tile"] or "untiled"), f"{r['peak_mib']:,.0f}", f"{r['before_mib']:,.0f}",
         f"{r['s']:.1f}"]
        for r in runs
    ]  # fmt: skip
    print_table(
        f"{model}: one window of {t} random {w}x{h} frames, torch threads {threads}; "
        f"max |tiled - untiled| on every 8th pixel {diff:.2g}",
        ["tile", "peak RSS MiB", "before the window", "s"],
        rows,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--frames", type=Path, default=NTURAIN / "a1_Rain")
    ap.add_argument("--clean", type=Path, default=NTURAIN / "a1_GT")
    ap.add_argument("--first", type=int, default=3, help="first measured frame (1-based)")
    ap.add_argument("--last", type=int, default=166, help="last measured frame (1-based)")
    ap.add_argument("--image-stride", type=int, default=1,
                    help="default-derain on every N-th measured frame")  # fmt: skip
    ap.add_argument("--video-model", default="video-derain")
    ap.add_argument("--image-model", default="default-derain")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument(
        "--tile-memory",
        action="store_true",
        help="instead: peak memory and time of one window untiled and tiled",
    )
    ap.add_argument("--tile-run", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.tile_run is not None:
        tile_run(args.tile_run, args.video_model)
        return
    if args.tile_memory:
        tile_memory(args.video_model, args.threads)
        return
    preset = get_preset("y-matlab")

    rain_paths = list_frames(args.frames)
    n = len(rain_paths)
    if not 1 <= args.first <= args.last <= n:
        sys.exit(f"error: --first/--last must satisfy 1 <= first <= last <= {n}")
    clean_paths = [args.clean / p.name for p in rain_paths]
    missing = [str(p) for p in clean_paths if not p.is_file()]
    if missing:
        sys.exit(f"error: no clean frame for {missing[0]} (and {len(missing) - 1} more)")
    measured = range(args.first - 1, args.last)  # 0-based
    subset = set(measured[:: args.image_stride])

    video = TimedWindows(video_model(resolve_model(args.video_model)))
    image = Restorer.from_pretrained(args.image_model)
    spans = window_spans(n, video.spec)

    def source() -> Iterator[np.ndarray]:
        for p in rain_paths:
            yield read_rgb(p)

    scores: dict[str, dict[int, dict[str, float]]] = {"rainy": {}, "video": {}, "image": {}}
    image_seconds: list[float] = []
    video_frames: list[np.ndarray] = []  # the measured frames, for the warping error
    rainy_frames: list[np.ndarray] = []
    clean_frames: list[np.ndarray] = []
    image_frames: list[np.ndarray] = []  # only with --image-stride 1 (consecutive)
    t_start = time.perf_counter()
    for i, restored in enumerate(restore_frames(source(), video)):
        if i not in measured:
            continue
        rainy, clean = read_rgb(rain_paths[i]), read_rgb(clean_paths[i])
        scores["rainy"][i] = preset.compute(rainy, clean)
        scores["video"][i] = preset.compute(restored, clean)
        video_frames.append(restored)
        rainy_frames.append(rainy)
        clean_frames.append(clean)
        if i in subset:
            t0 = time.perf_counter()
            out = image.restore_image(rainy)
            image_seconds.append(time.perf_counter() - t0)
            scores["image"][i] = preset.compute(out, clean)
            if args.image_stride == 1:
                image_frames.append(out)
        print(f"frame {i + 1}/{n}  video {scores['video'][i]['psnr']:.2f} dB", file=sys.stderr)
    wall = time.perf_counter() - t_start

    per_window = [s / (sp.end - sp.start) for s, sp in zip(video.seconds, spans, strict=True)]
    t_video, t_image = statistics.median(per_window), statistics.median(image_seconds)

    def mean(kind: str, keys: set[int] | range) -> tuple[float, float]:
        vals = [scores[kind][k] for k in keys]
        return (
            statistics.fmean(v["psnr"] for v in vals),
            statistics.fmean(v["ssim"] for v in vals),
        )

    def row(label: str, kind: str, keys, seconds: float | None, warp: str) -> list[str]:  # noqa: ANN001
        p, s = mean(kind, keys)
        ratio = f"{seconds / t_image:.3f}" if seconds is not None else ""
        secs = f"{seconds:.2f}" if seconds is not None else ""
        return [label, str(len(keys)), f"{p:.3f}", f"{s:.4f}", secs, ratio, warp]

    full = f"{args.first}-{args.last}"
    rows = [
        row(
            f"rainy input ({full})",
            "rainy",
            measured,
            None,
            warping_column(rainy_frames, clean_frames),
        ),
        row(
            f"{args.video_model} ({full})",
            "video",
            measured,
            t_video,
            warping_column(video_frames, clean_frames),
        ),
    ]
    if args.image_stride > 1:
        sub = sorted(subset)
        rows += [
            row(f"rainy input (stride {args.image_stride})", "rainy", sub, None, "n/a"),
            row(f"{args.image_model} (stride {args.image_stride})", "image", sub, t_image, "n/a"),
            row(f"{args.video_model} (stride {args.image_stride})", "video", sub, t_video, "n/a"),
        ]
    else:
        rows.insert(
            1,
            row(
                f"{args.image_model} ({full})",
                "image",
                measured,
                t_image,
                warping_column(image_frames, clean_frames),
            ),
        )
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    title = (
        f"{args.frames} vs {args.clean}: {preset.summary}; CPU, torch threads "
        f"{args.threads}, load average {load:.1f}, wall {wall / 60:.1f} min"
    )
    header = ["run", "frames", "PSNR", "SSIM", "s/frame", f"time vs {args.image_model}",
              "warp err"]  # fmt: skip
    print_table(title, header, rows)
    if args.json:
        result = {
            "command": " ".join(sys.argv),
            "preset": preset.to_dict(),
            "rows": [dict(zip(header, r, strict=True)) for r in rows],
            "video_seconds_per_window": video.seconds,
            "image_seconds": image_seconds,
            "per_frame": {k: {str(i + 1): v for i, v in d.items()} for k, d in scores.items()},
        }
        atomic_write_text(args.json, json.dumps(result, indent=1) + "\n")


if __name__ == "__main__":
    main()
