"""ESDNet and ESDNet-L (Yu, Dai, Li, Ma, Shen, Li and Qi, "Towards Efficient and
Scale-Robust Ultra-High-Definition Image Demoireing", ECCV 2022; github.com/CVMI-Lab/UHDM,
Apache-2.0), a three-level encoder-decoder for 4K screen photos.

Our own port of the official `my_model` in plain PyTorch; the state-dict names are the
official ones, so the released checkpoints load as they are (`clearsight import torch`):

- the image is 2x space-to-depth'd (12 channels) and a 5x5 conv lifts it to
  `en_feature_num` features; three encoder levels (features x1, x2, x4; a stride-2 conv
  between them) each run a residual dense block (dilations 1-2-1, growth `en_inter_num`)
  and `sam_number` semantic-aligned scale-aware modules (SAM);
- a SAM runs one dense block (dilations 1-2-3-2-1) on its input at full, 1/2 and 1/4 scale
  (bilinear), brings the two smaller results back up and fuses the three with channel
  weights from their global averages (a squeeze-excite over the concatenation), plus the
  input;
- three decoder levels (coarse to fine) each take the encoder level (and the finer-scale
  features of the level below), run a residual dense block and the SAMs, and emit a 12-channel
  map depth-to-space'd to an image at that level's scale: 1/4, 1/2 and full resolution.

Tensors: `forward(x)` takes [B,3,H,W] RGB in [0, 1] with H and W multiples of 32 and returns
[1/4, 1/2, full]-resolution images (training supervises all three). `restore(x)` is the
authors' test procedure on any size: pad each side towards a multiple of 32 with their
training set's mean colour (0.3827, 0.4141, 0.3912; the odd pixel on the bottom/right), run,
keep the full-resolution output and crop the padding off. The fusion pools globally, so tiles
share the whole image's pooled vectors (`clearsight.models.global_pool`).
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

SIZE_MULTIPLE = 32  # space-to-depth 2, two stride-2 levels, and the SAM's 1/4 branch
PAD_COLOUR = (0.3827, 0.4141, 0.3912)  # the authors' test pad: their training mean colour
SAM_DILATIONS = (1, 2, 3, 2, 1)
RDB_DILATIONS = (1, 2, 1)
DEFAULT_TILE = 1024
# 1.4 GB peak at 1024x1024 (measured, fp32, CPU): 1080p (FHDMi) runs whole, as the authors
# ran it; 4K (UHDM) runs in 1024 px tiles sharing the pooled vectors of a 1080p downscale
MAX_UNTILED_PIXELS = 1920 * 1088
STATS_PIXELS = 1920 * 1088
TILE_HALO = 96
TILE_BLEND = 48
REFERENCE_PARAMS = {1: 5_934_156, 2: 10_623_444}  # the official my_model at sam 1 / sam 2


class ESDNetInputError(ClearsightError, ValueError):
    """An input the network cannot take unpadded (one line for the CLI)."""


class _Conv(nn.Module):
    """A conv under `.conv` (the official `conv` wrapper's state-dict path)."""

    def __init__(self, cin: int, cout: int, k: int, *, dilation: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=dilation * (k // 2), dilation=dilation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class _ConvReLU(nn.Module):
    """conv then ReLU under `.conv.0` (the official `conv_relu` wrapper's path)."""

    def __init__(self, cin: int, cout: int, k: int, *, dilation: int = 1) -> None:
        super().__init__()
        pad = dilation * (k // 2)
        self.conv = nn.Sequential(
            nn.Conv2d(cin, cout, k, padding=pad, dilation=dilation), nn.ReLU(inplace=True)
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class DenseBlock(nn.Module):
    """Dilated 3x3 conv+ReLU layers, each seeing the block input and every earlier layer
    (newest first), then a 1x1 conv back to the input width; `residual` adds the input
    (the official `RDB`; without it, `DB`)."""

    def __init__(self, channels: int, dilations: tuple[int, ...], growth: int, *, residual: bool):
        super().__init__()
        self.residual = residual
        self.conv_layers = nn.ModuleList(
            _ConvReLU(channels + i * growth, growth, 3, dilation=d) for i, d in enumerate(dilations)
        )
        self.conv_post = _Conv(channels + len(dilations) * growth, channels, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = x
        for layer in self.conv_layers:
            t = torch.cat([layer(t), t], dim=1)
        y = self.conv_post(t)
        return y + x if self.residual else y


class ScaleFusion(nn.Module):
    """The official `CSAF`: weights for the three scales' features from their global
    averages (1x1 convs 3C -> 3C/4 -> 3C/4 -> 3C, ReLU, ReLU, sigmoid), weighted sum."""

    def __init__(self, channels: int, ratio: int = 4) -> None:
        super().__init__()
        self.pools = nn.ModuleList(GlobalPool() for _ in range(3))
        self.compress1 = nn.Conv2d(channels, channels // ratio, 1)
        self.compress2 = nn.Conv2d(channels // ratio, channels // ratio, 1)
        self.excitation = nn.Conv2d(channels // ratio, channels, 1)

    def forward(self, *scales: torch.Tensor) -> torch.Tensor:
        v = torch.cat([pool(s) for pool, s in zip(self.pools, scales, strict=True)], dim=1)
        v = F.relu(self.compress2(F.relu(self.compress1(v))))
        weights = torch.sigmoid(self.excitation(v)).chunk(3, dim=1)
        return sum(s * w for s, w in zip(scales, weights, strict=True))  # type: ignore[return-value]


class SAM(nn.Module):
    """Semantic-aligned scale-aware module: a dense block at 1, 1/2 and 1/4 scale, fused."""

    def __init__(self, channels: int, growth: int) -> None:
        super().__init__()
        self.basic_block = DenseBlock(channels, SAM_DILATIONS, growth, residual=False)
        self.basic_block_2 = DenseBlock(channels, SAM_DILATIONS, growth, residual=False)
        self.basic_block_4 = DenseBlock(channels, SAM_DILATIONS, growth, residual=False)
        self.fusion = ScaleFusion(3 * channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y1 = self.basic_block(x)
        y2 = self.basic_block_2(F.interpolate(x, scale_factor=0.5, mode="bilinear"))
        y4 = self.basic_block_4(F.interpolate(x, scale_factor=0.25, mode="bilinear"))
        y2 = F.interpolate(y2, scale_factor=2, mode="bilinear")
        y4 = F.interpolate(y4, scale_factor=4, mode="bilinear")
        return x + self.fusion(y1, y2, y4)


class _Level(nn.Module):
    """A residual dense block then `sams` SAMs (shared by the encoder and decoder levels)."""

    def __init__(self, channels: int, growth: int, sams: int) -> None:
        super().__init__()
        self.rdb = DenseBlock(channels, RDB_DILATIONS, growth, residual=True)
        self.sam_blocks = nn.ModuleList(SAM(channels, growth) for _ in range(sams))

    def features(self, x: torch.Tensor) -> torch.Tensor:
        x = self.rdb(x)
        for sam in self.sam_blocks:
            x = sam(x)
        return x


class EncoderLevel(_Level):
    """An encoder level; all but the last also give the next level's input (stride-2 conv)."""

    def __init__(self, channels: int, growth: int, sams: int, *, last: bool) -> None:
        super().__init__(channels, growth, sams)
        if not last:
            self.down = nn.Sequential(
                nn.Conv2d(channels, 2 * channels, 3, stride=2, padding=1), nn.ReLU(inplace=True)
            )


class DecoderLevel(_Level):
    """A decoder level: the image at its scale (12 channels depth-to-space'd) and its
    features upsampled 2x for the next finer level."""

    def __init__(self, channels: int, growth: int, sams: int) -> None:
        super().__init__(channels, growth, sams)
        self.conv = _Conv(channels, 12, 3)

    def image(self, f: torch.Tensor) -> torch.Tensor:
        return F.pixel_shuffle(self.conv(f), 2)


class Encoder(nn.Module):
    def __init__(self, features: int, growth: int, sams: int) -> None:
        super().__init__()
        self.conv_first = nn.Sequential(
            nn.Conv2d(12, features, 5, padding=2), nn.ReLU(inplace=True)
        )
        self.encoder_1 = EncoderLevel(features, growth, sams, last=False)
        self.encoder_2 = EncoderLevel(2 * features, growth, sams, last=False)
        self.encoder_3 = EncoderLevel(4 * features, growth, sams, last=True)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        f1 = self.encoder_1.features(self.conv_first(F.pixel_unshuffle(x, 2)))
        f2 = self.encoder_2.features(self.encoder_1.down(f1))
        f3 = self.encoder_3.features(self.encoder_2.down(f2))
        return f1, f2, f3


class Decoder(nn.Module):
    def __init__(self, en_features: int, features: int, growth: int, sams: int) -> None:
        super().__init__()
        self.preconv_3 = _ConvReLU(4 * en_features, features, 3)
        self.decoder_3 = DecoderLevel(features, growth, sams)
        self.preconv_2 = _ConvReLU(2 * en_features + features, features, 3)
        self.decoder_2 = DecoderLevel(features, growth, sams)
        self.preconv_1 = _ConvReLU(en_features + features, features, 3)
        self.decoder_1 = DecoderLevel(features, growth, sams)

    def forward(self, f1: torch.Tensor, f2: torch.Tensor, f3: torch.Tensor) -> list[torch.Tensor]:
        d3 = self.decoder_3.features(self.preconv_3(f3))
        up3 = F.interpolate(d3, scale_factor=2, mode="bilinear")
        d2 = self.decoder_2.features(self.preconv_2(torch.cat([f2, up3], dim=1)))
        up2 = F.interpolate(d2, scale_factor=2, mode="bilinear")
        d1 = self.decoder_1.features(self.preconv_1(torch.cat([f1, up2], dim=1)))
        return [self.decoder_3.image(d3), self.decoder_2.image(d2), self.decoder_1.image(d1)]


def reference_padding(h: int, w: int) -> tuple[int, int, int, int]:
    """(left, right, top, bottom) of the authors' test pad: half the way to the next
    multiple of 32 on each side, the odd pixel on the right/bottom."""
    ph, pw = (
        (SIZE_MULTIPLE - h % SIZE_MULTIPLE) % SIZE_MULTIPLE,
        (SIZE_MULTIPLE - w % SIZE_MULTIPLE) % SIZE_MULTIPLE,
    )
    return pw // 2, pw - pw // 2, ph // 2, ph - ph // 2


class ESDNet(RestorationModel):
    """ESDNet on [B,3,H,W] RGB in [0, 1]; `restore` takes any size (the authors' pad)."""

    tiling = TilingLimits(default_tile=DEFAULT_TILE, max_untiled_pixels=MAX_UNTILED_PIXELS)
    prefers_channels_last = True  # oneDNN convolutions NHWC: CPU time 1.14x less (256x256)

    def __init__(
        self,
        *,
        en_feature_num: int = 48,
        en_inter_num: int = 32,
        de_feature_num: int = 64,
        de_inter_num: int = 32,
        sam_number: int = 1,
    ) -> None:
        super().__init__()
        self.encoder = Encoder(en_feature_num, en_inter_num, sam_number)
        self.decoder = Decoder(en_feature_num, de_feature_num, de_inter_num, sam_number)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[1/4, 1/2, full]-resolution images; H and W must be multiples of 32."""
        h, w = x.shape[-2:]
        if isinstance(h, int) and (h % SIZE_MULTIPLE or w % SIZE_MULTIPLE):
            raise ESDNetInputError(
                f"ESDNet's forward needs H and W multiples of {SIZE_MULTIPLE}, got {h}x{w} "
                "(restore() pads any size)"
            )
        return self.decoder(*self.encoder(x))

    def pad_reference(self, x: torch.Tensor) -> tuple[torch.Tensor, tuple[int, int]]:
        """The authors' test pad: each channel padded with its mean colour, centred."""
        left, right, top, bottom = reference_padding(*x.shape[-2:])
        padded = torch.cat(
            [
                F.pad(x[:, c : c + 1], (left, right, top, bottom), value=v)
                for c, v in enumerate(PAD_COLOUR)
            ],
            dim=1,
        )
        return padded, (top, left)

    def full_resolution(self, x: torch.Tensor) -> torch.Tensor:
        """The full-resolution output alone (H and W multiples of 32)."""
        return self.decoder(*self.encoder(x))[-1]

    def restore(self, x: torch.Tensor, **_: Any) -> torch.Tensor:
        """The authors' test: pad with their mean colour to multiples of 32, run, crop."""
        h, w = x.shape[-2:]
        padded, (top, left) = self.pad_reference(x)
        return self.full_resolution(padded)[:, :, top : top + h, left : left + w]

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
        """`restore(x)` in overlapping tiles sharing the whole image's pooled fusion
        vectors (memory: one tile's activations plus the image). Not exact: the reach of
        the 1/32-scale branches exceeds the halo; docs/models/demoire.md gives the gap."""
        return shared_stats_tiled(
            self.restore,
            self.full_resolution,
            self.pad_reference,
            pool_sites(self),
            x,
            tile=tile,
            halo=halo,
            blend=blend,
            stats_pixels=stats_pixels,
            multiple=SIZE_MULTIPLE,
            progress=progress,
        )


_BOUNDS = {
    "en_feature_num": (4, 256),
    "en_inter_num": (1, 256),
    "de_feature_num": (4, 256),
    "de_inter_num": (1, 256),
    "sam_number": (0, 8),
}


@register_model(
    "esdnet",
    task="demoire",
    description="ESDNet (ECCV 2022) UHD demoireing, 1 SAM per level: 5,934,156 params",
    reference_params=REFERENCE_PARAMS[1],
    arg_bounds=_BOUNDS,
)
def esdnet(
    *,
    en_feature_num: int = 48,
    en_inter_num: int = 32,
    de_feature_num: int = 64,
    de_inter_num: int = 32,
    sam_number: int = 1,
) -> ESDNet:
    """The authors' configs (config/*_config.yaml)."""
    return ESDNet(
        en_feature_num=en_feature_num,
        en_inter_num=en_inter_num,
        de_feature_num=de_feature_num,
        de_inter_num=de_inter_num,
        sam_number=sam_number,
    )


@register_model(
    "esdnet-l",
    task="demoire",
    description="ESDNet-L (ECCV 2022) UHD demoireing, 2 SAMs per level: 10,623,444 params",
    reference_params=REFERENCE_PARAMS[2],
    arg_bounds=_BOUNDS,
)
def esdnet_l(
    *,
    en_feature_num: int = 48,
    en_inter_num: int = 32,
    de_feature_num: int = 64,
    de_inter_num: int = 32,
    sam_number: int = 2,
) -> ESDNet:
    """The authors' large configs (config/*_large_config.yaml)."""
    return ESDNet(
        en_feature_num=en_feature_num,
        en_inter_num=en_inter_num,
        de_feature_num=de_feature_num,
        de_inter_num=de_inter_num,
        sam_number=sam_number,
    )
