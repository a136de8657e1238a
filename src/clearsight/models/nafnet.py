"""NAFNet (Chen, Chu, Zhang and Sun, "Simple Baselines for Image Restoration", ECCV 2022;
github.com/megvii-research/NAFNet, MIT licence), a U-Net of activation-free blocks.

Our own port of the official `NAFNet` in plain PyTorch, at any width and block counts:

- a 3x3 conv lifts the image to `width` features; each encoder level runs its blocks, keeps
  the result as a skip and halves the resolution with a 2x2 stride-2 conv (channels x2);
  `middle_blocks` blocks at the bottom; each decoder level doubles the resolution with a 1x1
  conv and pixel shuffle (channels /2), adds the skip and runs its blocks; a 3x3 conv back to
  3 channels is added to the input;
- a block is two residual branches scaled by learnt per-channel factors (zero at
  initialisation): LayerNorm over channels, 1x1 conv to twice the width, 3x3 depthwise conv,
  SimpleGate (the two halves multiplied), simplified channel attention (a 1x1 conv of the
  global average, multiplied in), 1x1 conv; then LayerNorm, 1x1 conv, SimpleGate, 1x1 conv.

Tensors: `forward(x)` takes [B,3,H,W] RGB in [0, 1] of any size and returns the restored
image, same size, not clamped: like the official forward it pads the bottom and right with
zeros to a multiple of 2^levels, runs and crops (so `restore` on an odd size is the official
test's output). The attention pools globally, so tiles share the whole image's pooled vectors
(`clearsight.models.global_pool`). Standard layers only, so the model exports to ONNX.

The official state dict loads under the same names except `sca.1` (ours `sca.conv`);
`clearsight import torch --arch nafnet` maps it and ClearView's naming (`clearsight.convert.
torch_import`).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.errors import ClearsightError
from clearsight.models.contract import RestorationModel, TiledRestore, TilingLimits
from clearsight.models.global_pool import GlobalPool, pool_sites, shared_stats_tiled
from clearsight.models.registry import register_model
from clearsight.tiling import Progress

MAX_LEVELS = 6
MAX_BLOCKS = 64
MAX_WIDTH = 256
DEFAULT_TILE = 512
# 3.25 GB peak at 1920x1088 for the default width (measured, fp32, CPU): 1080p runs whole,
# as the authors run it; 4K runs in 512 px tiles sharing a 1080p downscale's pooled vectors
MAX_UNTILED_PIXELS = 1920 * 1088
STATS_PIXELS = 1920 * 1088
TILE_HALO = 64
TILE_BLEND = 32


class NAFNetConfigError(ClearsightError, ValueError):
    """NAFNet arguments out of range (block lists too long, negative or too many blocks)."""


class LayerNorm2d(nn.Module):
    """LayerNorm over the channels of [N,C,H,W] at each pixel (eps 1e-6, as the official)."""

    def __init__(self, channels: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels))
        self.bias = nn.Parameter(torch.zeros(channels))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.is_contiguous(memory_format=torch.channels_last) and x.shape[1] > 1:
            # NHWC memory: the channels are the innermost axis, so one fused layer_norm
            # over them replaces six elementwise passes (same values to ~1e-7)
            y = F.layer_norm(x.permute(0, 2, 3, 1), (x.shape[1],), self.weight, self.bias, self.eps)
            return y.permute(0, 3, 1, 2)
        mu = x.mean(1, keepdim=True)
        centred = x - mu
        var = centred.pow(2).mean(1, keepdim=True)
        y = centred / (var + self.eps).sqrt()
        return self.weight.view(1, -1, 1, 1) * y + self.bias.view(1, -1, 1, 1)


def simple_gate(x: torch.Tensor) -> torch.Tensor:
    """The first half of the channels times the second half."""
    a, b = x.chunk(2, dim=1)
    return a * b


class ChannelAttention(nn.Module):
    """Simplified channel attention: x times a 1x1 conv of its global average."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.pool = GlobalPool()
        self.conv = nn.Conv2d(channels, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.conv(self.pool(x))


class NAFBlock(nn.Module):
    """The official block (expansion 2 in both branches, no dropout at inference)."""

    def __init__(self, c: int) -> None:
        super().__init__()
        dw = 2 * c
        self.norm1 = LayerNorm2d(c)
        self.conv1 = nn.Conv2d(c, dw, 1)
        self.conv2 = nn.Conv2d(dw, dw, 3, padding=1, groups=dw)
        self.sca = ChannelAttention(dw // 2)
        self.conv3 = nn.Conv2d(dw // 2, c, 1)
        self.norm2 = LayerNorm2d(c)
        self.conv4 = nn.Conv2d(c, 2 * c, 1)
        self.conv5 = nn.Conv2d(c, c, 1)
        self.beta = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.gamma = nn.Parameter(torch.zeros(1, c, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = simple_gate(self.conv2(self.conv1(self.norm1(x))))
        if self.training or y.shape[0] != 1 or _tracing():
            x = x + self.conv3(self.sca(y)) * self.beta
            return x + self.conv5(simple_gate(self.conv4(self.norm2(x)))) * self.gamma
        # one image at inference: its attention vector (per input channel of conv3) and the
        # branch scales beta and gamma (per output channel) are folded into the 1x1 convs'
        # weights, a few thousand products instead of three full feature-map passes (CPU
        # time 12 % less at 512x512; outputs within 3e-7)
        attn = self.sca.conv(self.sca.pool(y)).view(1, -1, 1, 1)
        x = x + _scaled(self.conv3, self.beta, y, attn)
        return x + _scaled(self.conv5, self.gamma, simple_gate(self.conv4(self.norm2(x))))


def _tracing() -> bool:
    """Exporting (a traced graph must hold the published form, for any batch)."""
    return torch.jit.is_tracing() or torch.onnx.is_in_onnx_export()


def _scaled(
    conv: nn.Conv2d, scale: torch.Tensor, x: torch.Tensor, attn: torch.Tensor | None = None
) -> torch.Tensor:
    """`conv(x * attn) * scale` for a 1x1 conv, with `attn` [1,Cin,1,1] and `scale`
    [1,Cout,1,1] folded into its weights."""
    s = scale.view(-1)
    w = conv.weight * s.view(-1, 1, 1, 1)
    if attn is not None:
        w = w * attn
    bias = conv.bias * s if conv.bias is not None else None
    return F.conv2d(x, w, bias)


def _blocks(c: int, n: int) -> nn.Sequential:
    return nn.Sequential(*(NAFBlock(c) for _ in range(n)))


class NAFNet(RestorationModel):
    """NAFNet on [B,3,H,W] RGB in [0, 1], any H and W (padded inside, as the official)."""

    tiling = TilingLimits(default_tile=DEFAULT_TILE, max_untiled_pixels=MAX_UNTILED_PIXELS)
    prefers_channels_last = True  # oneDNN runs the 1x1 convs NHWC (CPU-time 1.2x, measured)

    def __init__(
        self,
        *,
        width: int = 32,
        enc_blocks: tuple[int, ...] | list[int] = (2, 2, 4, 8),
        middle_blocks: int = 4,
        dec_blocks: tuple[int, ...] | list[int] = (2, 2, 2, 2),
    ) -> None:
        super().__init__()
        check_nafnet_args(width, enc_blocks, middle_blocks, dec_blocks)
        self.intro = nn.Conv2d(3, width, 3, padding=1)
        self.ending = nn.Conv2d(width, 3, 3, padding=1)
        self.encoders = nn.ModuleList()
        self.downs = nn.ModuleList()
        self.ups = nn.ModuleList()
        self.decoders = nn.ModuleList()
        c = width
        for n in enc_blocks:
            self.encoders.append(_blocks(c, n))
            self.downs.append(nn.Conv2d(c, 2 * c, 2, stride=2))
            c *= 2
        self.middle_blks = _blocks(c, middle_blocks)
        for n in dec_blocks:
            self.ups.append(nn.Sequential(nn.Conv2d(c, 2 * c, 1, bias=False), nn.PixelShuffle(2)))
            c //= 2
            self.decoders.append(_blocks(c, n))
        self.size_multiple = 2 ** len(enc_blocks)

    def pad_zeros(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """The official padding: zeros on the bottom and right to multiples of 2^levels."""
        h, w = x.shape[-2:]
        m = self.size_multiple
        return F.pad(x, (0, (m - w % m) % m, 0, (m - h % m) % m)), (0, 0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        inp = self.pad_zeros(x)[0]
        f = self.intro(inp)
        skips = []
        for encoder, down in zip(self.encoders, self.downs, strict=True):
            f = encoder(f)
            skips.append(f)
            f = down(f)
        f = self.middle_blks(f)
        for decoder, up, skip in zip(self.decoders, self.ups, reversed(skips), strict=True):
            f = decoder(up(f) + skip)
        return (self.ending(f) + inp)[:, :, :h, :w]

    def tiled_path(self) -> TiledRestore | None:
        return self.restore_tiled

    def restore_tiled(
        self,
        x: torch.Tensor,
        *,
        tile: int = DEFAULT_TILE,
        halo: int = TILE_HALO,
        blend: int = TILE_BLEND,
        stats_pixels: int | None = STATS_PIXELS,
        progress: Progress | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """`self(x)` in overlapping tiles sharing the whole image's pooled attention vectors
        (memory: one tile's activations plus the image). Not exact: the U-Net's reach at
        its coarsest level exceeds the halo; docs/models/derain.md gives the measured gap."""
        return shared_stats_tiled(
            self,
            self,
            self.pad_zeros,
            pool_sites(self),
            x,
            tile=tile,
            halo=halo,
            blend=blend,
            stats_pixels=stats_pixels,
            multiple=self.size_multiple,
            progress=progress,
        )

    def prune_protected(self) -> list[nn.Module] | None:
        """None: the skip additions tie every level's widths together; not declared."""
        return None


def check_nafnet_args(width: int, enc_blocks: Any, middle_blocks: int, dec_blocks: Any) -> None:
    """Raise `NAFNetConfigError` unless the arguments describe a buildable, bounded NAFNet
    (an artifact's config is untrusted: lists are checked before anything is built)."""

    def count(v: Any) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= MAX_BLOCKS

    for key, blocks in (("enc_blocks", enc_blocks), ("dec_blocks", dec_blocks)):
        if not isinstance(blocks, list | tuple) or not all(count(b) for b in blocks):
            raise NAFNetConfigError(
                f"NAFNet {key} must be a list of block counts in 0..{MAX_BLOCKS}, got {blocks!r}"
            )
    if len(enc_blocks) != len(dec_blocks) or len(enc_blocks) > MAX_LEVELS:
        raise NAFNetConfigError(
            f"NAFNet needs as many decoder levels as encoder levels (at most {MAX_LEVELS}), "
            f"got {list(enc_blocks)} and {list(dec_blocks)}"
        )
    if not count(middle_blocks):
        raise NAFNetConfigError(f"NAFNet middle_blocks must be in 0..{MAX_BLOCKS}")
    if not isinstance(width, int) or isinstance(width, bool) or not 1 <= width <= MAX_WIDTH:
        raise NAFNetConfigError(f"NAFNet width must be an integer in 1..{MAX_WIDTH}")


@register_model(
    "nafnet",
    task="derain",
    description="NAFNet (ECCV 2022), activation-free U-Net, any width (default 32, Mid)",
    arg_bounds={"width": (1, MAX_WIDTH), "middle_blocks": (0, MAX_BLOCKS)},
)
def nafnet(
    *,
    width: int = 32,
    enc_blocks: list[int] | None = None,
    middle_blocks: int = 4,
    dec_blocks: list[int] | None = None,
) -> NAFNet:
    """Default: ClearView's NAFNet derainer (width 32, encoder 2-2-4-8, 4 middle blocks,
    decoder 2-2-2-2); the official GoPro/SIDD models are width 32 or 64, 1-1-1-28, 1,
    1-1-1-1 (deblur) or 2-2-4-8, 12, 2-2-2-2 (denoise)."""
    return NAFNet(
        width=width,
        enc_blocks=list(enc_blocks) if enc_blocks is not None else [2, 2, 4, 8],
        middle_blocks=middle_blocks,
        dec_blocks=list(dec_blocks) if dec_blocks is not None else [2, 2, 2, 2],
    )
