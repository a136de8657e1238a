"""Scoring: a model on paired or COCO data, two models against each other, the Astar
contest's score, and the HTML reports of each."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError

if TYPE_CHECKING:
    from clearsight.detection.astar import AstarResult
    from clearsight.engine.compare import Comparison
    from clearsight.engine.detect_evaluate import DetectionEvalResult
    from clearsight.engine.evaluate import EvalResult, ImageResult, ImagesHook
    from clearsight.engine.inference import Restorer
    from clearsight.report.thumbs import ThumbnailCollector


def evaluate_detection(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    *,
    device: str = "cpu",
    on_start: Callable[[int], None] | None = None,
    on_image: Callable[[int, Any], None] | None = None,
    restore: str | None = None,
) -> DetectionEvalResult:
    """COCO bbox AP (AP, AP50, AP75, APs/m/l, per class) and per-image rows of the detector
    `model` on the COCO-format folder `data` (`annotations/instances_*.json` + images).
    `restore` (a restoration model reference, "auto" or "auto:REF") scores the chain:
    each image restored in memory, then detected (`engine.pipeline.Pipeline`)."""
    from clearsight.engine.detect_evaluate import evaluate_coco_set
    from clearsight.engine.detector import Detector

    detector = Detector.from_pretrained(str(model), device=device)
    name = str(model)
    if restore is not None:
        from clearsight.engine.pipeline import Pipeline

        detector = Pipeline.around(detector, restore)
        name = f"{restore} -> {model}"
    return evaluate_coco_set(detector, data, model_name=name, on_start=on_start, on_image=on_image)


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


def thumbnail_collector(report: str | os.PathLike[str] | None, k: int) -> ThumbnailCollector | None:
    """A thumbnail collector (the `on_images` hook of `evaluate`/`compare`) when an HTML
    report will be written to `report`, else None. Raises `ClearsightError` when `k`, the
    number of worst and best images the report shows, is under 1."""
    if k < 1:
        raise ClearsightError(f"--report-k must be >= 1, got {k}")
    if report is None:
        return None
    from clearsight.report.thumbs import ThumbnailCollector

    return ThumbnailCollector()


def write_eval_report(
    path: str | os.PathLike[str],
    result: EvalResult,
    thumbs: ThumbnailCollector,
    restorer: Restorer,
    *,
    k: int = 8,
) -> Path:
    """Write `evaluate`'s result as a self-contained HTML page at `path` (the model's card,
    the metrics, the `k` worst and best images from `thumbs`), atomically; returns it."""
    from clearsight.report.html import model_card, render_eval_report, write_report

    page = render_eval_report(result, thumbs.thumbs, card=model_card(restorer.loaded), k=k)
    return write_report(path, page)


def write_detection_report(
    path: str | os.PathLike[str],
    result: DetectionEvalResult,
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    *,
    k: int = 8,
    restore: str | None = None,
) -> Path:
    """Write `evaluate_detection`'s result as an HTML page at `path`: the AP table and the
    `k` worst images of the COCO folder `data` with their boxes drawn; returns it. With the
    chain's `restore`, each of them is shown clean (for a `synth --coco` set whose source
    is there), as input, and restored with the predictions drawn on it."""
    from clearsight.api.models import load_model
    from clearsight.data.coco import find_coco_set, load_coco
    from clearsight.report.detection import render_detection_report
    from clearsight.report.html import model_card, write_report

    dataset = load_coco(*find_coco_set(Path(data)))
    front = None
    if restore is not None:  # the chain again, for what it showed the detector
        from clearsight.engine.detector import Detector
        from clearsight.engine.pipeline import Pipeline

        chain = Pipeline.around(Detector.from_pretrained(str(model)), restore)
        front = lambda img: chain.restore_images([img])[0]  # noqa: E731
    page = render_detection_report(
        result, dataset, card=model_card(load_model(model)), k=k, restore=front
    )
    return write_report(path, page)


def write_compare_report(
    path: str | os.PathLike[str],
    comparison: Comparison,
    thumbs_a: ThumbnailCollector,
    thumbs_b: ThumbnailCollector,
    model_a: Restorer,
    model_b: Restorer,
    *,
    k: int = 8,
) -> Path:
    """Write `compare`'s result as an HTML page at `path`: both model cards and the `k`
    largest gains and losses side by side; returns it."""
    from clearsight.report.html import model_card, render_compare_report, write_report

    page = render_compare_report(
        comparison,
        thumbs_a.thumbs,
        thumbs_b.thumbs,
        card_a=model_card(model_a.loaded),
        card_b=model_card(model_b.loaded),
        k=k,
    )
    return write_report(path, page)


def astar_score(
    model: str | os.PathLike[str],
    data: str | os.PathLike[str],
    *,
    limit: int | None = None,
    device: str = "cpu",
    json_out: str | os.PathLike[str] | None = None,
    **quirks: bool,
) -> AstarResult:
    """Score a detector as the Astar 2019 contest did on the COCO folder `data`
    (annotations/ and val2017/): mAP, MAdds, penalty and score. `model` is a detection
    artifact, bundled name, `--layout astar` `.onnx` file or a contest Paddle folder
    (`export_paddle(..., layout="astar")`). `quirks` turn contest quirks off
    (`nms_plus_one=False`, `drop_last_single=False`); `limit` scores the first N images only;
    `json_out` also writes the result as JSON (atomically). Raises `ClearsightError` for a
    bad model or folder."""
    from clearsight.atomic import atomic_write_text
    from clearsight.detection.astar import astar_score as score
    from clearsight.export.paddle import is_paddle_folder, load_contest_paddle

    target: object = str(model)
    if is_paddle_folder(str(model)):
        target = load_contest_paddle(str(model))
    result = score(target, data, limit=limit, device=device, **quirks)
    if json_out is not None:
        atomic_write_text(Path(json_out), result.to_json() + "\n")
    return result
