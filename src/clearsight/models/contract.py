"""What the engine, the exporter, the profiler and the auditor may ask a model.

One base class per task family, so that none of them asks a model's class or probes it with
`getattr`: they ask the contract, and a new architecture is one module that subclasses it
plus one `register_model` call (see `docs/architecture.md`).

Restoration (`RestorationModel`): image in, image of the same size out. Everything below has
a default, so a model declares only what differs:

- `pad_multiple`: H and W the model needs to be multiples of (the engine pads, then crops).
- `receptive_radius`: pixels of context an output pixel sees; None when unknown or global
  (global pooling), which makes generic tiles approximate (blended seams) instead of exact.
- `output_kind`: what `forward`'s outputs are for training: "image" (the restored image) or
  "residual" (what to subtract from the input, e.g. RESCAN's rain layers). `restore` and
  `final_output` always give the image.
- `supports_stages`, `stages`, `last_stages_used`: multi-stage models (RESCAN) run a chosen
  number of stages (`final_output(x, stages=..., threshold=...)`) and record how many each
  image used.
- `prefers_channels_last`: the engine keeps CPU weights NHWC (faster oneDNN convolutions).
- `tiling`: a `TilingLimits` (default tile size, pixels above which an image is tiled);
  None in either uses the engine's defaults (`clearsight.defaults`).
- `final_output(x, **kw)`: the one accessor for "the restored image": `restore`, or forward
  and its last output.
- `tiled_path()`: the model's own tiled restore (exact, or sharing whole-image statistics),
  or None: the engine then tiles generically.
- `export_graph()`, `stats_layout()`, `global_stats_hooks()`: the ONNX graph to trace and its
  output names; how global pooling sites are shared across ONNX Runtime tiles; the hooks that
  record or replace those sites' statistics (see `export/onnx.py`).

Plain `nn.Module`s (tests, quick experiments) still work: `as_restoration_model` shows one
through the contract, reading the attributes it declares under the same names.

Detection (`DetectionModel`) is designed here and implemented by the first detector: image
tensor in, per image boxes (xyxy), scores and labels out; a `DetectionPreprocess` (input size
and resize mode) and a `ClassMap` (contiguous label -> dataset id).

Models import only torch, this module and the layers below it (`tiling`, `preprocess`,
`defaults`): never the engine, the exporter or the CLI (tests/test_layers.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Protocol

import torch
from torch import nn

from clearsight.tiling import Progress

OutputKind = Literal["image", "residual"]


class TiledRestore(Protocol):
    """A model's own tiled restore: `restore(x)` computed in tiles of `tile` pixels."""

    def __call__(
        self, x: torch.Tensor, *, tile: int, progress: Progress | None = None, **kwargs: Any
    ) -> torch.Tensor: ...


def last_output(y: torch.Tensor | list[torch.Tensor] | tuple[torch.Tensor, ...]) -> torch.Tensor:
    """The final output of a call that may return several (training forwards return every
    stage or scale, the full-resolution image last)."""
    return y[-1] if isinstance(y, list | tuple) else y


@dataclass(frozen=True)
class TilingLimits:
    """When and how big a model's images are tiled (None: the engine's default)."""

    default_tile: int | None = None
    max_untiled_pixels: int | None = None


