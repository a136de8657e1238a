"""The `clearsight` command: a thin layer over the Python API.

Every command is a plain function of the engine; this module only parses arguments,
draws progress and tables, and turns `ClearsightError`s into one-line messages with a
non-zero exit code (`--debug` shows the traceback instead).
"""

from __future__ import annotations

import functools
import json
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table

from clearsight import __version__
from clearsight.errors import ClearsightError

app = typer.Typer(
    name="clearsight",
    help="Restore images with compact models: derain, demoire, restore, evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

_STATE = {"debug": False}
F = TypeVar("F", bound=Callable[..., Any])


def _friendly(fn: F) -> F:
    """Report `ClearsightError` as one line and exit 1, unless --debug was given."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except ClearsightError as exc:
            if _STATE["debug"]:
                raise
            err_console.print(f"[bold red]error:[/] {exc}", highlight=False, soft_wrap=True)
            raise typer.Exit(code=1) from None

    return wrapper  # type: ignore[return-value]


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
    err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"clearsight {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    _STATE["debug"] = debug


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=err_console,
        transient=False,
        disable=not err_console.is_terminal,
    )


# -- models ---------------------------------------------------------------------------------
@app.command("models")
@_friendly
def models_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every architecture (with its default parameter count) and every bundled model."""
    from clearsight.models.registry import build_model, count_parameters, list_specs
    from clearsight.zoo import bundled_models

    rows = []
    for spec in list_specs():
        n = count_parameters(build_model(spec.name))
        rows.append(
            {
                "name": spec.name,
                "kind": "architecture",
                "task": spec.task,
                "params": n,
                "preset": spec.metric_preset,
                "description": spec.description,
            }
        )
    for name, path in bundled_models().items():
        from clearsight.artifact import read_config

        cfg = read_config(path)
        rows.append(
            {
                "name": name,
                "kind": "bundled",
                "task": cfg.task,
                "params": cfg.param_count,
                "preset": cfg.metric_preset,
                "description": f"trained {cfg.architecture}",
            }
        )
    if as_json:
        console.print_json(json.dumps(rows))
        return
    table = Table(title="clearsight models")
    for col, kw in (
        ("name", {"style": "bold", "no_wrap": True}),
        ("kind", {}),
        ("task", {}),
        ("params", {"justify": "right"}),
        ("preset", {}),
        ("description", {}),
    ):
        table.add_column(col, **kw)
    for r in rows:
        table.add_row(
            r["name"], r["kind"], r["task"], f"{r['params']:,}", r["preset"], r["description"]
        )
    console.print(table)


# -- shared options -------------------------------------------------------------------------
ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Artifact path, bundled model or architecture name.")
]
TileOpt = Annotated[
    int | None,
    typer.Option(
        "--tile", help="Tile size in pixels (0: never tile; default: tile above 512x512)."
    ),
]
TtaOpt = Annotated[
    str, typer.Option("--tta", help="Self-ensemble: none, flip or x8 (flips and rotations).")
]
MaxPixOpt = Annotated[
    int | None,
    typer.Option("--max-pixels", help="Refuse images with more decoded pixels (default 200M)."),
]
DeviceOpt = Annotated[str, typer.Option("--device", help="torch device, e.g. cpu or cuda.")]
BackendOpt = Annotated[
    str,
    typer.Option("--backend", help="torch, or onnxruntime (exports the model to ONNX first)."),
]
ScalesOpt = Annotated[
    str,
    typer.Option(
        "--scales",
        help="Multi-scale prediction: comma-separated scales averaged with --tta, e.g. 1.0,0.75.",
    ),
]
StagesOpt = Annotated[
    str,
    typer.Option(
        "--stages",
        help="Stages of a multi-stage model (RESCAN): all (as trained), auto (each image stops "
        "once a stage changes it by less than --stage-threshold) or a number N.",
    ),
]
StageThresholdOpt = Annotated[
    float,
    typer.Option(
        "--stage-threshold",
        help="With --stages auto: stop once a stage changes the image by less than this "
        "(mean absolute difference, 0-1 image units).",
    ),
]
DEFAULT_STAGE_THRESHOLD = 6e-3  # = clearsight.models.rescan.DEFAULT_STAGE_THRESHOLD (tested)


