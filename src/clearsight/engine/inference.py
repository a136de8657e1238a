"""Restoring images of any size: same size out, never resized (docs/architecture.md §6).

`Restorer` wraps a loaded model with its preprocessing spec. Inputs are padded to the
model's multiple and cropped back; images above a pixel budget are tiled (the model's own
tiled path when it has one, else overlapping blended tiles); an optional x8
flip/rotation self-ensemble averages the eight dihedral views, and optional test-time
`scales` average predictions made on resized copies (each resized back to the input size).
Multi-stage models (RESCAN: `supports_stages`) can run fewer stages: a fixed number, or
"auto" (each image stops once a stage changes it by less than `stage_threshold`).
"""

from __future__ import annotations

import logging
import math
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import torch

from clearsight.artifact import LoadedModel
from clearsight.defaults import (
    DEFAULT_HALO,
    DEFAULT_MAX_UNTILED_PIXELS,
    DEFAULT_STAGE_THRESHOLD,
    DEFAULT_TILE,
    MIN_TILE,
)
from clearsight.engine.backend_table import BackendChoice, SlowerBackendWarning, slower_than_torch
from clearsight.errors import ClearsightError, ModelOutputError, OptionError
from clearsight.io import image_to_tensor, tensor_to_image
from clearsight.models.contract import as_restoration_model
from clearsight.preprocess import pad_to_multiple, resize_antialiased
from clearsight.runtime.ort_backend import BACKENDS, ort_precision
from clearsight.tiling import Progress, tiled_apply
from clearsight.zoo import PRECISIONS

_log = logging.getLogger(__name__)
_SLOWER_SAID: set[str] = set()
"""The `SlowerBackendWarning`s already given in this process."""
Ensemble = Literal["none", "flip", "x8"]
AUTO = "auto"
BACKEND_OPTIONS = (AUTO, *BACKENDS)


@dataclass(frozen=True)
class InferenceOptions:
    """How to run a model over an image."""

    tile: int | None = None
    """Tile size in pixels; None tiles only images above `max_untiled_pixels`, 0 never tiles."""
    max_untiled_pixels: int | None = None
    """Auto-tiling threshold; None uses the model's own `max_untiled_pixels`, else 512x512."""
    halo: int | None = None
    """Context around generic tiles; None uses the model's receptive radius (exact)."""
    blend: int = 0
    ensemble: Ensemble = "none"
    scales: tuple[float, ...] = (1.0,)
    """Multi-scale prediction: restore resized copies (bicubic, antialiased), resize each
    back to the input size and average them with the ensemble views; (1.0,) is off."""
    device: str = "cpu"
    stages: str | int = "all"
    """Stages of a multi-stage model (RESCAN): "all" (as trained), "auto" (each image stops
    once a stage changes it by less than `stage_threshold`), or a number N (the first N)."""
    stage_threshold: float = DEFAULT_STAGE_THRESHOLD
    """For "auto": mean absolute change of the restored image, in [0,1] image units, between
    two stages below which an image stops (>= 0; 0 never stops early)."""
    backend: str = "torch"
    """torch, onnxruntime (`Restorer.from_pretrained` exports the model to ONNX first), or
    auto: per image size, the backend `benchmarks/restore_speed.py` measured faster for the
    model's architecture (`engine/backend_table.py`; torch where nothing was measured, for
    stages other than all, and off the CPU)."""
    precision: str = "fp32"
    """fp32, or int8: `from_pretrained` runs the model's int8 ONNX file (`zoo.find_int8`:
    `x.int8.onnx` beside it, made by `clearsight compress quantize`) with ONNX Runtime,
    whatever `backend` says, since int8 exists only as an ONNX Runtime graph."""

    def __post_init__(self) -> None:
        """Validate every option once, here: an `OptionError` naming the first bad one."""
        if self.ensemble not in ENSEMBLE_VIEWS:
            known = ", ".join(ENSEMBLE_VIEWS)
            raise OptionError("ensemble", f"unknown ensemble {self.ensemble!r}; known: {known}")
        for name in ("tile", "max_untiled_pixels", "halo"):
            _check_count(name, getattr(self, name), allow_none=True)
        _check_count("blend", self.blend, allow_none=False)
        if self.tile is not None and 0 < self.tile < MIN_TILE:
            raise OptionError(
                "tile", f"must be 0 (never tile) or >= {MIN_TILE} pixels, got {self.tile}"
            )
        object.__setattr__(self, "device", check_device(self.device))
        object.__setattr__(self, "scales", validate_scales(self.scales))
        stages = parse_stages(self.stages)
        object.__setattr__(self, "stages", stages)
        object.__setattr__(self, "stage_threshold", check_stage_threshold(self.stage_threshold))
        if self.backend not in BACKEND_OPTIONS:
            raise OptionError(
                "backend",
                f"unknown backend {self.backend!r}; known: {', '.join(BACKEND_OPTIONS)}",
            )
        if self.precision not in PRECISIONS:
            raise OptionError(
                "precision",
                f"unknown precision {self.precision!r}; known: {', '.join(PRECISIONS)}",
            )
        if self.precision == "int8" and self.device != "cpu":
            raise OptionError(
                "precision", f"int8 runs with ONNX Runtime on the CPU; got --device {self.device}"
            )
        if (self.backend == "onnxruntime" or self.precision != "fp32") and stages != "all":
            raise OptionError(
                "stages",
                f"{stages} needs --backend torch and fp32 (an exported graph runs all stages)",
            )


