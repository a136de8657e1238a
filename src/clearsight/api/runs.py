"""Folder runs: restore or detect every image of some inputs into an output folder, on this
process (the local engine) or on a Ray cluster (docs/scale.md), with one call."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError, OptionError, check_unit_interval

if TYPE_CHECKING:
    from clearsight.engine.detector import Detector, DetectRun
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.engine.restore_files import RestoredFile, RestoreRun
    from clearsight.runtime.failures import FailedFile
    from clearsight.scale.detect_ray import DetectSummary
    from clearsight.scale.ray_engine import ScaleSummary

ENGINES = ("local", "ray")
"""What runs a folder run: this process, or an actor pool on Ray."""

DEFAULT_DERAIN = "default-derain"
DEFAULT_DEMOIRE = "default-demoire"
DEFAULT_DETECT = "default-detect"
EXISTING = ("overwrite", "skip")


def check_engine(engine: str) -> str:
    """`engine` when it is "local" or "ray"; an `OptionError` on `engine` otherwise."""
    if engine not in ENGINES:
        raise OptionError("engine", f"unknown engine {engine!r}; known: {', '.join(ENGINES)}")
    return engine


def _check_existing(existing: str | None) -> None:
    if existing is not None and existing not in EXISTING:
        raise OptionError("existing", f"must be one of {', '.join(EXISTING)}, got {existing!r}")


def restore_files(
    model: str | os.PathLike[str] | Restorer,
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    engine: str = "local",
    options: InferenceOptions | None = None,
    max_pixels: int | None = None,
    existing: str | None = None,
    fail_fast: bool = False,
    workers: int = 1,
    batch_size: int = 8,
    address: str | None = None,
    on_load: Callable[[Restorer], None] | None = None,
    on_start: Callable[..., None] | None = None,
    on_tile: Callable[[Path, int, int], None] | None = None,
    on_file: Callable[[RestoredFile], None] | None = None,
    on_failure: Callable[[FailedFile], None] | None = None,
    on_skip: Callable[[Path, Path], None] | None = None,
    on_result: Callable[[Any], None] | None = None,
    **option_values: Any,
) -> RestoreRun | ScaleSummary:
    """Restore every image of `inputs` into the folder `out`, names mirrored: what
    `clearsight restore`, `derain` and `demoire` run.

    `model` is a `Restorer`, or any `load_model` reference run with `options` (an
    `InferenceOptions`) or its keyword arguments (tile=..., ensemble=..., stages=...).
    `engine="local"` (default) runs here and returns a `RestoreRun`; `"ray"` runs
    `workers` actors (`address`: an existing cluster; inputs may also be globs, manifests
    and URIs) and returns a `ScaleSummary`. `existing`: "overwrite" or "skip" existing
    outputs; None is each engine's default (local: overwrite; Ray: skip, to resume).

    Callbacks: `on_load(restorer)` once the local engine's model is loaded; local:
    `on_start(n_files)`, `on_tile(source, done, total)`, `on_file(restored)`,
    `on_failure(failed)`, `on_skip(source, output)`; Ray: `on_start(todo, skipped)` and
    `on_result(item)` per image.

    A file that fails is recorded (OUT/failures.csv) and the run goes on, unless
    `fail_fast`. Raises `OptionError` for a bad option, engine or pixel limit (before any
    work), `ClearsightError` for a bad input or model, and `FailuresCsvError` (with the
    run attached) when failures.csv cannot be written.
    """
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.runtime.failures import check_max_pixels

    check_max_pixels(max_pixels)
    check_engine(engine)
    _check_existing(existing)
    if options is not None and option_values:
        raise TypeError("pass either options= or option keyword arguments, not both")
    if engine == "ray":
        from clearsight.scale.ray_engine import restore_files_ray

        if isinstance(model, Restorer):
            raise ClearsightError("--engine ray loads the model in each worker: give a reference")
        return restore_files_ray(
            str(model),
            inputs,
            out,
            workers=workers,
            batch_size=batch_size,
            address=address,
            max_pixels=max_pixels,
            options=options or InferenceOptions(**option_values),
            overwrite=existing == "overwrite",
            on_start=on_start,
            on_result=on_result,
        )
    from clearsight.engine.restore_files import restore_files as run_local

    if isinstance(model, Restorer):
        if options is not None or option_values:
            raise ClearsightError("give inference options to Restorer.from_pretrained, not here")
        restorer = model
    elif options is not None:
        from clearsight.engine.inference import load_for_options

        restorer = Restorer(load_for_options(str(model), options), options)
    else:
        restorer = Restorer.from_pretrained(str(model), **option_values)
    if on_load is not None:
        on_load(restorer)
    return run_local(
        restorer,
        [Path(p) for p in inputs],
        out,
        max_pixels=max_pixels,
        existing=existing or "overwrite",  # type: ignore[arg-type]
        fail_fast=fail_fast,
        on_start=on_start,
        on_tile=on_tile,
        on_file=on_file,
        on_failure=on_failure,
        on_skip=on_skip,
    )


def detect_files(
    model: str | os.PathLike[str] | Detector,
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    engine: str = "local",
    score_threshold: float = 0.3,
    device: str = "cpu",
    backend: str = "torch",
    precision: str = "fp32",
    existing: str | None = None,
    fail_fast: bool = False,
    workers: int = 1,
    batch_size: int = 8,
    address: str | None = None,
    on_image: Callable[[Path, Any], None] | None = None,
    on_failure: Callable[[FailedFile], None] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[Any], None] | None = None,
    restore: str | None = None,
    save_restored: str | os.PathLike[str] | None = None,
) -> DetectRun | DetectSummary:
    """Detect objects in every image of `inputs`: a copy of each with labelled boxes under
    `out`, and OUT/detections.json in COCO results format; what `clearsight detect` runs.

    `model`: a `Detector` or any detection reference (artifact, bundled name, `.onnx`).
    `engine="local"` returns a `DetectRun` (callbacks `on_image(source, detections)`,
    `on_failure(failed)`); `"ray"` returns a `DetectSummary` (callbacks
    `on_start(todo, skipped)`, `on_result(item)`) and resumes a run (skips images drawn and
    recorded) unless `existing="overwrite"`. Raises `OptionError` for an unknown engine,
    for `backend`/`precision` other than torch/fp32 on Ray, or `existing="skip"` locally;
    `ClearsightError` for a model that is not a detector or a bad input; a bad
    $CLEARSIGHT_MAX_PIXELS before any work. `restore`: a restoration model reference, or
    "auto" / "auto:REF" (restore only images that look rainy), run in memory before the
    detector (`engine.pipeline.Pipeline`); `save_restored` a folder for what it saw.
    """
    from clearsight.runtime.failures import check_max_pixels

    check_max_pixels(None)  # $CLEARSIGHT_MAX_PIXELS, before any work
    check_engine(engine)
    _check_existing(existing)
    check_unit_interval("score_threshold", score_threshold)
    if save_restored is not None and restore is None:
        raise OptionError("save_restored", "needs --restore (nothing is restored without it)")
    if engine == "ray":
        from clearsight.scale.detect_ray import detect_files_ray

        if backend != "torch" or precision != "fp32":
            raise OptionError(
                "backend", "detect runs --backend onnxruntime and int8 with --engine local"
            )
        return detect_files_ray(
            inputs,
            out,
            str(model),
            score_threshold=score_threshold,
            device=device,
            overwrite=existing == "overwrite",
            address=address,
            workers=workers,
            batch_size=batch_size,
            restore=restore,
            save_restored=save_restored,
            on_start=on_start,
            on_result=on_result,
        )
    if existing == "skip":
        raise OptionError("skip_existing", "detect resumes a run only with --engine ray")
    from clearsight.engine.detector import Detector

    detector = (
        model
        if isinstance(model, Detector)
        else Detector.from_pretrained(
            str(model), device=device, backend=backend, precision=precision
        )
    )
    if restore is not None:
        from clearsight.engine.pipeline import Pipeline

        detector = Pipeline.around(detector, restore, save_restored=save_restored)
    return detector.detect_files(
        [Path(p) for p in inputs],
        out,
        score_threshold=score_threshold,
        on_image=on_image,
        fail_fast=fail_fast,
        on_failure=on_failure,
    )
