"""Small models and images shared by tests."""

from __future__ import annotations

import time
from dataclasses import replace

import numpy as np
import torch
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig, make_config
from clearsight.preprocess import PreprocessSpec


class TinyConvNet(nn.Module):
    """Three dilated 3x3 convs: receptive radius 1 + 2 + 3 = 6, no global ops."""

    pad_multiple = 1
    receptive_radius = 6

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.body = nn.Sequential(
            nn.Conv2d(3, 8, 3, padding=1),
            nn.ReLU(),
            nn.Conv2d(8, 8, 3, padding=2, dilation=2),
            nn.ReLU(),
            nn.Conv2d(8, 3, 3, padding=3, dilation=3),
        )

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        return x + 0.1 * self.body(x)


class GlobalMeanNet(nn.Module):
    """Adds the global mean: no finite receptive field (like SE or tone blocks)."""

    pad_multiple = 1
    receptive_radius = None

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        return x + x.mean(dim=(2, 3), keepdim=True)


class MultipleOf8Net(nn.Module):
    """Needs H and W divisible by 8 (like space-to-depth models)."""

    pad_multiple = 8
    receptive_radius = 0

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        assert h % 8 == 0 and w % 8 == 0, (h, w)
        return x * 0.5


class SlowNet(nn.Module):
    """Identity taking 50 ms a call and counting its calls (one per tile, or per frame):
    slow enough for a test to cancel or abandon the work midway."""

    pad_multiple = 1
    receptive_radius = 0

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        time.sleep(0.05)
        return x


def loaded(model: nn.Module, preprocess: PreprocessSpec | None = None) -> LoadedModel:
    cfg = ModelConfig(
        architecture="test",
        arch_args={},
        task="any",
        preprocess=preprocess or PreprocessSpec(),
        metric_preset="rgb",
    )
    return LoadedModel(model=model.eval(), config=cfg, source="test")


def random_image(h: int, w: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)


TINY_SSD = {"num_classes": 5, "depth_multiplier": 0.25, "input_size": 128}


def tiny_ssd() -> LoadedModel:
    """A 128x128 SSD with 4 classes (+ background), seeded weights and confident heads."""
    from clearsight.models.registry import build_model
    from clearsight.models.ssd_mobilenet_v1 import SSD_PREPROCESS

    torch.manual_seed(0)
    model = build_model("ssd-mobilenet-v1", **TINY_SSD).eval()
    with torch.no_grad():  # a fresh head's 0.01 score prior would leave nothing above 0.3
        for head in model.class_heads:
            torch.nn.init.normal_(head.bias, 0.0, 1.0)
    spec = replace(SSD_PREPROCESS, size=(128, 128))
    cfg = make_config(model, "ssd-mobilenet-v1", TINY_SSD, name="tiny-ssd", preprocess=spec)
    cfg.class_ids, cfg.class_names = [1, 18, 44, 90], ["person", "dog", "bottle", "toothbrush"]
    return LoadedModel(model=model, config=cfg, source="tiny-ssd")
