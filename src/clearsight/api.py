"""The Python API behind `import clearsight`: one function per thing the CLI does.

Each CLI command parses its arguments, calls one function here (or a `Restorer` method)
and prints the result, so everything the command line can do, Python can do too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError, OptionError

if TYPE_CHECKING:
    from clearsight.artifact import LoadedModel
    from clearsight.compress.prune import PruneResult
    from clearsight.convert.paddle_import import ImportResult
    from clearsight.detection.evaluate import DetectionEvalResult
    from clearsight.engine.compare import Comparison
    from clearsight.engine.evaluate import EvalResult, ImageResult, ImagesHook
    from clearsight.engine.inference import Restorer
    from clearsight.engine.trainer import TrainResult
    from clearsight.export.onnx import ParityResult
    from clearsight.export.paddle import PaddleExport


def load_model(ref: str | os.PathLike[str], device: str = "cpu", seed: int = 0) -> LoadedModel:
    """Load an artifact folder or `.safetensors` file, an exported `.onnx` file (ONNX
    Runtime), a bundled model name ("default-derain") or an architecture name (random
    weights, seeded, with an `UntrainedModelWarning`)."""
    from clearsight.zoo import resolve_model

    return resolve_model(str(ref), device=device, seed=seed)


def model_task(ref: str | os.PathLike[str]) -> str:
    """The task ("derain", "demoire", "detect", ...) of `ref`, read from its config or the
    registry without loading weights: how commands route a model to the right engine."""
    from clearsight.zoo import model_task as task_of

    return task_of(str(ref))


def evaluate_detection(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    *,
    device: str = "cpu",
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[int, Any], None] | None = None,
) -> DetectionEvalResult:
    """COCO bbox AP (AP, AP50, AP75, APs/m/l, per class) and per-image rows of the detector
    `model` on the COCO-format folder `data` (`annotations/instances_*.json` + images)."""
    from clearsight.detection.detector import Detector
    from clearsight.detection.evaluate import evaluate_coco_set

    detector = Detector.from_pretrained(str(model), device=device)
    return evaluate_coco_set(
        detector, data, model_name=str(model), on_start=on_start, on_image=on_image
    )


def list_models() -> list[dict[str, Any]]:
    """Every architecture (with its default parameter count) and every bundled model, as
    rows with name, kind ("architecture"/"bundled"), task, params, preset, description."""
    from clearsight.artifact import read_config
    from clearsight.models.registry import build_model, count_parameters, list_specs
    from clearsight.zoo import bundled_models

    rows = [
        {
            "name": spec.name,
            "kind": "architecture",
            "task": spec.task,
            "params": count_parameters(build_model(spec.name)),
            "preset": spec.metric_preset,
            "description": spec.description,
        }
        for spec in list_specs()
    ]
    for name, path in bundled_models().items():
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
    return rows


def evaluate(
    model: str | Restorer,
    data: str | os.PathLike[str],
    *,
    preset: str | None = None,
    crop_border: int | None = None,
    ms_ssim: bool = False,
    save_dir: str | os.PathLike[str] | None = None,
    max_pixels: int | None = None,
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[ImageResult], None] | None = None,
    on_images: ImagesHook | None = None,
    model_name: str | None = None,
    **options: Any,
) -> EvalResult:
    """Score `model` (a `Restorer`, or a reference for `Restorer.from_pretrained` with
    `options`) on the paired folder `data` under `preset` (default: the model's own).

    `on_start(n_pairs)` is called once the pairs are found; the rest as in
    `clearsight.engine.evaluate.evaluate`. `model_name` labels the result (default: the
    reference, or the artifact's name).
    """
    from clearsight.data.pairs import find_pairs
    from clearsight.engine.evaluate import evaluate as evaluate_pairs
    from clearsight.engine.inference import Restorer
    from clearsight.metrics.presets import get_preset

    if isinstance(model, Restorer):
        if options:
            raise ClearsightError("give inference options to Restorer.from_pretrained, not here")
        restorer, label = model, model.loaded.config.name or model.loaded.source
    else:
        restorer, label = Restorer.from_pretrained(model, **options), model

    mp = get_preset(preset or restorer.loaded.config.metric_preset, crop_border=crop_border)
    pairs = find_pairs(Path(data))
    if on_start is not None:
        on_start(len(pairs))
    return evaluate_pairs(
        restorer,
        pairs,
        mp,
        model_name=model_name or label,
        data_name=str(data),
        save_dir=save_dir,
        max_pixels=max_pixels,
        on_image=on_image,
        ms_ssim=ms_ssim,
        on_images=on_images,
    )


def compare(
    model_a: Restorer,
    model_b: Restorer,
    data: str | os.PathLike[str],
    *,
    preset: str | None = None,
    names: tuple[str, str] = ("A", "B"),
    max_pixels: int | None = None,
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[ImageResult], None] | None = None,
    on_images_a: ImagesHook | None = None,
    on_images_b: ImagesHook | None = None,
) -> Comparison:
    """Score B against A per image on the paired folder `data` under one preset (default:
    A's own). `on_start(n_pairs)` once the pairs are found; each model then scores them all."""
    from clearsight.data.pairs import find_pairs
    from clearsight.engine.compare import compare as compare_pairs
    from clearsight.metrics.presets import get_preset

    mp = get_preset(preset or model_a.loaded.config.metric_preset)
    pairs = find_pairs(Path(data))
    if on_start is not None:
        on_start(len(pairs))
    return compare_pairs(
        model_a,
        model_b,
        pairs,
        mp,
        model_a=names[0],
        model_b=names[1],
        data_name=str(data),
        max_pixels=max_pixels,
        on_image=on_image,
        on_images_a=on_images_a,
        on_images_b=on_images_b,
    )


def train(
    config: str | os.PathLike[str] | None = None,
    *,
    overrides: Sequence[str] = (),
    run_dir: str | os.PathLike[str] | None = None,
    resume: str | os.PathLike[str] | None = None,
    overfit_batch: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train from a YAML `config` into `run_dir` (default runs/CONFIG-NAME), or continue the
    run in `resume` exactly; `overrides` are "key.path=value" strings (YAML values).

    Refuses to start a new run over a folder that already holds one (except to overfit a
    batch). The result's `run_dir` holds best/ and last/.
    """
    from clearsight.engine.checkpoint import CHECKPOINT_FILE, load_checkpoint
    from clearsight.engine.train_config import apply_overrides, config_from_dict, load_config
    from clearsight.engine.trainer import train as run_training

    if resume is not None:
        if config is not None:
            raise ClearsightError("give either CONFIG or --resume RUN_DIR, not both")
        out = Path(resume)
        state = load_checkpoint(out / CHECKPOINT_FILE)
        cfg = config_from_dict(apply_overrides(state["config"], list(overrides)))
    else:
        if config is None:
            raise ClearsightError("give a training CONFIG (YAML) or --resume RUN_DIR")
        cfg = load_config(Path(config), list(overrides))
        out = Path(run_dir) if run_dir is not None else Path("runs") / Path(config).stem
        if (out / CHECKPOINT_FILE).exists() and not overfit_batch:
            raise ClearsightError(
                f"{out} already holds a run; continue it with --resume {out} or pick --run-dir"
            )
    return run_training(
        cfg, out, resume=resume is not None, overfit_batch=overfit_batch, progress=progress
    )


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


def prune(
    model: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    ratio: float | None = None,
    target_macs: float | None = None,
    importance: str = "l1",
    report_json: str | os.PathLike[str] | None = None,
    seed: int = 0,
    progress: Callable[[int, float], None] | None = None,
    calibration: str | os.PathLike[str] | None = None,
    calibration_images: int = 64,
) -> tuple[Path, PruneResult]:
    """Structurally prune `model` (any `load_model` reference) until its recounted MACs drop
    by `ratio` (0.5 halves them) or reach `target_macs` (per pixel for restoration, contest
    MAdds in millions for detection), and save it as an artifact at `out` that reloads
    without the pruning library. The before/after table goes to `report_json` (default:
    OUT.prune.json beside it). `importance="energy"` ranks channels by the error their
    removal causes on `calibration` (a folder of images, at most `calibration_images`) and
    folds their means into the next layers. See docs/compress.md."""
    import json

    from clearsight.atomic import atomic_write_text
    from clearsight.compress.prune import (
        check_request,
        default_report_path,
        prune_model,
        save_pruned,
    )
    from clearsight.out_paths import check_output_file

    check_request(ratio, target_macs, importance, calibration is not None)
    if calibration_images < 1:
        raise OptionError("calibration_images", f"must be >= 1, got {calibration_images}")
    target = Path(out)
    if target.suffix == ".safetensors":
        check_output_file(target, "prune output")
    else:
        from clearsight.out_paths import check_output_folder

        check_output_folder(target, "prune output")
    json_path = check_output_file(report_json or default_report_path(target), "--json")
    loaded = load_model(model, seed=seed)
    if loaded.on_onnxruntime:
        raise ClearsightError(f"{model}: an ONNX file cannot be pruned; prune its artifact")
    src = loaded.source if Path(loaded.source).exists() else None
    inputs = None
    if calibration is not None:
        from clearsight.compress.prune_energy import calibration_inputs

        inputs = calibration_inputs(loaded, str(calibration), int(calibration_images))
    result = prune_model(
        loaded.model,
        ratio=ratio,
        target_macs=target_macs,
        importance=importance,
        seed=seed,
        source=src,
        progress=progress,
        calibration=inputs,
    )
    path = save_pruned(loaded, result, target)
    data = {"model": str(model), "output": str(path), **result.to_dict()}
    atomic_write_text(json_path, json.dumps(data, indent=2) + "\n")
    return path, result


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
    sets: dict[str, object] | None = None,
    name: str | None = None,
) -> ImportResult:
    """A Paddle `.pdparams` state dict as a clearsight artifact at `out` (read without Paddle,
    nothing in the pickle runs; docs/paddle.md). Returns the `ImportResult`."""
    from clearsight.convert.paddle_import import import_paddle as run_import
    from clearsight.out_paths import check_output_file, check_output_folder

    target = Path(out)
    if target.suffix == ".safetensors":
        check_output_file(target, "import output")
    else:
        check_output_folder(target, "import output")
    return run_import(weights, architecture, target, sets=sets, name=name)
