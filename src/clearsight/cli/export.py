"""`clearsight export`, `profile` and `benchmark`: deployment, its size and its speed."""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from clearsight.cli._app import app, console, err_console, friendly
from clearsight.cli._options import SkipExistingOpt
from clearsight.errors import ClearsightError


@app.command("export")
@friendly
def export_cmd(
    model: Annotated[str, typer.Argument(help="Artifact path, bundled model or architecture.")],
    fmt: Annotated[
        str, typer.Option("--format", "-f", help="Export format: onnx or paddle.")
    ] = "onnx",
    out: Annotated[
        Path | None,
        typer.Option(
            "--out",
            "-o",
            help="Output file, or folder for paddle (default: MODEL.onnx, MODEL.paddle).",
        ),
    ] = None,
    skip_existing: SkipExistingOpt = False,
    layout: Annotated[
        str | None,
        typer.Option(
            "--layout",
            help="Detectors: decoded (boxes + scores before NMS, default) or astar (the "
            "Astar 2019 contest interface, scored by astar-score; with --format paddle, the "
            "contest's Paddle submission).",
        ),
    ] = None,
) -> None:
    """Export MODEL (ONNX: opset 17, dynamic H and W, config in the metadata; paddle: a
    Paddle inference folder), parity-checked."""
    from clearsight.api import export

    done = export(model, out, fmt=fmt, layout=layout, skip_existing=skip_existing)
    if done.skipped:
        console.print(f"{done.path} exists, skipped (--skip-existing)", highlight=False)
        return
    if done.paddle is not None:
        result = done.paddle
        console.print(
            "parity (Paddle Inference vs the reference at "
            + ", ".join(f"{h}x{w}" for h, w in result.sizes)
            + f"): max abs difference {result.max_abs_diff:.3g}",
            highlight=False,
            soft_wrap=True,
        )
        for r in result.rewrites:
            console.print(f"ONNX rewrite before x2paddle: {r}", highlight=False, soft_wrap=True)
        console.print(f"wrote {result.path}/", highlight=False)
        return
    path, parity = done.path, done.onnx
    assert parity is not None
    sizes = ", ".join(f"{h}x{w}" for h, w in parity.sizes)
    what = "largest difference / output range" if parity.outputs else "max abs difference"
    console.print(
        f"parity (ONNX Runtime vs PyTorch at {sizes}): {what} {parity.max_abs_diff:.3g}",
        highlight=False,
        soft_wrap=True,
    )
    if parity.outputs is not None:
        per = ", ".join(f"{k} {v:.3g}" for k, v in parity.outputs.items())
        console.print(f"outputs: {per}; {parity.detections}", highlight=False, soft_wrap=True)
    console.print(f"wrote {path} ({path.stat().st_size / 2**20:.2f} MB)", highlight=False)


@app.command("profile")
@friendly
def profile_cmd(
    models: Annotated[
        list[str],
        typer.Argument(
            help="Artifact, .onnx file, bundled model or arch; two or more: a before/after "
            "table (the first is 'before')."
        ),
    ],
    sizes: Annotated[
        str | None,
        typer.Option("--sizes", help="One model: square sizes or HxW, e.g. 256,512."),
    ] = None,
    backend: Annotated[
        str | None,
        typer.Option(
            "--backend",
            help="One model: comma-separated torch,onnxruntime (default: the model's own).",
        ),
    ] = None,
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per size (median).")] = 3,
    tile: Annotated[
        int | None, typer.Option("--tile", help="One model: tile size (0: never).")
    ] = None,
    memory: Annotated[
        bool, typer.Option("--memory/--no-memory", help="Peak memory (in a subprocess).")
    ] = True,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            "-d",
            help="Table: quality on pairs (PSNR/SSIM) or a COCO folder (AP, Astar score).",
        ),
    ] = None,
    size: Annotated[
        int | None,
        typer.Option("--size", help="Table: restoration working size (square; default 512)."),
    ] = None,
    max_images: Annotated[
        int | None, typer.Option("--max-images", help="Table: score only the first N images.")
    ] = None,
    report: Annotated[
        Path | None, typer.Option("--report", help="Table: also write it as JSON here.")
    ] = None,
) -> None:
    """Parameters, MACs per pixel, latency and peak memory of MODEL for each backend; with
    several models (or --data), one before/after table with ratios to the first."""
    from clearsight.api import profile

    if runs < 1:
        raise ClearsightError(f"--runs must be >= 1, got {runs}")
    table_options = {"--data": data, "--size": size, "--max-images": max_images}
    table_options["--report"] = report
    if len(models) > 1 or any(v is not None for v in table_options.values()):
        for name, value in (("--sizes", sizes), ("--backend", backend), ("--tile", tile)):
            if value is not None:
                raise ClearsightError(
                    f"{name} applies to one model; the before/after table uses --size"
                )
        _profile_table(models, data, size, runs, memory, max_images, report, as_json)
        return
    (model,) = models
    backends = [b.strip() for b in backend.split(",") if b.strip()] if backend else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        rep = profile(
            model, sizes=sizes or "256,512", backends=backends, runs=runs, tile=tile, memory=memory
        )
    if as_json:
        console.print_json(json.dumps(rep.to_dict()))
        return
    console.print(
        f"{model}: {rep.params:,} parameters, {rep.macs_per_pixel / 1e3:,.1f} k MACs per "
        f"pixel (at {rep.mac_size}); {rep.threads} thread(s), load average "
        + " ".join(f"{v:.2f}" for v in rep.load_average),
        highlight=False,
    )
    table = Table(title=f"profile {model}")
    for col in ("backend", "size", "latency ms", "peak MB"):
        table.add_column(col, justify="left" if col in ("backend", "size") else "right")
    for b, rows in rep.latency.items():
        for r in rows:
            peak = r.get("peak_mb")
            table.add_row(
                b, r["size"], f"{r['latency_ms']:.1f}", "-" if peak is None else f"{peak:.0f}"
            )
    console.print(table)


