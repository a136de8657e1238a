"""Training losses for restoration models.

Every loss has one signature, `loss(outputs, inputs, targets) -> scalar`, where `outputs` is
what the model's forward returns: a tensor (the restored image) or, for multi-stage models
such as RESCAN, a list of per-stage predictions. Image losses judge the last stage's
restored image; `rescan` is RESCAN's own loss, which supervises every stage's rain layer.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F

from clearsight.errors import UnknownNameError

LossFn = Callable[[torch.Tensor | Sequence[torch.Tensor], torch.Tensor, torch.Tensor], torch.Tensor]


def _last(outputs: torch.Tensor | Sequence[torch.Tensor]) -> torch.Tensor:
    return outputs[-1] if isinstance(outputs, list | tuple) else outputs  # type: ignore[return-value]


def _restored(
    outputs: torch.Tensor | Sequence[torch.Tensor], inputs: torch.Tensor, residual: bool
) -> torch.Tensor:
    """The restored image from the last output: input - it for models that predict the
    degradation (RESCAN's rain layers), the output itself for models that predict the image
    (MBCNN's last scale). The model says which (`predicts_residual`); never guessed."""
    last = _last(outputs)
    return inputs - last if residual else last


def rescan_loss(outputs: Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor):
    """RESCAN (official): sum over stages of MSE(predicted rain, rainy - clean)."""
    rain = inputs - targets
    stages = outputs if isinstance(outputs, list | tuple) else [outputs]
    return sum(F.mse_loss(s, rain) for s in stages)


def charbonnier(pred: torch.Tensor, target: torch.Tensor, eps: float = 1e-3) -> torch.Tensor:
    """sqrt(d^2 + eps^2): L1-like on big errors, smooth at zero."""
    return torch.sqrt((pred - target) ** 2 + eps * eps).mean()


def _gauss_window(size: int = 11, sigma: float = 1.5, channels: int = 3) -> torch.Tensor:
    x = torch.arange(size, dtype=torch.float32) - (size - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    return (g[:, None] * g[None, :]).expand(channels, 1, size, size).contiguous()


def ssim_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """1 - SSIM (Gaussian 11x11, sigma 1.5, data range 1), differentiable, per channel."""
    c = pred.shape[1]
    w = _gauss_window(channels=c).to(pred)
    pad = w.shape[-1] // 2

    def blur(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(F.pad(t, (pad,) * 4, mode="reflect"), w, groups=c)

    c1, c2 = 0.01**2, 0.03**2
    mu_x, mu_y = blur(pred), blur(target)
    sxx = blur(pred * pred) - mu_x**2
    syy = blur(target * target) - mu_y**2
    sxy = blur(pred * target) - mu_x * mu_y
    ssim = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2))
    return 1.0 - ssim.mean()


PSNR_SCALE = 10.0 / math.log(10.0)


def psnr_loss(pred: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """NAFNet's training loss (BasicSR's PSNRLoss): minus each image's PSNR (data range 1),
    averaged: 10/ln 10 * mean over images of ln(MSE + 1e-8)."""
    mse = ((pred - target) ** 2).mean(dim=(1, 2, 3))
    return PSNR_SCALE * torch.log(mse + 1e-8).mean()


def build_loss(name: str, *, eps: float = 1e-3, residual: bool = False) -> LossFn:
    """The loss called `name` with the common signature.

    `residual`: the model's outputs are degradation layers (restored = input - output), as
    the model's `predicts_residual` attribute declares.
    """
    image_losses: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
        "l1": F.l1_loss,
        "mse": F.mse_loss,
        "charbonnier": lambda p, t: charbonnier(p, t, eps),
        "ssim": ssim_loss,
        "psnr": psnr_loss,
    }
    if name == "rescan":
        return rescan_loss  # type: ignore[return-value]
    if name == "mbcnn":
        return mbcnn_loss  # type: ignore[return-value]
    if name == "esdnet":
        return esdnet_loss  # type: ignore[return-value]
    if name not in image_losses:
        known = ", ".join(["rescan", "mbcnn", "esdnet", *image_losses])
        raise UnknownNameError(f"unknown loss {name!r}; known: {known}")
    fn = image_losses[name]
    return lambda outputs, inputs, targets: fn(_restored(outputs, inputs, residual), targets)


# -- MBCNN ------------------------------------------------------------------------------------
SOBEL_WEIGHT = 0.25


def sobel_gradients(x: torch.Tensor) -> torch.Tensor:
    """Per-channel Sobel x and y responses of [N,C,H,W] (replicate border): [N,2C,H,W]."""
    kx = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]])
    k = torch.stack([kx, kx.t()])[:, None].to(x)  # [2,1,3,3]
    c = x.shape[1]
    xp = F.pad(x, (1, 1, 1, 1), mode="replicate")
    return F.conv2d(xp, k.repeat(c, 1, 1, 1), groups=c)


def mbcnn_loss(
    outputs: torch.Tensor | Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """MBCNN: sum over scales of L1 + 0.25 * Sobel-gradient L1 against the downscaled target.

    `outputs` is MBCNN's [1/4, 1/2, full] list (a single tensor counts as one scale); each
    scale's target is `targets` area-averaged to that output's size.
    """
    scales = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
    total = targets.new_zeros(())
    for out in scales:
        tgt = targets
        if out.shape[-2:] != targets.shape[-2:]:
            tgt = F.interpolate(targets, size=out.shape[-2:], mode="area")
        total = total + F.l1_loss(out, tgt)
        total = total + SOBEL_WEIGHT * F.l1_loss(sobel_gradients(out), sobel_gradients(tgt))
    return total


# -- ESDNet ------------------------------------------------------------------------------------


def esdnet_loss(
    outputs: torch.Tensor | Sequence[torch.Tensor], inputs: torch.Tensor, targets: torch.Tensor
) -> torch.Tensor:
    """ESDNet's loss without its perceptual term: the sum over its [1/4, 1/2, full] outputs
    of L1 against the target bilinearly downscaled to each (as the authors' multi-scale
    loss, weight 1). Their VGG16 perceptual term (ImageNet weights, relu3_3) is left out:
    the weights are a download this project does not make."""
    scales = list(outputs) if isinstance(outputs, list | tuple) else [outputs]
    total = targets.new_zeros(())
    for out in scales:
        tgt = targets
        if out.shape[-2:] != targets.shape[-2:]:
            factor = out.shape[-1] / targets.shape[-1]
            tgt = F.interpolate(targets, scale_factor=factor, mode="bilinear", align_corners=False)
        total = total + F.l1_loss(out, tgt)
    return total
