"""Data-driven channel ranking for pruning, with mean compensation (docs/compress.md).

Weight norms say little about a channel once batch norms are folded into the weights (the
converted SSD-MobileNet-v1, YOLOX-Nano): a channel with tiny weights may carry a large,
nearly constant activation, and removing it shifts every consumer. Here a channel is
ranked by what removing it costs the layers that read it, measured on real images:

* each consumer (a convolution with `groups=1` or a linear layer whose input channels the
  group removes) records its input's per-channel mean and variance over the calibration
  images;
* replacing channel c by its mean changes that consumer's output by an error of energy
  `Var(x_c) * ||W[:, c]||^2` (summed over every consumer of the group): the `energy`
  importance;
* the mean itself is not lost: before the channel goes, `W[:, c] * mean(x_c)` (summed over
  the kernel) is added to each consumer's bias, so only the channel's variation is removed.
  A channel that is constant on the images is removed exactly, up to the zero padding of a
  3x3 consumer at the image border.

Hand-written because Torch-Pruning's importances rank by weights or gradients and none
folds the removed channel's mean back in; its dependency graph still decides the groups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from clearsight.errors import OptionError
from clearsight.models.contract import as_restoration_model

CALIBRATION_CROP = 256
"""Restoration models see centre crops of at most this side (statistics are per channel, so
a crop holds enough positions)."""
Stats = dict[nn.Module, tuple[torch.Tensor, torch.Tensor]]
"""Consumer layer -> (per-input-channel mean, variance), float64, in its current indices."""


def _is_consumer_layer(layer: nn.Module) -> bool:
    if isinstance(layer, nn.Conv2d):
        return layer.groups == 1
    return isinstance(layer, nn.Linear)


def calibration_inputs(loaded: Any, folder: str, limit: int) -> list[torch.Tensor]:
    """Up to `limit` images of `folder` as the model is fed them ([1, 3, H, W] each): a
    detector's own resize or letterbox, a restoration model's centre crop of at most
    `CALIBRATION_CROP` pixels (as `compress quantize` calibrates)."""
    from clearsight.compress.quantize import (
        calibration_images,
        prepare_detection_image,
        prepare_image,
    )

    paths = calibration_images(folder, limit)
    if not paths:
        raise OptionError("calibration", f"{folder} holds no images")
    if loaded.is_detector:
        arrays = [prepare_detection_image(p, loaded, "decoded") for p in paths]
    else:
        pad = as_restoration_model(loaded.model).pad_multiple
        arrays = [prepare_image(p, loaded, pad, CALIBRATION_CROP) for p in paths]
    return [torch.from_numpy(a) for a in arrays]


@torch.no_grad()
def collect_stats(model: nn.Module, inputs: list[torch.Tensor]) -> Stats:
    """Input mean and variance per channel of every consumer layer over `inputs` (and every
    position), from forward pre-hooks."""
    sums: dict[nn.Module, list[Any]] = {}

    def hook(layer: nn.Module, inputs: tuple[torch.Tensor, ...]) -> None:
        x = inputs[0].detach().double()
        x = x.transpose(0, 1).flatten(1) if x.ndim == 4 else x.reshape(-1, x.shape[-1]).t()
        acc = sums.setdefault(layer, [0, 0.0, 0.0])
        acc[0] += x.shape[1]
        acc[1] = acc[1] + x.sum(1)
        acc[2] = acc[2] + (x * x).sum(1)

    layers = [m for m in model.modules() if _is_consumer_layer(m)]
    hooks = [m.register_forward_pre_hook(hook) for m in layers]
    try:
        for x in inputs:
            model(x)
    finally:
        for h in hooks:
            h.remove()
    stats: Stats = {}
    for layer, (n, s, s2) in sums.items():
        mean = s / n
        stats[layer] = (mean, (s2 / n - mean * mean).clamp_min(0.0))
    return stats


def _consumer_deps(group: Any, stats: Stats) -> list[tuple[int, nn.Module, list[int]]]:
    """(position, layer, idxs) of the group's members whose input channels it removes and
    whose input statistics were recorded."""
    from torch_pruning import function

    in_fns = (function.prune_conv_in_channels, function.prune_linear_in_channels)
    out = []
    for i, (dep, idxs) in enumerate(group):
        layer = dep.target.module
        if dep.handler in in_fns and layer in stats and _is_consumer_layer(layer):
            out.append((i, layer, list(idxs)))
    return out


def _in_channel_norms(layer: nn.Module) -> torch.Tensor:
    """||W[:, c]||^2 per input channel c."""
    w = layer.weight.detach().double()
    return w.transpose(0, 1).flatten(1).pow(2).sum(1)


def energy_importance(
    stats: Stats, fallback: Callable[[Any], torch.Tensor]
) -> Callable[[Any], torch.Tensor]:
    """The group importance: summed error energy of removing each channel (module
    docstring); `fallback` ranks a group no recorded consumer reads."""

    def importance(group: Any) -> torch.Tensor:
        n = len(group[0].idxs)
        score = torch.zeros(n, dtype=torch.float64)
        found = False
        for i, layer, idxs in _consumer_deps(group, stats):
            root = torch.as_tensor(group[i].root_idxs, dtype=torch.long)
            per = _in_channel_norms(layer)[idxs] * stats[layer][1][idxs]
            score.scatter_add_(0, root, per)
            found = True
        return score if found else fallback(group).double()

    return importance


@torch.no_grad()
def compensate_and_prune(group: Any, stats: Stats) -> None:
    """Fold the removed channels' means into their consumers' biases, remove the channels,
    and drop them from `stats` so later groups index the consumers' current inputs."""
    consumers = _consumer_deps(group, stats)
    for _, layer, idxs in consumers:
        mean = stats[layer][0][idxs].to(layer.weight.dtype)
        w = layer.weight.detach()[:, idxs]
        shift = (w.flatten(2).sum(2) if w.ndim == 4 else w) @ mean
        if layer.bias is None:
            layer.bias = nn.Parameter(torch.zeros_like(shift))
        layer.bias.add_(shift)
    group.prune()
    for _, layer, idxs in consumers:
        mean, var = stats[layer]
        keep = torch.ones(mean.numel(), dtype=torch.bool)
        keep[idxs] = False
        stats[layer] = (mean[keep], var[keep])
