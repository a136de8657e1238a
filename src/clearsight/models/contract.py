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
- `prefers_compile`: long CPU training runs `torch.compile` the model (measured faster).
- `tiling`: a `TilingLimits` (default tile size, pixels above which an image is tiled);
  None in either uses the engine's defaults (`clearsight.defaults`).
- `final_output(x, **kw)`: the one accessor for "the restored image": `restore`, or forward
  and its last output.
- `tiled_path()`: the model's own tiled restore (exact, or sharing whole-image statistics),
  or None: the engine then tiles generically.
- `export_graph()`, `stats_layout()`, `global_stats_hooks()`: the ONNX graph to trace and its
  output names; how global pooling sites are shared across ONNX Runtime tiles; the hooks that
  record or replace those sites' statistics (see `export/onnx.py`).

Fine-tuning (restoration): `init_optional_keys()` names the state keys of optional branches
that start as the identity (MBCNN's tone head), which an initial artifact built without the
branch may lack (`model.init` in training then leaves them at their own initialisation);
`init_optional_args()` names the arguments that switch those branches on.

Pruning (both families): `prune_protected()` names the layers whose output width is
semantic (image channels, the DCT's 64 frequencies, class and box outputs), which a
structured pruner must keep; None (the default) means the architecture has not declared
them and is not prunable. `prune_tracing()` is a context during which `forward` calls its
layers as modules (RESCAN fuses its gate convolutions functionally, which a dependency
tracer cannot follow). See `docs/compress.md`.

Plain `nn.Module`s (tests, quick experiments) still work: `as_restoration_model` shows one
through the contract, reading the attributes it declares under the same names.

Detection (`DetectionModel`, implemented by yolox-nano and ssd-mobilenet-v1): the
preprocessed batch in, the raw head out; `decode` and `postprocess` give boxes (xyxy),
scores and contiguous labels; preprocessing and the label -> dataset id map are artifact data.

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
    prefers_compile: bool = False
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

    def prune_protected(self) -> list[nn.Module] | None:
        """Layers whose output channels a structured pruner must keep (the restored image's
        channels and any other semantic width); None: not declared, so not prunable."""
        return None

    def init_optional_keys(self) -> list[str]:
        """State-dict keys an initial artifact may lack: optional branches initialised to
        the identity, so loading the rest reproduces the artifact's output exactly."""
        return []

    def init_optional_args(self) -> list[str]:
        """The constructor arguments that switch such branches on: an initial artifact may
        differ from the model in these (and only these) when it lacks the branch."""
        return []

    def prune_tracing(self) -> contextlib.AbstractContextManager[None]:
        """While active, `forward` calls every layer as a module (for a dependency tracer)."""
        return contextlib.nullcontext()

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


class DetectionModel(nn.Module):
    """Base of detection architectures: what `detection.Detector`, the COCO evaluation and
    the Astar scorer may ask of a detector.

    - `task = "detect"`; `input_size` (H, W) is the fixed size the network sees (its anchors
      or grids are built for it); `num_classes` counts the class outputs.
    - `forward(x)` takes the preprocessed [N,3,H,W] batch and returns the raw head output
      (what ONNX export and parity with a reference runtime compare).
    - `decode(raw)` gives (xyxy boxes in network-input pixels [N,A,4], scores [N,A,C]).
    - `postprocess(raw, score_threshold=, iou_threshold=, max_detections=)` gives, per image,
      a dict of `boxes` [K,4] (network-input pixels), `scores` [K] and `labels` [K]
      (contiguous 0..C-1, background excluded).

    Preprocessing (input size, stretch or letterbox, colour order, range, mean/std) is the
    artifact's `PreprocessSpec`, and the contiguous label -> dataset id map (COCO's sparse
    ids) is the artifact's `class_ids`/`class_names`: data, read by every consumer
    (`detection/preprocess.py`, `engine/detector.py`), never re-declared.
    """

    task: ClassVar[str] = "detect"
    input_size: tuple[int, int]
    num_classes: int

    def prune_protected(self) -> list[nn.Module] | None:
        """Layers whose output channels a structured pruner must keep (class, box and
        objectness outputs); None: not declared, so not prunable."""
        return None

    def prune_tracing(self) -> contextlib.AbstractContextManager[None]:
        """While active, `forward` calls every layer as a module (for a dependency tracer)."""
        return contextlib.nullcontext()

    @property
    def num_labels(self) -> int:
        """Contiguous labels `postprocess` emits (the artifact's `class_ids` has one per
        label): `num_classes`, less one where a background output is counted in it (SSD)."""
        return self.num_classes

    def decode(self, raw: Any) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError(f"{type(self).__name__} does not implement decode()")

    def postprocess(
        self,
        raw: Any,
        score_threshold: float = 0.01,
        iou_threshold: float = 0.5,
        max_detections: int = 100,
    ) -> list[dict[str, torch.Tensor]]:
        raise NotImplementedError(f"{type(self).__name__} does not implement postprocess()")


def detection_labels(model: nn.Module) -> int | None:
    """Contiguous labels a detector emits: the contract's `num_labels`, or what a plain
    module (a test's stand-in, a bare ONNX Runtime forward) declares under the contract's
    names (`num_labels`, else `num_classes`); None when it declares neither."""
    if isinstance(model, DetectionModel):
        return int(model.num_labels)
    # the only place a detector is probed by name: modules written without the contract
    n = getattr(model, "num_labels", getattr(model, "num_classes", None))
    return int(n) if n is not None else None


def own_postprocess(model: nn.Module) -> Any:
    """The detector's own `postprocess`, or None where it has none (a bare forward, whose
    boxes the registered architecture's postprocess then decodes)."""
    if isinstance(model, DetectionModel):
        return model.postprocess
    post = getattr(model, "postprocess", None)
    return post if callable(post) else None
