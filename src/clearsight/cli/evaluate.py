"""`clearsight eval`: `clearsight.evaluate` printed as a table (and an optional report)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from clearsight.api import DEFAULT_STAGE_THRESHOLD
from clearsight.cli._app import app, console, friendly, progress, say
from clearsight.cli._options import (
    BackendOpt,
    DeviceOpt,
    MaxPixOpt,
    ModelOpt,
    ReportKOpt,
    ReportOpt,
    RestoreOpt,
    ScalesOpt,
    SkipExistingOpt,
    StagesOpt,
    StageThresholdOpt,
    TemporalOpt,
    TileOpt,
    TtaOpt,
)
from clearsight.errors import ClearsightError, OptionError

if TYPE_CHECKING:
    from clearsight.api import EvalResult, InferenceOptions


def _eval_detection(
    model: str,
    data: Path,
    out: Path | None,
    device: str,
    report: Path | None,
    k: int,
    restore: str | None = None,
) -> None:
    """`clearsight eval` on a detector: COCO AP table, per-image CSV and summary JSON, and
    an HTML report with the worst images' boxes drawn (`report/detection.py`)."""
    from clearsight.api import evaluate_detection, plan_fixed_outputs

    plan_fixed_outputs(out, report, inputs=[data])
    if k < 1:
        raise ClearsightError(f"--report-k must be >= 1, got {k}")

    with progress() as bar:
        task = bar.add_task(f"eval {data.name}", total=None)
        result = evaluate_detection(
            model,
            data,
            device=device,
            on_start=lambda n: bar.update(task, total=n),
            on_image=lambda i, d: bar.advance(task),
            restore=restore,
        )
    summary = result.summary()
    table = Table(title=f"{result.model_name} on {data} (COCO bbox, {summary['evaluator']})")
    for key in summary["metrics"]:
        table.add_column(key, justify="right")
    table.add_row(*(_pct(v) for v in summary["metrics"].values()))
    console.print(table)
    dropped = summary["dropped_detections"]
    note = f" ({dropped} more of classes the set does not list, not scored)" if dropped else ""
    console.print(f"n = {summary['n']} images, {summary['detections']} detections{note}")
    if out is not None:
        csv_path, json_path = result.write(out)
        console.print(f"wrote {csv_path} and {json_path}")
    if report is not None:
        from clearsight.api import write_detection_report

        path = write_detection_report(report, result, model, data, k=k, restore=restore)
        console.print(f"wrote report {path}", highlight=False)


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.1f}"


@app.command("eval")
@friendly
def eval_cmd(
    model: ModelOpt,
    data: Annotated[
        Path,
        typer.Option("--data", "-d", help="Folder with rain/clean, moire/clean or input/target."),
    ],
    preset: Annotated[
        str | None, typer.Option("--preset", "-p", help="Metric preset (default: the model's).")
    ] = None,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Folder for per_image.csv and summary.json.")
    ] = None,
    crop_border: Annotated[
        int | None,
        typer.Option("--crop-border", help="Pixels cropped from each side before scoring."),
    ] = None,
    ms_ssim: Annotated[bool, typer.Option("--ms-ssim", help="Also compute MS-SSIM.")] = False,
    save_images: Annotated[
        bool, typer.Option("--save-images", help="Also write the restored images under OUT/images.")
    ] = False,
    tile: TileOpt = None,
    tta: TtaOpt = "none",
    scales: ScalesOpt = "1.0",
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
    report: ReportOpt = None,
    report_k: ReportKOpt = 8,
    backend: BackendOpt = "torch",
    stages: StagesOpt = "all",
    stage_threshold: StageThresholdOpt = DEFAULT_STAGE_THRESHOLD,
    skip_existing: SkipExistingOpt = False,
    video: Annotated[
        bool,
        typer.Option(
            "--video",
            help="DATA is one clip: numbered input frames (rain/, moire/ or input/) and clean/, "
            "or two videos with --clean; per_frame.csv with PSNR, SSIM and warping error.",
        ),
    ] = False,
    clean: Annotated[
        Path | None,
        typer.Option("--clean", help="With --video: the clean video for DATA (a video file)."),
    ] = None,
    fps: Annotated[
        float | None,
        typer.Option(
            "--fps",
            help="With --video: the frame rate of DATA's numbered frames, for the report's "
            "player (0.001 to 1000 per second, default 25; a video keeps its own).",
        ),
    ] = None,
    temporal: TemporalOpt = False,
    restore: RestoreOpt = None,
) -> None:
    """Score MODEL on paired data under a metric preset (a detector: COCO AP on a COCO-format
    folder, --restore MODEL for a restoration model before it; a clip with --video);
    per-image CSV and summary JSON."""
    from clearsight import api

    api.check_max_pixels(max_pixels)
    if restore is not None and (video or api.model_family(model) is not api.Family.DETECTION):
        raise OptionError("restore", "scores a detector behind a restoration model; --model "
                          "must be a detector (COCO-format --data)")  # fmt: skip
    if video:
        page = report if report is not None else (out / "report.html" if out else None)
        _eval_video(model, data, clean, out, preset or "y-matlab", save_images, page, fps, temporal)
        return
    if api.model_family(model) is api.Family.DETECTION:
        _eval_detection(model, data, out, device, report, report_k, restore)
        return

    api.plan_fixed_outputs(out, report, inputs=[data])
    outputs = [out / "per_image.csv", out / "summary.json"] if out is not None else []
    outputs += [report] if report is not None else []
    if skip_existing and outputs and all(p.is_file() for p in outputs):
        console.print("outputs exist, skipped (--skip-existing)", highlight=False)
        return
    restorer = api.Restorer.from_pretrained(
        model,
        tile=tile,
        ensemble=tta,
        scales=api.parse_scales(scales),
        device=device,
        backend=backend,
        stages=stages,
        stage_threshold=stage_threshold,
        precision="fp32",
    )
    if save_images and out is None:
        raise ClearsightError("--save-images needs --out")
    thumbs = api.thumbnail_collector(report, report_k)
    with progress() as bar:
        task = bar.add_task(f"eval {data.name}", total=None)
        result = api.evaluate(
            restorer,
            data,
            preset=preset,
            crop_border=crop_border,
            ms_ssim=ms_ssim,
            save_dir=(out / "images") if (save_images and out) else None,
            max_pixels=max_pixels,
            on_start=lambda n: bar.update(task, total=n),
            on_image=lambda r: bar.advance(task),
            on_images=thumbs,
            model_name=model,
        )
    console.print(_metrics_table(result, restorer.options, model, data))
    summary = result.summary()
    console.print(f"n = {summary['n']}; worst: {', '.join(summary['worst'])}")
    if out is not None:
        csv_path, json_path = result.write(out)
        console.print(f"wrote {csv_path} and {json_path}")
    if report is not None and thumbs is not None:
        path = api.write_eval_report(report, result, thumbs, restorer, k=report_k)
        console.print(f"wrote report {path}", highlight=False)


