"""Compression: prune channels, quantize to int8, rebuild a detector for another input size."""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.api.models import load_model
from clearsight.errors import ClearsightError, OptionError

if TYPE_CHECKING:
    from clearsight.compress.input_size import InputSizeResult
    from clearsight.compress.prune import PruneResult
    from clearsight.compress.quantize import QuantizeResult


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


def prune_report_path(out: str | os.PathLike[str]) -> Path:
    """Where `prune` writes its before/after JSON by default: OUT.prune.json beside OUT."""
    from clearsight.compress.prune import default_report_path

    return default_report_path(out)


def change_input_size(
    model: str | os.PathLike[str], out: str | os.PathLike[str], size: int, resize: str = "keep"
) -> InputSizeResult:
    """Save detector `model` (an artifact or bundled name) rebuilt for `size` x `size`
    inputs at `out`, same weights; `resize` "fixed" stretches images to it (the Astar
    contest's resize), "letterbox" keeps the aspect, "keep" the model's own choice. The
    result holds the sizes, resizes and MAdds before and after. Raises `ClearsightError`
    for a model that is not a detector, a bad size or resize."""
    from clearsight.compress.input_size import change_input_size as change

    return change(model, out, size, resize)


@dataclass(frozen=True)
class Quantized:
    """What `quantize` did: the int8 file written, the quantization's result, and the
    fp32-vs-int8 table (`report`: a restoration or detection report with `table()`,
    `to_dict()`), or None with the reason in `note` (None when no table was asked for)."""

    path: Path
    result: QuantizeResult
    detector: bool
    report: Any | None = None
    scored_on: Path | None = None
    note: str | None = None


def quantize(
    model: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    calibration: str | os.PathLike[str] | None = None,
    method: str = "static",
    layout: str | None = None,
    calibration_method: str | None = None,
    calibration_images: int | None = None,
    calibration_crop: int = 256,
    exclude: Sequence[str] = (),
    keep_output_fp32: bool = True,
    data: str | os.PathLike[str] | None = None,
    max_images: int | None = None,
    sizes: Sequence[int] = (512,),
    runs: int = 3,
    table: bool = True,
    report_json: str | os.PathLike[str] | None = None,
    on_quantize: Callable[[], None] | None = None,
    on_saved: Callable[[Path, QuantizeResult], None] | None = None,
) -> Quantized:
    """Int8 post-training quantization of `model` (artifact, bundled name, architecture or
    fp32 `.onnx`) with ONNX Runtime, saved at `out` (default MODEL.int8.onnx beside it;
    detectors' `layout` "astar": MODEL-astar.int8.onnx), then scored fp32 vs int8.

    `method` "static" (calibrated on the images in `calibration`, QDQ) or "dynamic";
    `calibration_method` minmax, entropy or percentile; the first `calibration_images`
    images, centre-cropped to `calibration_crop`; `exclude` node names and (by default)
    the output path stay fp32. The table (unless `table=False`, and only with `data` or
    `calibration`): restoration: size, PSNR, PSNR against fp32 and latency at `sizes` on
    the pairs in `data` (else the calibration images); detectors: output differences,
    detection agreement on the calibration images and, with a COCO `data` folder, AP or
    the contest score. `report_json` also writes it as JSON. `on_quantize()` is called
    before the work, `on_saved(path, result)` once the file is written.

    Raises `OptionError`/`ClearsightError` for bad options (before any work), a model that
    cannot be quantized, or an unwritable output.
    """
    import json

    from clearsight.atomic import atomic_write_text
    from clearsight.compress.quantize import QuantizeOptions, quantize_model, save_quantized
    from clearsight.out_paths import check_output_file
    from clearsight.runtime.ort_backend import load_onnx
    from clearsight.zoo import default_int8_output

    opts = QuantizeOptions(
        method=method,
        calibration=calibration_method,
        exclude=tuple(exclude),
        keep_output_fp32=keep_output_fp32,
        max_images=calibration_images,
        crop=calibration_crop,
        layout=layout,
    )
    target = check_output_file(out or default_int8_output(str(model), layout))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = load_model(model)
        if on_quantize is not None:
            on_quantize()
        result = quantize_model(loaded, calibration, opts)
    save_quantized(result, target)
    if on_saved is not None:
        on_saved(target, result)
    detector = loaded.is_detector
    done = Quantized(target, result, detector)
    if not table or (data or calibration) is None:
        return done
    if detector and calibration is None:
        return Quantized(
            target, result, detector, note="no table: a detector's is made on --calibration images"
        )
    fp32_mb, int8_mb = len(result.fp32_data) / 2**20, len(result.data) / 2**20
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fp32 = load_onnx(result.fp32_data, source=f"{model} (fp32 onnx)")
        int8 = load_onnx(target)
        if detector:
            from clearsight.compress.quant_report_detect import detect_quant_report

            assert calibration is not None
            scored_on = Path(calibration)
            rep: Any = detect_quant_report(
                fp32, int8, calibration, fp32_mb=fp32_mb, int8_mb=int8_mb,
                runs=max(runs, 5), max_images=max_images, data=data,
            )  # fmt: skip
        else:
            from clearsight.compress.quant_report import quant_report

            scored_on = Path(data or calibration)  # type: ignore[arg-type]
            rep = quant_report(
                fp32, int8, scored_on, fp32_mb=fp32_mb, int8_mb=int8_mb,
                sizes=list(sizes), runs=runs, max_images=max_images,
            )  # fmt: skip
    if report_json is not None:
        atomic_write_text(Path(report_json), json.dumps(rep.to_dict(), indent=2))
    return Quantized(target, result, detector, report=rep, scored_on=scored_on)
