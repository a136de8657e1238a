"""The training loop: `train(config, run_dir)` from Python, `clearsight train` from the shell.

The loop itself (`_Run.loop`) fits on one screen; the pieces around it are small helpers:
a resumable batch stream (epoch, position), a step-indexed learning-rate schedule, an EMA
of the weights, validation with a metric preset, and exports through `save_artifact`.

Faults lose nothing: a checkpoint is written atomically every `ckpt_every` steps (and at the
start, so a rollback always has a target); resume continues bit-exactly on CPU; a NaN/Inf
loss skips its step, `nan_patience` in a row roll back to the last checkpoint at half the LR,
and more than `max_rollbacks` rollbacks stop the run with `TrainingDivergedError`. Each
skipped step is logged with where the NaN/inf was found (`TrainResult.nan_events`), and no
checkpoint or artifact is ever written holding one.

Quantization-aware training (`train.qat`, `clearsight/compress/qat.py`): the model trains
with fake-quantized convolutions; a skipped step also undoes what its batch did to the
quantizers' ranges, and the observers freeze at `train.qat.freeze_step`.

Speed without changing the math: on CPU the model and batches are channels-last for the
architectures that measured faster so (`train.memory_format: auto`, the model's
`prefers_channels_last`), and `train.amp: auto` turns bf16 autocast on only where the device
computes bf16 natively (`choose_amp`); the first log line of a run says what was chosen.

Detectors (architectures registered with task "detect") train through the same loop; their
data, loss, validation (COCO AP) and label map come from `engine/detect_train.py`.

Under `torchrun` (WORLD_SIZE > 1) the model is wrapped in DistributedDataParallel (gloo on
CPU, NCCL on GPU), `data.batch_size` is split across ranks, and only rank 0 writes files.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
import os
import statistics
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from clearsight.artifact import LoadedModel, ModelConfig, make_config, save_artifact
from clearsight.atomic import atomic_write_text, sweep_leftovers
from clearsight.compress import qat
from clearsight.cpu_features import CpuFeatures, detect_cpu_features
from clearsight.data.paired import InputFolderDataset, PairedFolderDataset, SideBySideDataset
from clearsight.engine.checkpoint import (
    CHECKPOINT_FILE,
    CheckpointError,
    load_checkpoint,
    one_line,
    rng_state,
    save_checkpoint,
    set_rng_state,
)
from clearsight.engine.distill import build_distiller
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.engine.train_config import (
    TrainConfig,
    TrainConfigError,
    TrainSection,
    config_from_dict,
)
from clearsight.errors import ClearsightError
from clearsight.io import tensor_to_image
from clearsight.losses import build_loss
from clearsight.metrics import psnr
from clearsight.metrics.presets import get_preset
from clearsight.metrics.tone import mean_level_shift, tone_fitted
from clearsight.models.contract import RestorationModel
from clearsight.models.registry import build_model, get_spec

__all__ = [
    "OVERFIT_MARGIN",
    "SpeedSettings",
    "TrainResult",
    "TrainingDivergedError",
    "choose_amp",
    "speed_settings",
    "train",
    "use_channels_last",
    "use_compile",
]

LOG_FILE = "train_log.jsonl"
OVERFIT_MARGIN = 0.5
"""--overfit-batch passes when the last loss is at most this fraction of the first."""
TIMING_STEPS = 100
"""With train.max_minutes, the step time is the median over this many first steps..."""
TIMING_SHARE = 0.25
"""...or over the steps in this share of the budget (at least `MIN_TIMING_STEPS`), whichever
ends first: timing 100 slow steps could spend most of the budget at the first learning rate
and leave the fitted schedule only its last minutes to anneal."""
MIN_TIMING_STEPS = 5
TIME_MARGIN = 0.92
"""Share of the remaining budget given to steps; the rest covers validation and exports."""
COMPILE_MIN_STEPS = 500
"""`train.compile: auto` compiles only runs this long: compiling RESCAN's training step took
about 2 minutes on a 2-core CPU, which only a run of hundreds of steps repays."""


class TrainingDivergedError(ClearsightError):
    """The loss stayed NaN/Inf through every allowed rollback."""


@dataclass
class TrainResult:
    """What a run did; `first_loss`/`last_loss` are the first and last finite losses."""

    run_dir: Path
    steps: int
    first_loss: float | None = None
    last_loss: float | None = None
    best_metric: float | None = None
    val_metrics: dict[str, float] = field(default_factory=dict)
    nan_skipped: int = 0
    rollbacks: int = 0
    nan_events: list[dict[str, Any]] = field(default_factory=list)
    """Each skipped step and refused checkpoint: {"step", "nan": where it was found}."""
    lr_scale: float = 1.0
    overfit_ok: bool | None = None
    overfit_ap: float | None = None
    """Detectors with --overfit-batch: COCO AP on the batch trained on."""
    model: nn.Module | None = field(default=None, repr=False)
    """The trained weights in memory (the EMA copy when EMA is on), on every rank."""


# ------------------------------------------------------------------------------ pieces
@dataclass(frozen=True)
class SpeedSettings:
    """How the steps are computed: bf16 autocast or fp32, and the memory layout."""

    amp: bool
    channels_last: bool
    why: str
    compiled: bool = False
    """Why amp was (not) chosen, e.g. 'auto: AVX2, no native bf16'."""

    def describe(self) -> str:
        layout = "channels-last" if self.channels_last else "contiguous"
        compiled = ", torch.compile" if self.compiled else ""
        return f"train: {'bf16 autocast' if self.amp else 'fp32'}, {layout}{compiled} ({self.why})"

    def log_fields(self) -> dict[str, str]:
        """Strings only: TensorBoard takes the numeric fields of a log record as scalars."""
        return {
            "amp": "bf16" if self.amp else "off",
            "memory_format": "channels_last" if self.channels_last else "contiguous",
            "amp_reason": self.why,
            "compile": "on" if self.compiled else "off",
        }


def choose_amp(
    setting: str, device: torch.device, cpu: CpuFeatures | None = None
) -> tuple[bool, str]:
    """`train.amp` resolved on `device`: (bf16 on?, why). `cpu` defaults to this machine's.

    "auto" takes bf16 only where it is native: a CUDA device that supports it, or a CPU with
    AVX512-BF16 or AMX. On other CPUs bf16 is emulated and slower than fp32, so never there.
    """
    if setting == "off":
        return False, "train.amp: off"
    if setting == "bf16":
        return True, "train.amp: bf16"
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ok, f"auto: CUDA device {'with' if ok else 'without'} bf16"
    if device.type != "cpu":
        return False, f"auto: bf16 untested on {device.type}"
    feats = cpu if cpu is not None else detect_cpu_features()
    return feats.native_bf16, f"auto: {feats.describe()}"


def use_channels_last(
    setting: str, model: nn.Module, device: torch.device, cpu: CpuFeatures | None = None
) -> bool:
    """`train.memory_format` resolved: "auto" follows the architecture's measured preference
    (`prefers_channels_last`, a class attribute of the model) on CPUs with AVX-512 only.

    Measured with `benchmarks/train_speed.py`: channels-last trained RESCAN about 1.3x
    faster on a 2-core AVX-512 CPU, but 4-6% slower (RESCAN and mbcnn-light alike) on a
    2-core AVX2 CPU, where oneDNN's NHWC kernels lose to the plain ones. `cpu` defaults to
    this machine's (tests inject one).
    """
    if setting != "auto":
        return setting == "channels_last"
    if device.type != "cpu" or not bool(getattr(model, "prefers_channels_last", False)):
        return False
    feats = cpu if cpu is not None else detect_cpu_features()
    return feats.capability.upper().startswith("AVX512")


def use_compile(setting: str, model: nn.Module, device: torch.device, steps: int) -> bool:
    """`train.compile` resolved: "auto" compiles architectures that measured faster compiled
    than their best eager step (`prefers_compile`; none of the bundled ones so far, see
    `benchmarks/train_speed.py` and the note in models/rescan.py)
    on CPU, in runs long enough to repay the compile time (`COMPILE_MIN_STEPS`)."""
    if setting != "auto":
        return setting == "on"
    return (
        device.type == "cpu"
        and bool(getattr(model, "prefers_compile", False))
        and steps >= COMPILE_MIN_STEPS
    )


def speed_settings(
    t: TrainSection, model: nn.Module, device: torch.device, cpu: CpuFeatures | None = None
) -> SpeedSettings:
    amp, why = choose_amp(t.amp, device, cpu)
    compiled = use_compile(t.compile, model, device, t.steps)
    # A compiled step picks its own layouts: channels-last on top measured slower (RESCAN,
    # AVX-512: 7.6 s against 5.8 s contiguous, bf16), so "auto" keeps contiguous there.
    auto_layout = t.memory_format == "auto" and compiled
    layout = False if auto_layout else use_channels_last(t.memory_format, model, device, cpu)
    return SpeedSettings(amp, layout, why, compiled)


@dataclass(frozen=True)
class _Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0


def _init_dist(device: str) -> _Dist:
    """Join the torchrun process group when WORLD_SIZE > 1; pick the device."""
    want_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return _Dist(
            device=torch.device(("cuda" if device == "auto" else device) if want_cuda else "cpu")
        )
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local}") if want_cuda else torch.device("cpu")
    owns = not dist.is_initialized()
    if owns:
        if want_cuda:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if want_cuda else "gloo")
    return _Dist(rank=dist.get_rank(), world=dist.get_world_size(), device=dev, owns_group=owns)


class _SkipSampler(Sampler[int]):
    """A DistributedSampler whose next pass starts `skip` samples in (mid-epoch resume)."""

    def __init__(self, inner: DistributedSampler) -> None:
        self.inner, self.skip = inner, 0

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.inner)[self.skip :])

    def __len__(self) -> int:
        return len(self.inner) - self.skip


class _BatchStream:
    """Batches in a deterministic order with a position that a checkpoint can restore."""

    def __init__(self, ds: Dataset, batch: int, workers: int, seed: int, d: _Dist) -> None:
        self.ds, self.batch = ds, batch
        inner = DistributedSampler(ds, d.world, d.rank, shuffle=True, seed=seed, drop_last=True)
        self.sampler = _SkipSampler(inner)
        self.per_epoch = len(inner) // batch
        if self.per_epoch == 0:
            raise TrainConfigError(
                f"data.batch_size: {batch * d.world} is more than the {len(ds)} training "
                "samples; lower it or raise data.repeat"
            )
        self.loader = DataLoader(
            ds,
            batch,
            sampler=self.sampler,
            num_workers=workers,
            drop_last=True,
            persistent_workers=workers > 0,
            collate_fn=getattr(ds, "collate_fn", None),  # detection: per-image box lists
        )
        self.epoch, self.position, self._it = 0, 0, None

    def seek(self, epoch: int, position: int) -> None:
        self.epoch, self.position, self._it = epoch, position, None

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.position >= self.per_epoch:
            self.seek(self.epoch + 1, 0)
        if self._it is None:
            self.sampler.inner.set_epoch(self.epoch)
            self.ds.set_epoch(self.epoch)  # type: ignore[attr-defined]
            self.sampler.skip = self.position * self.batch
            self._it = iter(self.loader)
        self.position += 1
        return next(self._it)


def _detect_train() -> ModuleType:
    """`engine/detect_train.py`, imported on first use: it brings torchvision (and with it
    torch._dynamo, seconds), which restoration training never needs (benchmarks/cli_startup.py)."""
    from clearsight.engine import detect_train

    return detect_train


def lr_factor(cfg: TrainConfig, step: int) -> float:
    """The schedule as a pure function of the step: nothing to restore on resume."""
    s = cfg.schedule
    if s.name == "multistep":
        return s.gamma ** sum(step >= m for m in s.milestones)
    if step < s.warmup_steps:
        return (step + 1) / s.warmup_steps
    start = max(s.warmup_steps, s.restart_step)
    t = max(0.0, (step - start) / max(1, cfg.train.steps - start))
    floor = s.min_lr / cfg.optim.lr
    return floor + (1 - floor) * 0.5 * (1 + math.cos(math.pi * min(1.0, t)))


@torch.no_grad()
def _ema_update(ema: nn.Module, model: nn.Module, decay: float) -> None:
    for e, p in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
        if e.dtype.is_floating_point:
            e.lerp_(p, 1.0 - decay)
        else:
            e.copy_(p)


def _init_from(model: nn.Module, cfg: TrainConfig) -> ModelConfig:
    """Fill `model` from the artifact `model.init` (fine-tuning); refuse a different model.
    Returns the artifact's config (a detector keeps its label map and preprocessing).

    A pruned artifact (its config records narrowed `widths`) first narrows `model` to its
    widths, so `clearsight train` fine-tunes it (recovery after pruning; docs/compress.md).
    """
    from clearsight.models.widths import WidthsError, apply_widths
    from clearsight.zoo import resolve_model

    init = str(cfg.model.init)
    loaded = resolve_model(init)
    mismatch = TrainConfigError(
        f"model.init: {init} is a {loaded.config.architecture!r} with arguments "
        f"{loaded.config.arch_args}; it does not fit model.arch {cfg.model.arch!r} with "
        f"arguments {cfg.model.args}"
    )
    if loaded.config.architecture != cfg.model.arch:
        raise mismatch
    # Arguments that change no weight shape (YOLOX-Nano's input_size) would otherwise load
    # and train at the artifact's preprocessing while the model decodes at its own size.
    # An argument that switches on an optional branch the artifact lacks may differ.
    defaults = get_spec(cfg.model.arch).default_args()
    restorer = isinstance(model, RestorationModel)
    switches = set(model.init_optional_args()) if restorer else set()
    theirs = list(loaded.model.state_dict())
    if switches and set(model.init_optional_keys()) <= set(theirs):
        switches = set()  # the artifact has the branch: its switch must match too
    mine_args = {k: v for k, v in {**defaults, **cfg.model.args}.items() if k not in switches}
    their_args = {
        k: v for k, v in {**defaults, **loaded.config.arch_args}.items() if k not in switches
    }
    if mine_args != their_args:
        raise mismatch
    if loaded.config.widths:
        try:
            apply_widths(model, loaded.config.widths, loaded.config.layer_shapes)
        except WidthsError as exc:
            raise TrainConfigError(f"model.init: {init}: {exc}") from None
    # an optional identity-initialised branch (MBCNN's tone head) may be absent from the
    # artifact; compare the arguments without the switches that add such branches
    optional = set(model.init_optional_keys()) if restorer else set()
    if [k for k in model.state_dict() if k not in optional or k in theirs] != theirs:
        raise mismatch
    try:
        model.load_state_dict(loaded.model.state_dict(), strict=not optional)
    except RuntimeError as exc:
        raise TrainConfigError(f"model.init: {init} does not fit the model: {exc}") from None
    return loaded.config


def _open_data(cfg: TrainConfig, root: str, train: bool) -> Any:
    d = cfg.data
    if not root:
        raise TrainConfigError(f"data.{'train' if train else 'val'}: no data folder given")
    kw: dict[str, Any] = {
        "patch_size": d.patch_size if train else None,
        "augment": train,
        "cache": d.cache if train else "none",
        "seed": d.seed,
        "repeat": d.repeat if train else 1,
    }
    if d.layout == "side-by-side":
        return SideBySideDataset(root, order=d.order, **kw)  # type: ignore[arg-type]
    if train and cfg.distill.teacher and cfg.distill.task_weight == 0:
        return InputFolderDataset(root, input_dir=d.input_dir, **kw)  # no targets needed
    names = {"input_dir": d.input_dir, "target_dir": d.target_dir, "name_map": d.name_map}
    return PairedFolderDataset(root, **names, **kw)


def data_hash(ds: Any) -> str:
    """sha256 of the sorted (relative path, size) list: names which files were trained on."""
    root = Path(getattr(ds, "root", "."))
    if hasattr(ds, "files"):  # detection: the annotation file and the images
        files = sorted(set(ds.files()))
    else:
        files = sorted({f for p in ds.pairs for f in (p.input, p.target)})
    h = hashlib.sha256()
    for f in files:
        rel = os.path.relpath(f, root) if root != Path(".") else str(f)
        h.update(f"{rel}\t{f.stat().st_size}\n".encode())
    return h.hexdigest()


# ------------------------------------------------------------------------------ the run
class _Run:
    """State of one training run; `loop` is the whole algorithm."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, d: _Dist, overfit: bool) -> None:
        self.cfg, self.run_dir, self.d, self.overfit = cfg, run_dir, d, overfit
        t = cfg.train
        self.ckpt_path = run_dir / CHECKPOINT_FILE
        torch.manual_seed(t.seed)
        self.model = build_model(cfg.model.arch, **cfg.model.args).to(d.device)
        init = _init_from(self.model, cfg) if cfg.model.init else None
        self.qat = t.qat.enabled
        if self.qat:  # fake-quantized convs (compress/qat.py); weights exported as fp32
            self.qat_freeze = t.qat.freeze_step or max(1, t.steps // 2)
            qat.prepare_qat_model(self.model, t.qat.backend)
        self.spec = get_spec(cfg.model.arch)
        self.speed = speed_settings(t, self.model, d.device)
        if self.qat:  # fake-quant observers: eager fp32 steps (no autocast, no compile)
            self.speed = dataclasses.replace(
                self.speed, amp=False, compiled=False, why="train.qat: eager fp32"
            )
        if cfg.model.resize_filter is not None and self.spec.task != "detect":
            raise TrainConfigError(
                f"model.resize_filter: {cfg.model.arch} restores images at their own size; "
                "only detectors resize their input"
            )
        self.detect = (
            _detect_train().detection_setup(self.model, cfg, init)
            if self.spec.task == "detect"
            else None
        )
        self.memory_format = (
            torch.channels_last if self.speed.channels_last else torch.contiguous_format
        )
        self.model.to(memory_format=self.memory_format)  # before the EMA copy and optimizer
        self.ema = copy.deepcopy(self.model).requires_grad_(False) if t.ema_decay > 0 else None
        # after the EMA copy: its feature hooks must not be copied into the EMA model
        self.distill = build_distiller(
            cfg,
            self.model,
            self.detect.preprocess if self.detect is not None else self.spec.preprocess,
            self.spec.task,
            d.device,
            self.detect.class_ids if self.detect is not None else None,
        )
        self.net: nn.Module = self.model
        if d.world > 1:
            self.net = nn.parallel.DistributedDataParallel(self.model)
        if self.speed.compiled:  # the step only: saving, EMA and validation use self.model
            self.net = torch.compile(self.net)  # type: ignore[assignment]
        opt_cls = torch.optim.AdamW if cfg.optim.name == "adamw" else torch.optim.Adam
        self.opt = opt_cls(
            [*self.model.parameters(), *(self.distill.parameters() if self.distill else [])],
            lr=cfg.optim.lr,
            betas=tuple(cfg.optim.betas),
            weight_decay=cfg.optim.weight_decay,
        )
        self.loss_fn = (
            _detect_train().build_detection_loss(cfg.loss.name, self.model)
            if self.detect is not None
            else build_loss(
                cfg.loss.name,
                eps=cfg.loss.eps,
                residual=bool(getattr(self.model, "predicts_residual", False)),
            )
        )
        self.train_ds = self._open_data(cfg.data.train, True)
        if self.distill is not None:
            self.distill.prepare_data(self.train_ds)
        if cfg.data.batch_size % d.world:
            raise TrainConfigError(
                f"data.batch_size: {cfg.data.batch_size} does not split over {d.world} ranks"
            )
        per_rank = cfg.data.batch_size // d.world
        self.stream = _BatchStream(self.train_ds, per_rank, cfg.data.workers, cfg.data.seed, d)
        self.val_ds = self._open_data(cfg.data.val, False) if cfg.data.val and not overfit else None
        self.preset = (
            get_preset(cfg.val.preset or self.spec.metric_preset, cfg.val.crop_border)
            if self.detect is None
            else None
        )
        self.amp = self.speed.amp
        self.step, self.best, self.val_metrics = 0, -math.inf, {}
        self.nan_skipped, self.nan_streak, self.rollbacks, self.lr_scale = 0, 0, 0, 1.0
        self.nan_events: list[dict[str, Any]] = []
        self.nan_where = ""
        self.data_hash = data_hash(self.train_ds)
        self.log_fh = None
        self.tb = None

    def _open_data(self, root: str, train: bool) -> Any:
        if self.detect is not None:
            return _detect_train().open_detection_data(self.cfg, root, self.detect, train)
        return _open_data(self.cfg, root, train)

    def _batch_to_device(self, inp: torch.Tensor, tgt: Any) -> tuple[torch.Tensor, Any]:
        """The batch on the device in the model's input space (detection data are already)."""
        inp = inp.to(self.d.device, non_blocking=True)
        if self.detect is not None:
            return inp, _detect_train().targets_to(tgt, self.d.device)
        inp = self.spec.preprocess.to_model(inp).contiguous(memory_format=self.memory_format)
        tgt = self.spec.preprocess.to_model(tgt.to(self.d.device, non_blocking=True))
        return inp, tgt.contiguous(memory_format=self.memory_format)

    # -- state ----------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "epoch": self.stream.epoch,
            "position": self.stream.position,
            "model": self.model.state_dict(),
            "optimizer": self.opt.state_dict(),
            "scheduler": {"lr_scale": self.lr_scale, "lr": self.opt.param_groups[0]["lr"]},
            "ema": self.ema.state_dict() if self.ema is not None else None,
            "rng": rng_state(),
            "config": self.cfg.to_dict(),
            "best": self.best,
            "counters": {"nan_skipped": self.nan_skipped, "rollbacks": self.rollbacks},
            "data_hash": self.data_hash,
            "distill": self.distill.state_dict() if self.distill is not None else None,
        }

    def load(self, s: dict[str, Any]) -> None:
        self.model.load_state_dict(s["model"])
        self.opt.load_state_dict(s["optimizer"])
        if self.ema is not None:
            self.ema.load_state_dict(s["ema"] if s["ema"] is not None else s["model"])
        if self.distill is not None and s.get("distill") is not None:
            self.distill.load_state_dict(s["distill"])
        set_rng_state(s["rng"])
        self.step, self.best = int(s["step"]), float(s["best"])
        self.lr_scale = float(s["scheduler"]["lr_scale"])
        self.nan_skipped = int(s["counters"]["nan_skipped"])
        self.rollbacks = int(s["counters"]["rollbacks"])
        self.stream.seek(int(s["epoch"]), int(s["position"]))

    def nonfinite_weights(self) -> list[str]:
        """Parameters and buffers (of the model and its EMA) holding NaN or inf."""
        bad = qat.nonfinite(self.model)
        return bad + ([f"ema.{k}" for k in qat.nonfinite(self.ema)] if self.ema is not None else [])

    def save(self) -> None:
        bad = self.nonfinite_weights()
        if bad:  # never a checkpoint that would carry a NaN forward: back to the last good one
            self.nan_event("weights", f"{bad[0]} (checkpoint not written)")
            self.rollback()
            return
        if self.d.main:
            save_checkpoint(self.state(), self.ckpt_path)
        if self.d.world > 1:
            dist.barrier()

    # -- one step -------------------------------------------------------------------------
    def train_step(self, batch: tuple[torch.Tensor, torch.Tensor] | None) -> float:
        """One optimizer step over `grad_accum` batches; returns the loss (NaN: skipped)."""
        t = self.cfg.train
        lr = self.cfg.optim.lr * self.lr_scale * lr_factor(self.cfg, self.step)
        for g in self.opt.param_groups:
            g["lr"] = lr
        total = torch.zeros((), device=self.d.device)
        quant = qat.snapshot(self.model) if self.qat else None
        for micro in range(t.grad_accum):
            raw = batch if batch is not None else self.stream.next()
            inp, tgt = self._batch_to_device(*raw)
            sync = micro == t.grad_accum - 1 or not isinstance(
                self.net, nn.parallel.DistributedDataParallel
            )
            ctx = self.net.no_sync() if not sync else _nullcontext()  # type: ignore[operator]
            with ctx, torch.autocast(self.d.device.type, torch.bfloat16, enabled=self.amp):
                out = self.net(inp)
                if self.distill is None:
                    loss = self.loss_fn(out, inp, tgt) / t.grad_accum
                else:
                    loss = self.distill.loss(out, inp, tgt, raw[0], self.loss_fn) / t.grad_accum
            loss.backward()
            total += loss.detach().float()
        if self.d.world > 1 and self.distill is not None:
            self.distill.sync_grads(self.d.world)
        if self.d.world > 1:
            dist.all_reduce(total)
            total /= self.d.world
        ok = bool(torch.isfinite(total))
        self.nan_where = "" if ok else "loss"
        if ok and t.clip_grad_norm > 0:
            norm = nn.utils.clip_grad_norm_(self.model.parameters(), t.clip_grad_norm)
            ok = bool(torch.isfinite(norm))
            self.nan_where = "" if ok else "gradient norm"
        if ok and quant is not None:
            bad = qat.nonfinite(self.model, quant_only=True)
            ok, self.nan_where = not bad, f"quantizer range {bad[0]}" if bad else ""
        if not ok and quant is not None:
            qat.restore(self.model, quant)  # the observers saw the bad batch: undo them too
        if ok:
            self.opt.step()
            if self.ema is not None:
                _ema_update(self.ema, self.model, t.ema_decay)
        self.opt.zero_grad(set_to_none=True)
        return float(total) if ok else math.nan

    # -- validation and export ------------------------------------------------------------
    def export_model(self) -> nn.Module:
        return self.ema if self.ema is not None else self.model

    @torch.no_grad()
    def validate(self) -> dict[str, float]:
        """Mean per-image metrics under the preset, images sharded over ranks and reduced."""
        assert self.val_ds is not None
        model = self.export_model()
        if self.detect is not None:
            # every rank scores the whole (small) set: no collective to keep in step
            return _detect_train().validate_detector(
                model,
                self.detect.config(model, self.cfg),
                self.val_ds,
                self.d.device,
                self.cfg.val.max_images,
            )
        assert self.preset is not None
        cfg = make_config(model, self.cfg.model.arch, self.cfg.model.args)
        restorer = Restorer(
            LoadedModel(model, cfg, "training"), InferenceOptions(tile=0, device=str(self.d.device))
        )
        n = (
            len(self.val_ds)
            if self.cfg.val.max_images == 0
            else min(self.cfg.val.max_images, len(self.val_ds))
        )
        sums: dict[str, float] = {}
        for i in range(self.d.rank, n, self.d.world):
            inp, tgt = self.val_ds[i]
            out = restorer.restore(inp[None])
            target = tensor_to_image(tgt, np.uint8)
            image = tensor_to_image(out, np.uint8)
            metrics = self.preset.compute(image, target)
            if self.cfg.val.tone:
                metrics["tone_psnr"] = psnr(np.rint(tone_fitted(image, target)), target)
                metrics["tone_shift"] = mean_level_shift(target, image)
            for k, v in metrics.items():
                sums[k] = sums.get(k, 0.0) + min(v, 100.0)  # identical pairs: cap inf PSNR
        # The Restorer moves a model that prefers NHWC to channels-last; training goes on in
        # the run's own layout, or a resumed run (which starts in it) would round differently.
        model.to(memory_format=self.memory_format)
        model.train()
        keys = sorted(sums) or ["psnr", "ssim"]
        vec = torch.tensor([sums.get(k, 0.0) for k in keys], dtype=torch.float64)
        if self.d.world > 1:
            dist.all_reduce(vec)
        return {k: float(v) / n for k, v in zip(keys, vec.tolist(), strict=True)}

    def export(self, name: str) -> None:
        model = self.export_model()
        if qat.nonfinite(model):
            self.nan_event("weights", f"artifact {name}/ not written")
            return
        if self.qat:  # the trained weights as a plain fp32 model: loads without torch.ao
            plain = build_model(self.cfg.model.arch, **self.cfg.model.args)
            plain.load_state_dict(qat.float_state_dict(model, plain))
            model = plain
        prov = {
            "training_config": self.cfg.to_dict(),
            "data": {
                "train": self.cfg.data.train,
                "val": self.cfg.data.val,
                "files_sha256": self.data_hash,
            },
            "steps": self.step,
            "ema": self.ema is not None,
            "val_metrics": {
                "preset": self.preset.name if self.preset else "coco-ap",
                **self.val_metrics,
            },
        }
        if self.qat:
            prov["qat"] = {**dataclasses.asdict(self.cfg.train.qat), "freeze_step": self.qat_freeze}
        if self.nan_events:
            prov["nan_events"] = list(self.nan_events)
        if self.detect is not None:
            title = f"{self.cfg.model.arch}-{self.run_dir.name}"
            cfg = self.detect.config(model, self.cfg, provenance=prov, name=title)
        else:
            assert self.preset is not None
            cfg = make_config(
                model,
                self.cfg.model.arch,
                self.cfg.model.args,
                provenance=prov,
                metric_preset=self.preset.name,
            )
        save_artifact(model, self.run_dir / name, cfg)
        if self.qat and name == "last":  # the int8 graph with the trained scales, beside it
            from clearsight.compress.quantize import qat_int8_onnx, save_quantized_bytes
            from clearsight.zoo import int8_path_for

            data = qat_int8_onnx(self.export_model(), cfg, f"{self.run_dir / name} (qat)")
            save_quantized_bytes(data, int8_path_for(self.run_dir / name))

    def log(self, record: dict[str, Any]) -> None:
        if not self.d.main:
            return
        if self.log_fh is None:
            self.log_fh = open(self.run_dir / LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self.log_fh.write(json.dumps(record) + "\n")
        self.log_fh.flush()
        if self.cfg.train.tensorboard and not self.overfit:
            if self.tb is None:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, record["step"])

    def close(self) -> None:
        for h in (self.log_fh, self.tb):
            if h is not None:
                h.close()

    # -- the loop -------------------------------------------------------------------------
    def loop(self, bar: Any) -> TrainResult:
        t, res = self.cfg.train, TrainResult(self.run_dir, self.step)
        fixed = self.stream.next() if self.overfit else None
        window: list[float] = []
        speed_logged = False
        bar.note(self.speed.describe())
        t0, s0 = time.perf_counter(), self.step
        budget_s = t.max_minutes * 60.0
        durations: list[float] = []
        t_prev, timed = t0, False
        while self.step < t.steps:
            loss = self.train_step(fixed)
            self.step += 1
            if budget_s > 0:
                now = time.perf_counter()
                elapsed = now - t0
                n = self.step - s0
                if not timed:
                    durations.append(now - t_prev)
                    t_prev = now
                due = not timed and (
                    n >= TIMING_STEPS
                    or (n >= MIN_TIMING_STEPS and elapsed >= TIMING_SHARE * budget_s)
                )
                over, due = self.agree(float(elapsed >= budget_s), float(due))
                if due:
                    # the median, so that slow first steps (loader start-up, a cache filling)
                    # or a short burst of other work do not cut the run's steps for good
                    timed = True
                    step_s = statistics.median(durations)
                    step_s, left_s = self.agree(step_s, budget_s - elapsed)
                    self.fit_budget(step_s, left_s, bar)
                elif over and self.step < t.steps:
                    bar.note(f"time budget of {t.max_minutes:g} min reached at step {self.step}")
                    self.log({"step": self.step, "budget": "reached", "planned_steps": t.steps})
                    self.cfg.train.steps = self.step
            if self.qat and self.step == self.qat_freeze:
                qat.freeze_observers(self.model)
                self.log({"step": self.step, "qat": "observers frozen"})
                bar.note(f"step {self.step}: QAT observers frozen (scales fixed from here)")
            if math.isnan(loss):
                self.nan_event(self.nan_where or "loss", "step skipped")
                self.nan_skipped, self.nan_streak = self.nan_skipped + 1, self.nan_streak + 1
                if self.nan_streak >= t.nan_patience:
                    self.rollback()
                continue
            self.nan_streak = 0
            res.first_loss = loss if res.first_loss is None else res.first_loss
            res.last_loss = loss
            window.append(loss)
            rate = (self.step - s0) / max(time.perf_counter() - t0, 1e-9)
            bar.update(self.step, loss=loss, rate=rate)
            if self.step % t.log_every == 0 or self.step == t.steps:
                lr = self.opt.param_groups[0]["lr"]
                record = {
                    "step": self.step,
                    "loss": sum(window) / len(window),
                    "lr": lr,
                    "steps_per_s": rate,
                }
                if not speed_logged:  # the first line of each process says what it chose
                    record.update(self.speed.log_fields())
                    speed_logged = True
                self.log(record)
                window = []
            if self.overfit:
                continue
            if self.val_ds is not None and (self.step % t.val_every == 0 or self.step == t.steps):
                self.val_metrics = self.validate()
                self.log(
                    {"step": self.step, **{f"val/{k}": v for k, v in self.val_metrics.items()}}
                )
                bar.note(
                    f"step {self.step}: "
                    + ", ".join(f"{k} {v:.4f}" for k, v in self.val_metrics.items())
                )
                m = self.val_metrics
                score = m.get("score", m.get("psnr", m.get("AP", -math.inf)))
                score = score if math.isfinite(score) else -math.inf
                if score > self.best:
                    self.best = score
                    if self.d.main:
                        self.export("best")
                if self.d.main:
                    self.export("last")
            if self.step % t.ckpt_every == 0 or self.step == t.steps:
                self.save()
        if not self.overfit and self.d.main:
            self.export("last")
            if self.val_ds is None:
                self.export("best")
        res.steps, res.val_metrics, res.nan_skipped = self.step, self.val_metrics, self.nan_skipped
        res.rollbacks, res.lr_scale = self.rollbacks, self.lr_scale
        res.nan_events = list(self.nan_events)
        res.best_metric = self.best if math.isfinite(self.best) else None
        res.model = self.export_model()
        if self.overfit and res.first_loss is not None and res.last_loss is not None:
            res.overfit_ok = res.last_loss <= OVERFIT_MARGIN * res.first_loss
            if self.detect is not None and fixed is not None:
                inp, tgt = self._batch_to_device(*fixed)
                res.overfit_ap = _detect_train().batch_ap(self.export_model(), inp, tgt)
                res.overfit_ok = res.overfit_ap >= _detect_train().OVERFIT_AP
        return res

    def agree(self, *values: float) -> tuple[float, ...]:
        """Rank 0's values on every rank. Each rank reads its own clock, so a decision taken
        from time (cut the steps, stop now) must be one decision, or the ranks stop at
        different steps and the collectives of the one still training never complete."""
        if self.d.world <= 1:
            return values
        vec = torch.tensor(values, dtype=torch.float64, device=self.d.device)  # NCCL: on GPU
        dist.broadcast(vec, src=0)
        return tuple(vec.tolist())

    def fit_budget(self, step_s: float, left_s: float, bar: Any) -> None:
        """Cut `train.steps` (and multistep milestones) to what fits in `left_s` seconds.
        The decision goes to the train log too, where a run without progress output
        (`--no-progress`, a log file) still shows it."""
        t, sched = self.cfg.train, self.cfg.schedule
        fits = self.step + max(0, int(TIME_MARGIN * left_s / max(step_s, 1e-9)))
        self.log(
            {
                "step": self.step,
                "budget": "fits" if fits >= t.steps else "cut",
                "planned_steps": t.steps,
                "fitted_steps": min(fits, t.steps),
                "step_ms": round(step_s * 1000, 1),
            }
        )
        if fits >= t.steps:
            return
        scale = fits / t.steps
        sched.milestones = [max(1, round(m * scale)) for m in sched.milestones]
        sched.warmup_steps = min(sched.warmup_steps, fits // 2)
        bar.note(f"time budget: {t.steps} steps cut to {fits} ({step_s * 1000:.0f} ms/step)")
        if sched.name == "cosine" and fits <= sched.restart_step:
            # the restart's cosine would begin after the leg ends: it stays at optim.lr
            self.log(
                {
                    "step": self.step,
                    "warning": "restart_step_not_reached",
                    "restart_step": sched.restart_step,
                    "fitted_steps": fits,
                }
            )
            warnings.warn(
                f"schedule.restart_step ({sched.restart_step}) is at or after the last step "
                f"the time budget fits ({fits}): this leg ends at optim.lr without annealing; "
                "set it to the step the leg resumes from",
                stacklevel=2,
            )
        t.steps = fits
        bar.set_total(fits)

    def nan_event(self, where: str, what: str) -> None:
        """Record and log where a NaN/inf was found (the run's report lists them)."""
        event = {"step": self.step, "nan": where, "action": what}
        if self.qat:
            event["qat"] = "frozen" if qat.observers_frozen(self.model) else "observing"
        self.nan_events.append(event)
        self.log(event)

    def rollback(self) -> None:
        """Back to the last checkpoint at half the LR, or stop after `max_rollbacks`."""
        t = self.cfg.train
        if self.rollbacks >= t.max_rollbacks:
            raise TrainingDivergedError(
                f"loss was NaN/Inf for {t.nan_patience} steps in a row at step {self.step} after "
                f"{self.rollbacks} rollback(s) (max_rollbacks {t.max_rollbacks}); lower optim.lr "
                f"or check the data; last good checkpoint: {self.ckpt_path}"
            )
        rollbacks, scale, skipped = self.rollbacks + 1, self.lr_scale * 0.5, self.nan_skipped
        self.load(load_checkpoint(self.ckpt_path))
        self.rollbacks, self.lr_scale, self.nan_skipped, self.nan_streak = (
            rollbacks,
            scale,
            skipped,
            0,
        )
        self.log({"step": self.step, "rollback": rollbacks, "lr_scale": scale})


class _nullcontext:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: object) -> None:
        return None


