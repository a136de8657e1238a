"""`clearsight compress quantize`: int8 ONNX Runtime model, with its before/after table."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from clearsight.cli._app import console, err_console, friendly


@friendly
def quantize_cmd(
    model: Annotated[
        str, typer.Argument(help="Artifact path, bundled model, architecture or fp32 .onnx.")
    ],
    calibration: Annotated[
        Path | None,
        typer.Option(
            "--calibration",
            "-c",
            help="Folder of real input images (or pairs: their input side) for static ranges.",
        ),
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", "-o", help="Output .onnx (default: MODEL.int8.onnx beside it)."),
    ] = None,
    method: Annotated[
        str, typer.Option("--method", help="static (calibrated, QDQ) or dynamic.")
    ] = "static",
    layout: Annotated[
        str | None,
        typer.Option("--layout", help="Detectors: export layout, decoded (default) or astar."),
    ] = None,
    calibration_method: Annotated[
        str | None,
        typer.Option(
            "--calibration-method",
            help="minmax, entropy or percentile (default: minmax; detectors percentile).",
        ),
    ] = None,
    calibration_images: Annotated[
        int | None,
        typer.Option(
            "--calibration-images",
            help="Use the first N images by name (default 16; detectors 64).",
        ),
    ] = None,
    calibration_crop: Annotated[
        int, typer.Option("--calibration-crop", help="Centre crop side of each image (px).")
    ] = 256,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="Keep this node in fp32 (repeatable; fp32 graph names)."),
    ] = None,
    output_fp32: Annotated[
        bool,
        typer.Option(
            "--output-fp32/--quantize-output",
            help="Keep the nodes from the last convolution to each output in fp32 (default).",
        ),
    ] = True,
    data: Annotated[
        Path | None,
        typer.Option(
            "--data",
            "-d",
            help="Pairs to score fp32 vs int8 on (default: the calibration images, vs fp32 "
            "only); detectors: a COCO-format folder to take AP (or astar mAP) on.",
        ),
    ] = None,
    max_images: Annotated[
        int | None,
        typer.Option(
            "--max-images",
            help="Score only the first N of --data (detectors: compare on N calibration "
            "images, default 8).",
        ),
    ] = None,
    sizes: Annotated[
        str,
        typer.Option("--sizes", help="Square latency sizes, e.g. 512,1024 (detectors: fixed)."),
    ] = "512",
    runs: Annotated[int, typer.Option("--runs", help="Timed runs per size (median).")] = 3,
    report: Annotated[
        Path | None, typer.Option("--report", help="Also write the table as JSON here.")
    ] = None,
    no_report: Annotated[
        bool, typer.Option("--no-report", help="Quantize only: no parity table.")
    ] = False,
) -> None:
    """Int8 post-training quantization with ONNX Runtime; prints fp32 vs int8 (size, PSNR,
    PSNR against fp32, latency; detectors: output differences, detection agreement, AP or
    the contest score, latency)."""
    from clearsight.api import check_not_input, quantize
    from clearsight.errors import ClearsightError

    check_not_input(out, model)

    try:
        size_list = [int(s) for s in sizes.split(",") if s.strip()]
    except ValueError:
        raise ClearsightError(f"--sizes: expected integers like 512,1024, got {sizes!r}") from None

    def saved(target: Path, result: Any) -> None:
        console.print(
            f"wrote {target} ({len(result.data) / 2**20:.2f} MB; fp32 "
            f"{len(result.fp32_data) / 2**20:.2f} MB); {len(result.excluded)} node(s) kept "
            "in fp32",
            highlight=False,
            soft_wrap=True,
        )

    done = quantize(
        model,
        out,
        calibration=calibration,
        method=method,
        layout=layout,
        calibration_method=calibration_method,
        calibration_images=calibration_images,
        calibration_crop=calibration_crop,
        exclude=exclude or (),
        keep_output_fp32=output_fp32,
        data=data,
        max_images=max_images,
        sizes=size_list,
        runs=runs,
        table=not no_report,
        report_json=report,
        on_quantize=lambda: err_console.print(f"quantizing {model} ({method})...", highlight=False),
        on_saved=saved,
    )
    if done.note is not None:
        err_console.print(done.note)
    rep = done.report
    if rep is None:
        return
    if done.detector:
        _detector_table(model, rep)
    else:
        title = f"{model}: fp32 vs int8 on {done.scored_on} ({rep.n_images} images, {rep.preset})"
        _print_table(rep, title)
        err_console.print(
            f"ONNX Runtime, {rep.threads} thread(s); load average "
            + " ".join(f"{v:.2f}" for v in rep.load_average),
            highlight=False,
        )
    if report is not None:
        console.print(f"report: {report}", highlight=False)


def _detector_table(model: str, rep: Any) -> None:
    """fp32 vs int8 for a detector (`compress/quant_report_detect.py`'s report)."""
    where = f"; {rep.metric} on {rep.data}" if rep.data else ""
    _print_table(
        rep, f"{model} ({rep.layout}): fp32 vs int8, {rep.n_images} calibration images{where}"
    )
    diffs = ", ".join(
        f"{k} {v:.3g} (of {rep.output_range[k]:.3g})" for k, v in rep.output_max_abs_diff.items()
    )
    console.print(f"largest output differences: {diffs}", highlight=False, soft_wrap=True)
    err_console.print(
        f"ONNX Runtime, {rep.threads} thread(s); detections above 0.3 matched at IoU 0.5; "
        "load average " + " ".join(f"{v:.2f}" for v in rep.load_average),
        highlight=False,
    )


def _print_table(rep: Any, title: str) -> None:
    """A report's `table()` (header, rows) as a rich table, the first column left-aligned."""
    head, body = rep.table()
    table = Table(title=title)
    for i, col in enumerate(head):
        table.add_column(col, justify="left" if i == 0 else "right")
    for row in body:
        table.add_row(*row)
    console.print(table)


def register(group: typer.Typer) -> None:
    """Add `quantize` to the `compress` group."""
    group.command("quantize")(quantize_cmd)
