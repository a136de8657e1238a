"""`clearsight compare`: model B against model A per image, gains and losses."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from clearsight.cli._app import app, console, friendly, progress
from clearsight.cli._options import DeviceOpt, MaxPixOpt, ReportKOpt, ReportOpt, TileOpt
from clearsight.errors import ClearsightError

if TYPE_CHECKING:
    from clearsight.api import Comparison


@app.command("compare")
@friendly
def compare_cmd(
    data: Annotated[
        Path,
        typer.Option("--data", "-d", help="Folder with rain/clean, moire/clean or input/target."),
    ],
    models: Annotated[
        list[str],
        typer.Option("--model", "-m", help="Give exactly two: A (baseline) then B."),
    ],
    preset: Annotated[
        str | None,
        typer.Option("--preset", "-p", help="Metric preset (default: model A's)."),
    ] = None,
    report: ReportOpt = None,
    report_k: ReportKOpt = 8,
    top: Annotated[int, typer.Option("--top", help="Largest gains and losses listed.")] = 10,
    tile: TileOpt = None,
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
) -> None:
    """Compare model B with model A per image on paired data under one preset."""

    from clearsight import api

    if len(models) != 2:
        raise ClearsightError(f"give exactly two --model options (A then B), got {len(models)}")
    api.check_max_pixels(max_pixels)
    ra, rb = (api.Restorer.from_pretrained(m, tile=tile, device=device) for m in models)
    thumbs_a = api.thumbnail_collector(report, report_k)
    thumbs_b = api.thumbnail_collector(report, report_k)
    with progress() as bar:
        task = bar.add_task(f"compare {data.name}", total=None)
        cmp = api.compare(
            ra,
            rb,
            data,
            preset=preset,
            names=(models[0], models[1]),
            max_pixels=max_pixels,
            on_start=lambda n: bar.update(task, total=2 * n),
            on_image=lambda r: bar.advance(task),
            on_images_a=thumbs_a,
            on_images_b=thumbs_b,
        )
    mp = cmp.preset
    console.print(_deltas_table(cmp, models, data, top))
    s = cmp.summary()
    c = s["psnr"]
    console.print(f"preset {mp.summary}", highlight=False, markup=False)
    mean = c["mean_delta"]
    console.print(
        f"n = {s['n']}: B better on {c['better']}, worse on {c['worse']}, equal on {c['equal']} "
        f"(within {cmp.tolerance['psnr']:g} dB); mean PSNR A {s['mean_a']['psnr']:.3f}, "
        f"B {s['mean_b']['psnr']:.3f}; mean delta "
        + (f"{mean:+.3f} dB" if mean is not None else "n/a"),
        highlight=False,
    )
    if report is not None and thumbs_a is not None and thumbs_b is not None:
        path = api.write_compare_report(report, cmp, thumbs_a, thumbs_b, ra, rb, k=report_k)
        console.print(f"wrote report {path}", highlight=False)


def _deltas_table(cmp: Comparison, models: list[str], data: Path, top: int) -> Table:
    """The `top` largest PSNR gains and losses of B over A, image by image."""
    mp = cmp.preset
    names = f"B = {models[1]} vs A = {models[0]} on {data}"
    table = Table(title=f"{names}  [preset {mp.name}: {mp.description}]")
    for col, kw in (
        ("", {}),
        ("image", {"style": "bold"}),
        ("A psnr", {"justify": "right"}),
        ("B psnr", {"justify": "right"}),
        ("delta dB", {"justify": "right"}),
        ("A ssim", {"justify": "right"}),
        ("B ssim", {"justify": "right"}),
    ):
        table.add_column(col, **kw)

    def row(kind: str, d: Any) -> None:
        colour = "green" if d.delta["psnr"] > 0 else "red"
        table.add_row(
            kind,
            d.name,
            f"{d.a['psnr']:.3f}",
            f"{d.b['psnr']:.3f}",
            Text(f"{d.delta['psnr']:+.3f}", style=colour),
            f"{d.a['ssim']:.4f}",
            f"{d.b['ssim']:.4f}",
        )

    gains, losses = cmp.gains(top), cmp.losses(top)
    for d in gains:
        row("gain", d)
    if gains and losses:
        table.add_section()
    for d in losses:
        row("loss", d)
    return table