def _metrics_table(result: EvalResult, options: InferenceOptions, model: str, data: Path) -> Table:
    """Mean/median/min/max of every metric, the latency and (with --stages) stages used."""
    mp = result.preset
    summary = result.summary()
    table = Table(title=f"{model} on {data}  (preset {mp.name}: {mp.description})")
    table.add_column("metric")
    for col in ("mean", "median", "min", "max"):
        table.add_column(col, justify="right")
    for m in result.metric_names:
        s = summary[m]
        fmt = "{:.3f}" if m == "psnr" else "{:.4f}"
        table.add_row(
            m,
            *(
                fmt.format(s[c]) if s[c] is not None else "inf"
                for c in ("mean", "median", "min", "max")
            ),
        )
    lat = summary["latency_ms"]
    table.add_row("latency ms", f"{lat['mean']:.1f}", f"{lat['median']:.1f}", "", "")
    if "stages" in summary:
        st, chosen = summary["stages"], options.stages
        threshold = options.stage_threshold
        label = f"stages ({chosen}, {threshold:g})" if chosen == "auto" else "stages"
        table.add_row(
            f"{label} used",
            f"{st['mean']:.2f}",
            f"{st['median']:g}",
            f"{st['min']:g}",
            f"{st['max']:g}",
        )
    return table


def _eval_video(
    model: str,
    data: Path,
    clean: Path | None,
    out: Path | None,
    preset: str,
    save: bool,
    report: Path | None,
    fps: float | None,
    temporal: bool,
) -> None:
    """`clearsight eval --video`: one clip restored and scored frame by frame; the HTML
    report (OUT/report.html, or --report) with its player's two clips beside it."""
    from clearsight import api

    api.check_video_options(fps=fps)
    if not data.exists():
        raise OptionError("data", f"{data} not found")
    if clean is None and not data.is_dir():
        raise OptionError(
            "data",
            f"{data} is a file: give its clean video with --clean, or a folder with the "
            "input frames (rain/, moire/ or input/) and clean/",
        )
    players = api.player_paths(report) if report is not None else ()
    api.plan_fixed_outputs(
        out, report, inputs=[p for p in (data, clean) if p is not None], report_files=players
    )
    pairs: Any = data if clean is None else (data, clean)
    res = api.evaluate_video(
        model, pairs, out, preset=preset, save_images=save, report=report, fps=fps,
        temporal=temporal,
    )  # fmt: skip
    summary = res.summary
    for key in ("psnr", "ssim", "warping_error", "flicker"):
        value = summary.get(key, {})
        mean = value.get("mean") if isinstance(value, dict) else None
        if mean is not None:
            say(f"{key}: {mean:.6g}")
    say(f"{summary.get('frames', len(res.rows))} frames, preset {preset}")
    if out is not None:
        say(f"wrote {out / 'per_frame.csv'} and {out / 'summary.json'}")
    if report is not None:
        say(f"wrote report {report}")
