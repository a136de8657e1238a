"""MACs of a restoration model's forward, by layer type.

MACs are counted with forward hooks on the layers that do the arithmetic, using the shapes the
model really runs with (so a pruned model counts its real widths):

- `Conv2d`: output elements x in_channels/groups x kh x kw;
- `ConvTranspose2d`: input elements x out_channels/groups x kh x kw (each input pixel is
  scattered through the kernel; the Conv2d formula applied to the output would overcount by
  stride^2);
- `Linear`: output elements x in_features;
- MBCNN's learnable bandpass (a functional 1x1 conv): output elements x 64;
- convolutions and matrix products called functionally (no module to hook), from torch's
  `FlopCounterMode`, under "functional".

Element-wise ops, pooling and activations are not counted (the field's convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.utils.flop_counter import FlopCounterMode

from clearsight.models.contract import as_restoration_model

__all__ = ["MacCount", "count_macs"]


@dataclass
class MacCount:
    """MACs of one forward at `height` x `width`."""

    height: int
    width: int
    total: int
    by_type: dict[str, int] = field(default_factory=dict)

    @property
    def per_pixel(self) -> float:
        return self.total / (self.height * self.width)


def _layer_macs(module: nn.Module, inp: torch.Tensor, out: torch.Tensor) -> int:
    from clearsight.models.mbcnn import LearnableBandpass

    if isinstance(module, nn.ConvTranspose2d):
        kh, kw = module.kernel_size
        return inp.numel() * (module.out_channels // module.groups) * kh * kw
    if isinstance(module, nn.Conv2d):
        kh, kw = module.kernel_size
        return out.numel() * (module.in_channels // module.groups) * kh * kw
    if isinstance(module, nn.Linear):
        return out.numel() * module.in_features
    if isinstance(module, LearnableBandpass):
        return out.numel() * int(module.kernel.shape[1])
    return 0


def _counted_types() -> tuple[type[nn.Module], ...]:
    from clearsight.models.mbcnn import LearnableBandpass

    return (nn.Conv2d, nn.ConvTranspose2d, nn.Linear, LearnableBandpass)


@torch.no_grad()
def count_macs(model: nn.Module, height: int = 256, width: int = 256) -> MacCount:
    """MACs of the model's `final_output` on one [1,3,H,W] input, by layer type."""
    by_type: dict[str, int] = {}

    def hook(module: nn.Module, args: tuple[Any, ...], out: Any) -> None:
        name = type(module).__name__
        by_type[name] = by_type.get(name, 0) + _layer_macs(module, args[0], out)

    handles = [
        m.register_forward_hook(hook) for m in model.modules() if isinstance(m, _counted_types())
    ]
    # torch's FlopCounterMode also sees convolutions called functionally (RESCAN's fused
    # gate convs use their modules' weights through F.conv2d, so no module hook fires);
    # what the hooks miss is reported as "functional".
    counter = FlopCounterMode(display=False)
    try:
        x = torch.rand(1, 3, height, width)
        net = as_restoration_model(model)
        with counter:
            net.final_output(x)
    finally:
        for h in handles:
            h.remove()
    functional = counter.get_total_flops() // 2 - sum(by_type.values())
    if functional > 0:
        by_type["functional"] = functional
    return MacCount(height, width, sum(by_type.values()), by_type)
