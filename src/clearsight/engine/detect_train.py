"""The detection family's side of training (`DetectionTask`, see `engine/train_task.py`).

The loop, checkpoints, resume, NaN guard and data-parallel wrapping are the trainer's own and
are shared with restoration; what differs for a detector lives here:

- the label map and preprocessing a run trains with (`DetectionSetup`): a fine-tuned model
  keeps its init artifact's `class_ids`, names and `PreprocessSpec`; a model trained from
  scratch takes the training set's categories (or COCO's table when the head has COCO's 80
  labels, or the TF API's 90 ids) and the architecture's spec at the model's input size.
  Both are written into every exported artifact, so `clearsight detect` / `eval` read what
  training used;
- batches are (model inputs, per-image targets) from `detection.train_data`, already in
  the model's input space;
- validation is COCO AP through the same `Detector` and scorer as `clearsight eval`;
- `--overfit-batch` scores the fixed batch itself (`batch_ap`).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig, make_config
from clearsight.data.coco import CocoDataset
from clearsight.detection.coco_classes import COCO_IDS, COCO_NAMES
from clearsight.detection.detector import Detector
from clearsight.detection.evaluate import evaluate_detector, find_coco_set
from clearsight.detection.losses import build_detection_loss
from clearsight.detection.train_data import CocoDetectionDataset, Target
from clearsight.engine.train_config import TrainConfig, TrainConfigError
from clearsight.engine.train_task import ValidationContext
from clearsight.metrics.coco_eval import evaluate_coco
from clearsight.models.registry import get_spec
from clearsight.preprocess import PreprocessSpec

__all__ = [
    "OVERFIT_AP",
    "DetectionSetup",
    "DetectionTask",
    "batch_ap",
    "build_detection_loss",
    "detection_setup",
    "open_detection_data",
    "validate_detector",
]

OVERFIT_AP = 0.9
"""--overfit-batch on a detector passes when COCO AP on its own batch reaches this."""
VAL_KEYS = {"AP": "ap", "AP50": "ap50", "AP75": "ap75"}


@dataclass(frozen=True)
class DetectionSetup:
    """What a detector is trained with and what its artifacts carry."""

    preprocess: PreprocessSpec
    class_ids: list[int]
    class_names: list[str]

    def config(self, model: nn.Module, cfg: TrainConfig, **kw: Any) -> ModelConfig:
        """The artifact config of `model`, with this preprocessing and label map."""
        out = make_config(model, cfg.model.arch, cfg.model.args, preprocess=self.preprocess, **kw)
        out.class_ids, out.class_names = list(self.class_ids), list(self.class_names)
        return out


def _model_spec(arch: str, model: nn.Module) -> PreprocessSpec:
    """The architecture's preprocessing at the model's input size (anchors are built for it)."""
    spec = get_spec(arch).preprocess
    if spec.resize == "none":
        return spec
    return dataclasses.replace(spec, size=tuple(int(v) for v in model.input_size))


def detection_setup(model: nn.Module, cfg: TrainConfig, init: ModelConfig | None) -> DetectionSetup:
    """The label map and preprocessing for a run (see the module docstring), with the
    resize filter `model.resize_filter` names, if any."""
    setup = _label_map_and_spec(model, cfg, init)
    if cfg.model.resize_filter is None:
        return setup
    interpolation, _, aa = cfg.model.resize_filter.partition("-")
    extra = {**setup.preprocess.extra, "interpolation": interpolation, "antialias": aa != ""}
    return dataclasses.replace(setup, preprocess=dataclasses.replace(setup.preprocess, extra=extra))


def _label_map_and_spec(
    model: nn.Module, cfg: TrainConfig, init: ModelConfig | None
) -> DetectionSetup:
    if init is not None and init.class_ids is not None:
        names = init.class_names or [str(i) for i in init.class_ids]
        return DetectionSetup(init.preprocess, list(init.class_ids), list(names))
    n = int(model.num_labels)
    spec = _model_spec(cfg.model.arch, model)
    coco_name = dict(zip(COCO_IDS, COCO_NAMES, strict=True))
    ann, _ = find_coco_set(cfg.data.train)
    from clearsight.data.coco import load_coco

    cats = load_coco(ann, check_files=False).categories
    if len(cats) == n:
        ids = sorted(cats)
        return DetectionSetup(spec, ids, [cats[i] for i in ids])
    if n == len(COCO_IDS):
        return DetectionSetup(spec, list(COCO_IDS), list(COCO_NAMES))
    if n == 90:  # the TF Object Detection API's COCO head: label k is category id k + 1
        ids = list(range(1, 91))
        return DetectionSetup(spec, ids, [coco_name.get(i, "???") for i in ids])
    raise TrainConfigError(
        f"data.train: {ann} has {len(cats)} categories but {cfg.model.arch} with arguments "
        f"{cfg.model.args} predicts {n} labels; set model.args.num_classes to fit"
    )


def open_detection_data(
    cfg: TrainConfig, root: str, setup: DetectionSetup, train: bool
) -> CocoDetectionDataset:
    if not root:
        raise TrainConfigError(f"data.{'train' if train else 'val'}: no data folder given")
    d = cfg.data
    return CocoDetectionDataset.from_folder(
        root,
        setup.preprocess,
        setup.class_ids,
        augment=train and d.augment,
        seed=d.seed,
        repeat=d.repeat if train else 1,
    )


def targets_to(targets: list[Target], device: torch.device) -> list[Target]:
    return [{k: v.to(device, non_blocking=True) for k, v in t.items()} for t in targets]


def _first_images(ds: CocoDataset, n: int) -> CocoDataset:
    """`ds` cut to its first `n` images (0: all), ground truth included."""
    if n <= 0 or n >= len(ds.images):
        return ds
    images = ds.images[:n]
    keep = {e.id for e in images}
    raw = dict(ds.raw)
    raw["images"] = [im for im in ds.raw["images"] if im["id"] in keep]
    raw["annotations"] = [a for a in ds.raw["annotations"] if a["image_id"] in keep]
    return CocoDataset(ds.annotation_file, ds.image_dir, images, ds.categories, raw=raw)


@torch.no_grad()
def validate_detector(
    model: nn.Module,
    config: ModelConfig,
    val: CocoDetectionDataset,
    device: torch.device,
    max_images: int = 0,
) -> dict[str, float]:
    """COCO AP, AP50, AP75 of `model` on the validation set, as `clearsight eval` scores."""
    detector = Detector(LoadedModel(model, config, "training"), device=device)
    result, _ = evaluate_detector(detector, _first_images(val.coco, max_images))
    model.train()
    return {k: float(getattr(result, f)) for k, f in VAL_KEYS.items()}


@torch.no_grad()
def batch_ap(model: nn.Module, inputs: torch.Tensor, targets: list[Target]) -> float:
    """COCO AP@[.5:.95] of `model` on one batch, boxes in network-input pixels."""
    was_training = model.training
    model.eval()
    outs = model.postprocess(model(inputs), score_threshold=0.001, max_detections=100)
    model.train(was_training)
    h, w = inputs.shape[-2:]
    n_labels = int(model.num_labels)
    gt: dict[str, Any] = {
        "images": [{"id": i, "width": int(w), "height": int(h)} for i in range(len(targets))],
        "annotations": [],
        "categories": [{"id": k, "name": str(k)} for k in range(n_labels)],
    }
    for i, t in enumerate(targets):
        for box, label in zip(t["boxes"].tolist(), t["labels"].tolist(), strict=True):
            x0, y0, x1, y1 = box
            gt["annotations"].append(
                {"id": len(gt["annotations"]) + 1, "image_id": i, "category_id": int(label),
                 "bbox": [x0, y0, x1 - x0, y1 - y0], "area": (x1 - x0) * (y1 - y0)}
            )  # fmt: skip
    results = [
        {"image_id": i, "category_id": int(lab), "bbox": [b[0], b[1], b[2] - b[0], b[3] - b[1]],
         "score": float(s)}
        for i, o in enumerate(outs)
        for b, s, lab in zip(o["boxes"].tolist(), o["scores"].tolist(), o["labels"].tolist(),
                             strict=True)
    ]  # fmt: skip
    ap = evaluate_coco(gt, results).ap
    return ap if math.isfinite(ap) else 0.0


class DetectionTask:
    """COCO folders in, detection losses, COCO AP validation, the label map in the artifact."""

    metric_name = "coco-ap"

    def __init__(self, model: nn.Module, cfg: TrainConfig, init: ModelConfig | None) -> None:
        self.cfg = cfg
        self.setup = detection_setup(model, cfg, init)
        self.preprocess = self.setup.preprocess
        self.class_ids: list[int] | None = self.setup.class_ids

    def open_data(self, root: str, train: bool) -> CocoDetectionDataset:
        return open_detection_data(self.cfg, root, self.setup, train)

    def data_files(self, ds: Any) -> list[Path]:
        return sorted(set(ds.files()))

    def build_loss(self, model: nn.Module) -> Callable[..., torch.Tensor]:
        return build_detection_loss(self.cfg.loss.name, model)

    def to_device(
        self, inp: torch.Tensor, target: Any, device: torch.device, fmt: torch.memory_format
    ) -> tuple[torch.Tensor, Any]:
        # the data set already gives model inputs (resized, normalised)
        return inp.to(device, non_blocking=True), targets_to(target, device)

    def validate(self, model: nn.Module, ds: Any, ctx: ValidationContext) -> dict[str, float]:
        # every rank scores the whole (small) set: no collective to keep in step
        config = self.setup.config(model, self.cfg)
        return validate_detector(model, config, ds, ctx.device, ctx.max_images)

    def score(self, metrics: dict[str, float]) -> float:
        return metrics.get("AP", -math.inf)

    def artifact_config(self, model: nn.Module, **kw: Any) -> ModelConfig:
        return self.setup.config(model, self.cfg, **kw)

    def overfit_check(
        self, model: nn.Module, inp: torch.Tensor, target: Any, first: float, last: float
    ) -> tuple[bool, float | None]:
        ap = batch_ap(model, inp, target)
        return ap >= OVERFIT_AP, ap