def _stages_note(restorer: Any) -> str:
    """', 3 stages' for the image just restored, when --stages is not all."""
    used = getattr(restorer, "last_stages_used", None)
    if restorer.options.stages == "all" or not used:
        return ""
    text = ", ".join(f"{n:g}" for n in used)
    return f", {text} stage{'' if used == [1] else 's'}"


def _make_restorer(
    model: str,
    tile: int | None,
    tta: str,
    device: str,
    scales: str = "1.0",
    backend: str = "torch",
    stages: str = "all",
    stage_threshold: float = DEFAULT_STAGE_THRESHOLD,
) -> Any:
    from clearsight.engine.inference import (
        ENSEMBLE_VIEWS,
        InferenceOptions,
        Restorer,
        StageOptionError,
        check_stage_threshold,
        parse_scales,
        parse_stages,
    )
    from clearsight.errors import UnknownNameError
    from clearsight.zoo import resolve_model

    if tta not in ENSEMBLE_VIEWS:
        raise UnknownNameError(f"--tta: unknown value {tta!r}; known: {', '.join(ENSEMBLE_VIEWS)}")
    if tile is not None and tile < 0:
        raise ClearsightError(f"--tile must be >= 0, got {tile}")
    try:
        scale_values = parse_scales(scales)
    except ValueError as exc:
        raise ClearsightError(f"--scales: {exc}") from None

    def stage_error(exc: StageOptionError) -> ClearsightError:
        return ClearsightError(f"--{exc.option.replace('_', '-')}: {exc.detail}")

    try:
        stage_value = parse_stages(stages)
        check_stage_threshold(stage_threshold)
    except StageOptionError as exc:
        raise stage_error(exc) from None
    if backend != "torch" and stage_value != "all":
        raise ClearsightError(
            f"--stages {stage_value} needs --backend torch (an exported graph runs all stages)"
        )
    loaded = resolve_model(model, device=device)
    if backend != "torch":
        from clearsight.engine.ort_backend import check_backend
        from clearsight.export.onnx import to_onnxruntime

        check_backend(backend)
        loaded = to_onnxruntime(loaded, device)
    opts = InferenceOptions(
        tile=tile,
        ensemble=tta,  # type: ignore[arg-type]
        scales=scale_values,
        device=device,
        stages=stage_value,
        stage_threshold=stage_threshold,
    )
    try:
        return Restorer(loaded, opts)
    except StageOptionError as exc:
        raise stage_error(exc) from None


def _restore_files(
    restorer: Any, inputs: list[Path], out: Path, max_pixels: int | None, what: str
) -> list[Path]:
    from clearsight.engine.batch import plan_outputs
    from clearsight.io import image_to_tensor, read_image, tensor_to_image, write_image

    plan = plan_outputs(inputs, out)
    written = []
    with _progress() as progress:
        images = progress.add_task(what, total=len(plan))
        for src, dst in plan:
            img = read_image(src, max_pixels=max_pixels)
            tiles = progress.add_task(f"  {src.name}", total=None)

            def on_tile(done: int, total: int, tiles: Any = tiles) -> None:
                progress.update(tiles, completed=done, total=total)

            out_t, ms = restorer.timed_restore(image_to_tensor(img), on_tile)
            dtype = img.dtype
            write_image(dst, tensor_to_image(out_t, dtype=dtype), bit_depth=8 * dtype.itemsize)
            progress.remove_task(tiles)
            progress.advance(images)
            written.append(dst)
            note = _stages_note(restorer)
            err_console.print(f"{src} -> {dst}  ({ms:.0f} ms{note})", highlight=False)
    return written


# -- restore --------------------------------------------------------------------------------
@app.command("restore")
@_friendly
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
    restorer = _make_restorer(model, tile, tta, device, scales, backend, stages, stage_threshold)
    written = _restore_files(restorer, inputs, out, max_pixels, "restoring")
    console.print(f"restored {len(written)} image(s) into {out}")


# -- derain ---------------------------------------------------------------------------------
DEFAULT_DERAIN = "default-derain"