class RestorationModel(nn.Module):
    """Base of every restoration architecture: image in, image of the same size out."""

    task_family: ClassVar[str] = "restoration"
    pad_multiple: int = 1
    receptive_radius: int | None = None
    output_kind: OutputKind = "image"
    supports_stages: bool = False
    stages: int = 0
    """Trained stages of a multi-stage model (0: not multi-stage)."""
    last_stages_used: list[int] | None = None
    """Stages each image of the last staged call used (batch order); None without stages."""
    prefers_channels_last: bool = False
    tiling: TilingLimits = TilingLimits()

    @property
    def predicts_residual(self) -> bool:
        """`output_kind == "residual"` (the name the trainer and losses read)."""
        return self.output_kind == "residual"

    def restore(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The restored image of `x` (inference); by default forward's last output."""
        return last_output(self(x, **kwargs))

    def final_output(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        """The restored image: `restore(x, **kwargs)`, its last output if it gives several.
        The engine, exporter, profiler and auditor all get the image through this."""
        return last_output(self.restore(x, **kwargs))

    def tiled_path(self) -> TiledRestore | None:
        """The model's own tiled restore, or None (the engine's generic tiler is used)."""
        return None

    def export_graph(self) -> tuple[nn.Module, list[str]]:
        """The module to trace for ONNX and its output names, the main `output` first."""
        return FinalOutputGraph(self), ["output"]

    def stats_layout(self) -> dict[str, Any] | None:
        """How the global pooling sites are shared across ONNX Runtime tiles (`sites` values
        of `channels` each, with `halo`, `blend`, `stats_pixels`, `default_tile` and
        optionally `max_untiled_pixels`); None when the model pools nothing globally."""
        return None

    @contextlib.contextmanager
    def global_stats_hooks(
        self, shared: torch.Tensor | None = None
    ) -> Iterator[list[torch.Tensor]]:
        """While active, each global pooling site appends the statistic it computed from its
        own input to the yielded list, in call order; with `shared` [N, sites, C] site k uses
        `shared[:, k]` instead. Inference only. A model without such sites yields []."""
        yield []


class FinalOutputGraph(nn.Module):
    """The export graph of a single-output model: its `final_output`."""

    def __init__(self, model: RestorationModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.model.final_output(x)
        return y + 0.0 if y is x else y  # a graph output may not be its input


class PlainModule(RestorationModel):
    """A plain `nn.Module` seen through the contract: the contract attributes it declares
    itself (same names), the defaults otherwise; `restore` if it has one, else forward."""

    def __init__(self, module: nn.Module) -> None:
        super().__init__()
        self.module = module

    def _declared(self, name: str, default: Any) -> Any:
        # the only place a model is probed by name: modules written without the contract
        return getattr(self.module, name, default)

    @property  # type: ignore[override]
    def pad_multiple(self) -> int:
        return int(self._declared("pad_multiple", 1) or 1)

    @property  # type: ignore[override]
    def receptive_radius(self) -> int | None:
        return self._declared("receptive_radius", None)

    @property  # type: ignore[override]
    def output_kind(self) -> OutputKind:
        return "residual" if self._declared("predicts_residual", False) else "image"

    @property  # type: ignore[override]
    def supports_stages(self) -> bool:
        return bool(self._declared("supports_stages", False))

    @property  # type: ignore[override]
    def stages(self) -> int:
        return int(self._declared("stages", 0) or 0)

    @property  # type: ignore[override]
    def last_stages_used(self) -> list[int] | None:
        return self._declared("last_stages_used", None)

    @property  # type: ignore[override]
    def prefers_channels_last(self) -> bool:
        return bool(self._declared("prefers_channels_last", False))

    @property  # type: ignore[override]
    def tiling(self) -> TilingLimits:
        return TilingLimits(
            self._declared("default_tile", None), self._declared("max_untiled_pixels", None)
        )

    def forward(self, x: torch.Tensor) -> Any:
        return self.module(x)

    def restore(self, x: torch.Tensor, **kwargs: Any) -> torch.Tensor:
        own = self._declared("restore", None)
        return last_output(own(x, **kwargs) if callable(own) else self.module(x, **kwargs))

    def tiled_path(self) -> TiledRestore | None:
        own = self._declared("restore_tiled", None)
        return own if callable(own) else None


def as_restoration_model(model: nn.Module) -> RestorationModel:
    """`model` itself when it implements the contract, else a `PlainModule` view of it."""
    return model if isinstance(model, RestorationModel) else PlainModule(model)


# --------------------------------------------------------------------------- detection

ResizeMode = Literal["letterbox", "stretch"]


@dataclass(frozen=True)
class DetectionPreprocess:
    """How an image becomes a detector's input, and how boxes map back.

    `input_size` (H, W) is what the network sees. "letterbox" scales the image to fit inside
    it keeping the aspect ratio and pads the rest with `pad_value` (boxes are un-padded and
    un-scaled back); "stretch" resizes to exactly `input_size` (boxes are scaled per axis).
    Values are RGB in [0,1] before `mean`/`std` normalisation, as for restoration.
    """

    input_size: tuple[int, int]
    resize_mode: ResizeMode = "letterbox"
    pad_value: float = 114 / 255
    mean: tuple[float, float, float] = (0.0, 0.0, 0.0)
    std: tuple[float, float, float] = (1.0, 1.0, 1.0)


@dataclass(frozen=True)
class ClassMap:
    """Contiguous labels 0..K-1 (what a detector outputs) -> the dataset's ids and names.

    COCO's 80 categories carry sparse ids between 1 and 90, so label 0 is id 1 ("person") and
    label 79 is id 90 ("toothbrush"); evaluation against COCO annotations needs the ids.
    """

    dataset_ids: tuple[int, ...]
    names: tuple[str, ...]

    def __post_init__(self) -> None:
        if len(self.dataset_ids) != len(self.names):
            raise ValueError(f"class map: {len(self.dataset_ids)} ids but {len(self.names)} names")
        if len(set(self.dataset_ids)) != len(self.dataset_ids):
            raise ValueError("class map: dataset ids must be unique")

    @property
    def num_classes(self) -> int:
        return len(self.dataset_ids)

    def dataset_id(self, label: int) -> int:
        """The dataset id of contiguous `label`."""
        return self.dataset_ids[label]

    def label(self, dataset_id: int) -> int:
        """The contiguous label of `dataset_id` (a ValueError for an unknown id)."""
        return self.dataset_ids.index(dataset_id)


@dataclass
class Detections:
    """One image's detections, in that image's own pixel coordinates (after `preprocess` is
    undone): `boxes` [K,4] float (x1, y1, x2, y2), `scores` [K] float in [0,1] sorted
    descending, `labels` [K] int64 contiguous labels (see `ClassMap`)."""

    boxes: torch.Tensor
    scores: torch.Tensor
    labels: torch.Tensor


class DetectionModel(nn.Module):
    """Base of detection architectures (design: the first detector fills it in).

    `detect` takes a [B,3,H,W] RGB batch in [0,1] at the image's own size and returns one
    `Detections` per image; the model applies its `preprocess` (resize to `input_size`) and
    maps boxes back, so callers never see the network's resolution. `forward` is the raw
    network for training. The ONNX graph (`export_graph`) takes the preprocessed
    [N,3,input_size] batch and outputs `boxes` [N,K,4], `scores` [N,K] and `labels` [N,K]
    (padded with score 0); resizing and box mapping stay outside the graph.
    """

    task_family: ClassVar[str] = "detection"
    preprocess: DetectionPreprocess
    class_map: ClassMap

    def detect(self, images: torch.Tensor, *, score_threshold: float = 0.0) -> list[Detections]:
        raise NotImplementedError(f"{type(self).__name__} does not implement detect()")

    def export_graph(self) -> tuple[nn.Module, list[str]]:
        raise NotImplementedError(f"{type(self).__name__} does not implement export_graph()")
