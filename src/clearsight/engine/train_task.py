"""What a task family must give the training loop (`engine/trainer.py`).

The loop (steps, checkpoints, resume, NaN guard, budgets, data parallelism, EMA, QAT) is
the same for every family; data, loss, validation, the best-model rule and the exported
artifact's config differ. Each family implements `TrainingTask` in a module of its own
(`engine/restore_train.py`, `engine/detect_train.py`) and names it in the family table
(`clearsight/families.py`), so the loop never asks which family it trains.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from torch import nn
from torch.utils.data import Dataset

from clearsight.artifact import ModelConfig
from clearsight.preprocess import PreprocessSpec

__all__ = ["TrainingTask", "ValidationContext", "data_hash"]


@dataclass(frozen=True)
class ValidationContext:
    """Where validation runs: this rank's share of the images and the layout to restore."""

    device: torch.device
    rank: int = 0
    world: int = 1
    memory_format: torch.memory_format = torch.contiguous_format
    max_images: int = 0


class TrainingTask(Protocol):
    """A family's side of training (built by `factory(model, config, init)`)."""

    metric_name: str
    """What validation is scored with (a metric preset's name, or "coco-ap")."""
    preprocess: PreprocessSpec
    """The model's input space (a distillation teacher is fed through it)."""
    class_ids: list[int] | None
    """Dataset ids of the contiguous labels (detection), else None."""

    def open_data(self, root: str, train: bool) -> Dataset:
        """The training or validation set at `root`."""
        ...

    def data_files(self, ds: Any) -> list[Path]:
        """Every file a set reads (hashed into the provenance)."""
        ...

    def build_loss(self, model: nn.Module) -> Callable[..., torch.Tensor]:
        """`loss(out, inp, target)` for the configured loss."""
        ...

    def to_device(
        self, inp: torch.Tensor, target: Any, device: torch.device, fmt: torch.memory_format
    ) -> tuple[torch.Tensor, Any]:
        """A batch from the loader on `device`, in the model's input space."""
        ...

    def validate(self, model: nn.Module, ds: Any, ctx: ValidationContext) -> dict[str, float]:
        """Mean metrics on the validation set (every rank returns the same numbers)."""
        ...

    def score(self, metrics: dict[str, float]) -> float:
        """The value the best model maximises."""
        ...

    def artifact_config(self, model: nn.Module, **kw: Any) -> ModelConfig:
        """The config an exported artifact carries (`make_config` keywords in `kw`)."""
        ...

    def overfit_check(
        self, model: nn.Module, inp: torch.Tensor, target: Any, first: float, last: float
    ) -> tuple[bool, float | None]:
        """--overfit-batch's verdict on the fixed batch: (passed, the family's figure)."""
        ...


def data_hash(files: list[Path], root: Path) -> str:
    """sha256 of the sorted (relative path, size) list: names which files were trained on."""
    h = hashlib.sha256()
    for f in files:
        rel = os.path.relpath(f, root) if root != Path(".") else str(f)
        h.update(f"{rel}\t{f.stat().st_size}\n".encode())
    return h.hexdigest()
