"""`clearsight restore`, `derain` and `demoire`: `clearsight.restore_files` with a bar."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from clearsight.cli._app import (
    EXIT_SOME_FAILED,
    app,
    friendly,
    progress,
    say,
    say_failed,
)
from clearsight.cli._options import (
    AddressOpt,
    BatchSizeOpt,
    DeviceOpt,
    EngineOpt,
    FailFastOpt,
    MaxPixOpt,
    ModelOpt,
    PrecisionOpt,
    RestoreBackendOpt,
    ScalesOpt,
    SkipExistingOpt,
    StagesOpt,
    StageThresholdOpt,
    TileOpt,
    TtaOpt,
    VerboseOpt,
    WorkersOpt,
)
from clearsight.defaults import DEFAULT_STAGE_THRESHOLD
from clearsight.errors import ClearsightError, OptionError

if TYPE_CHECKING:
    from clearsight.engine.inference import Restorer
    from clearsight.engine.restore_files import RestoredFile, RestoreRun
    from clearsight.scale.ray_engine import ScaleSummary

Summary = TypeVar("Summary", bound="ScaleSummary")

DEFAULT_DERAIN = "default-derain"
DEFAULT_DEMOIRE = "default-demoire"


def make_restorer(
    model: str,
    *,
    tile: int | None = None,
    tta: str = "none",
    device: str = "cpu",
    scales: str = "1.0",
    backend: str = "torch",
    stages: str = "all",
    stage_threshold: float = DEFAULT_STAGE_THRESHOLD,
    precision: str = "fp32",
) -> Restorer:
    """`Restorer.from_pretrained` with the command line's options (only --scales needs
    parsing; every value is validated by `InferenceOptions`)."""
    from clearsight.engine.inference import Restorer, parse_scales

    return Restorer.from_pretrained(
        model,
        tile=tile,
        ensemble=tta,
        scales=parse_scales(scales),
        device=device,
        backend=backend,
        stages=stages,
        stage_threshold=stage_threshold,
        precision=precision,
    )


ENGINES = ("local", "ray")


def parse_scales(text: str) -> tuple[float, ...]:
    from clearsight.engine.inference import parse_scales as parse

    return parse(text)


def check_max_pixels(max_pixels: int | None) -> None:
    """--max-pixels and $CLEARSIGHT_MAX_PIXELS, checked with the other options: a bad
    value stops the command before any work (nothing created)."""
    from clearsight.engine.restore_files import check_max_pixels as check

    check(max_pixels)


def use_ray(engine: str) -> bool:
    """Whether --engine asks for Ray (else the local engine); an OptionError for others."""
    if engine not in ENGINES:
        raise OptionError("engine", f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return engine == "ray"


def restore_on_ray(
    model: str,
    inputs: list[str],
    out: Path,
    *,
    max_pixels: int | None,
    address: str | None,
    workers: int,
    batch_size: int,
    what: str,
    skip_existing: bool | None = None,
    **options: object,
) -> None:
    """`restore_files_ray` with a bar; prints the summary, exits 3 when an image failed.
    Ray runs resume (skip finished outputs) unless --overwrite is given."""
    from clearsight.engine.inference import InferenceOptions
    from clearsight.scale.ray_engine import restore_files_ray

    check_max_pixels(max_pixels)
    opts = InferenceOptions(**options)  # type: ignore[arg-type]

    def line(s: ScaleSummary) -> str:
        return f"{s.line()} into {out}"

    summary = run_on_ray(
        what,
        lambda **callbacks: restore_files_ray(
            model,
            inputs,
            out,
            workers=workers,
            batch_size=batch_size,
            address=address,
            max_pixels=max_pixels,
            options=opts,
            overwrite=skip_existing is False,
            **callbacks,
        ),
        line,
    )
    finish_ray(summary, line)


def run_on_ray(
    what: str, start: Callable[..., Summary], line: Callable[[Summary], str] | None = None
) -> Summary:
    """`start(on_start=..., on_result=...)` (a `*_files_ray` call) under a progress bar,
    printing each failed image as it comes back (`say_failed`, as the local engine does).
    Should failures.csv be unwritable, the run's `line(summary)` is printed before the
    error, so the summary is not lost."""
    from clearsight.engine.restore_files import FailuresCsvError

    with progress() as bar:
        task = bar.add_task(what, total=None)

        def on_result(r: object) -> None:
            bar.advance(task)
            if getattr(r, "status", "") != "done":
                say_failed(getattr(r, "source", ""), getattr(r, "reason", ""))

        try:
            return start(
                on_start=lambda todo, _skipped: bar.update(task, total=todo), on_result=on_result
            )
        except FailuresCsvError as exc:
            if exc.run is not None and line is not None:
                bar.stop()
                say(line(exc.run))
            raise


def finish_ray(summary: Summary, line: Callable[[Summary], str]) -> None:
    """Print a Ray run's last line; exit 3 (some inputs failed) when failures.csv lists any."""
    say(line(summary))
    if summary.failures_csv is not None:
        say(f"failures listed in {summary.failures_csv}")
        raise typer.Exit(code=EXIT_SOME_FAILED)


