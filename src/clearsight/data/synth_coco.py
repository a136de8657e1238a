"""A rainy (or moiré) copy of a COCO-format detection set, with the same annotations.

`clearsight synth rain --coco DATA -o OUT` degrades every image of the COCO-format folder DATA
(`annotations/instances_<split>.json` + `<split>/`) with the package's own rain or moiré
synthesis and writes OUT in the same layout: the images under their own names (so the
instances JSON applies unchanged) and the JSON itself, with an `info.clearsight_synth`
record of what was done (kind, preset, seed, source folder). Both syntheses keep every pixel
where it was (moiré is mapped back onto the clean grid), so the boxes stay true. Each image's
random draws come from (seed, file name), as for the paired folders: the same seed gives the
same set, whatever the order.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.atomic import atomic_write_text
from clearsight.data.coco import find_coco_set, load_coco
from clearsight.data.synth_common import SynthReport, pair_seed
from clearsight.errors import ClearsightError, OptionError
from clearsight.io import to_uint8, write_image
from clearsight.out_paths import check_output_folder

__all__ = ["KINDS", "degrade", "synth_coco"]

KINDS = ("rain", "moire")


def degrade(image: np.ndarray, kind: str, name: str, *, seed: int, preset: str) -> np.ndarray:
    """The rainy (moiré) version of the uint8 RGB `image` called `name` (deterministic)."""
    if kind == "rain":
        from clearsight.data.synth_rain import rain_pair

        return rain_pair(image, seed, name, 0, preset)
    if kind == "moire":
        from clearsight.data.synth_moire import synthesize_moire

        return synthesize_moire(image, pair_seed(seed, name, 0))[0]
    raise OptionError("kind", f"unknown synthesis {kind!r}; known: {', '.join(KINDS)}")


def synth_coco(
    data: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    kind: str = "rain",
    preset: str = "heavy",
    seed: int = 0,
    on_image: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Write OUT: a COCO-format copy of `data` whose images are rainy (`kind="rain"`, under
    `preset`: light, heavy or mixed) or moiré (`kind="moire"`); the annotations unchanged."""
    from clearsight.data.synth_rain import PRESETS

    if kind not in KINDS:
        raise OptionError("kind", f"unknown synthesis {kind!r}; known: {', '.join(KINDS)}")
    if kind == "rain" and preset not in PRESETS:
        raise OptionError("preset", f"must be one of {', '.join(PRESETS)}, got {preset!r}")
    ann, images = find_coco_set(data)
    dataset = load_coco(ann, images)
    root = check_output_folder(out, "--out")
    if root.resolve() == Path(data).resolve():
        raise OptionError("out", f"{root} is the input set; choose another folder")
    image_dir = root / images.name
    n = 0
    for i, entry in enumerate(dataset.images):
        img = to_uint8(dataset.image(i))
        target = image_dir / entry.file_name
        try:
            write_image(target, degrade(img, kind, Path(entry.file_name).name, seed=seed,
                                        preset=preset))  # fmt: skip
        except ValueError as exc:
            raise ClearsightError(f"{entry.path}: {exc}") from None
        n += 1
        if on_image is not None:
            on_image(target)
    raw: dict[str, Any] = dict(dataset.raw)
    info = dict(raw.get("info") or {})
    info["clearsight_synth"] = {
        "kind": kind,
        "preset": preset if kind == "rain" else None,
        "seed": seed,
        "source": str(Path(data)),
    }
    raw["info"] = info
    atomic_write_text(root / "annotations" / ann.name, json.dumps(raw) + "\n")
    return SynthReport(pairs=n, out=root)