def load_for_options(ref: str, opts: InferenceOptions) -> LoadedModel:
    """The model `ref` as `opts` runs it: its int8 ONNX file for `precision="int8"`
    (`zoo.find_int8`), exported to ONNX Runtime for `backend="onnxruntime"`, else as is."""
    from clearsight.zoo import find_int8, resolve_model

    if opts.precision == "int8":
        return resolve_model(str(find_int8(ref)))
    loaded = resolve_model(ref, device=opts.device)
    if opts.backend == "onnxruntime":
        from clearsight.export.onnx import to_onnxruntime

        loaded = to_onnxruntime(loaded, opts.device)
    return loaded


def _check_count(name: str, value: object, *, allow_none: bool) -> None:
    """An int >= 0 (or None where that means "automatic")."""
    if value is None and allow_none:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise OptionError(name, f"must be >= 0, got {value}")


def available_devices() -> list[str]:
    """The devices this machine can run on, as `--device` spells them."""
    found = ["cpu"]
    found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        found.append("mps")
    return found


def check_device(device: object) -> str:
    """A torch device string that exists here (cuda/mps available, index in range), else
    an `OptionError` naming the devices that are."""
    if isinstance(device, torch.device):
        device = str(device)
    known = ", ".join(available_devices())
    if not isinstance(device, str):
        raise OptionError("device", f"expected a device name such as cpu, got {device!r}")
    try:
        dev = torch.device(device)
    except (RuntimeError, ValueError):
        raise OptionError(
            "device", f"{device!r} is not a torch device name; available: {known}"
        ) from None
    if dev.type == "cpu":
        return device
    if dev.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if count == 0 or (dev.index is not None and dev.index >= count):
            raise OptionError("device", f"{device} is not available here; available: {known}")
        return device
    if dev.type == "mps":
        mps = getattr(torch.backends, "mps", None)
        if mps is None or not mps.is_available():
            raise OptionError("device", f"{device} is not available here; available: {known}")
        return device
    raise OptionError("device", f"{device} is not supported; available: {known}")


class StageOptionError(OptionError):
    """A bad `stages`/`stage_threshold` option; `option` names which (for the CLI)."""


