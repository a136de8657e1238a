"""Checking output paths before any work: a folder where a file goes, a file where a folder goes.

Commands call these first, so that a bad `--out` or `--report` fails in one line before a
model is loaded or any output is written (an evaluation used to leave `per_image.csv` behind
and then crash on its report path; docs/reliability.md).
"""

from __future__ import annotations

import os
from pathlib import Path

from clearsight.errors import ClearsightError


class OutputPathError(ClearsightError):
    """An output path cannot be written: a file stands where a folder must be, or the reverse."""


def _file_in_the_way(path: Path) -> Path | None:
    """The first existing parent of `path` that is not a folder, if any."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


def check_output_folder(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """`path` is a folder or can become one; else an `OutputPathError` naming it."""
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise OutputPathError(f"{what} {p} is a file, not a folder; choose another path")
    blocker = _file_in_the_way(p)
    if blocker is not None:
        raise OutputPathError(f"{what} {p}: {blocker} is a file, not a folder")
    return p


def check_output_file(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """`path` is a file or can become one; else an `OutputPathError` naming it."""
    p = Path(path)
    if p.is_dir():
        raise OutputPathError(f"{what} {p} is a folder, expected a file name")
    blocker = _file_in_the_way(p)
    if blocker is not None:
        raise OutputPathError(f"{what} {p}: {blocker} is a file, not a folder")
    return p


def check_replaced_folder(
    path: str | os.PathLike[str], mark: str, what: str = "output folder"
) -> Path:
    """`path`, a folder that a save replaces whole (a model artifact, a Paddle export), is
    new, empty or one clearsight wrote (it holds `mark`, e.g. `config.json`); a folder of
    anything else is an `OutputPathError`, never deleted (`compress input-size -o DIR`
    replaced a DIR of the user's files with the artifact)."""
    p = check_output_folder(path, what)
    if p.is_dir() and not (p / mark).is_file():
        held = sorted(c.name for c in p.iterdir())
        if held:
            raise OutputPathError(
                f"{what} {p} already holds other files ({held[0]}, ...) and is replaced whole "
                "when written; choose a new or empty folder"
            )
    return p


def check_not_input(
    path: str | os.PathLike[str] | None, source: str | os.PathLike[str], what: str = "--out"
) -> None:
    """An output is not the file it is made from: `export MODEL -o MODEL` replaced the
    model with its ONNX export, exit 0. `source` may be a name that is not a path (a
    bundled model): then nothing is checked."""
    if path is None or not Path(source).is_file():
        return
    if os.path.realpath(path) == os.path.realpath(source):
        raise OutputPathError(f"{what} {path} is the input {source}; choose another path")
