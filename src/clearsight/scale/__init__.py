"""Scaling out: restoring or detecting in many images on a Ray cluster (`--engine ray`,
docs/scale.md).

Ray is optional (`pip install 'clearsight[scale]'`); nothing here imports it until a run
starts.
"""

from clearsight.scale.detect_ray import DetectSummary, DetectTask, detect_files_ray
from clearsight.scale.inputs import WorkItem, plan_inputs
from clearsight.scale.ray_engine import ItemResult, RestoreTask, ScaleSummary, restore_files_ray

__all__ = [
    "DetectSummary",
    "DetectTask",
    "ItemResult",
    "RestoreTask",
    "ScaleSummary",
    "WorkItem",
    "detect_files_ray",
    "plan_inputs",
    "restore_files_ray",
]
