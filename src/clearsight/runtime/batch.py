"""Mapping input files and folders to output paths that mirror their names.

A folder's image-named symbolic links that lead nowhere (a loop, a missing target) are
planned too: `list_images` passes over them as not files, but the user put them there, so
a folder run lists each as a failed input (`check_link` says why) instead of skipping it
without a word.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from pathlib import Path

from clearsight.errors import ClearsightError, ImageReadError
from clearsight.io import is_image_path, list_images


def _broken_links(folder: Path) -> list[Path]:
    """Image-named symbolic links under `folder` (not hidden) that reach no file."""
    found = []
    for path in folder.rglob("*"):
        rel = path.relative_to(folder).parts
        if any(p.startswith(".") for p in rel) or not is_image_path(path):
            continue
        if path.is_symlink() and not path.exists():
            found.append(path)
    return found


def check_link(path: Path) -> None:
    """Raise an `ImageReadError` naming `path` when it is a symbolic link that loops or
    points nowhere (read as 'not found', which a listing that shows it contradicts)."""
    if not path.is_symlink():
        return
    try:
        os.stat(path)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise ImageReadError(f"{path}: symbolic link loop") from exc
        target = os.readlink(path)
        raise ImageReadError(f"{path}: symbolic link to {target}, which does not exist") from exc


def check_video_file(path: Path) -> None:
    """A video input is a regular file (or a folder of numbered frames): a link that loops
    or leads nowhere (`check_link`), or a device or named pipe given with a video's name,
    is an `ImageReadError` naming it (as an image is refused), never opened (a pipe would
    block the run)."""
    check_link(path)
    if path.exists() and not path.is_file() and not path.is_dir():  # a folder: its frames
        raise ImageReadError(f"{path}: not a regular file")


def plan_outputs(inputs: Sequence[Path], out_dir: Path) -> list[tuple[Path, Path]]:
    """(source, destination) pairs: files land as OUT/name, folder contents as OUT/relative path.
    A file given twice onto one output (itself and its folder) is planned once."""
    plan: list[tuple[Path, Path]] = []
    for item in inputs:
        item = Path(item)
        if item.is_dir():
            broken = _broken_links(item)
            try:
                files = list_images(item, recursive=True)
            except ImageReadError:
                if not broken:
                    raise
                files = []
            for src in sorted(files + broken, key=lambda f: f.relative_to(item).parts):
                plan.append((src, out_dir / src.relative_to(item)))
        elif item.exists():
            for src in list_images(item):
                plan.append((src, out_dir / src.name))
        else:
            raise ImageReadError(f"input not found: {item}")
    seen: dict[Path, Path] = {}
    once: list[tuple[Path, Path]] = []
    for src, dst in plan:
        if dst in seen:
            if os.path.realpath(seen[dst]) == os.path.realpath(src):  # given twice: once
                continue
            raise ClearsightError(f"two inputs would be written to {dst}: {seen[dst]} and {src}")
        if os.path.realpath(dst) == os.path.realpath(src):  # no error on a symlink loop
            raise ClearsightError(f"output {dst} would overwrite its input; choose another --out")
        seen[dst] = src
        once.append((src, dst))
    return once
