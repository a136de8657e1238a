"""What the pair synthesizers (rain, moiré) share: seeding, the source list, 8-bit input."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clearsight.errors import ClearsightError


def pair_seed(seed: int, name: str, k: int) -> np.random.Generator:
    """The generator for copy `k` of the image called `name`: independent of file order."""
    return np.random.default_rng([seed, zlib.crc32(name.encode("utf-8")), k])


@dataclass(frozen=True)
class SynthReport:
    pairs: int
    out: Path


def check_clean(clean: np.ndarray, what: str) -> tuple[int, int]:
    """(H, W) of a clean HxWx3 uint8 RGB image of at least 8x8; ValueError otherwise."""
    if clean.ndim != 3 or clean.shape[2] != 3 or clean.dtype != np.uint8:
        raise ValueError(f"expected an HxWx3 uint8 RGB image, got {clean.shape} {clean.dtype}")
    h, w, _ = clean.shape
    if h < 8 or w < 8:
        raise ValueError(f"image too small for {what} synthesis: {w}x{h} (need 8x8 or more)")
    return h, w


def check_clip_frame(
    frame: np.ndarray, index: int, size: tuple[int, int] | None, what: str
) -> tuple[int, int]:
    """(H, W) of frame `index` of a clean clip: `check_clean`'s rules, and the first frame's
    size (`size`, None for the first); a ClearsightError naming the frame otherwise."""
    try:
        hw = check_clean(np.asarray(frame), what)
    except ValueError as exc:
        raise ClearsightError(f"frame {index}: {exc}") from None
    if size is not None and hw != size:
        raise ClearsightError(
            f"frame {index}: {hw[1]}x{hw[0]} differs from the clip's first frame "
            f"{size[1]}x{size[0]}; a video's frames share one size"
        )
    return hw


def synth_sources(clean_dir: Path, out: Path, per_image: int, degraded: str) -> list[Path]:
    """The clean images to synthesise from; creates OUT/<degraded> and OUT/clean."""
    from clearsight.io import list_images

    if per_image < 1:
        raise ClearsightError(f"--per-image must be >= 1, got {per_image}")
    if not Path(clean_dir).is_dir():
        raise ClearsightError(f"clean folder not found: {clean_dir}")
    files = list_images(clean_dir)
    if not files:
        raise ClearsightError(f"no images in {clean_dir}")
    (out / degraded).mkdir(parents=True, exist_ok=True)
    (out / "clean").mkdir(parents=True, exist_ok=True)
    return files


def read_as_uint8(path: Path, max_pixels: int | None) -> np.ndarray:
    """The image at `path` as 8-bit RGB (16-bit sources are synthesised at 8 bits)."""
    from clearsight.io import read_image, to_uint8

    return to_uint8(read_image(path, max_pixels=max_pixels))
