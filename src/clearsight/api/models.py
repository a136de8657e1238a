"""Models and the checks every command makes first: load, name a task or family, list."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError

if TYPE_CHECKING:
    from clearsight.artifact import LoadedModel
    from clearsight.families import Family
    from clearsight.model_audit import AuditReport


def load_model(ref: str | os.PathLike[str], device: str = "cpu", seed: int = 0) -> LoadedModel:
    """Load an artifact folder or `.safetensors` file, an exported `.onnx` file (ONNX
    Runtime), a bundled model name ("default-derain") or an architecture name (random
    weights, seeded, with an `UntrainedModelWarning`).

    Raises `ClearsightError` ("unknown model ...") for a reference that is none of these."""
    from clearsight.zoo import resolve_model

    return resolve_model(str(ref), device=device, seed=seed)


def model_task(ref: str | os.PathLike[str]) -> str:
    """The task ("derain", "demoire", "detect", ...) of `ref`, read from its config or the
    registry without loading weights. Raises `ClearsightError` for an unknown reference."""
    from clearsight.zoo import model_task as task_of

    return task_of(str(ref))


def model_family(ref: str | os.PathLike[str]) -> Family:
    """The task family (`clearsight.families.Family`: restoration or detection) of `ref`,
    without loading weights: how a command routes a model to the right engine. Raises
    `ClearsightError` for an unknown reference."""
    from clearsight.zoo import model_family as family

    return family(str(ref))


def require_bundled(name: str, architecture: str) -> str:
    """`name` when it is a bundled model of this installation; else a `ClearsightError`
    saying to give a trained `architecture` artifact instead (what `clearsight derain` and
    `demoire` check before any work)."""
    from clearsight.zoo import bundled_models

    if name not in bundled_models():
        raise ClearsightError(
            f"the bundled model {name!r} is missing from this installation; "
            f"use `clearsight restore --model ARTIFACT` with a trained {architecture} artifact"
        )
    return name


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
                "description": f"{_origin(cfg)} {cfg.architecture}",
            }
        )
    return rows


def _origin(cfg: Any) -> str:
    """How a bundled model came to be: converted from released weights (its provenance
    names them) or trained here."""
    return "converted" if "converted_from" in (cfg.provenance or {}) else "trained"


def audit(model: str | os.PathLike[str], *, size: int = 32, seed: int = 0) -> AuditReport:
    """Check `model` (architecture name or artifact path) for the field's known bugs:
    gradients, purity, structure, spec and two training steps, on a `size` x `size` sample
    batch (seeded). Raises `ClearsightError` for a size under 8."""
    from clearsight.model_audit import audit as run_audit

    if size < 8:
        raise ClearsightError(f"--size must be >= 8, got {size}")
    return run_audit(str(model), size=size, seed=seed)


def parse_scales(text: str) -> tuple[float, ...]:
    """Parse "1.0,0.75" as (1.0, 0.75): the `scales` inference option from its command-line text
    (an `OptionError` on `scales` for a bad one)."""
    from clearsight.engine.inference import parse_scales as parse

    return parse(text)


def check_max_pixels(max_pixels: int | None) -> int:
    """The pixel limit that applies (`max_pixels`, else $CLEARSIGHT_MAX_PIXELS, else the
    default); a bad value is an `OptionError` naming it, raised before any work."""
    from clearsight.runtime.failures import check_max_pixels as check

    return check(max_pixels)


def check_output_file(path: str | os.PathLike[str], what: str = "output file") -> Path:
    """`path` as a file that can be written (no folder or file in its way); an
    `OutputPathError` (a `ClearsightError`) naming `what` otherwise."""
    from clearsight.out_paths import check_output_file as check

    return check(path, what)


def check_output_folder(path: str | os.PathLike[str], what: str = "output folder") -> Path:
    """`path` as a folder that can hold outputs (no file in its way); an `OutputPathError`
    naming `what` otherwise."""
    from clearsight.out_paths import check_output_folder as check

    return check(path, what)