def _stages_note(restored: RestoredFile) -> str:
    """', 3 stages' for a file restored with --stages other than all."""
    used = restored.stages
    if not used:
        return ""
    text = ", ".join(f"{n:g}" for n in used)
    return f", {text} stage{'' if used == [1] else 's'}"


EPILOG = (
    "Existing outputs are replaced (--overwrite, the default: rerunning with another model "
    "or options must refresh them); --skip-existing keeps them, to resume a run. A file that "
    "cannot be restored is reported and listed in OUT/failures.csv, and the run goes on. "
    "Exit codes: 0 all done; 1 an error stopped the command (or the first failure, with "
    "--fail-fast); 2 a usage error; 3 the run finished but some inputs failed."
)


def restore_with_progress(
    restorer: Restorer,
    inputs: list[Path],
    out: Path,
    max_pixels: int | None,
    what: str,
    *,
    skip_existing: bool = False,
    fail_fast: bool = False,
    verbose: bool = False,
) -> RestoreRun:
    """`restore_files` drawing one bar for the files and one for the current file's tiles,
    printing each failure and skipped file as it happens (and, `verbose`, each distinct
    choice of --backend auto, once, when made)."""
    from clearsight.engine.restore_files import FailedFile, restore_files

    with progress() as bar:
        files = bar.add_task(what, total=None)
        tiles: dict[Path, object] = {}

        def on_tile(src: Path, done: int, total: int) -> None:
            if src not in tiles:
                tiles[src] = bar.add_task(f"  {src.name}", total=None)
            bar.update(tiles[src], completed=done, total=total)  # type: ignore[arg-type]

        reasons: set[str] = set()

        def on_file(r: RestoredFile) -> None:
            if r.source in tiles:
                bar.remove_task(tiles.pop(r.source))  # type: ignore[arg-type]
            bar.advance(files)
            note = _stages_note(r)
            choice = restorer.last_backend  # set by --backend auto only
            if choice is not None:
                note += f", {choice.backend}"
                if verbose and choice.reason not in reasons:  # each distinct choice once
                    reasons.add(choice.reason)
                    say(f"backend auto: {choice.reason}", err=True)
            say(f"{r.source} -> {r.output}  ({r.latency_ms:.0f} ms{note})", err=True)

        def on_failure(f: FailedFile) -> None:
            if f.source in tiles:
                bar.remove_task(tiles.pop(f.source))  # type: ignore[arg-type]
            bar.advance(files)
            say_failed(f.source, f.reason)

        def on_skip(src: Path, dst: Path) -> None:
            bar.advance(files)
            say(f"{src} -> {dst}  (exists, skipped)", err=True)

        return restore_files(
            restorer,
            inputs,
            out,
            max_pixels=max_pixels,
            existing="skip" if skip_existing else "overwrite",
            fail_fast=fail_fast,
            on_start=lambda n: bar.update(files, total=n),
            on_tile=on_tile,
            on_file=on_file,
            on_failure=on_failure,
            on_skip=on_skip,
        )


def restore_and_finish(
    restorer: Restorer, inputs: list[str], out: Path, what: str, verb: str, **kw: Any
) -> None:
    """`restore_with_progress`, then `finish`; a failures.csv that cannot be written still
    gets the run's summary printed before its error."""
    from clearsight.engine.restore_files import FailuresCsvError

    try:
        run = restore_with_progress(restorer, [Path(p) for p in inputs], out, what=what, **kw)
    except FailuresCsvError as exc:
        if exc.run is not None:
            summarize(exc.run, verb, out)
        raise
    finish(run, verb, out)


def summarize(run: RestoreRun, verb: str, out: Path) -> None:
    """'restored 3 image(s) into OUT' and '3 done, 0 skipped, 1 failed'."""
    replaced = f"; replaced {len(run.replaced)} existing" if run.replaced else ""
    say(f"{verb} {len(run)} image(s) into {out}{replaced}")
    say(run.summary())


def finish(run: RestoreRun, verb: str, out: Path) -> None:
    """Print the summary; exit 3 when some inputs failed (after the whole run)."""
    summarize(run, verb, out)
    if run.failed:
        say(f"{len(run.failed)} input(s) failed; see {run.failures_csv}", err=True)
        raise typer.Exit(code=EXIT_SOME_FAILED)


