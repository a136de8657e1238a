"""Paired training data: synthesise it (moiré, rain) and check it before training."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError

if TYPE_CHECKING:
    from clearsight.data.paired import DataReport
    from clearsight.data.synth_common import SynthReport


def synth_moire(
    clean: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    per_image: int = 1,
    seed: int = 0,
    match_tone: bool = False,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Screen-camera moiré over the clean images of `clean`: `per_image` aligned pairs per
    image in OUT/moire and OUT/clean, the same for the same `seed`. `match_tone` applies the
    capture's tone change to the target too. Raises `ClearsightError` for a bad folder or
    pixel limit."""
    from clearsight.data.synth_moire import MoireConfig, synth_moire_folder
    from clearsight.runtime.failures import check_max_pixels

    check_max_pixels(max_pixels)
    return synth_moire_folder(
        Path(clean),
        Path(out),
        per_image=per_image,
        seed=seed,
        cfg=MoireConfig(match_tone=match_tone),
        max_pixels=max_pixels,
        on_pair=on_pair,
    )


def synth_rain(
    clean: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    preset: str = "mixed",
    per_image: int = 1,
    seed: int = 0,
    workers: int = 0,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Rain streaks (and haze for heavy rain) over the clean images of `clean`: pairs in
    OUT/rain and OUT/clean. `preset` light (Rain100L-like), heavy (Rain100H-like) or mixed;
    `workers` processes (0: this one; the same output either way). Raises
    `ClearsightError` for a bad folder, preset or pixel limit."""
    from clearsight.data.synth_rain import synth_rain_folder
    from clearsight.runtime.failures import check_max_pixels

    check_max_pixels(max_pixels)
    return synth_rain_folder(
        Path(clean),
        Path(out),
        preset=preset,
        per_image=per_image,
        seed=seed,
        workers=workers,
        max_pixels=max_pixels,
        on_pair=on_pair,
    )


def synth_coco(
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    kind: str = "rain",
    preset: str = "heavy",
    seed: int = 0,
    on_image: Callable[[Path], None] | None = None,
) -> SynthReport:
    """A COCO-format copy of the COCO-format folder `data` in OUT whose images are rainy
    (`kind="rain"`, `preset` light, heavy or mixed) or moiré (`kind="moire"`), with the
    same annotations: "COCO in the rain" from any COCO-format set (`data.synth_coco`)."""
    from clearsight.data.synth_coco import synth_coco as run

    return run(data, out, kind=kind, preset=preset, seed=seed, on_image=on_image)


def check_data(
    data: str | os.PathLike[str],
    *,
    input_dir: str | None = None,
    target_dir: str | None = None,
    name_map: str | None = None,
    side_by_side: bool = False,
    order: str = "clean-rain",
    quick: bool = False,
    psnr_floor: float = 10.0,
) -> DataReport:
    """Check paired training data in `data` (names, sizes, readable files and, unless
    `quick`, the pixels: misaligned, extreme or colour-swapped pairs, PSNR under
    `psnr_floor`) into a report that lists everything it found. `side_by_side`: each file
    holds both images (halves in `order`, clean-rain or rain-clean). Raises
    `ClearsightError` when nothing can be checked (no such folder, no known layout) or for
    folder options given with `side_by_side`."""
    from clearsight.data.paired import validate_pairs, validate_side_by_side

    if side_by_side:
        if input_dir or target_dir or name_map:
            raise ClearsightError(
                "--side-by-side takes a folder of files; it has no --input-dir, "
                "--target-dir or --name-map"
            )
        return validate_side_by_side(data, order=order, decode=not quick)  # type: ignore[arg-type]
    return validate_pairs(
        data,
        input_dir=input_dir,
        target_dir=target_dir,
        name_map=name_map,
        decode=not quick,
        psnr_floor=psnr_floor,
    )


def synth_rain_video(
    clean: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    preset: str = "light",
    seed: int = 0,
    fps: float | None = None,
    max_frames: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> Any:
    """Rain over a clean video (or a folder of numbered frames read at `fps`) that moves
    coherently from frame to frame (each layer falls along its own streaks): numbered frame
    pairs in OUT/rain and OUT/clean, the layout `clearsight eval --video` reads."""
    from clearsight.video.synth_rain import synth_rain_video as run

    return run(clean, out, seed=seed, preset=preset, fps=fps, max_frames=max_frames,
               on_pair=on_pair)  # fmt: skip


def synth_moire_video(
    clean: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    seed: int = 0,
    match_tone: bool = False,
    fps: float | None = None,
    max_frames: int | None = None,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> Any:
    """Screen-camera moiré over a clean video (or a folder of numbered frames read at `fps`)
    seen by a moving camera, so the moiré drifts coherently from frame to frame: numbered
    frame pairs in OUT/moire and OUT/clean, the layout `clearsight eval --video` reads."""
    from clearsight.runtime.failures import check_max_pixels
    from clearsight.video.synth_moire import synth_moire_video as run

    check_max_pixels(max_pixels)
    return run(clean, out, seed=seed, match_tone=match_tone, fps=fps, max_frames=max_frames,
               max_pixels=max_pixels, on_pair=on_pair)  # fmt: skip
