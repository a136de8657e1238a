"""Deployment: export (ONNX, Paddle), import Paddle weights, and measure a model's size and
speed (profile, benchmark)."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from clearsight.api.models import load_model
from clearsight.errors import ClearsightError

if TYPE_CHECKING:
    from clearsight.backend_bench import BenchmarkReport
    from clearsight.convert.paddle_import import ImportResult
    from clearsight.export.onnx import ParityResult
    from clearsight.export.paddle import PaddleExport
    from clearsight.profile import ProfileReport
    from clearsight.profile_table import ProfileTable


@dataclass(frozen=True)
class Export:
    """What `export` did: the format, the output path, and the parity check of the format
    (`onnx` for ONNX, `paddle` for Paddle); `skipped` when the output existed and was kept."""

    fmt: str
    path: Path
    skipped: bool = False
    onnx: ParityResult | None = None
    paddle: PaddleExport | None = None


def export(
    model: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    fmt: str = "onnx",
    layout: str | None = None,
    skip_existing: bool = False,
) -> Export:
    """Export `model` (any `load_model` reference) as `fmt`: "onnx" (`export_onnx`) or
    "paddle" (`export_paddle`), parity-checked; default output MODEL.onnx / MODEL.paddle.
    Detectors: `layout` "decoded" (ONNX only) or "astar" (the contest's interface).
    `skip_existing` keeps an existing output (nothing is loaded). Raises `ClearsightError`
    for an unknown format or layout, or the decoded layout with Paddle."""
    from clearsight.export.onnx import check_format, default_output
    from clearsight.export.onnx_detect import check_layout

    fmt = check_format(fmt)
    layout = None if layout is None else check_layout(layout)
    if fmt == "paddle" and layout == "decoded":
        raise ClearsightError(
            "--format paddle takes --layout astar only (the contest model); for the decoded "
            "layout export ONNX, then convert the .onnx file with --format paddle"
        )
    target = Path(out) if out is not None else default_output(str(model), fmt, layout)
    from clearsight.out_paths import check_not_input

    check_not_input(target, str(model))
    if skip_existing and target.exists():
        return Export(fmt, target, skipped=True)
    if fmt == "paddle":
        from clearsight.export.paddle import META_FILE
        from clearsight.out_paths import check_replaced_folder

        check_replaced_folder(target, META_FILE, "--out")  # replaced whole, after the export
        result = export_paddle(model, target, layout=layout)
        return Export(fmt, result.path, paddle=result)
    path, parity = export_onnx(model, target, fmt, layout=layout)
    return Export(fmt, path, onnx=parity)


def export_onnx(
    model: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    fmt: str = "onnx",
    layout: str | None = None,
) -> tuple[Path, ParityResult]:
    """Export `model` (any `load_model` reference) to ONNX (opset 17, dynamic H and W, the
    config in the metadata), parity-checked against PyTorch; default file MODEL.onnx.
    Detectors: `layout` "decoded" (default) or "astar" (the contest's, MODEL-astar.onnx)."""
    from clearsight.export.onnx import check_format, default_output
    from clearsight.export.onnx import export_onnx as export_loaded
    from clearsight.out_paths import check_output_file

    fmt = check_format(fmt)
    if fmt != "onnx":
        raise ClearsightError(f"export_onnx writes ONNX; for {fmt!r} use export_{fmt}")
    target = check_output_file(out or default_output(str(model), fmt, layout), "export output")
    loaded = load_model(model)
    return export_loaded(loaded, target, layout=layout)


def export_paddle(
    model: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    layout: str | None = None,
) -> PaddleExport:
    """Export `model` (any `load_model` reference, an `.onnx` file with clearsight metadata
    included) as a Paddle inference folder, parity-checked with Paddle Inference on the CPU
    (docs/export.md); default folder MODEL.paddle. `layout="astar"`: a detector in the Astar
    contest's interface, the contest submission (docs/paddle.md)."""
    from clearsight.export.onnx import default_output
    from clearsight.export.paddle import export_contest_paddle
    from clearsight.export.paddle import export_paddle as export_loaded
    from clearsight.out_paths import check_output_folder

    if layout not in (None, "astar"):
        raise ClearsightError(f"export_paddle: layout must be None or 'astar', got {layout!r}")
    default = default_output(str(model), "paddle", layout)
    target = check_output_folder(out or default, "export output")
    if layout == "astar":
        return export_contest_paddle(load_model(model), target)
    return export_loaded(load_model(model), target)


def import_paddle(
    weights: str | os.PathLike[str],
    architecture: str,
    out: str | os.PathLike[str],
    *,
    sets: dict[str, object] | Sequence[str] | None = None,
    name: str | None = None,
) -> ImportResult:
    """A Paddle `.pdparams` state dict as a clearsight artifact at `out` (read without Paddle,
    nothing in the pickle runs; docs/paddle.md). `sets`: architecture arguments and import
    options (`bn_eps`, `lost_blocks`), as a dict or as "key=value" strings. Returns the
    `ImportResult`; raises `ClearsightError` for a bad item, file, name or shape."""
    from clearsight.convert.paddle_import import import_paddle as run_import
    from clearsight.out_paths import check_output_file, check_output_folder

    if sets is not None and not isinstance(sets, dict):
        sets = parse_import_sets(sets)

    target = Path(out)
    if target.suffix == ".safetensors":
        check_output_file(target, "import output")
    else:
        check_output_folder(target, "import output")
    return run_import(weights, architecture, target, sets=sets, name=name)


def import_torch(
    weights: str | os.PathLike[str],
    architecture: str,
    out: str | os.PathLike[str],
    *,
    args: dict[str, object] | str | None = None,
    name: str | None = None,
) -> ImportResult:
    """A released PyTorch checkpoint (ESDNet's, NAFNet's or ClearView's NAFNet; a path or
    `hf://OWNER/REPO/FILE[@REVISION]`) as a clearsight artifact at `out`, with a model card
    stub. Read weights-only (a pickle that would run code is refused); the architecture's
    arguments come from the tensor shapes, or `args` (a dict or JSON text). Raises
    `ClearsightError` for a bad file, name or shape (docs/models/derain.md)."""
    from clearsight.convert.torch_import import import_torch as run_import
    from clearsight.convert.torch_import import parse_args_json
    from clearsight.out_paths import check_output_file, check_output_folder

    given = parse_args_json(args) if isinstance(args, str) or args is None else dict(args)
    target = Path(out)
    if target.suffix == ".safetensors":
        check_output_file(target, "import output")
    else:
        check_output_folder(target, "import output")
    return run_import(weights, architecture, target, args=given, name=name)


def parse_import_sets(items: Sequence[str] | None) -> dict[str, object]:
    """`key=value` strings (`clearsight import paddle --set`) as the `sets` of
    `import_paddle`; values parse as JSON (numbers, true/false), else as strings. Raises
    `ClearsightError` for an item without `=`."""
    from clearsight.convert.paddle_import import parse_sets

    return parse_sets(list(items) if items is not None else None)


def profile(
    model: str | os.PathLike[str],
    *,
    sizes: str = "256,512",
    backends: Sequence[str] | None = None,
    runs: int = 3,
    tile: int | None = None,
    memory: bool = True,
) -> ProfileReport:
    """Parameters, MACs per pixel, and per-backend latency and peak memory of `model` at
    each of `sizes` ("256,512" or "321x481"); `backends` default to the model's own (torch,
    or onnxruntime for an `.onnx` file). Raises `ClearsightError` for bad sizes or runs."""
    from clearsight.profile import parse_sizes, profile_model

    if runs < 1:
        raise ClearsightError(f"--runs must be >= 1, got {runs}")
    loaded = load_model(model)
    return profile_model(
        loaded, sizes=parse_sizes(sizes), backends=backends, runs=runs, tile=tile, memory=memory
    )


def profile_table(
    models: Sequence[str],
    *,
    data: str | os.PathLike[str] | None = None,
    size: int | None = None,
    runs: int = 3,
    memory: bool = True,
    max_images: int | None = None,
    report: str | os.PathLike[str] | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ProfileTable:
    """The before/after table of `models` (the first is "before"): size, MACs, latency,
    memory and, with `data`, quality (PSNR/SSIM on pairs, or AP and the Astar score on a
    COCO folder), with ratios to the first. `report`: also write it as JSON (atomically).
    Raises `ClearsightError` for mixed families, bad runs or an unwritable report."""
    import json

    from clearsight.atomic import atomic_write_text
    from clearsight.out_paths import check_output_file
    from clearsight.profile_table import profile_models

    if runs < 1:
        raise ClearsightError(f"--runs must be >= 1, got {runs}")
    target = check_output_file(report, "--report") if report is not None else None
    rep = profile_models(
        list(models),
        data=data,
        size=size,
        runs=runs,
        memory=memory,
        max_images=max_images,
        on_step=on_step,
    )
    if target is not None:
        atomic_write_text(target, json.dumps(rep.to_dict(), indent=2) + "\n")
    return rep


def benchmark(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    *,
    sizes: Sequence[int] = (512, 1024),
    runs: int = 3,
    quick: bool = False,
    preset: str | None = None,
    max_images: int | None = None,
) -> BenchmarkReport:
    """PyTorch eager vs tuned vs ONNX Runtime on the pairs in `data`: size, parameters,
    MACs, PSNR (and its change) and latency at each square size of `sizes`. `quick`: one
    run on at most two images (a smoke test)."""
    from clearsight.backend_bench import benchmark_model

    loaded = load_model(model)
    return benchmark_model(
        loaded, data, sizes=list(sizes), runs=runs, quick=quick, preset=preset,
        max_images=max_images,
    )  # fmt: skip
