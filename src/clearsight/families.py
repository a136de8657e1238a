"""The table of task families: the one place where restoration, detection and video differ.

A *task* is what an architecture is registered for (`derain`, `demoire`, `any`, `detect`,
`video-derain`); a *family* groups the tasks that share a runner, a training task, an
evaluator and a default metric. Everything that must behave differently per family looks
the family up here (`family_of`, `FAMILIES`) instead of comparing task strings or asking a
model's class.

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

__all__ = [
    "FAMILIES",
    "REFERENCES",
    "Backend",
    "Family",
    "FamilyRow",
    "RESTORES",
    "family_of",
    "row_for",
]


class Family(enum.Enum):
    """A task family; the value is what artifacts and `clearsight models --json` print."""

    RESTORATION = "restoration"
    DETECTION = "detection"
    VIDEO = "video"
    """Models that restore a window of frames at once (S2VD). Image models run on video too,
    frame by frame (`engine.video_window.PerFrame`); they stay in their own family."""


class Backend(enum.Enum):
    """What runs a loaded model (`LoadedModel.backend`, set once where it is loaded)."""

    TORCH = "torch"
    ONNXRUNTIME = "onnxruntime"
    PADDLE = "paddle"


@dataclass(frozen=True)
class FamilyRow:
    """One family: the registry tasks it covers and where its parts live.

    Fields holding `"module:name"` are resolved by `load(field)`; the rest are data."""

    family: Family
    tasks: tuple[str, ...]
    """Registry task names of this family (`register_model(task=...)`)."""
    runner: str
    """Runs a loaded model on its inputs (images; a video family's windows of frames):
    `Runner(loaded, ...)`."""
    file_run: str
    """Runs the runner over files into an output (images: a folder with the names mirrored
    and failures.csv; videos: one video or frame folder)."""
    evaluator: str
    """Scores it on a data folder of this family's layout (`clearsight eval`)."""
    default_metric: str
    """What `clearsight eval` reports first and the best model is chosen by."""
    training_task: str
    """`TrainingTask` factory (engine/train_task.py): `factory(model, config, init)`."""
    export_layouts: tuple[str, ...]
    """ONNX graph layouts `clearsight export --layout` offers (empty: one layout only)."""
    serve_endpoint: str
    """The server's route for this family's requests."""
    ray_task: str
    """The file run on a Ray cluster (`--engine ray`)."""

    def load(self, part: str) -> Any:
        """The object that field `part` names, imported now."""
        module, _, name = str(getattr(self, part)).partition(":")
        obj: Any = importlib.import_module(module)
        for attr in name.split("."):
            obj = getattr(obj, attr)
        return obj


REFERENCES = ("runner", "file_run", "evaluator", "training_task", "ray_task")
"""The fields of a `FamilyRow` that name code (resolved by `FamilyRow.load`)."""

FAMILIES: dict[Family, FamilyRow] = {
    Family.RESTORATION: FamilyRow(
        family=Family.RESTORATION,
        tasks=("derain", "demoire", "any"),
        runner="clearsight.engine.inference:Restorer",
        file_run="clearsight.engine.restore_files:restore_files",
        evaluator="clearsight.engine.evaluate:evaluate",
        default_metric="psnr",
        training_task="clearsight.engine.restore_train:RestorationTask",
        export_layouts=(),
        serve_endpoint="/v1/restore",
        ray_task="clearsight.scale.ray_engine:restore_files_ray",
    ),
    Family.DETECTION: FamilyRow(
        family=Family.DETECTION,
        tasks=("detect",),
        runner="clearsight.engine.detector:Detector",
        file_run="clearsight.engine.detector:Detector.detect_files",
        evaluator="clearsight.engine.detect_evaluate:evaluate_coco_set",
        default_metric="AP",
        training_task="clearsight.engine.detect_train:DetectionTask",
        export_layouts=("decoded", "astar"),
        serve_endpoint="/v1/detect",
        ray_task="clearsight.scale.detect_ray:detect_files_ray",
    ),
    Family.VIDEO: FamilyRow(
        family=Family.VIDEO,
        tasks=("video-derain",),
        runner="clearsight.engine.video_window:Windowed",
        file_run="clearsight.video.restore:restore_video",
        evaluator="clearsight.video.evaluate:evaluate_video",
        default_metric="psnr",
        training_task="clearsight.engine.video_train:VideoRestorationTask",
        export_layouts=(),
        serve_endpoint="/v1/jobs",
        ray_task="clearsight.scale.video_ray:restore_videos_ray",
    ),
}

_BY_TASK = {task: row.family for row in FAMILIES.values() for task in row.tasks}

RESTORES: dict[str, str] = {"derain": "derain", "demoire": "demoire", "video-derain": "derain"}
"""What a restoring task removes (the command and page task that run it); a task not here
(`any`: identity-like models) serves every restoration."""


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
