"""The learning rate as a pure function of the step, and the EMA of the weights.

Nothing here holds state a checkpoint would have to restore: a resumed run recomputes the
learning rate from its step.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from clearsight.engine.train_config import TrainConfig

__all__ = ["ema_update", "lr_factor"]


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
def ema_update(ema: nn.Module, model: nn.Module, decay: float) -> None:
    for e, p in zip(ema.state_dict().values(), model.state_dict().values(), strict=True):
        if e.dtype.is_floating_point:
            e.lerp_(p, 1.0 - decay)
        else:
            e.copy_(p)