@app.command("derain")
@_friendly
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
    restorer = _make_restorer(
        DEFAULT_DERAIN, tile, tta, device, stages=stages, stage_threshold=stage_threshold
    )
    written = _restore_files(restorer, inputs, out, max_pixels, "deraining")
    console.print(f"derained {len(written)} image(s) into {out}")


def _require_bundled(name: str, arch: str) -> None:
    from clearsight.zoo import bundled_models

    if name not in bundled_models():
        raise ClearsightError(
            f"the bundled model {name!r} is missing from this installation; "
            f"use `clearsight restore --model ARTIFACT` with a trained {arch} artifact"
        )


# -- demoire --------------------------------------------------------------------------------
DEFAULT_DEMOIRE = "default-demoire"


@app.command("demoire")
@_friendly
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
    restorer = _make_restorer(DEFAULT_DEMOIRE, tile, tta, device, scales=scales)
    written = _restore_files(restorer, inputs, out, max_pixels, "demoiréing")
    console.print(f"demoiréd {len(written)} image(s) into {out}")


ReportOpt = Annotated[
    Path | None, typer.Option("--report", help="Write a self-contained HTML report here.")
]
ReportKOpt = Annotated[
    int,
    typer.Option("--report-k", help="Sets over 24 images: show the K worst and K best in it."),
]


def _thumbs_for(report: Path | None, k: int) -> Any:
    if k < 1:
        raise ClearsightError(f"--report-k must be >= 1, got {k}")
    if report is None:
        return None
    from clearsight.report.thumbs import ThumbnailCollector

    return ThumbnailCollector()


# -- eval -----------------------------------------------------------------------------------
@app.command("eval")
@_friendly
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
) -> None:
    """Score MODEL on paired data under a metric preset; per-image CSV and summary JSON."""
    import statistics

    from clearsight.data.pairs import find_pairs
    from clearsight.engine.evaluate import evaluate
    from clearsight.metrics.presets import get_preset

    restorer = _make_restorer(model, tile, tta, device, scales, backend, stages, stage_threshold)
    preset_name = preset or restorer.loaded.config.metric_preset
    mp = get_preset(preset_name, crop_border=crop_border)
    pairs = find_pairs(data)
    if save_images and out is None:
        raise ClearsightError("--save-images needs --out")
    thumbs = _thumbs_for(report, report_k)
    stages_used: list[float] = []

    def on_image(r: Any) -> None:
        stages_used.extend(restorer.last_stages_used or [])
        progress.advance(task)

    with _progress() as progress:
        task = progress.add_task(f"eval {data.name}", total=len(pairs))
        result = evaluate(
            restorer,
            pairs,
            mp,
            model_name=model,
            data_name=str(data),
            save_dir=(out / "images") if (save_images and out) else None,
            max_pixels=max_pixels,
            on_image=on_image,
            ms_ssim=ms_ssim,
            on_images=thumbs,
        )
    summary = result.summary()
    table = Table(title=escape(f"{model} on {data}  (preset {mp.name}: {mp.description})"))
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
    chosen = restorer.options.stages
    if chosen != "all" and stages_used:
        label = f"stages ({chosen}, {stage_threshold:g})" if chosen == "auto" else "stages"
        table.add_row(
            f"{label} used",
            f"{statistics.fmean(stages_used):.2f}",
            f"{statistics.median(stages_used):g}",
            f"{min(stages_used):g}",
            f"{max(stages_used):g}",
        )
    console.print(table)
    console.print(f"n = {summary['n']}; worst: {', '.join(summary['worst'])}")
    if out is not None:
        csv_path, json_path = result.write(out)
        console.print(f"wrote {csv_path} and {json_path}")
    if report is not None and thumbs is not None:
        from clearsight.report.html import model_card, render_eval_report, write_report

        page = render_eval_report(
            result, thumbs.thumbs, card=model_card(restorer.loaded), k=report_k
        )
        console.print(f"wrote report {write_report(report, page)}", highlight=False)


# -- synth --------------------------------------------------------------------------------
synth_app = typer.Typer(
    help="Synthesise paired training data (degraded/clean).", no_args_is_help=True
)
app.add_typer(synth_app, name="synth")