def parse_stages(value: str | int) -> str | int:
    """The stages option: "all", "auto" or a count >= 1 (an int or its text), else an error.

    The upper bound (the model's trained stages) is checked by the `Restorer`.
    """
    if isinstance(value, bool):
        raise StageOptionError("stages", f"expected all, auto or a number >= 1, got {value!r}")
    if isinstance(value, str):
        key = value.strip().lower()
        if key in ("all", "auto"):
            return key
        try:
            value = int(key)
        except ValueError:
            raise StageOptionError(
                "stages", f"expected all, auto or a number of stages >= 1, got {value!r}"
            ) from None
    if not isinstance(value, int) or value < 1:
        raise StageOptionError("stages", f"expected all, auto or a number >= 1, got {value!r}")
    return value


def check_stage_threshold(value: float) -> float:
    """A finite or infinite number >= 0; else a StageOptionError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not float(value) >= 0.0:
        raise StageOptionError("stage_threshold", f"must be a number >= 0, got {value!r}")
    return float(value)


def _dihedral(
    k: int,
) -> tuple[Callable[[torch.Tensor], torch.Tensor], Callable[[torch.Tensor], torch.Tensor]]:
    """The k-th of the 8 flip/rotation views (k < 4: rotations; k >= 4: flipped rotations)."""
    rot, flip = k % 4, k >= 4

    def fwd(t: torch.Tensor) -> torch.Tensor:
        t = t.flip(-1) if flip else t
        return torch.rot90(t, rot, dims=(-2, -1))

    def inv(t: torch.Tensor) -> torch.Tensor:
        t = torch.rot90(t, -rot, dims=(-2, -1))
        return t.flip(-1) if flip else t

    return fwd, inv


ENSEMBLE_VIEWS: dict[str, list[int]] = {"none": [0], "flip": [0, 4], "x8": list(range(8))}
MIN_SCALE, MAX_SCALE = 0.1, 4.0


def validate_scales(scales: object) -> tuple[float, ...]:
    """A non-empty tuple of finite scales in [0.1, 4]; an OptionError that says what is wrong."""
    if isinstance(scales, str | bytes) or not hasattr(scales, "__iter__"):
        raise OptionError("scales", f"scales must be a sequence of numbers, got {scales!r}")
    out: list[float] = []
    for s in scales:  # type: ignore[attr-defined]
        if isinstance(s, bool) or not isinstance(s, int | float):
            raise OptionError("scales", f"scale {s!r} is not a number")
        if not (MIN_SCALE <= float(s) <= MAX_SCALE):  # also rejects NaN
            raise OptionError("scales", f"scale {s!r} is outside [{MIN_SCALE}, {MAX_SCALE}]")
        out.append(float(s))
    if not out:
        raise OptionError("scales", "scales must hold at least one scale, e.g. (1.0,)")
    return tuple(out)


def parse_scales(text: str) -> tuple[float, ...]:
    """'1.0,0.75' -> (1.0, 0.75), with a clear OptionError for anything else."""
    parts = [p.strip() for p in text.split(",")]
    values: list[float] = []
    for p in parts:
        try:
            values.append(float(p))
        except ValueError:
            raise OptionError(
                "scales",
                f"bad scale {p!r} in {text!r}; expected numbers separated by commas, e.g. 1.0,0.75",
            ) from None
    return validate_scales(values)


class Restorer:
    """Run a restoration model on [B,3,H,W] RGB tensors in [0,1]."""

    def __init__(self, loaded: LoadedModel, options: InferenceOptions | None = None) -> None:
        if loaded.is_detector:
            raise ClearsightError(
                f"model {loaded.source} is a detector (task 'detect'), not a restoration "
                "model; use `clearsight detect` or `clearsight eval`"
            )
        self.loaded = loaded
        self.options = options or InferenceOptions()
        if self.options.ensemble not in ENSEMBLE_VIEWS:
            known = ", ".join(ENSEMBLE_VIEWS)
            raise ValueError(f"unknown ensemble {self.options.ensemble!r}; known: {known}")
        self.scales = validate_scales(self.options.scales)
        self.model = loaded.model.eval().to(self.options.device)
        self.net = as_restoration_model(self.model)
        """The model as the restoration contract sees it (`models/contract.py`)."""
        cpu = torch.device(self.options.device).type == "cpu"
        if self.net.prefers_channels_last and cpu:
            # oneDNN's convolutions run faster on NHWC weights (MBCNN at 1024x1024: 1.3x);
            # the values are unchanged and outputs come back in the default layout
            self.model.to(memory_format=torch.channels_last)
        self.spec = loaded.config.preprocess
        self.pad_multiple = max(int(self.net.pad_multiple), int(self.spec.pad_multiple))
        self.staged = bool(self.net.supports_stages)
        self._stage_kwargs = self._check_stages()
        self._stage_calls: list[list[int]] = []
        self.last_stages_used: list[float] | None = None
        """Stages each image of the last `restore` used (batch order), for a multi-stage
        model; the mean over its model calls when it had several (ensemble views, scales,
        generic tiles). None for a model without stages."""
        self._ort_delegate: Restorer | None = None
        self.warn_if_slower = self.loaded.on_onnxruntime
        """Warn when ONNX Runtime runs this model where torch was measured clearly faster
        (`_warn_if_slower`); off for the Restorer `backend="auto"` chose it for."""
        self.last_backend: BackendChoice | None = None
        """What `backend="auto"` ran the last `restore` with, and why; None otherwise."""

    @classmethod
    def from_pretrained(cls, ref: str, **options: Any) -> Restorer:
        """A Restorer for `ref` (artifact path, `.onnx` file, bundled name such as
        "default-derain", or architecture name), with `InferenceOptions(**options)`.

        The options are validated before the model is loaded, so a bad option fails fast;
        `backend="onnxruntime"` runs the model exported to ONNX (CPU only).
        """
        opts = InferenceOptions(**options)
        return cls(load_for_options(ref, opts), opts)

    def _check_stages(self) -> dict[str, Any]:
        """Validate the stage options; the keyword arguments for the model's calls."""
        stages = parse_stages(self.options.stages)
        threshold = check_stage_threshold(self.options.stage_threshold)
        if stages == "all":
            return {}  # the model's own default: its call stays exactly as without stages
        if not self.staged:
            cfg = self.loaded.config
            what = cfg.name or cfg.architecture
            raise StageOptionError(
                "stages",
                f"model {what!r} ({type(self.model).__name__}) has no stages to choose, so "
                f"{stages!r} cannot apply; only multi-stage models such as RESCAN (with the "
                "torch backend) take stages other than all",
            )
        trained = int(self.net.stages or 0)
        if isinstance(stages, int) and trained and stages > trained:
            raise StageOptionError(
                "stages",
                f"{stages} is more than the {trained} stage(s) the model was trained with; "
                f"use all, auto or 1..{trained}",
            )
        if stages == "auto":
            return {"stages": "auto", "threshold": threshold * self._unit_scale()}
        return {"stages": stages}

    def _unit_scale(self) -> float:
        """Model-input units per [0,1] image unit (1 for RESCAN's plain [0,1] input; the
        mean over channels when the spec normalises them differently)."""
        lo, hi = self.spec.value_range
        scale = sum((hi - lo) / s for s in self.spec.std) / len(self.spec.std)
        return abs(scale) if math.isfinite(scale) else 1.0

    def _record_stages(self) -> None:
        if self.staged:
            used = self.net.last_stages_used
            if used:
                self._stage_calls.append([int(n) for n in used])

    # -- pieces -------------------------------------------------------------------------
    def _forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.net.final_output(x, **self._stage_kwargs)
        self._record_stages()
        return self._check_output(x, y)

    def _check_output(self, x: torch.Tensor, y: object) -> torch.Tensor:
        """`y` if it is what a restoration model must return for `x` ([B,3,H,W] at the
        input's batch and size); else a one-line `ModelOutputError` naming the model. A
        wrong size would otherwise be cropped or written as is without a word."""
        b, _, h, w = x.shape
        if isinstance(y, torch.Tensor) and y.ndim == 4 and tuple(y.shape) == (b, 3, h, w):
            return y
        cfg = self.loaded.config
        what = cfg.name or cfg.architecture
        shape = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
        if isinstance(y, torch.Tensor) and y.ndim == 4 and y.shape[0] != b:
            problem = f"a batch of {y.shape[0]} for a batch of {b}"
        else:
            problem = f"{shape} for a {h}x{w} input (batch {b})"
        raise ModelOutputError(
            f"model {what!r} returned {problem}: a restoration model must return "
            f"[B,3,H,W] at its input's batch and size ({self.loaded.source})"
        )

    def _padded_forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        y = self._forward(pad_to_multiple(x, self.pad_multiple))
        return y[..., :h, :w]

    def _tile_size(self, h: int, w: int) -> int | None:
        t = self.options.tile
        if t == 0:
            return None
        if t is None:
            # a model may declare its own threshold and tile (MBCNN: big tiles, since each
            # tiled call also pays for one whole-image pass for its global statistics)
            own = self.net.tiling
            limit = (
                self.options.max_untiled_pixels
                or own.max_untiled_pixels
                or DEFAULT_MAX_UNTILED_PIXELS
            )
            return (own.default_tile or DEFAULT_TILE) if h * w > limit else None
        return t if (h > t or w > t) else None

    def _one_view(self, x: torch.Tensor, progress: Progress | None) -> torch.Tensor:
        h, w = x.shape[-2:]
        tile = self._tile_size(h, w)
        if tile is None:
            y = self._padded_forward(x)
            if progress is not None:
                progress(1, 1)
            return y
        own = self.net.tiled_path()
        if own is not None:
            # the model's own tiled path (exact, or sharing whole-image statistics); padded
            # to the multiple like the untiled path, then cropped back
            x = pad_to_multiple(x, self.pad_multiple)
            y = own(x, tile=tile, progress=progress, **self._stage_kwargs)
            self._record_stages()
            return self._check_output(x, y)[..., :h, :w]
        radius = self.net.receptive_radius
        halo = (
            self.options.halo
            if self.options.halo is not None
            else (radius + self.options.blend if radius is not None else DEFAULT_HALO)
        )
        blend = self.options.blend if radius is not None else max(self.options.blend, halo // 2)
        return tiled_apply(
            self._padded_forward, x, tile=tile, halo=halo, blend=blend, progress=progress
        )

    # -- backend auto -------------------------------------------------------------------
    def _auto_choice(self, height: int, width: int) -> BackendChoice:
        """The backend for an image of this size: fixed where only one can run it, else
        the one measured faster (`engine/backend_table.py`)."""
        from clearsight.engine.backend_table import choose_backend

        if self.loaded.on_onnxruntime:
            return BackendChoice("onnxruntime", "onnxruntime: the model is an ONNX graph")
        if torch.device(self.options.device).type != "cpu":
            return BackendChoice(
                "torch", f"torch: onnxruntime runs on the CPU, not {self.options.device}"
            )
        if self.options.stages != "all":
            return BackendChoice("torch", "torch: stages other than all run on torch only")
        return choose_backend(self.loaded.config.architecture, height, width)

    def _auto_delegate(self, height: int, width: int) -> Restorer | None:
        """With backend auto: the ONNX Runtime Restorer (exported on first use) when it is
        the faster backend at this size, else None (this torch model runs it)."""
        choice = self._auto_choice(height, width)
        if choice != self.last_backend:
            _log.info("backend auto: %s", choice.reason)
        self.last_backend = choice
        if choice.backend != "onnxruntime" or self.loaded.on_onnxruntime:
            return None
        if self._ort_delegate is None:
            from clearsight.export.onnx import to_onnxruntime

            opts = replace(self.options, backend="onnxruntime")
            self._ort_delegate = Restorer(to_onnxruntime(self.loaded, opts.device), opts)
            self._ort_delegate.warn_if_slower = False  # chosen because it is faster here
        return self._ort_delegate

    def _warn_if_slower(self, height: int, width: int) -> None:
        """A `SlowerBackendWarning`, once per model and reason in a process (a server builds
        a Restorer per request), when this model runs on ONNX Runtime fp32 at a size where
        the shipped table measured torch clearly faster (RESCAN at 1024x1024: its tiles and
        whole-image statistics pass compute 1.6x the pixels)."""
        if not self.warn_if_slower or (ort_precision(self.model) or "fp32") != "fp32":
            return
        why = slower_than_torch(self.loaded.config.architecture, height, width)
        said = f"{self.loaded.source}: {why}"
        if why is not None and said not in _SLOWER_SAID:
            _SLOWER_SAID.add(said)
            _log.info("%s", said)
            warnings.warn(said, SlowerBackendWarning, stacklevel=3)

    # -- public -------------------------------------------------------------------------
    @torch.inference_mode()
    def restore(self, rgb01: torch.Tensor, progress: Progress | None = None) -> torch.Tensor:
        """Restore [B,3,H,W] RGB in [0,1]; returns the same shape, clamped to [0,1]."""
        if rgb01.ndim != 4 or rgb01.shape[1] != 3:
            raise ValueError(f"expected a [B,3,H,W] tensor, got shape {tuple(rgb01.shape)}")
        if self.options.backend == AUTO:
            delegate = self._auto_delegate(int(rgb01.shape[-2]), int(rgb01.shape[-1]))
            if delegate is not None:
                y = delegate.restore(rgb01, progress)
                self.last_stages_used = delegate.last_stages_used
                return y
        self._warn_if_slower(int(rgb01.shape[-2]), int(rgb01.shape[-1]))
        x = self.spec.to_model(rgb01.to(self.options.device, torch.float32))
        self._stage_calls = []
        views = ENSEMBLE_VIEWS[self.options.ensemble]
        size = (int(x.shape[-2]), int(x.shape[-1]))
        runs = [(s, k) for s in self.scales for k in views]
        acc: torch.Tensor | None = None
        for i, (scale, k) in enumerate(runs):
            fwd, inv = _dihedral(k)

            def view_progress(done: int, total: int, i: int = i) -> None:
                if progress is not None:
                    progress(i * total + done, len(runs) * total)

            if scale == 1.0:
                xs = x
            else:
                hs, ws = max(1, round(size[0] * scale)), max(1, round(size[1] * scale))
                xs = resize_antialiased(x, (hs, ws))
            y = resize_antialiased(inv(self._one_view(fwd(xs), view_progress)), size)
            acc = y if acc is None else acc + y
        assert acc is not None
        self.last_stages_used = self._stages_per_image(int(x.shape[0]))
        out = self.spec.from_model(acc / len(runs))
        return out.clamp_(0.0, 1.0).cpu()

    def _stages_per_image(self, batch: int) -> list[float] | None:
        calls = [c for c in self._stage_calls if len(c) == batch]
        if not self.staged or not calls:
            return None
        return [sum(c[i] for c in calls) / len(calls) for i in range(batch)]

    def timed_restore(
        self, rgb01: torch.Tensor, progress: Progress | None = None
    ) -> tuple[torch.Tensor, float]:
        """Restore and return (output, latency in milliseconds)."""
        t0 = time.perf_counter()
        y = self.restore(rgb01, progress)
        return y, (time.perf_counter() - t0) * 1000.0

    def restore_image(self, image: np.ndarray) -> np.ndarray:
        """Restore one HxWx3 RGB image as `read_image` gives it (uint8 or uint16) and return
        it in the same dtype (float input in [0,1] comes back as uint8)."""
        out = self.restore(image_to_tensor(image))
        return tensor_to_image(out, dtype=np.uint16 if image.dtype == np.uint16 else np.uint8)
