"""`clearsight restore`, `derain` and `demoire`: `clearsight.restore_files` with a bar."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clearsight.cli._app import app, console, err_console, friendly, progress
from clearsight.cli._options import (
    AddressOpt,
    BackendOpt,
    BatchSizeOpt,
    DeviceOpt,
    EngineOpt,
    MaxPixOpt,
    ModelOpt,
    ScalesOpt,
    StagesOpt,
    StageThresholdOpt,
    TileOpt,
    TtaOpt,
    WorkersOpt,
)
from clearsight.defaults import DEFAULT_STAGE_THRESHOLD
from clearsight.errors import ClearsightError, OptionError

if TYPE_CHECKING:
    from clearsight.engine.inference import Restorer
    from clearsight.engine.restore_files import RestoredFile

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
    )


ENGINES = ("local", "ray")


def parse_scales(text: str) -> tuple[float, ...]:
    from clearsight.engine.inference import parse_scales as parse

    return parse(text)


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
    **options: object,
) -> None:
    """`restore_files_ray` with a bar; prints the summary, exits 1 when an image failed."""
    from clearsight.engine.inference import InferenceOptions
    from clearsight.scale.ray_engine import restore_files_ray

    opts = InferenceOptions(**options)  # type: ignore[arg-type]
    with progress() as bar:
        task = bar.add_task(what, total=None)

        def on_result(r: object) -> None:
            bar.advance(task)
            if getattr(r, "status", "") != "done":
                err_console.print(f"failed: {getattr(r, 'reason', '')}", highlight=False)

        summary = restore_files_ray(
            model,
            inputs,
            out,
            workers=workers,
            batch_size=batch_size,
            address=address,
            max_pixels=max_pixels,
            options=opts,
            on_start=lambda todo, _skipped: bar.update(task, total=todo),
            on_result=on_result,
        )
    console.print(f"{summary.line()} into {out}")
    if summary.failures_csv is not None:
        console.print(f"failures listed in {summary.failures_csv}")
        raise typer.Exit(1)


def _stages_note(restored: RestoredFile) -> str:
    """', 3 stages' for a file restored with --stages other than all."""
    used = restored.stages
    if not used:
        return ""
    text = ", ".join(f"{n:g}" for n in used)
    return f", {text} stage{'' if used == [1] else 's'}"


def restore_with_progress(
    restorer: Restorer, inputs: list[Path], out: Path, max_pixels: int | None, what: str
) -> list[RestoredFile]:
    """`restore_files` drawing one bar for the files and one for the current file's tiles."""
    from clearsight.engine.restore_files import restore_files

    with progress() as bar:
        files = bar.add_task(what, total=None)
        tiles: dict[Path, object] = {}

        def on_tile(src: Path, done: int, total: int) -> None:
            if src not in tiles:
                tiles[src] = bar.add_task(f"  {src.name}", total=None)
            bar.update(tiles[src], completed=done, total=total)  # type: ignore[arg-type]

        def on_file(r: RestoredFile) -> None:
            if r.source in tiles:
                bar.remove_task(tiles.pop(r.source))  # type: ignore[arg-type]
            bar.advance(files)
            note = _stages_note(r)
            err_console.print(
                f"{r.source} -> {r.output}  ({r.latency_ms:.0f} ms{note})", highlight=False
            )

        return restore_files(
            restorer,
            inputs,
            out,
            max_pixels=max_pixels,
            on_start=lambda n: bar.update(files, total=n),
            on_tile=on_tile,
            on_file=on_file,
        )


@app.command("restore")
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
    backend: BackendOpt = "torch",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
) -> None:
    """Restore images with MODEL; outputs mirror the input names under OUT."""
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
            tile=tile,
            ensemble=tta,
            scales=parse_scales(scales),
            device=device,
            backend=backend,
            stages=stages,
            stage_threshold=stage_threshold,
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
    )
    written = restore_with_progress(
        restorer, [Path(p) for p in inputs], out, max_pixels, "restoring"
    )
    console.print(f"restored {len(written)} image(s) into {out}")


def _require_bundled(name: str, arch: str) -> None:
    from clearsight.zoo import bundled_models

    if name not in bundled_models():
        raise ClearsightError(
            f"the bundled model {name!r} is missing from this installation; "
            f"use `clearsight restore --model ARTIFACT` with a trained {arch} artifact"
        )


@app.command("derain")
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
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
) -> None:
    """Remove rain with the bundled default deraining model (RESCAN, see `models`)."""
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
            tile=tile,
            ensemble=tta,
            device=device,
            stages=stages,
            stage_threshold=stage_threshold,
        )
        return
    restorer = make_restorer(
        DEFAULT_DERAIN,
        tile=tile,
        tta=tta,
        device=device,
        stages=stages,
        stage_threshold=stage_threshold,
    )
    written = restore_with_progress(
        restorer, [Path(p) for p in inputs], out, max_pixels, "deraining"
    )
    console.print(f"derained {len(written)} image(s) into {out}")


@app.command("demoire")
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
    engine: EngineOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = 1,
    batch_size: BatchSizeOpt = 8,
) -> None:
    """Remove moiré with the bundled default demoiréing model (mbcnn-light, see `models`)."""
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
            tile=tile,
            ensemble=tta,
            scales=parse_scales(scales),
            device=device,
        )
        return
    restorer = make_restorer(DEFAULT_DEMOIRE, tile=tile, tta=tta, device=device, scales=scales)
    written = restore_with_progress(
        restorer, [Path(p) for p in inputs], out, max_pixels, "demoiréing"
    )
    console.print(f"demoiréd {len(written)} image(s) into {out}")
