"""Training configuration: YAML checked on load into typed dataclasses.

A typo in a config should fail before the first step, not after an hour, so every key is
checked against the dataclasses below: an unknown key or a value of the wrong type is a
`TrainConfigError` that names the key path (`optim.lrr: unknown key`, `train.steps: expected
int, got str`). `--set key.path=value` overrides are parsed as YAML and checked the same way.
"""

from __future__ import annotations

import dataclasses
import os
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import yaml

from clearsight.errors import ClearsightError

__all__ = [
    "DataConfig",
    "DistillConfig",
    "LossConfig",
    "ModelSection",
    "OptimConfig",
    "QatConfig",
    "ScheduleConfig",
    "TrainConfig",
    "TrainConfigError",
    "TrainSection",
    "ValConfig",
    "apply_overrides",
    "config_from_dict",
    "load_config",
]


class TrainConfigError(ClearsightError, ValueError):
    """A training config that cannot be used; the message names the key path."""


@dataclass
class ModelSection:
    """Architecture name from the registry and its constructor arguments."""

    arch: str = "rescan"
    args: dict[str, Any] = field(default_factory=dict)
    init: str | None = None
    """Start from these weights (artifact path or bundled name) instead of a random init:
    fine-tuning. The artifact's architecture and arguments must match `arch` and `args`."""
    resize_filter: str | None = None
    """Detectors only: train (and save in the artifact) this resize filter instead of the
    init artifact's or the architecture's, to match the deployment's resize: the Astar
    contest's PIL Lanczos is nearest to "bicubic-antialias" (docs/compress.md)."""


@dataclass
class DataConfig:
    """Where the pairs live and how they become batches (`batch_size` is global, all ranks)."""

    train: str = ""
    val: str | None = None
    layout: str = "folders"  # folders | side-by-side
    input_dir: str | None = None
    target_dir: str | None = None
    name_map: str | None = None
    order: str = "clean-rain"  # side-by-side halves
    patch_size: int = 64
    frames: int = 0
    """Video models: frames per training window (0: the architecture's window, S2VD's 24)."""
    batch_size: int = 16
    workers: int = 0
    cache: str = "memory"  # memory | none
    seed: int = 0
    repeat: int = 1
    augment: bool = True
    """Detection: the joint image-box augmentation (photometric, IoU crop, flip). Restoration
    data always take their crop/flip/rotation draw."""


@dataclass
class OptimConfig:
    name: str = "adam"  # adam | adamw
    lr: float = 5e-3
    betas: list[float] = field(default_factory=lambda: [0.9, 0.999])
    weight_decay: float = 0.0


@dataclass
class ScheduleConfig:
    """multistep: lr x gamma at each milestone (RESCAN's); cosine: linear warmup then cosine."""

    name: str = "multistep"  # multistep | cosine
    milestones: list[int] = field(default_factory=list)
    gamma: float = 0.1
    warmup_steps: int = 0
    min_lr: float = 0.0
    restart_step: int = 0
    """cosine: the cosine starts again from `optim.lr` at this step and ends at `train.steps`;
    before it the LR stays at `optim.lr`. For a resumed leg, the step it resumes from gives a
    warm restart whose height does not depend on how many steps its time budget fits (with 0,
    one cosine spans the whole run and a budget cut moves every step along it)."""


@dataclass
class LossConfig:
    name: str = "rescan"
    """l1 | mse | charbonnier | ssim | psnr (NAFNet's) | rescan | mbcnn | esdnet (multi-scale
    L1) | multibox (SSD) | yolox"""
    eps: float = 1e-3  # charbonnier
    detector: str | None = None
    """Restoration: a frozen detector (artifact or bundled name) whose features of the
    restored image are pulled towards those of the clean image (`engine/task_loss.py`)."""
    detector_weight: float = 0.0
    """Weight of that feature loss against the pixel loss `name` (0: off)."""


@dataclass
class QatConfig:
    """Quantization-aware training (`clearsight/engine/qat.py`, docs/quantize.md)."""

    enabled: bool = False
    backend: str = "x86"  # the torch.ao default QAT qconfig: x86 | fbgemm | qnnpack
    freeze_step: int = 0
    """Observers stop at this step (scales and zero points fixed from then on); 0: at half
    of `train.steps`."""


