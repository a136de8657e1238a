"""The identity "model": returns its input, so `eval --model identity` scores the inputs."""

from __future__ import annotations

import torch

from clearsight.models.contract import RestorationModel
from clearsight.models.registry import register_model


class Identity(RestorationModel):
    """Output equals input; a baseline that reproduces the golden input-vs-target numbers."""

    pad_multiple = 1
    receptive_radius = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


@register_model(
    "identity",
    task="any",
    description="Returns the input unchanged: scores the inputs themselves (a baseline).",
)
def identity() -> Identity:
    return Identity()
