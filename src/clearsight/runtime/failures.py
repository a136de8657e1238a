"""How a folder run keeps going past a bad input, whatever runs it (restore, detect, local
or on Ray): the failed file and its one-line reason, `OUT/failures.csv`, the pixel limit
checked before any work, non-finite outputs refused, and the temporaries of killed runs
swept (docs/reliability.md).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from clearsight.atomic import atomic_write_text, sweep_leftovers
from clearsight.errors import ClearsightError, ModelOutputError, OptionError, library_reason
from clearsight.io import resolve_max_pixels

__all__ = [
    "FAILURES_CSV",
    "FailedFile",
    "FailuresCsvError",
    "check_finite",
    "check_max_pixels",
    "failure_reason",
    "sweep_output_folders",
    "update_failures_csv",
    "write_failures_csv",
]

FAILURES_CSV = "failures.csv"


@dataclass(frozen=True)
class FailedFile:
    """One input that could not be restored, and why (one line)."""

    source: Path
    output: Path
    reason: str


class FailuresCsvError(ClearsightError):
    """A folder run finished, but its `failures.csv` could not be written. `run` is the
    run's account (a `RestoreRun`, `DetectRun` or `ScaleSummary`), set by the run that
    raised it, so that a caller can still report what was done."""

    def __init__(self, path: Path, detail: str) -> None:
        super().__init__(
            f"cannot write {path} ({detail}); each failed input was reported as it failed"
        )
        self.path = path
        self.run: Any = None


def check_max_pixels(max_pixels: int | None) -> int:
    """The pixel limit a run will use, checked before any work: `max_pixels` (an
    OptionError naming --max-pixels) or $CLEARSIGHT_MAX_PIXELS (an error naming it)."""
    if max_pixels is not None and (
        isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels <= 0
    ):
        raise OptionError(
            "max_pixels", f"must be a positive whole number of pixels, got {max_pixels!r}"
        )
    return resolve_max_pixels(max_pixels)


def check_finite(output: torch.Tensor) -> None:
    """Refuse a model output holding NaN or inf: written as an image it would be silently
    black (or white) pixels, so the file fails instead."""
    finite = torch.isfinite(output)
    if not bool(finite.all()):
        bad = int(finite.numel() - finite.sum())
        raise ModelOutputError(
            f"model produced NaN/inf ({bad} of {finite.numel()} output values); nothing written"
        )


def failure_reason(exc: BaseException) -> str:
    """One line for a failed file: a `ClearsightError`'s message, OpenCV's or FFmpeg's own
    words for theirs (`library_reason`), else the type and message."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, ClearsightError):
        return text or type(exc).__name__
    library = library_reason(exc)
    if library is not None:
        return library
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def write_failures_csv(path: Path, failed: Sequence[FailedFile]) -> Path:
    """Write `failed` as CSV (file, output, reason), atomically."""
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(["file", "output", "reason"])
    for f in failed:
        writer.writerow([str(f.source), str(f.output), f.reason])
    atomic_write_text(path, buf.getvalue())
    return path


def update_failures_csv(out_dir: Path, failed: Sequence[FailedFile]) -> Path | None:
    """OUT/failures.csv for this run: written when anything failed (its path returned), else
    a previous run's list removed, since it no longer describes the folder."""
    path = out_dir / FAILURES_CSV
    try:
        if failed:
            return write_failures_csv(path, failed)
        if path.is_file():
            path.unlink()
    except OSError as exc:
        raise FailuresCsvError(path, (exc.strerror or type(exc).__name__).lower()) from exc
    return None


def sweep_output_folders(out_dir: Path, outputs: Iterable[Path], before: float) -> None:
    """Remove the temporaries that killed writes left in OUT and the outputs' folders, of
    writers now dead and older than `before` (`clearsight.atomic.sweep_leftovers`)."""
    for folder in sorted({out_dir} | {p.parent for p in outputs}):
        sweep_leftovers(folder, before=before)