@app.command("restore", epilog=EPILOG)
@friendly
def restore_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Image files or folders; with --engine ray also globs, manifests, URIs."
        ),
    ],
    model: ModelOpt,
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("restored"),
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    scales: ScalesOpt = "1.0",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    precision: PrecisionOpt = "fp32",
    backend: RestoreBackendOpt = "auto",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    skip_existing: SkipExistingOpt = None,
    fail_fast: FailFastOpt = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
    verbose: VerboseOpt = False,
) -> None:
    """Restore images with MODEL; outputs mirror the input names under OUT."""
    check_max_pixels(max_pixels)
    if use_ray(engine):
        restore_on_ray(
            model,
            inputs,
            out,
            max_pixels=max_pixels,
            address=address,
            workers=workers,
            batch_size=batch_size,
            what="restoring",
            skip_existing=skip_existing,
            tile=tile,
            ensemble=tta,
            scales=parse_scales(scales),
            device=device,
            backend=backend,
            stages=stages,
            stage_threshold=stage_threshold,
            precision=precision,
        )
        return
    restorer = make_restorer(
        model,
        tile=tile,
        tta=tta,
        device=device,
        scales=scales,
        backend=backend,
        stages=stages,
        stage_threshold=stage_threshold,
        precision=precision,
    )
    restore_and_finish(
        restorer,
        inputs,
        out,
        "restoring",
        "restored",
        max_pixels=max_pixels,
        skip_existing=bool(skip_existing),
        fail_fast=fail_fast,
        verbose=verbose,
    )


def _require_bundled(name: str, arch: str) -> None:
    from clearsight.zoo import bundled_models

    if name not in bundled_models():
        raise ClearsightError(
            f"the bundled model {name!r} is missing from this installation; "
            f"use `clearsight restore --model ARTIFACT` with a trained {arch} artifact"
        )


@app.command("derain", epilog=EPILOG)
@friendly
def derain_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Rainy image files or folders; with --engine ray also globs, manifests, URIs."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("derained"),
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    precision: PrecisionOpt = "fp32",
    backend: RestoreBackendOpt = "auto",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    skip_existing: SkipExistingOpt = None,
    fail_fast: FailFastOpt = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
    verbose: VerboseOpt = False,
) -> None:
    """Remove rain with the bundled default deraining model (RESCAN, see `models`)."""
    check_max_pixels(max_pixels)
    _require_bundled(DEFAULT_DERAIN, "RESCAN")
    if use_ray(engine):
        restore_on_ray(
            DEFAULT_DERAIN,
            inputs,
            out,
            max_pixels=max_pixels,
            address=address,
            workers=workers,
            batch_size=batch_size,
            what="deraining",
            skip_existing=skip_existing,
            tile=tile,
            ensemble=tta,
            device=device,
            backend=backend,
            stages=stages,
            stage_threshold=stage_threshold,
            precision=precision,
        )
        return
    restorer = make_restorer(
        DEFAULT_DERAIN,
        tile=tile,
        tta=tta,
        device=device,
        backend=backend,
        stages=stages,
        stage_threshold=stage_threshold,
        precision=precision,
    )
    restore_and_finish(
        restorer,
        inputs,
        out,
        "deraining",
        "derained",
        max_pixels=max_pixels,
        skip_existing=bool(skip_existing),
        fail_fast=fail_fast,
        verbose=verbose,
    )


@app.command("demoire", epilog=EPILOG)
@friendly
def demoire_cmd(
    inputs: Annotated[
        list[str],
        typer.Argument(
            help="Screen photos (files or folders); with --engine ray also globs, manifests, URIs."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("demoired"),
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    scales: ScalesOpt = "1.0",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    precision: PrecisionOpt = "fp32",
    backend: RestoreBackendOpt = "auto",
    skip_existing: SkipExistingOpt = None,
    fail_fast: FailFastOpt = False,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
    verbose: VerboseOpt = False,
) -> None:
    """Remove moiré with the bundled default demoiréing model (mbcnn-light, see `models`)."""
    check_max_pixels(max_pixels)
    _require_bundled(DEFAULT_DEMOIRE, "MBCNN")
    if use_ray(engine):
        restore_on_ray(
            DEFAULT_DEMOIRE,
            inputs,
            out,
            max_pixels=max_pixels,
            address=address,
            workers=workers,
            batch_size=batch_size,
            what="demoiréing",
            skip_existing=skip_existing,
            tile=tile,
            ensemble=tta,
            scales=parse_scales(scales),
            device=device,
            backend=backend,
            precision=precision,
        )
        return
    restorer = make_restorer(
        DEFAULT_DEMOIRE,
        tile=tile,
        tta=tta,
        device=device,
        scales=scales,
        backend=backend,
        precision=precision,
    )
    restore_and_finish(
        restorer,
        inputs,
        out,
        "demoiréing",
        "demoiréd",
        max_pixels=max_pixels,
        skip_existing=bool(skip_existing),
        fail_fast=fail_fast,
        verbose=verbose,
    )
