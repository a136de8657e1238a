"""The training loop: `train(config, run_dir)` from Python, `clearsight train` from the shell.

The loop itself (`_Run.loop`) fits on one screen; the pieces around it are small helpers.

Faults lose nothing: a checkpoint is written atomically every `ckpt_every` steps (and at the
start, so a rollback always has a target); resume continues bit-exactly on CPU; a NaN/Inf
loss skips its step, `nan_patience` in a row roll back to the last checkpoint at half the LR,
and more than `max_rollbacks` rollbacks stop the run with `TrainingDivergedError`. Each
skipped step is logged with where the NaN/inf was found (`TrainResult.nan_events`), and no
checkpoint or artifact is ever written holding one.

Quantization-aware training (`train.qat`, `engine/qat.py`): fake-quantized convolutions;
a skipped step also undoes its batch's effect on the quantizers' ranges.

What differs between task families (data, loss, validation, the best-model rule, the
exported config) is the family's `TrainingTask` (`engine/train_task.py`), found in the family
table (`clearsight/families.py`): this loop never asks which family it trains. Beside it:
the speed policy (`train_speed.py`: bf16, channels-last, compile, chosen from measurements),
the batch stream and process group (`train_stream.py`), the schedule and EMA
(`train_schedule.py`), the time budget (`train_budget.py`), logs and the bar (`train_log.py`).

Under `torchrun` (WORLD_SIZE > 1) the model is wrapped in DistributedDataParallel (gloo on
CPU, NCCL on GPU), `data.batch_size` is split across ranks, and only rank 0 writes files.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import os
import time
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from clearsight.artifact import save_artifact
from clearsight.atomic import sweep_leftovers
from clearsight.engine import qat
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
from clearsight.engine.train_budget import BudgetClock, fit_budget
from clearsight.engine.train_config import TrainConfig, TrainConfigError, config_from_dict
from clearsight.engine.train_init import init_from
from clearsight.engine.train_log import LOG_FILE, RunLog, TrainBar, truncate_log
from clearsight.engine.train_schedule import ema_update, lr_factor
from clearsight.engine.train_speed import speed_settings
from clearsight.engine.train_stream import BatchStream, Dist, init_dist
from clearsight.engine.train_task import TrainingTask, ValidationContext, data_hash
from clearsight.errors import ClearsightError
from clearsight.families import row_for
from clearsight.models.registry import build_model, get_spec

__all__ = ["TrainResult", "TrainingDivergedError", "train", "training_task"]


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
    """--overfit-batch's figure, where the family's check has one."""
    model: nn.Module | None = field(default=None, repr=False)
    """The trained weights in memory (the EMA copy when EMA is on), on every rank."""


def training_task(model: nn.Module, cfg: TrainConfig, init: Any) -> TrainingTask:
    """The `TrainingTask` of `cfg.model.arch`'s family (the family table names it)."""
    factory = row_for(get_spec(cfg.model.arch).task).load("training_task")
    return factory(model, cfg, init)


