"""Mapping input files and folders to output paths that mirror their names."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from clearsight.errors import ClearsightError, ImageReadError
from clearsight.io import list_images


def plan_outputs(inputs: Sequence[Path], out_dir: Path) -> list[tuple[Path, Path]]:
    """(source, destination) pairs: files land as OUT/name, folder contents as OUT/relative path."""
    plan: list[tuple[Path, Path]] = []
    for item in inputs:
        item = Path(item)
        if item.is_dir():
            for src in list_images(item, recursive=True):
                plan.append((src, out_dir / src.relative_to(item)))
        elif item.exists():
            for src in list_images(item):
                plan.append((src, out_dir / src.name))
        else:
            raise ImageReadError(f"input not found: {item}")
    seen: dict[Path, Path] = {}
    for src, dst in plan:
        if dst in seen:
            raise ClearsightError(f"two inputs would be written to {dst}: {seen[dst]} and {src}")
        if dst.resolve() == src.resolve():
            raise ClearsightError(f"output {dst} would overwrite its input; choose another --out")
        seen[dst] = src
    return plan
