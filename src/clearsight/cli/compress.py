"""`clearsight compress`: model compression commands, each with a before/after table.

`compress_app` is the command group; each compression registers its command on it:
`prune` here (structured pruning, `clearsight.api.prune`), `quantize` in its own module
(`cli/compress_quantize.py`, registered at the end of this one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from clearsight.cli import compress_quantize
from clearsight.cli._app import app, console, friendly

compress_app = typer.Typer(
    name="compress",
    help="Compress a model; each command prints a before/after table.",
    no_args_is_help=True,
)
app.add_typer(compress_app, name="compress")


def _size(n: int | None) -> str:
    return "-" if n is None else f"{n / 2**20:.2f} MB"


def _ratio(after: float | None, before: float | None) -> str:
    return "-" if not after or not before else f"{after / before:.3f}"


@compress_app.command("prune")
@friendly
def prune_cmd(
    model: Annotated[str, typer.Argument(help="Artifact path, bundled model or architecture.")],
    out: Annotated[
        Path, typer.Option("--out", "-o", help="Output artifact (folder, or .safetensors).")
    ],
    ratio: Annotated[
        float | None, typer.Option("--ratio", help="Share of the MACs to remove (0.5: half).")
    ] = None,
    target_macs: Annotated[
        float | None,
        typer.Option(
            "--target-macs",
            help="MACs to keep: per pixel (restoration) or contest MAdds in millions (detection).",
        ),
    ] = None,
    importance: Annotated[
        str,
        typer.Option(
            "--importance",
            help="Channel ranking: l1, taylor, group, or energy (measured on --calibration).",
        ),
    ] = "l1",
    calibration: Annotated[
        Path | None,
        typer.Option(
            "--calibration",
            help="Folder of images for --importance energy (the model's own preprocessing).",
        ),
    ] = None,
    calibration_images: Annotated[
        int, typer.Option("--calibration-images", help="Use at most this many of them.")
    ] = 64,
    json_out: Annotated[
        Path | None,
        typer.Option("--json", help="Before/after table as JSON (default: OUT.prune.json)."),
    ] = None,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the tracing input.")] = 0,
) -> None:
    """Remove whole channels from MODEL until its recounted MACs reach the target."""
    from clearsight.api import check_artifact_target, prune, prune_report_path

    check_artifact_target(out, source=model)
    with console.status("pruning") as status:

        def step(n: int, macs: float) -> None:
            status.update(f"pruning: round {n}, {macs:,.6g} MACs")

        path, result = prune(
            model,
            out,
            ratio=ratio,
            target_macs=target_macs,
            importance=importance,
            report_json=json_out,
            seed=seed,
            progress=step,
            calibration=calibration,
            calibration_images=calibration_images,
        )
    b, a = result.before, result.after
    table = Table(title=f"prune {model} ({result.importance}, {result.rounds} rounds)")
    for col in ("", "before", "after", "after/before"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("parameters", f"{b.params:,}", f"{a.params:,}", _ratio(a.params, b.params))
    table.add_row(a.macs_unit, f"{b.macs:,.1f}", f"{a.macs:,.1f}", _ratio(a.macs, b.macs))
    table.add_row(
        "file size", _size(b.file_bytes), _size(a.file_bytes), _ratio(a.file_bytes, b.file_bytes)
    )
    console.print(table)
    console.print(f"wrote {path} and {json_out or prune_report_path(out)}", highlight=False)


@compress_app.command("input-size")
@friendly
def input_size_cmd(
    model: Annotated[str, typer.Argument(help="Detector artifact path or bundled name.")],
    size: Annotated[int, typer.Option("--size", help="The new input's side in pixels.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output artifact folder.")],
    resize: Annotated[
        str,
        typer.Option(
            "--resize",
            help="keep (the model's), fixed (stretch, as the Astar contest) or letterbox.",
        ),
    ] = "keep",
) -> None:
    """Rebuild detector MODEL for SIZE x SIZE inputs with the same weights."""
    from clearsight.api import change_input_size, check_artifact_target

    check_artifact_target(out, source=model)
    r = change_input_size(model, out, size, resize)
    table = Table(title=f"input-size {model}")
    for col in ("", "before", "after", "after/before"):
        table.add_column(col, justify="right" if col else "left")
    table.add_row("input", "x".join(map(str, r.size_before)), "x".join(map(str, r.size_after)), "")
    table.add_row("resize", r.resize_before, r.resize_after, "")
    table.add_row(
        "MAdds (M)", f"{r.madds_before:,.1f}", f"{r.madds_after:,.1f}",
        _ratio(r.madds_after, r.madds_before),
    )  # fmt: skip
    console.print(table)
    console.print(f"wrote {r.path}", highlight=False)


compress_quantize.register(compress_app)
