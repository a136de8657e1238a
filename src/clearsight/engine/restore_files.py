"""Restoring image files: every input file or folder into an output folder, names mirrored.

The loop behind `clearsight restore/derain/demoire`, public so that Python users get the
same planning (no overwritten inputs, no two inputs onto one output) and bit depth.

A run over an archive keeps going past a file it cannot restore: each failure is reported
as it happens (`on_failure`), listed in `failures.csv` beside the outputs and returned, and
the caller decides what the run's outcome is (the CLI exits 3). `fail_fast` raises the first
failure instead. Existing outputs are replaced (`existing="overwrite"`, the default) or
kept (`"skip"`, to resume an interrupted run); temporary files that killed runs left in the
output folders are swept first (docs/reliability.md). A bad pixel limit (`max_pixels`, or
$CLEARSIGHT_MAX_PIXELS) is refused before any work; a model output holding NaN or inf is a
failed file, never written; a `failures.csv` that cannot be written is a `FailuresCsvError`
carrying the run's account, so the caller can still say what was done.
"""

from __future__ import annotations

import csv
import io
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import torch

from clearsight.atomic import atomic_write_text, sweep_leftovers
from clearsight.engine.batch import check_link, plan_outputs
from clearsight.engine.inference import Restorer
from clearsight.errors import ClearsightError, ModelOutputError, OptionError
from clearsight.io import (
    image_to_tensor,
    read_image,
    resolve_max_pixels,
    tensor_to_image,
    write_image,
)
from clearsight.out_paths import check_output_folder

Existing = Literal["overwrite", "skip"]
EXISTING_POLICIES: tuple[str, ...] = ("overwrite", "skip")
FAILURES_CSV = "failures.csv"


@dataclass(frozen=True)
class RestoredFile:
    """One restored file: where it came from, where it went, how long the model took."""

    source: Path
    output: Path
    latency_ms: float
    stages: list[float] | None = None
    """Stages a multi-stage model used (when the `stages` option is not "all"), else None."""


@dataclass(frozen=True)
class FailedFile:
    """One input that could not be restored, and why (one line)."""

    source: Path
    output: Path
    reason: str


class RestoreRun(list[RestoredFile]):
    """What a run did: the restored files (the list itself), and the rest of the account."""

    def __init__(self, done: Iterable[RestoredFile] = ()) -> None:
        super().__init__(done)
        self.skipped: list[Path] = []
        """Sources whose output existed and was kept (`existing="skip"`)."""
        self.replaced: list[Path] = []
        """Outputs that existed before and were replaced (`existing="overwrite"`)."""
        self.failed: list[FailedFile] = []
        self.failures_csv: Path | None = None
        """`failures.csv` beside the outputs, when anything failed."""

    @property
    def done(self) -> list[RestoredFile]:
        return list(self)

    def summary(self) -> str:
        """'3 done, 0 skipped, 2 failed' (the CLI's last line)."""
        return f"{len(self)} done, {len(self.skipped)} skipped, {len(self.failed)} failed"


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
    """One line for a failed file: a `ClearsightError`'s message, else the type and message."""
    lines = str(exc).strip().splitlines()
    text = lines[0] if lines else ""
    if isinstance(exc, ClearsightError):
        return text or type(exc).__name__
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


def restore_files(
    restorer: Restorer,
    inputs: Sequence[str | Path],
    out: str | Path,
    *,
    max_pixels: int | None = None,
    existing: Existing = "overwrite",
    fail_fast: bool = False,
    on_start: Callable[[int], None] | None = None,
    on_tile: Callable[[Path, int, int], None] | None = None,
    on_file: Callable[[RestoredFile], None] | None = None,
    on_failure: Callable[[FailedFile], None] | None = None,
    on_skip: Callable[[Path, Path], None] | None = None,
) -> RestoreRun:
    """Restore every image of `inputs` (files, or folders searched recursively) into `out`.

    Files land as OUT/name and folder contents as OUT/relative path, written at the input's
    bit depth. A file that cannot be read, restored or written is recorded (`on_failure`,
    `RestoreRun.failed`, OUT/failures.csv) and the run goes on, unless `fail_fast` (then the
    first failure is raised). A missing input, a clash in the plan or a bad pixel limit is
    raised before any work; a `failures.csv` that cannot be written raises
    `FailuresCsvError` with the run attached. Progress: `on_start(n_files)` once,
    `on_tile(source, done, total)` during each image, `on_file(restored)` after each,
    `on_skip(source, output)` for a kept output.
    """
    if existing not in EXISTING_POLICIES:
        raise OptionError(
            "existing", f"must be one of {', '.join(EXISTING_POLICIES)}, got {existing!r}"
        )
    started = time.time()  # this run's start: older leftovers of dead writers are swept
    check_max_pixels(max_pixels)
    out_dir = check_output_folder(out)
    plan = plan_outputs([Path(p) for p in inputs], out_dir)
    sweep_output_folders(out_dir, (dst for _, dst in plan), started)
    if on_start is not None:
        on_start(len(plan))
    run = RestoreRun()
    for src, dst in plan:
        if existing == "skip" and dst.exists():
            run.skipped.append(src)
            if on_skip is not None:
                on_skip(src, dst)
            continue
        try:
            replacing = dst.exists()
            restored = _restore_one(restorer, src, dst, max_pixels, on_tile)
        except Exception as exc:
            if fail_fast:
                raise
            failed = FailedFile(src, dst, failure_reason(exc))
            run.failed.append(failed)
            if on_failure is not None:
                on_failure(failed)
            continue
        if replacing:
            run.replaced.append(dst)
        run.append(restored)
        if on_file is not None:
            on_file(restored)
    try:
        run.failures_csv = update_failures_csv(out_dir, run.failed)
    except FailuresCsvError as exc:
        exc.run = run
        raise
    return run


def _restore_one(
    restorer: Restorer,
    src: Path,
    dst: Path,
    max_pixels: int | None,
    on_tile: Callable[[Path, int, int], None] | None,
) -> RestoredFile:
    check_link(src)
    img = read_image(src, max_pixels=max_pixels)

    def tile_progress(n: int, total: int) -> None:
        if on_tile is not None:
            on_tile(src, n, total)

    out_t, ms = restorer.timed_restore(image_to_tensor(img), tile_progress)
    check_finite(out_t)
    dtype = img.dtype
    write_image(dst, tensor_to_image(out_t, dtype=dtype), bit_depth=8 * dtype.itemsize)
    used = restorer.last_stages_used if restorer.options.stages != "all" else None
    return RestoredFile(src, dst, ms, list(used) if used else None)
