"""A detector at another input size: the same weights fed a smaller (or larger) image.

The Astar contest hands every model a 300x300 image and counts MAdds at the model's own
input, so YOLOX-Nano, built for 416x416, upsamples the contest's pixels and pays for 1.9x
the MAdds of a 300-ish input without seeing any detail more. Its convolutions run at any
multiple of 32: rebuilt at 320 it keeps its weights and costs 316 instead of 534 MAdds
(docs/compress.md, "Detectors"). The artifact records the new `input_size` argument and a
preprocessing at that size (optionally an antialiased stretch, `resize="fixed"`, as the
contest's own Lanczos resize), so `detect`, `eval`, `astar-score` and `train` (`model.init`)
all read it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from pathlib import Path

from clearsight.artifact import build_from_config, save_artifact
from clearsight.errors import ClearsightError, OptionError
from clearsight.models.registry import get_spec

__all__ = ["InputSizeResult", "change_input_size"]

RESIZES = ("keep", "fixed", "letterbox")


@dataclass
class InputSizeResult:
    """What `change_input_size` wrote: the input sizes, resizes and MAdds before and after."""

    path: Path
    size_before: tuple[int, int]
    size_after: tuple[int, int]
    resize_before: str
    resize_after: str
    madds_before: float
    madds_after: float


def change_input_size(
    model: str | os.PathLike[str], out: str | os.PathLike[str], size: int, resize: str = "keep"
) -> InputSizeResult:
    """Save detector `model` (an artifact or bundled name) rebuilt for `size` x `size`
    inputs at `out`; `resize` "fixed" stretches images to it (the contest's resize),
    "letterbox" keeps the aspect, "keep" keeps the model's own choice."""
    from clearsight.compress.prune import measure_macs
    from clearsight.out_paths import check_output_folder
    from clearsight.zoo import resolve_model

    if resize not in RESIZES:
        raise OptionError("resize", f"unknown {resize!r}; options: {', '.join(RESIZES)}")
    if size <= 0:
        raise OptionError("size", f"the input's side in pixels, > 0; got {size}")
    check_output_folder(out, "input-size output")
    loaded = resolve_model(str(model))
    cfg = loaded.config
    if not loaded.is_detector:
        raise ClearsightError(f"{model}: a {cfg.task!r} model takes any image size as it is")
    if "input_size" not in get_spec(cfg.architecture).default_args():
        raise ClearsightError(f"{model}: {cfg.architecture} has no input_size argument")
    spec = cfg.preprocess
    new_spec = dataclasses.replace(
        spec, size=(size, size), resize=spec.resize if resize == "keep" else resize
    )
    if resize == "fixed":  # a stretch as the contest's: its Lanczos resize antialiases
        new_spec = dataclasses.replace(new_spec, extra={**spec.extra, "antialias": True})
    provenance = dict(cfg.provenance)
    provenance["input_size"] = {"from": loaded.source, "size": size, "resize": new_spec.resize}
    new_cfg = dataclasses.replace(
        cfg,
        arch_args={**cfg.arch_args, "input_size": size},
        preprocess=new_spec,
        provenance=provenance,
        name=f"{cfg.name or cfg.architecture}-{size}",
    )
    try:
        rebuilt = build_from_config(new_cfg, source=str(model))
    except (ValueError, ClearsightError) as exc:
        raise OptionError("size", str(exc)) from None
    rebuilt.load_state_dict(loaded.model.state_dict(), strict=True)
    before, _ = measure_macs(loaded.model)
    after, _ = measure_macs(rebuilt)
    path = save_artifact(rebuilt, out, new_cfg)
    return InputSizeResult(
        path,
        tuple(loaded.model.input_size),
        tuple(rebuilt.input_size),
        spec.resize,
        new_spec.resize,
        before,
        after,
    )
