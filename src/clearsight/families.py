"""The table of task families: the one place where restoration and detection differ.

A *task* is what an architecture is registered for (`derain`, `demoire`, `any`, `detect`);
a *family* groups the tasks that share a runner, a training task, an evaluator and a
default metric. Everything that must behave differently per family looks the family up
here (`family_of`, `FAMILIES`) instead of comparing task strings or asking a model's class.

The table names each family's parts by import path (`"package.module:Name"`), resolved on
first use (`FamilyRow.load`). That keeps this module low in the import order (it imports
nothing of the package but the errors), so the engine, the API, the CLI and the server can
all read it, and it keeps start-up fast: detection's parts bring torchvision, which a
restoration run never needs (benchmarks/cli_startup.py). docs/architecture.md shows how a
new family is added: one row here, plus its modules.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass
from typing import Any

from clearsight.errors import UnknownNameError

__all__ = ["FAMILIES", "Backend", "Family", "FamilyRow", "family_of", "row_for"]


class Family(enum.Enum):
    """A task family; the value is what artifacts and `clearsight models --json` print."""

    RESTORATION = "restoration"
    DETECTION = "detection"


class Backend(enum.Enum):
    """What runs a loaded model (`LoadedModel.backend`, set once where it is loaded)."""

    TORCH = "torch"
    ONNXRUNTIME = "onnxruntime"
    PADDLE = "paddle"


@dataclass(frozen=True)
class FamilyRow:
    """One family: the registry tasks it covers and where its parts live."""

    family: Family
    tasks: tuple[str, ...]
    """Registry task names of this family (`register_model(task=...)`)."""
    default_metric: str
    """What `clearsight eval` reports first and the best model is chosen by."""
    training_task: str
    """`TrainingTask` factory (engine/train_task.py): `factory(model, config, init)`."""

    def load(self, part: str) -> Any:
        """The object that field `part` names, imported now."""
        module, _, name = str(getattr(self, part)).partition(":")
        return getattr(importlib.import_module(module), name)


FAMILIES: dict[Family, FamilyRow] = {
    Family.RESTORATION: FamilyRow(
        family=Family.RESTORATION,
        tasks=("derain", "demoire", "any"),
        default_metric="psnr",
        training_task="clearsight.engine.restore_train:RestorationTask",
    ),
    Family.DETECTION: FamilyRow(
        family=Family.DETECTION,
        tasks=("detect",),
        default_metric="AP",
        training_task="clearsight.engine.detect_train:DetectionTask",
    ),
}

_BY_TASK = {task: row.family for row in FAMILIES.values() for task in row.tasks}


def family_of(task: str) -> Family:
    """The family of registry task `task`; an unknown task is an UnknownNameError."""
    try:
        return _BY_TASK[task]
    except KeyError:
        known = ", ".join(sorted(_BY_TASK))
        raise UnknownNameError(f"unknown task {task!r}; known: {known}") from None


def row_for(task: str) -> FamilyRow:
    """The table row of registry task `task`."""
    return FAMILIES[family_of(task)]
