"""Build the bundled sample clip `examples/rainy-coffee-clip.mp4` and its README frames.

How the clip is made (deterministic: the same code gives the same frames):
- Source: `examples/coffee.jpg`, scikit-image's `coffee` sample (photograph by Rachel
  Michetti, courtesy of Pikolo Espresso Bar; CC0, no copyright restrictions), 600x400.
- A slow pan: the photo is scaled to 450x300 (INTER_AREA) and a 320x240 window moves 4 pixels
  right per frame over 24 frames (x 16 to 108, y 30).
- Rain: `clearsight.data.synth_rain_video.rainy_clip`, preset `light`, seed 0 (streaks that
  fall along their own lines from frame to frame).
- Encoding: H.264 (libx264), yuv420p, crf 23, 12 fps, through `clearsight.video.io.VideoWriter`.
  The frames handed to the encoder are the same on every run; the encoded bytes are not
  quite (x264 runs multi-threaded there, and its output then varies by a few hundred bytes).

    python scripts/make_sample_video.py                  # writes examples/rainy-coffee-clip.mp4
    python scripts/make_sample_video.py --pictures docs/img  # frames of that clip

`--pictures DIR` builds no clip: from the existing one it writes DIR/rainy-coffee-clip-frame.png
(frame 12 as decoded, what `clearsight derain` reads) and DIR/derained-coffee-clip-frame.png (that
frame derained by the bundled `video-derain` model over the whole clip; ~10 s on a CPU).
"""

from __future__ import annotations

import argparse
from fractions import Fraction
from pathlib import Path

import cv2
import numpy as np

from clearsight.data.synth_rain_video import rainy_clip
from clearsight.io import read_image, to_uint8, write_image
from clearsight.video.frames import open_source
from clearsight.video.io import VideoWriter

ROOT = Path(__file__).resolve().parent.parent
SOURCE = ROOT / "examples" / "coffee.jpg"
OUT = ROOT / "examples" / "rainy-coffee-clip.mp4"
SCALED = (450, 300)  # (width, height) the photo is resized to before panning
WIDTH, HEIGHT, FRAMES, FPS = 320, 240, 24, 12
START, STEP, TOP = 16, 4, 30  # pan: window x = START + STEP * i, y = TOP
PICTURE_FRAME = 12


def pan_frames() -> list[np.ndarray]:
    """The clean clip: a 320x240 window panning across the scaled photo."""
    photo = cv2.resize(to_uint8(read_image(SOURCE)), SCALED, interpolation=cv2.INTER_AREA)
    frames = []
    for i in range(FRAMES):
        x = START + STEP * i
        frames.append(np.ascontiguousarray(photo[TOP : TOP + HEIGHT, x : x + WIDTH]))
    return frames


def write_clip(out: Path) -> None:
    rate = Fraction(FPS)
    with VideoWriter(out, width=WIDTH, height=HEIGHT, time_base=1 / rate, rate=rate, crf=23) as w:
        for i, frame in enumerate(rainy_clip(pan_frames(), seed=0, preset="light")):
            w.write(frame, i)


def write_pictures(clip: Path, folder: Path) -> None:
    from clearsight.engine.video_window import restore_frames, video_model
    from clearsight.zoo import resolve_model

    with open_source(clip) as reader:
        frames = [f.image for f in reader.frames()]
    write_image(folder / "rainy-coffee-clip-frame.png", frames[PICTURE_FRAME])
    derained = list(restore_frames(frames, video_model(resolve_model("video-derain"))))
    write_image(folder / "derained-coffee-clip-frame.png", derained[PICTURE_FRAME])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT, help="the clip (%(default)s)")
    ap.add_argument("--pictures", type=Path, help="write the before/after frames of the clip here")
    args = ap.parse_args()
    if args.pictures is not None:
        write_pictures(args.out, args.pictures)
        print(f"{args.pictures}: rainy-coffee-clip-frame.png, derained-coffee-clip-frame.png")
    else:
        write_clip(args.out)
        print(f"{args.out}: {args.out.stat().st_size} bytes")


if __name__ == "__main__":
    main()