# ------------------------------------------------------------------------------ the run
class _Run:
    """State of one training run; `loop` is the whole algorithm."""

    def __init__(self, cfg: TrainConfig, run_dir: Path, d: Dist, overfit: bool) -> None:
        self.cfg, self.run_dir, self.d, self.overfit = cfg, run_dir, d, overfit
        t = cfg.train
        self.ckpt_path = run_dir / CHECKPOINT_FILE
        torch.manual_seed(t.seed)
        self.model = build_model(cfg.model.arch, **cfg.model.args).to(d.device)
        init = init_from(self.model, cfg) if cfg.model.init else None
        self.qat = t.qat.enabled
        if self.qat:  # fake-quantized convs (engine/qat.py); weights exported as fp32
            self.qat_freeze = t.qat.freeze_step or max(1, t.steps // 2)
            qat.prepare_qat_model(self.model, t.qat.backend)
        self.spec = get_spec(cfg.model.arch)
        self.speed = speed_settings(t, self.model, d.device)
        if self.qat:  # fake-quant observers: eager fp32 steps (no autocast, no compile)
            self.speed = dataclasses.replace(
                self.speed, amp=False, compiled=False, why="train.qat: eager fp32"
            )
        self.task = training_task(self.model, cfg, init)
        self.memory_format = (
            torch.channels_last if self.speed.channels_last else torch.contiguous_format
        )
        self.model.to(memory_format=self.memory_format)  # before the EMA copy and optimizer
        self.ema = copy.deepcopy(self.model).requires_grad_(False) if t.ema_decay > 0 else None
        # after the EMA copy: its feature hooks must not be copied into the EMA model
        self.distill = build_distiller(
            cfg,
            self.model,
            self.task.preprocess,
            self.spec.task,
            d.device,
            self.task.class_ids,
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
        self.loss_fn = self.task.build_loss(self.model)
        self.train_ds = self.task.open_data(cfg.data.train, True)
        if self.distill is not None:
            self.distill.prepare_data(self.train_ds)
        if cfg.data.batch_size % d.world:
            raise TrainConfigError(
                f"data.batch_size: {cfg.data.batch_size} does not split over {d.world} ranks"
            )
        per_rank = cfg.data.batch_size // d.world
        self.stream = BatchStream(self.train_ds, per_rank, cfg.data.workers, cfg.data.seed, d)
        want_val = cfg.data.val and not overfit
        self.val_ds = self.task.open_data(cfg.data.val, False) if want_val else None
        self.amp = self.speed.amp
        self.step, self.best, self.val_metrics = 0, -math.inf, {}
        self.nan_skipped, self.nan_streak, self.rollbacks, self.lr_scale = 0, 0, 0, 1.0
        self.nan_events: list[dict[str, Any]] = []
        self.nan_where = ""
        root = Path(getattr(self.train_ds, "root", "."))
        self.data_hash = data_hash(self.task.data_files(self.train_ds), root)
        self.log = RunLog(run_dir, d.main, t.tensorboard and not overfit)

    def to_device(self, raw: tuple[torch.Tensor, Any]) -> tuple[torch.Tensor, Any]:
        """A loader batch on the run's device, in the model's input space and layout."""
        return self.task.to_device(*raw, self.d.device, self.memory_format)

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

    def resume(self, s: dict[str, Any]) -> None:
        """Continue from checkpoint `s`: one line naming the file if it does not fit."""
        try:
            self.load(s)
        except (KeyError, TypeError, ValueError, RuntimeError, IndexError) as exc:
            where = self.run_dir / CHECKPOINT_FILE
            raise CheckpointError(f"{where}: does not fit this run ({one_line(exc)})") from exc
        if self.d.main:
            truncate_log(self.run_dir / LOG_FILE, self.step)

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
        saved = qat.snapshot(self.model, buffers=True)  # running statistics and quantizers
        for micro in range(t.grad_accum):
            raw = batch if batch is not None else self.stream.next()
            inp, tgt = self.to_device(raw)
            sync = micro == t.grad_accum - 1 or not isinstance(
                self.net, nn.parallel.DistributedDataParallel
            )
            ctx = self.net.no_sync() if not sync else nullcontext()  # type: ignore[operator]
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
        if ok and self.qat:
            bad = qat.nonfinite(self.model, quant_only=True)
            ok, self.nan_where = not bad, f"quantizer range {bad[0]}" if bad else ""
        if not ok:  # BatchNorm and the observers took in the bad batch: undo that too
            qat.restore(self.model, saved)
        if ok:
            self.opt.step()
            if self.ema is not None:
                ema_update(self.ema, self.model, t.ema_decay)
        self.opt.zero_grad(set_to_none=True)
        return float(total) if ok else math.nan

    # -- validation and export ------------------------------------------------------------
    def export_model(self) -> nn.Module:
        return self.ema if self.ema is not None else self.model

    def validate(self) -> dict[str, float]:
        assert self.val_ds is not None
        d, fmt, most = self.d, self.memory_format, self.cfg.val.max_images
        ctx = ValidationContext(d.device, d.rank, d.world, fmt, most)
        return self.task.validate(self.export_model(), self.val_ds, ctx)

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
                "preset": self.task.metric_name,
                **self.val_metrics,
            },
        }
        if self.qat:
            prov["qat"] = {**dataclasses.asdict(self.cfg.train.qat), "freeze_step": self.qat_freeze}
        if self.nan_events:
            prov["nan_events"] = list(self.nan_events)
        title = f"{self.cfg.model.arch}-{self.run_dir.name}"
        cfg = self.task.artifact_config(model, provenance=prov, name=title)
        save_artifact(model, self.run_dir / name, cfg)
        if self.qat and name == "last":  # the int8 graph with the trained scales, beside it
            from clearsight.engine.qat_export import qat_int8_onnx
            from clearsight.export.onnx_precision import save_onnx_bytes
            from clearsight.zoo import int8_path_for

            data = qat_int8_onnx(self.export_model(), cfg, f"{self.run_dir / name} (qat)")
            save_onnx_bytes(data, int8_path_for(self.run_dir / name))

    # -- the loop -------------------------------------------------------------------------
    def loop(self, bar: Any) -> TrainResult:
        t, res = self.cfg.train, TrainResult(self.run_dir, self.step)
        fixed = self.stream.next() if self.overfit else None
        window: list[float] = []
        speed_logged = False
        bar.note(self.speed.describe())
        t0, s0 = time.perf_counter(), self.step
        clock = BudgetClock(t.max_minutes, self.step)
        while self.step < t.steps:
            loss = self.train_step(fixed)
            self.step += 1
            if clock.budget_s > 0:
                elapsed, due_now, step_s, left_s = clock.tick(self.step)
                over, due = self.agree(float(elapsed >= clock.budget_s), float(due_now))
                if due:
                    clock.timed = True
                    step_s, left_s = self.agree(step_s, left_s)
                    fit_budget(self.cfg, self.step, step_s, left_s, self.log, bar)
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
                score = self.task.score(self.val_metrics)
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
            assert fixed is not None
            inp, tgt = self.to_device(fixed)
            first, last = res.first_loss, res.last_loss
            res.overfit_ok, res.overfit_ap = self.task.overfit_check(
                self.export_model(), inp, tgt, first, last
            )
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
        self.rollbacks, self.lr_scale, self.nan_skipped = rollbacks, scale, skipped
        self.nan_streak = 0
        self.log({"step": self.step, "rollback": rollbacks, "lr_scale": scale})


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
    d = init_dist(config.train.device)
    try:
        if d.main:
            run.mkdir(parents=True, exist_ok=True)
            sweep_leftovers(run, before=started)  # temporary files of a killed earlier run
        r = _Run(config, run, d, overfit_batch)
        try:
            if start is not None:
                r.resume(start)
            elif not overfit_batch:
                r.save()  # step 0: a rollback target before the first update
            with TrainBar(config.train.steps, r.step, progress and d.main) as bar:
                return r.loop(bar)
        finally:
            r.log.close()
    finally:
        if d.owns_group:
            dist.destroy_process_group()