@synth_app.command("moire")
@_friendly
def synth_moire_cmd(
    clean: Annotated[Path, typer.Option("--clean", help="Folder of clean images.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (moire/ and clean/).")],
    per_image: Annotated[
        int, typer.Option("--per-image", help="Synthetic pairs per clean image.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same pairs).")] = 0,
    match_tone: Annotated[
        bool,
        typer.Option("--match-tone", help="Apply the capture's tone change to the target too."),
    ] = False,
    max_pixels: MaxPixOpt = None,
) -> None:
    """Screen-camera moiré simulation: aligned OUT/moire and OUT/clean pairs, same size."""
    from clearsight.data.synth_moire import MoireConfig, synth_moire_folder

    with _progress() as progress:
        task = progress.add_task("synth moire", total=None)
        report = synth_moire_folder(
            clean,
            out,
            per_image=per_image,
            seed=seed,
            cfg=MoireConfig(match_tone=match_tone),
            max_pixels=max_pixels,
            on_pair=lambda p: progress.advance(task),
        )
    console.print(f"wrote {report.pairs} pair(s) into {out}/moire and {out}/clean")


@synth_app.command("rain")
@_friendly
def synth_rain_cmd(
    clean: Annotated[Path, typer.Option("--clean", help="Folder of clean images.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (rain/ and clean/).")],
    preset: Annotated[
        str, typer.Option("--preset", help="light (Rain100L-like), heavy (Rain100H-like), mixed.")
    ] = "mixed",
    per_image: Annotated[
        int, typer.Option("--per-image", help="Synthetic pairs per clean image.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same pairs).")] = 0,
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes (0: this process; same output).")
    ] = 0,
    max_pixels: MaxPixOpt = None,
) -> None:
    """Rain streaks (and haze for heavy rain) over clean photos: OUT/rain and OUT/clean pairs."""
    from clearsight.data.synth_rain import synth_rain_folder

    with _progress() as progress:
        task = progress.add_task(f"synth rain ({preset})", total=None)
        report = synth_rain_folder(
            clean,
            out,
            preset=preset,
            per_image=per_image,
            seed=seed,
            workers=workers,
            max_pixels=max_pixels,
            on_pair=lambda p: progress.advance(task),
        )
    console.print(f"wrote {report.pairs} pair(s) into {out}/rain and {out}/clean")