@dataclass
class TrainSection:
    steps: int = 1000
    grad_accum: int = 1
    clip_grad_norm: float = 0.0  # 0: off
    ema_decay: float = 0.0  # 0: off
    amp: str = "auto"
    """auto: bf16 autocast where the device computes bf16 natively (a CUDA GPU that supports
    it, or a CPU with AVX512-BF16 or AMX, see `clearsight.cpu_features`), else fp32;
    bf16: always (emulated, hence slower, on other CPUs); off: fp32."""
    memory_format: str = "auto"
    """auto: channels-last on an AVX-512 CPU for architectures that measured faster with it
    (the model's `prefers_channels_last`; on AVX2 it measured slower), else contiguous;
    channels_last | contiguous: forced. The math is the same either way (within rounding)."""
    compile: str = "auto"
    """auto: `torch.compile` the model on CPU for architectures that measured faster compiled
    (the model's `prefers_compile`) in runs of at least `COMPILE_MIN_STEPS` steps, which repay
    the compile time (minutes); on | off: forced. Same math within float rounding."""
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    seed: int = 0
    log_every: int = 10
    max_minutes: float = 0.0
    """Wall-clock budget (0: off): after a short timing the step budget is cut to what fits,
    so the LR schedule still completes; a hard stop at the budget is the backstop."""
    val_every: int = 500
    ckpt_every: int = 500
    nan_patience: int = 3
    max_rollbacks: int = 3
    tensorboard: bool = True
    qat: QatConfig = field(default_factory=QatConfig)


@dataclass
class ValConfig:
    preset: str | None = None  # None: the architecture's preset
    max_images: int = 0  # 0: all
    crop_border: int | None = None
    # restoration: also log RGB PSNR after the oracle per-channel tone fit (`tone_psnr`) and
    # the output's mean level minus the target's (`tone_shift`, 0-255), as
    # benchmarks/tone_gap.py measures them: how much of the error is global tone
    tone: bool = False


@dataclass
class DistillConfig:
    """Knowledge distillation from a teacher artifact (docs/compress.md, "Distillation").

    loss = task_weight x the normal loss + weight x the output-distillation loss
    + feature_weight x the feature-matching loss. The teacher runs on the same raw images
    through its own artifact's preprocessing."""

    teacher: str | None = None
    """Artifact path or bundled name (as `load_model` takes); None: no distillation."""
    weight: float = 1.0
    task_weight: float = 1.0
    """0: distillation only; restoration data are then read as inputs only, so a folder of
    photos with no targets serves."""
    temperature: float = 1.0
    """Detection: class logits are divided by it before the sigmoid on both sides."""
    score_threshold: float = 0.3
    """Detection: teacher score above which an anchor's decoded box is a regression target
    (same architecture) or a detection becomes a pseudo-label (another architecture)."""
    detection: str = "auto"
    """auto: `dense` (per-anchor logits and decoded boxes) when teacher and student share
    the architecture, classes and input geometry, else `pseudo` (the teacher's detections
    after NMS as targets of the student's own detection loss)."""
    features: list[list[str]] = field(default_factory=list)
    """(student_layer, teacher_layer) module names, matched through trained 1x1 adapters."""
    feature_weight: float = 1.0
    feature_loss: str = "mse"  # mse | l1


