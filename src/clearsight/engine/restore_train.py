"""The restoration family's side of training (`engine/train_task.py`): paired folders,
pixel losses, PSNR/SSIM validation under the architecture's metric preset."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig, make_config
from clearsight.data.paired import InputFolderDataset, PairedFolderDataset, SideBySideDataset
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.engine.train_config import TrainConfig, TrainConfigError
from clearsight.engine.train_task import ValidationContext
from clearsight.io import tensor_to_image
from clearsight.losses import build_loss
from clearsight.metrics import psnr
from clearsight.metrics.presets import get_preset
from clearsight.metrics.tone import mean_level_shift, tone_fitted
from clearsight.models.contract import as_restoration_model
from clearsight.models.registry import get_spec

__all__ = ["OVERFIT_MARGIN", "RestorationTask", "open_restoration_data"]

OVERFIT_MARGIN = 0.5
"""--overfit-batch passes when the last loss is at most this fraction of the first."""


def open_restoration_data(cfg: TrainConfig, root: str, train: bool) -> Any:
    """The paired (or side-by-side, or input-only for pure distillation) set at `root`."""
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


class RestorationTask:
    """Image in, image of the same size out; validated per image under a metric preset."""

    class_ids = None

    def __init__(self, model: nn.Module, cfg: TrainConfig, init: ModelConfig | None) -> None:
        if cfg.model.resize_filter is not None:
            raise TrainConfigError(
                f"model.resize_filter: {cfg.model.arch} restores images at their own size; "
                "only detectors resize their input"
            )
        self.cfg = cfg
        self.spec = get_spec(cfg.model.arch)
        self.preprocess = self.spec.preprocess
        self.preset = get_preset(cfg.val.preset or self.spec.metric_preset, cfg.val.crop_border)
        self.metric_name = self.preset.name
        self.residual = as_restoration_model(model).predicts_residual

    def open_data(self, root: str, train: bool) -> Any:
        return open_restoration_data(self.cfg, root, train)

    def data_files(self, ds: Any) -> list[Path]:
        return sorted({f for p in ds.pairs for f in (p.input, p.target)})

    def build_loss(self, model: nn.Module) -> Callable[..., torch.Tensor]:
        loss = self.cfg.loss
        pixel = build_loss(loss.name, eps=loss.eps, residual=self.residual)
        if not loss.detector or loss.detector_weight == 0:
            return pixel
        from clearsight.engine.task_loss import build_task_loss

        device = next(model.parameters()).device
        return build_task_loss(pixel, loss.detector, self.preprocess, weight=loss.detector_weight,
                               residual=self.residual, device=device)  # fmt: skip

    def to_device(
        self, inp: torch.Tensor, target: Any, device: torch.device, fmt: torch.memory_format
    ) -> tuple[torch.Tensor, Any]:
        to_model = self.preprocess.to_model
        inp = to_model(inp.to(device, non_blocking=True)).contiguous(memory_format=fmt)
        target = to_model(target.to(device, non_blocking=True))
        return inp, target.contiguous(memory_format=fmt)

    @torch.no_grad()
    def validate(self, model: nn.Module, ds: Any, ctx: ValidationContext) -> dict[str, float]:
        """Mean per-image metrics under the preset, images sharded over ranks and reduced."""
        cfg = make_config(model, self.cfg.model.arch, self.cfg.model.args)
        restorer = Restorer(
            LoadedModel(model, cfg, "training"), InferenceOptions(tile=0, device=str(ctx.device))
        )
        n = len(ds) if ctx.max_images == 0 else min(ctx.max_images, len(ds))
        sums: dict[str, float] = {}
        for i in range(ctx.rank, n, ctx.world):
            inp, tgt = ds[i]
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
        model.to(memory_format=ctx.memory_format)
        model.train()
        keys = sorted(sums) or ["psnr", "ssim"]
        vec = torch.tensor([sums.get(k, 0.0) for k in keys], dtype=torch.float64)
        if ctx.world > 1:
            dist.all_reduce(vec)
        return {k: float(v) / n for k, v in zip(keys, vec.tolist(), strict=True)}

    def score(self, metrics: dict[str, float]) -> float:
        return metrics.get("score", metrics.get("psnr", -float("inf")))

    def artifact_config(self, model: nn.Module, **kw: Any) -> ModelConfig:
        kw.pop("name", None)  # restoration artifacts are named by their folder
        return make_config(
            model, self.cfg.model.arch, self.cfg.model.args, metric_preset=self.preset.name, **kw
        )

    def overfit_check(
        self, model: nn.Module, inp: torch.Tensor, target: Any, first: float, last: float
    ) -> tuple[bool, float | None]:
        return last <= OVERFIT_MARGIN * first, None