class _Bar:
    """Rich progress (loss, step rate, ETA) or nothing."""

    def __init__(self, total: int, start: int, enabled: bool) -> None:
        self.progress = None
        if enabled:
            from clearsight.progress import progress_bar

            self.progress = progress_bar(
                fields=("loss {task.fields[loss]:.4g}", "{task.fields[rate]:.2f} it/s")
            )
            self.task = self.progress.add_task(
                "train", total=total, completed=start, loss=math.nan, rate=0.0
            )

    def __enter__(self) -> _Bar:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def set_total(self, total: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, total=total)

    def update(self, step: int, **fields: float) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, **fields)

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text, highlight=False)


def _truncate_log(path: Path, step: int) -> None:
    """Drop log lines written after the checkpoint we resume from (they will be redone)."""
    if not path.is_file():
        return
    keep = [
        ln
        for ln in path.read_text(encoding="utf-8").splitlines()
        if ln and json.loads(ln)["step"] <= step
    ]
    atomic_write_text(path, "".join(f"{ln}\n" for ln in keep))


def train(
    config: TrainConfig | None,
    run_dir: str | os.PathLike[str],
    *,
    resume: bool = False,
    overfit_batch: bool = False,
    progress: bool = True,
) -> TrainResult:
    """Train per `config` into `run_dir` (checkpoint.pt, best/, last/, train_log.jsonl).

    `resume` continues from run_dir's checkpoint; `config` None takes the checkpoint's own.
    `overfit_batch` trains on one batch only (a sanity check) and sets `overfit_ok`.
    """
    run = Path(run_dir)
    started = time.time()
    start = None
    if resume:
        if not (run / CHECKPOINT_FILE).is_file():
            raise CheckpointError(f"cannot resume: no {CHECKPOINT_FILE} in {run}")
        start = load_checkpoint(run / CHECKPOINT_FILE)
        config = config or config_from_dict(start["config"])
    if config is None:
        raise TrainConfigError("no training config given")
    if start is not None and int(start["step"]) >= config.train.steps:
        # a train.max_minutes budget cuts train.steps to the step it reached
        raise TrainConfigError(
            f"cannot resume {run}: it already reached train.steps ({config.train.steps}) at "
            f"step {int(start['step'])}; to continue, raise it (--set train.steps=N)"
        )
    d = _init_dist(config.train.device)
    try:
        if d.main:
            run.mkdir(parents=True, exist_ok=True)
            sweep_leftovers(run, before=started)  # temporary files of a killed earlier run
        r = _Run(config, run, d, overfit_batch)
        if start is not None:
            try:
                r.load(start)
            except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
                r.close()
                raise CheckpointError(
                    f"{run / CHECKPOINT_FILE}: does not fit this run ({one_line(exc)})"
                ) from exc
            if d.main:
                _truncate_log(run / LOG_FILE, r.step)
        elif not overfit_batch:
            r.save()  # step 0: a rollback target before the first update
        try:
            with _Bar(config.train.steps, r.step, progress and d.main) as bar:
                return r.loop(bar)
        finally:
            r.close()
    finally:
        if d.owns_group:
            dist.destroy_process_group()
