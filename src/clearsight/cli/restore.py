"""`clearsight restore`, `derain` and `demoire`: `clearsight.restore_files` with a bar."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from clearsight.cli._app import app, console, err_console, friendly, progress
from clearsight.cli._options import (
    BackendOpt,
    DeviceOpt,
    MaxPixOpt,
    ModelOpt,
    ScalesOpt,
    StagesOpt,
    StageThresholdOpt,
    TileOpt,
    TtaOpt,
)
from clearsight.defaults import DEFAULT_STAGE_THRESHOLD
from clearsight.errors import ClearsightError

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
    inputs: Annotated[list[Path], typer.Argument(help="Image files or folders.")],
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
) -> None:
    """Restore images with MODEL; outputs mirror the input names under OUT."""
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
    written = restore_with_progress(restorer, inputs, out, max_pixels, "restoring")
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
    inputs: Annotated[list[Path], typer.Argument(help="Rainy image files or folders.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("derained"),
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
) -> None:
    """Remove rain with the bundled default deraining model (RESCAN, see `models`)."""
    _require_bundled(DEFAULT_DERAIN, "RESCAN")
    restorer = make_restorer(
        DEFAULT_DERAIN,
        tile=tile,
        tta=tta,
        device=device,
        stages=stages,
        stage_threshold=stage_threshold,
    )
    written = restore_with_progress(restorer, inputs, out, max_pixels, "deraining")
    console.print(f"derained {len(written)} image(s) into {out}")


@app.command("demoire")
@friendly
def demoire_cmd(
    inputs: Annotated[list[Path], typer.Argument(help="Screen photos (files or folders).")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder.")] = Path("demoired"),
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    scales: ScalesOpt = "1.0",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
) -> None:
    """Remove moiré with the bundled default demoiréing model (mbcnn-light, see `models`)."""
    _require_bundled(DEFAULT_DEMOIRE, "MBCNN")
    restorer = make_restorer(DEFAULT_DEMOIRE, tile=tile, tta=tta, device=device, scales=scales)
    written = restore_with_progress(restorer, inputs, out, max_pixels, "demoiréing")
    console.print(f"demoiréd {len(written)} image(s) into {out}")