def main() -> None:
    """Console entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)


# -- check-data -----------------------------------------------------------------------------
@app.command("check-data")
@_friendly
def check_data_cmd(
    data: Annotated[
        Path, typer.Argument(help="Folder with rain/clean, moire/clean or input/target pairs.")
    ],
    input_dir: Annotated[
        str | None, typer.Option("--input-dir", help="Input folder name under DATA.")
    ] = None,
    target_dir: Annotated[
        str | None, typer.Option("--target-dir", help="Target folder name under DATA.")
    ] = None,
    name_map: Annotated[
        str | None,
        typer.Option("--name-map", help="Target name from the input's stem, e.g. 'no{stem}'."),
    ] = None,
    side_by_side: Annotated[
        bool,
        typer.Option("--side-by-side", help="Each file holds both images side by side (RESCAN)."),
    ] = False,
    order: Annotated[
        str, typer.Option("--order", help="Side-by-side halves: clean-rain or rain-clean.")
    ] = "clean-rain",
    quick: Annotated[
        bool, typer.Option("--quick", help="Read file headers only (misses truncated data).")
    ] = False,
    psnr_floor: Annotated[
        float, typer.Option("--psnr-floor", help="Flag pairs whose PSNR is below this (dB).")
    ] = 10.0,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Misaligned, extreme or colour-swapped pairs fail too."),
    ] = False,
) -> None:
    """Check paired training data (names, sizes, readable files); exit 1 on any problem."""

    from clearsight.data.paired import validate_pairs, validate_side_by_side

    if side_by_side:
        if input_dir or target_dir or name_map:
            raise ClearsightError(
                "--side-by-side takes a folder of files; it has no --input-dir, "
                "--target-dir or --name-map"
            )
        report = validate_side_by_side(data, order=order, decode=not quick)  # type: ignore[arg-type]
    else:
        report = validate_pairs(
            data,
            input_dir=input_dir,
            target_dir=target_dir,
            name_map=name_map,
            decode=not quick,
            psnr_floor=psnr_floor,
        )
    table = Table(title=f"check-data {escape(str(data))}")
    table.add_column("item", style="bold")
    table.add_column("value")
    for label, value in report.summary()[1:]:
        table.add_row(label, value)
    console.print(table)
    problems = report.problems() + (report.content_lines() if strict else [])
    if problems:
        console.print(f"[bold red]problems ({len(problems)}):[/]")
        for line in problems:
            console.print(f"  {line}", highlight=False, soft_wrap=True, markup=False)
    for line in report.warning_lines():
        if strict and line in problems:
            continue
        console.print(f"[yellow]warning:[/] {escape(line)}", highlight=False, soft_wrap=True)
    if problems:
        console.print(
            f"[bold red]{len(problems)} problem(s) found[/] in {escape(str(data))}", highlight=False
        )
        raise typer.Exit(code=1)
    console.print(f"[green]ok:[/] {report.n_pairs} pairs ready for training", highlight=False)


# -- train ----------------------------------------------------------------------------------
@app.command("train")
@_friendly
def train_cmd(
    config: Annotated[Path | None, typer.Argument(help="Training config (YAML).")] = None,
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a config value: key.path=value (YAML value)."),
    ] = None,
    run_dir: Annotated[
        Path | None, typer.Option("--run-dir", help="Output folder (default: runs/CONFIG-NAME).")
    ] = None,
    resume: Annotated[
        Path | None, typer.Option("--resume", help="Continue the run in this folder exactly.")
    ] = None,
    overfit_batch: Annotated[
        bool,
        typer.Option("--overfit-batch", help="Train on one batch; fail if the loss won't fall."),
    ] = False,
    no_progress: Annotated[bool, typer.Option("--no-progress", help="No progress bar.")] = False,
) -> None:
    """Train a model from CONFIG (or --resume RUN_DIR); writes RUN_DIR/best and RUN_DIR/last."""
    import os

    from clearsight.engine.checkpoint import CHECKPOINT_FILE, load_checkpoint
    from clearsight.engine.train_config import apply_overrides, config_from_dict, load_config
    from clearsight.engine.trainer import OVERFIT_MARGIN, train

    if resume is not None:
        if config is not None:
            raise ClearsightError("give either CONFIG or --resume RUN_DIR, not both")
        state = load_checkpoint(resume / CHECKPOINT_FILE)
        cfg = config_from_dict(apply_overrides(state["config"], set_ or []))
        out = resume
    else:
        if config is None:
            raise ClearsightError("give a training CONFIG (YAML) or --resume RUN_DIR")
        cfg = load_config(config, set_ or [])
        out = run_dir or Path("runs") / config.stem
        if (out / CHECKPOINT_FILE).exists() and not overfit_batch:
            raise ClearsightError(
                f"{out} already holds a run; continue it with --resume {out} or pick --run-dir"
            )
    result = train(
        cfg, out, resume=resume is not None, overfit_batch=overfit_batch, progress=not no_progress
    )
    if os.environ.get("RANK", "0") != "0":
        return  # under torchrun, rank 0 reports
    if overfit_batch:
        first, last = result.first_loss, result.last_loss
        console.print(f"overfit one batch: first loss {first:.6g}, last loss {last:.6g}")
        if not result.overfit_ok:
            raise ClearsightError(
                f"the loss did not fall below {OVERFIT_MARGIN:g} x its first value in "
                f"{result.steps} steps on one batch: check the model, loss and learning rate"
            )
        console.print("[green]ok:[/] the loss fell", highlight=False)
        return
    metrics = ", ".join(f"{k} {v:.4f}" for k, v in result.val_metrics.items()) or "no validation"
    console.print(
        f"trained {result.steps} steps: loss {result.first_loss:.6g} -> {result.last_loss:.6g}; "
        f"{metrics}; skipped {result.nan_skipped} NaN step(s), {result.rollbacks} rollback(s)",
        highlight=False,
    )
    console.print(f"model: {out / 'best'} (best), {out / 'last'} (last)", highlight=False)


# -- compare --------------------------------------------------------------------------------
@app.command("compare")
@_friendly
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

    from clearsight.data.pairs import find_pairs
    from clearsight.engine.compare import compare
    from clearsight.metrics.presets import get_preset

    if len(models) != 2:
        raise ClearsightError(f"give exactly two --model options (A then B), got {len(models)}")
    ra = _make_restorer(models[0], tile, "none", device)
    rb = _make_restorer(models[1], tile, "none", device)
    mp = get_preset(preset or ra.loaded.config.metric_preset)
    pairs = find_pairs(data)
    thumbs_a, thumbs_b = _thumbs_for(report, report_k), _thumbs_for(report, report_k)
    with _progress() as progress:
        task = progress.add_task(f"compare {data.name}", total=2 * len(pairs))
        cmp = compare(
            ra,
            rb,
            pairs,
            mp,
            model_a=models[0],
            model_b=models[1],
            data_name=str(data),
            max_pixels=max_pixels,
            on_image=lambda r: progress.advance(task),
            on_images_a=thumbs_a,
            on_images_b=thumbs_b,
        )
    s = cmp.summary()
    c = s["psnr"]
    table = Table(
        title=f"B = {escape(models[1])} vs A = {escape(models[0])} on {escape(str(data))}  "
        f"[preset {mp.name}: {escape(mp.description)}]"
    )
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
            escape(d.name),
            f"{d.a['psnr']:.3f}",
            f"{d.b['psnr']:.3f}",
            f"[{colour}]{d.delta['psnr']:+.3f}[/]",
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
    console.print(table)
    console.print(f"preset {mp.summary}", highlight=False, markup=False)
    mean = c["mean_delta"]
    console.print(
        f"n = {s['n']}: B better on {c['better']}, worse on {c['worse']}, equal on {c['equal']} "
        f"(within {cmp.tolerance['psnr']:g} dB); mean PSNR A {s['mean_a']['psnr']:.3f}, "
        f"B {s['mean_b']['psnr']:.3f}; mean delta "
        + (f"{mean:+.3f} dB" if mean is not None else "n/a"),
        highlight=False,
    )
    if report is not None:
        from clearsight.report.html import model_card, render_compare_report, write_report

        page = render_compare_report(
            cmp,
            thumbs_a.thumbs,
            thumbs_b.thumbs,
            card_a=model_card(ra.loaded),
            card_b=model_card(rb.loaded),
            k=report_k,
        )
        console.print(f"wrote report {write_report(report, page)}", highlight=False)


# -- audit ----------------------------------------------------------------------------------
@app.command("audit")
@_friendly
def audit_cmd(
    model: Annotated[str, typer.Argument(help="Architecture name or artifact path.")],
    size: Annotated[int, typer.Option("--size", help="Side of the sample batch, pixels.")] = 32,
    seed: Annotated[int, typer.Option("--seed", help="Seed for weights and the batch.")] = 0,
) -> None:
    """Check MODEL for the field's known bugs: gradients, purity, structure, spec, two steps."""

    from clearsight.model_audit import audit

    if size < 8:
        raise ClearsightError(f"--size must be >= 8, got {size}")
    report = audit(model, size=size, seed=seed)
    table = Table(title=f"audit {escape(model)}")
    table.add_column("check", style="bold")
    table.add_column("result")
    table.add_column("details")
    for c in report.checks:
        table.add_row(
            c.name, "[green]PASS[/]" if c.passed else "[bold red]FAIL[/]", escape(c.details)
        )
    console.print(table)
    failed = report.failed()
    if failed:
        console.print(f"[bold red]{len(failed)} check(s) failed[/]", highlight=False)
        raise typer.Exit(code=1)
    console.print(f"[green]ok:[/] all {len(report.checks)} checks passed", highlight=False)


# export, profile and benchmark live in their own module (registered on import)
from clearsight import cli_export as _cli_export  # noqa: E402, F401
