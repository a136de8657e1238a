"""The video family's side of training (`engine/train_task.py`): S2VD fine-tuning.

Data are clips of paired frames cut into random windows (`data/video_pairs.py`); the loss is
a restoration pixel loss on every frame of the window (`l1`, `mse` or `charbonnier`); the
validation restores each whole validation clip window by window, exactly as inference does
(`engine/video_window.py`: `Windowed`, the family's runner), and scores every frame under
the metric preset, averaged over all frames of all clips. The loop, its checkpoints, exact
resume and NaN guard are the trainer's (`engine/trainer.py`), shared with every family.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig, make_config
from clearsight.data.video_pairs import VideoWindowDataset
from clearsight.engine.restore_train import RestorationTask
from clearsight.engine.train_config import TrainConfig, TrainConfigError
from clearsight.engine.train_task import ValidationContext
from clearsight.engine.video_window import Windowed, restore_frames
from clearsight.io import to_uint8
from clearsight.models.contract import as_restoration_model

__all__ = ["VIDEO_LOSSES", "VideoRestorationTask"]

VIDEO_LOSSES = ("l1", "mse", "charbonnier")
"""The losses a window trains with (pixel losses that read any tensor shape)."""


class VideoRestorationTask(RestorationTask):
    """A window of frames in, the restored window out; the image restoration task's loss,
    best-model rule and artifact config, with video data and validation."""

    def __init__(self, model: nn.Module, cfg: TrainConfig, init: ModelConfig | None) -> None:
        super().__init__(model, cfg, init)
        arch, d = cfg.model.arch, cfg.data
        if cfg.loss.name not in VIDEO_LOSSES:
            raise TrainConfigError(
                f"loss.name: {arch} trains with {', '.join(VIDEO_LOSSES)} (a pixel loss on "
                f"every frame of the window), got {cfg.loss.name!r}"
            )
        refused = {
            "data.layout": d.layout != "folders",
            "data.input_dir": d.input_dir is not None,
            "data.target_dir": d.target_dir is not None,
            "data.name_map": d.name_map is not None,
            "distill.teacher": bool(cfg.distill.teacher),
            "val.tone": cfg.val.tone,
        }
        for key, set_ in refused.items():
            if set_:
                raise TrainConfigError(
                    f"{key}: not for video models ({arch} trains on clip folders holding "
                    "rain/, moire/ or input/ and clean/ frames; docs/training.md)"
                )
        net = as_restoration_model(model)
        multiple = max(int(net.pad_multiple), int(self.preprocess.pad_multiple))
        if d.patch_size % multiple:
            raise TrainConfigError(
                f"data.patch_size: {arch} takes sides that are multiples of {multiple}, "
                f"got {d.patch_size}"
            )
        self.frames = d.frames or int(self.preprocess.extra.get("window_frames", 1))

    def open_data(self, root: str, train: bool) -> Any:
        if not root:
            raise TrainConfigError(f"data.{'train' if train else 'val'}: no data folder given")
        d = self.cfg.data
        return VideoWindowDataset(
            root,
            frames=self.frames if train else None,
            patch_size=d.patch_size if train else None,
            augment=train,
            seed=d.seed,
            repeat=d.repeat if train else 1,
            cache=d.cache if train else "none",
        )

    def data_files(self, ds: Any) -> list[Path]:
        return ds.files()

    def to_device(
        self, inp: torch.Tensor, target: Any, device: torch.device, fmt: torch.memory_format
    ) -> tuple[torch.Tensor, Any]:
        """[B,3,T,h,w] windows on `device`, each frame mapped into the model's input space
        (the memory format applies to 4-D tensors only; windows stay contiguous)."""

        def to_model(x: torch.Tensor) -> torch.Tensor:
            b, c, t, h, w = x.shape
            frames = x.to(device, non_blocking=True).transpose(1, 2).reshape(b * t, c, h, w)
            y = self.preprocess.to_model(frames)
            return y.reshape(b, t, c, h, w).transpose(1, 2).contiguous()

        return to_model(inp), to_model(target)

    @torch.no_grad()
    def validate(self, model: nn.Module, ds: Any, ctx: ValidationContext) -> dict[str, float]:
        """Mean per-frame metrics under the preset over every frame of the validation clips
        (clips sharded over ranks and reduced); each clip restored as inference does."""
        cfg = make_config(model, self.cfg.model.arch, self.cfg.model.args)
        runner = Windowed(LoadedModel(model, cfg, "training"), device=ctx.device, tile=0)
        n = len(ds) if ctx.max_images == 0 else min(ctx.max_images, len(ds))
        sums: dict[str, float] = {}
        count = 0
        for i in range(ctx.rank, n, ctx.world):
            inputs, targets = ds.clip_frames(i)
            for out, target in zip(restore_frames(inputs, runner), targets, strict=True):
                for k, v in self.preset.compute(out, to_uint8(target)).items():
                    sums[k] = sums.get(k, 0.0) + min(v, 100.0)  # identical frames: cap inf
                count += 1
        model.train()
        keys = sorted(sums) or ["psnr", "ssim"]
        vec = torch.tensor([*(sums.get(k, 0.0) for k in keys), count], dtype=torch.float64)
        if ctx.world > 1:
            dist.all_reduce(vec)
        total = max(float(vec[-1]), 1.0)
        return {k: float(v) / total for k, v in zip(keys, vec[:-1].tolist(), strict=True)}