@dataclass
class TrainConfig:
    model: ModelSection = field(default_factory=ModelSection)
    data: DataConfig = field(default_factory=DataConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    schedule: ScheduleConfig = field(default_factory=ScheduleConfig)
    loss: LossConfig = field(default_factory=LossConfig)
    train: TrainSection = field(default_factory=TrainSection)
    val: ValConfig = field(default_factory=ValConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON/YAML-able dict; `config_from_dict` reads it back."""
        return asdict(self)


CHOICES: dict[str, tuple[str, ...]] = {
    "data.layout": ("folders", "side-by-side"),
    "data.order": ("clean-rain", "rain-clean"),
    "data.cache": ("memory", "none"),
    "optim.name": ("adam", "adamw"),
    "schedule.name": ("multistep", "cosine"),
    "loss.name": (
        "l1",
        "mse",
        "charbonnier",
        "ssim",
        "psnr",
        "rescan",
        "mbcnn",
        "esdnet",
        "multibox",
        "yolox",
    ),  # fmt: skip
    "train.amp": ("auto", "bf16", "off"),
    "train.memory_format": ("auto", "channels_last", "contiguous"),
    "train.compile": ("auto", "on", "off"),
    "distill.detection": ("auto", "dense", "pseudo"),
    "distill.feature_loss": ("mse", "l1"),
}
RESIZE_FILTERS = ("bilinear", "bilinear-antialias", "bicubic", "bicubic-antialias", "nearest")
POSITIVE = {"data.patch_size", "data.batch_size", "data.repeat", "train.steps", "train.grad_accum"}
POSITIVE |= {"train.log_every", "train.val_every", "train.ckpt_every", "train.nan_patience"}
POSITIVE |= {"optim.lr"}
NON_NEGATIVE = {"data.workers", "train.max_rollbacks", "val.max_images", "train.clip_grad_norm"}
NON_NEGATIVE |= {"optim.weight_decay", "schedule.warmup_steps", "schedule.min_lr"}
NON_NEGATIVE |= {"schedule.restart_step", "data.frames"}
NON_NEGATIVE |= {"train.max_minutes", "distill.weight", "distill.task_weight"}
NON_NEGATIVE |= {"distill.feature_weight", "loss.detector_weight"}
POSITIVE |= {"distill.temperature"}


def _type_name(tp: Any) -> str:
    if typing.get_origin(tp) in (types.UnionType, typing.Union):
        return " or ".join(_type_name(a) for a in typing.get_args(tp))
    if tp is type(None):
        return "null"
    origin = typing.get_origin(tp)
    if origin is not None:
        return f"{origin.__name__}[{', '.join(_type_name(a) for a in typing.get_args(tp))}]"
    return getattr(tp, "__name__", str(tp))


def _coerce(value: Any, tp: Any, path: str) -> Any:
    """`value` checked against the annotation `tp`; ints are accepted where floats are."""
    origin = typing.get_origin(tp)
    if origin in (types.UnionType, typing.Union):
        for arg in typing.get_args(tp):
            try:
                return _coerce(value, arg, path)
            except TrainConfigError:
                continue
    elif tp is Any:
        return value
    elif tp is type(None):
        if value is None:
            return None
    elif dataclasses.is_dataclass(tp):
        return _section(value, tp, path)
    elif origin is list:
        (item,) = typing.get_args(tp)
        if isinstance(value, list | tuple):
            return [_coerce(v, item, f"{path}[{i}]") for i, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return dict(value)
    elif tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif tp is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):  # PyYAML (YAML 1.1) reads 1e-4 (no dot) as a string
            try:
                return float(value)
            except ValueError:
                pass
    elif tp is str and isinstance(value, str):
        return value
    raise TrainConfigError(f"{path}: expected {_type_name(tp)}, got {type(value).__name__}")


def _section(raw: Any, cls: Any, path: str) -> Any:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        where = path or "config"
        raise TrainConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    hints = typing.get_type_hints(cls)
    names = {f.name for f in dataclasses.fields(cls)}
    kwargs = {}
    for key, value in raw.items():
        key_path = f"{path}.{key}" if path else str(key)
        if key not in names:
            raise TrainConfigError(f"{key_path}: unknown key (known: {', '.join(sorted(names))})")
        kwargs[key] = _coerce(value, hints[key], key_path)
    return cls(**kwargs)


def _check_values(cfg: TrainConfig) -> None:
    """Range and choice checks that types alone cannot express."""
    flat = {
        f"{sec}.{k}": v for sec, d in cfg.to_dict().items() for k, v in d.items() if k != "args"
    }
    for key, options in CHOICES.items():
        if flat[key] not in options:
            raise TrainConfigError(f"{key}: {flat[key]!r} is not one of {', '.join(options)}")
    for key in POSITIVE:
        if flat[key] <= 0:
            raise TrainConfigError(f"{key}: must be > 0, got {flat[key]}")
    for key in NON_NEGATIVE:
        if flat[key] < 0:
            raise TrainConfigError(f"{key}: must be >= 0, got {flat[key]}")
    rf = cfg.model.resize_filter
    if rf is not None and rf not in RESIZE_FILTERS:
        raise TrainConfigError(
            f"model.resize_filter: {rf!r} is not one of {', '.join(RESIZE_FILTERS)}"
        )
    if not 0.0 <= cfg.train.ema_decay < 1.0:
        raise TrainConfigError(f"train.ema_decay: must be in [0, 1), got {cfg.train.ema_decay}")
    if len(cfg.optim.betas) != 2:
        raise TrainConfigError(f"optim.betas: expected 2 values, got {len(cfg.optim.betas)}")
    if sorted(cfg.schedule.milestones) != cfg.schedule.milestones:
        raise TrainConfigError("schedule.milestones: must be increasing")
    restart = cfg.schedule.restart_step
    if restart and cfg.schedule.name != "cosine":
        raise TrainConfigError(
            f"schedule.restart_step: only the cosine schedule restarts (schedule.name is "
            f"{cfg.schedule.name!r})"
        )
    if restart >= cfg.train.steps:
        raise TrainConfigError(
            f"schedule.restart_step: must be below train.steps ({cfg.train.steps}), got {restart}"
        )
    qat = cfg.train.qat
    if qat.backend not in ("x86", "fbgemm", "qnnpack"):
        raise TrainConfigError(
            f"train.qat.backend: {qat.backend!r} is not one of x86, fbgemm, qnnpack"
        )
    if qat.freeze_step < 0:
        raise TrainConfigError(f"train.qat.freeze_step: must be >= 0, got {qat.freeze_step}")
    if qat.enabled and cfg.train.amp == "bf16":
        raise TrainConfigError(
            "train.amp: bf16 cannot be combined with train.qat (int8 fake-quant)"
        )

    for i, pair in enumerate(cfg.distill.features):
        if len(pair) != 2:
            raise TrainConfigError(
                f"distill.features[{i}]: expected [student_layer, teacher_layer], got {pair}"
            )
    if cfg.distill.features and not cfg.distill.teacher:
        raise TrainConfigError("distill.features: needs distill.teacher")
    if not 0.0 <= cfg.distill.score_threshold < 1.0:
        raise TrainConfigError(
            f"distill.score_threshold: must be in [0, 1), got {cfg.distill.score_threshold}"
        )


def _yaml_switches(raw: Any) -> Any:
    """YAML 1.1 reads a bare `off`/`on` as a boolean: `train.amp: off` or `--set
    train.compile=off` mean the words, so booleans there become them again."""
    train = raw.get("train") if isinstance(raw, dict) else None
    if not isinstance(train, dict):
        return raw
    fixed = dict(train)
    for key in ("amp", "compile"):
        if isinstance(fixed.get(key), bool):
            fixed[key] = "on" if fixed[key] else "off"
    return {**raw, "train": fixed}


def config_from_dict(raw: Any) -> TrainConfig:
    """Check a parsed YAML/JSON dict and build the config."""
    cfg = _section(_yaml_switches(raw), TrainConfig, "")
    _check_values(cfg)
    return cfg


def _parse_override(item: str) -> tuple[list[str], Any]:
    key, sep, text = item.partition("=")
    if not sep or not key.strip():
        raise TrainConfigError(f"--set {item!r}: expected key.path=value")
    try:
        value = yaml.safe_load(text) if text.strip() else ""
    except yaml.YAMLError as exc:
        raise TrainConfigError(f"--set {key}: cannot parse value {text!r} ({exc})") from None
    return key.strip().split("."), value


def apply_overrides(raw: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """`raw` with each `key.path=value` (value parsed as YAML) set; sections made as needed."""
    out = dict(raw)
    for item in overrides:
        keys, value = _parse_override(item)
        node = out
        for i, k in enumerate(keys[:-1]):
            child = node.get(k)
            if child is None:
                child = {}
            elif not isinstance(child, dict):
                raise TrainConfigError(f"{'.'.join(keys[: i + 1])}: is not a section")
            node[k] = child = dict(child)
            node = child
        node[keys[-1]] = value
    return out


def load_config(path: str | os.PathLike[str], overrides: list[str] | None = None) -> TrainConfig:
    """Read a YAML config, apply `--set` overrides and check everything."""
    p = Path(path)
    if not p.is_file():
        raise TrainConfigError(f"config file not found: {p}")
    try:
        raw = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise TrainConfigError(f"{p}: not valid YAML ({exc})") from None
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise TrainConfigError(f"{p}: expected a mapping at the top level")
    try:
        return config_from_dict(apply_overrides(raw, overrides or []))
    except TrainConfigError as exc:
        raise TrainConfigError(f"{p}: {exc}") from None
