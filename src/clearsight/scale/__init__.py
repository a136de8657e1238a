"""Scaling restoration out: many images on a Ray cluster (`--engine ray`, docs/scale.md).

Ray is optional (`pip install 'clearsight[scale]'`); nothing here imports it until a run
starts.
"""

from clearsight.scale.inputs import WorkItem, plan_inputs
from clearsight.scale.ray_engine import ItemResult, RestoreTask, ScaleSummary, restore_files_ray

__all__ = [
    "ItemResult",
    "RestoreTask",
    "ScaleSummary",
    "WorkItem",
    "plan_inputs",
    "restore_files_ray",
]
