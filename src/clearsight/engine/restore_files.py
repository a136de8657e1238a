"""Restoring image files: every input file or folder into an output folder, names mirrored.

The loop behind `clearsight restore/derain/demoire`, public so that Python users get the
same planning (no overwritten inputs, no two inputs onto one output) and bit depth.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from clearsight.engine.batch import plan_outputs
from clearsight.engine.inference import Restorer
from clearsight.io import image_to_tensor, read_image, tensor_to_image, write_image


@dataclass(frozen=True)
class RestoredFile:
    """One restored file: where it came from, where it went, how long the model took."""

    source: Path
    output: Path
    latency_ms: float
    stages: list[float] | None = None
    """Stages a multi-stage model used (when the `stages` option is not "all"), else None."""


def restore_files(
    restorer: Restorer,
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    max_pixels: int | None = None,
    on_start: Callable[[int], None] | None = None,
    on_tile: Callable[[Path, int, int], None] | None = None,
    on_file: Callable[[RestoredFile], None] | None = None,
) -> list[RestoredFile]:
    """Restore every image of `inputs` (files, or folders searched recursively) into `out`.

    Files land as OUT/name and folder contents as OUT/relative path, written at the input's
    bit depth. Progress: `on_start(n_files)` once, `on_tile(source, done, total)` during each
    image, `on_file(restored)` after each.
    """
    plan = plan_outputs([Path(p) for p in inputs], Path(out))
    if on_start is not None:
        on_start(len(plan))
    done: list[RestoredFile] = []
    for src, dst in plan:
        img = read_image(src, max_pixels=max_pixels)

        def tile_progress(n: int, total: int, src: Path = src) -> None:
            if on_tile is not None:
                on_tile(src, n, total)

        out_t, ms = restorer.timed_restore(image_to_tensor(img), tile_progress)
        dtype = img.dtype
        write_image(dst, tensor_to_image(out_t, dtype=dtype), bit_depth=8 * dtype.itemsize)
        used = restorer.last_stages_used if restorer.options.stages != "all" else None
        restored = RestoredFile(src, dst, ms, list(used) if used else None)
        done.append(restored)
        if on_file is not None:
            on_file(restored)
    return done