def _profile_table(
    models: list[str],
    data: Path | None,
    size: int | None,
    runs: int,
    memory: bool,
    max_images: int | None,
    report: Path | None,
    as_json: bool,
) -> None:
    """`profile A B ...`: the before/after table (`profile_table.profile_models`)."""
    from clearsight.api import profile_table

    rep = profile_table(
        models,
        data=data,
        size=size,
        runs=runs,
        memory=memory,
        max_images=max_images,
        report=report,
        on_step=lambda text: err_console.print(text, highlight=False),
    )
    text = json.dumps(rep.to_dict(), indent=2)
    if as_json:
        console.print_json(text)
        return
    head, body = rep.table()
    what = f" on {rep.data} ({rep.n_images} images, {rep.preset})" if rep.data else ""
    table = Table(title=f"profile at {rep.size}{what}")
    for i, col in enumerate(head):
        table.add_column(col, justify="left" if i == 0 else "right", overflow="fold")
    for cells in body:
        table.add_row(*cells)
    console.print(table)
    for row in rep.rows:
        for note in row.notes:
            err_console.print(f"{row.model}: {note}", highlight=False, soft_wrap=True)
    loads = "; ".join(
        f"{row.model} " + " ".join(f"{v:.2f}" for v in row.load_average)
        for row in rep.rows
        if row.load_average is not None
    )
    err_console.print(
        f"latency: median of {rep.runs} run(s), {rep.threads} thread(s); load average after "
        f"timing: {loads}",
        highlight=False,
        soft_wrap=True,
    )
    if report is not None:
        console.print(f"report: {report}", highlight=False)


@app.command("benchmark")
@friendly
def benchmark_cmd(
    model: Annotated[str, typer.Argument(help="Artifact path, bundled model or architecture.")],
    data: Annotated[Path, typer.Option("--data", "-d", help="Paired data folder.")],
    sizes: Annotated[str, typer.Option("--sizes", help="Square latency sizes.")] = "512,1024",
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per size (median).")] = 3,
    quick: Annotated[
        bool, typer.Option("--quick", help="One run, at most two images (smoke test).")
    ] = False,
    preset: Annotated[
        str | None, typer.Option("--preset", "-p", help="Metric preset (default: the model's).")
    ] = None,
    max_images: Annotated[
        int | None, typer.Option("--max-images", help="Score only the first N pairs (by name).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """PyTorch eager vs tuned vs ONNX Runtime: size, params, MACs, PSNR, latency."""
    from clearsight.api import benchmark

    try:
        size_list = [int(s) for s in sizes.split(",")]
    except ValueError:
        raise ClearsightError(f"--sizes: expected integers like 512,1024, got {sizes!r}") from None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = benchmark(
            model,
            data,
            sizes=size_list,
            runs=runs,
            quick=quick,
            preset=preset,
            max_images=max_images,
        )
    if as_json:
        console.print_json(json.dumps(report.to_dict()))
        return
    table = Table(
        title=f"benchmark {model} on {data} (preset {report.preset}, {report.n_images} images)"
    )
    lat_cols = list(report.rows[0].latency_ms) if report.rows else []
    for col in ["format", "size MB", "params", "MACs/px", "PSNR", "dPSNR"]:
        table.add_column(col, justify="left" if col == "format" else "right")
    for s in lat_cols:
        table.add_column(f"{s} ms", justify="right")
    for r in report.rows:
        table.add_row(*r.cells(lat_cols))
    console.print(table)
    err_console.print(
        f"{report.threads} thread(s); load average "
        + " ".join(f"{v:.2f}" for v in report.load_average),
        highlight=False,
    )
