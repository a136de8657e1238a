"""S2VD's derainer: a 3-D convolutional video derainer (Yue et al., "Semi-Supervised Video
Deraining with Dynamical Rain Generator", CVPR 2021; github.com/zsyOAOA/S2VD, MIT licence).

Our own port of the official `DerainNet` in plain PyTorch (the weights map one to one,
`clearsight.convert.s2vd`). It sees a window of frames at once:

- the frames are 2x space-to-depth'd (12 channels at half resolution, torch's
  `pixel_unshuffle` order, which is the official `PixelUnShuffle3D`'s);
- two 3x3x3 convs (ReLU between) lift them to `channels` features, then `blocks`
  pre-activation residual blocks (BN, ReLU, conv, BN, ReLU, conv, plus the skip), then BN,
  ReLU and a conv back to 12 channels, depth-to-space'd to a full-resolution rain estimate;
- the rain estimate is subtracted from the input and three bias-free 3x3x3 convs (ReLU
  between) refine the difference into the output.

Every 3x3x3 conv pads time by repeating the first and last frame and space by zeros (as the
official `MyConv3d`). Standard layers only, so the model exports to ONNX.

Tensors: `forward(x)` takes [B,3,T,H,W] RGB in [0, 1] (a window of T frames) and returns
the derained window, same shape, not clamped; H and W must be even. A 4-D [N,3,H,W] batch is
N independent images, each run as a one-frame clip (what the image engine, the auditor and
the exporter's checks feed). Reach: 42 px in space (`receptive_radius`), 22 frames in time;
the official test feeds 24-frame windows with 2 frames of context each side
(`clearsight.engine.video_window`).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.errors import ClearsightError
from clearsight.models.contract import RestorationModel, TiledRestore, TilingLimits
from clearsight.models.registry import register_model
from clearsight.preprocess import PreprocessSpec
from clearsight.tiling import Progress, grid_spans

SCALE = 2  # space-to-depth factor
REFERENCE_PARAMS = 525_260  # the official derainer_rho05.pt at channels 32, blocks 8
WINDOW_FRAMES = 24  # the official test's window and context (test_NTURain_synthetic.py)
CONTEXT_FRAMES = 2
# Space reach in full-resolution pixels: 19 half-resolution convs (38 px, +1 for the 2x2
# cell) then 3 full-resolution ones. Tiles in `restore_tiled` carry a 48 px halo (24 cells).
RECEPTIVE_RADIUS = 2 * 19 + 1 + 3
TILE_HALO_HALF = 24
DEFAULT_TILE = 512
MAX_UNTILED_PIXELS = 1024 * 1024

PREPROCESS = PreprocessSpec(
    pad_multiple=SCALE,
    extra={
        "layout": "B,3,T,H,W",
        "window_frames": WINDOW_FRAMES,
        "context_frames": CONTEXT_FRAMES,
    },
)


class S2VDInputError(ClearsightError, ValueError):
    """A window S2VD cannot take (wrong rank, channels or odd size): one line for the CLI."""


class TimeReplicateConv3d(nn.Conv3d):
    """A 3x3x3 conv whose time axis is padded by repeating the end frames and whose space
    axes are zero padded (the official `MyConv3d`)."""

    def __init__(self, cin: int, cout: int, *, bias: bool = True) -> None:
        super().__init__(cin, cout, kernel_size=3, padding=(0, 1, 1), bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.pad(x, (0, 0, 0, 0, 1, 1), mode="replicate"))


class PreActBlock3d(nn.Module):
    """x + conv(ReLU(BN(conv(ReLU(BN(x)))))), the official `ResBlock`."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.norm1 = nn.BatchNorm3d(channels)
        self.conv1 = TimeReplicateConv3d(channels, channels)
        self.norm2 = nn.BatchNorm3d(channels)
        self.conv2 = TimeReplicateConv3d(channels, channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv1(F.relu(self.norm1(x)))
        return x + self.conv2(F.relu(self.norm2(y)))


def _space_to_depth(x: torch.Tensor) -> torch.Tensor:
    """[B,C,T,H,W] -> [B,4C,T,H/2,W/2] (channel c*4 + row*2 + col, as pixel_unshuffle)."""
    b, c, t, h, w = x.shape
    y = F.pixel_unshuffle(x.transpose(1, 2).reshape(b * t, c, h, w), SCALE)
    return y.reshape(b, t, c * SCALE * SCALE, h // SCALE, w // SCALE).transpose(1, 2)


def _depth_to_space(x: torch.Tensor) -> torch.Tensor:
    """The inverse of `_space_to_depth`."""
    b, c, t, h, w = x.shape
    y = F.pixel_shuffle(x.transpose(1, 2).reshape(b * t, c, h, w), SCALE)
    return y.reshape(b, t, c // (SCALE * SCALE), h * SCALE, w * SCALE).transpose(1, 2)


class S2VD(RestorationModel):
    """The S2VD derainer on a window of frames ([B,3,T,H,W] in [0, 1], H and W even)."""

    pad_multiple = SCALE
    receptive_radius = RECEPTIVE_RADIUS
    tiling = TilingLimits(default_tile=DEFAULT_TILE, max_untiled_pixels=MAX_UNTILED_PIXELS)

    def __init__(self, *, channels: int = 32, blocks: int = 8) -> None:
        super().__init__()
        cells = 3 * SCALE * SCALE
        self.in_conv1 = TimeReplicateConv3d(cells, channels)
        self.in_conv2 = TimeReplicateConv3d(channels, channels)
        self.blocks = nn.ModuleList(PreActBlock3d(channels) for _ in range(blocks))
        self.out_norm = nn.BatchNorm3d(channels)
        self.out_conv = TimeReplicateConv3d(channels, cells)
        self.refine1 = TimeReplicateConv3d(3, channels, bias=False)
        self.refine2 = TimeReplicateConv3d(channels, channels, bias=False)
        self.refine3 = TimeReplicateConv3d(channels, 3, bias=False)
        for m in self.modules():  # the official initialisation
            if isinstance(m, nn.Conv3d):
                nn.init.orthogonal_(m.weight)
                if m.bias is not None:
                    nn.init.zeros_(m.bias)

    def _window(self, x: torch.Tensor) -> torch.Tensor:
        f = self.in_conv2(F.relu(self.in_conv1(_space_to_depth(x))))
        for block in self.blocks:
            f = block(f)
        rain = _depth_to_space(self.out_conv(F.relu(self.out_norm(f))))
        y = F.relu(self.refine1(x - rain))
        return self.refine3(F.relu(self.refine2(y)))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.ndim not in (4, 5) or x.shape[1] != 3:
            raise S2VDInputError(
                f"S2VD takes [B,3,T,H,W] windows or [N,3,H,W] images, got {tuple(x.shape)}"
            )
        if x.shape[-2] % SCALE or x.shape[-1] % SCALE:
            h, w = x.shape[-2:]
            raise S2VDInputError(f"S2VD needs even height and width, got {h}x{w} (pad first)")
        if x.ndim == 4:
            return self._window(x.unsqueeze(2)).squeeze(2)
        return self._window(x)

    def tiled_path(self) -> TiledRestore | None:
        return self.restore_tiled

    def restore_tiled(
        self, x: torch.Tensor, *, tile: int, progress: Progress | None = None, **_: object
    ) -> torch.Tensor:
        """`self(x)` computed in spatial tiles of about `tile` px (every frame of the window
        at once), equal to the untiled output to float precision: tiles are cut on even
        coordinates (so every 2x2 cell stays whole) and carry a halo wider than the reach,
        and only their cores are kept. Memory: the input, the output and one tile's
        activations, so it scales with the tile, not the frame."""
        if x.ndim not in (4, 5) or x.shape[-2] % SCALE or x.shape[-1] % SCALE:
            self(x)  # raises the one-line error for this shape
        five = x if x.ndim == 5 else x.unsqueeze(2)
        h, w = five.shape[-2:]
        halo = TILE_HALO_HALF * SCALE
        # the grid is laid on the half-resolution cells, so every boundary is even
        rows = [(a * SCALE, b * SCALE) for a, b in grid_spans(h // SCALE, max(1, tile // SCALE))]
        cols = [(a * SCALE, b * SCALE) for a, b in grid_spans(w // SCALE, max(1, tile // SCALE))]
        out = torch.empty_like(five)
        done = 0
        for r0, r1 in rows:
            for c0, c1 in cols:
                ir0, ir1 = max(0, r0 - halo), min(h, r1 + halo)
                ic0, ic1 = max(0, c0 - halo), min(w, c1 + halo)
                y = self._window(five[..., ir0:ir1, ic0:ic1])
                out[..., r0:r1, c0:c1] = y[..., r0 - ir0 : r1 - ir0, c0 - ic0 : c1 - ic0]
                done += 1
                if progress is not None:
                    progress(done, len(rows) * len(cols))
        return out if x.ndim == 5 else out.squeeze(2)

    def export_graph(self) -> tuple[nn.Module, list[str]]:
        return WindowGraph(self), ["output"]


class WindowGraph(nn.Module):
    """The ONNX graph: one window as a batch of frames, [T,3,H,W] in and out (the batch axis
    is time, so ONNX Runtime runs a window in one call; one image is a one-frame window)."""

    def __init__(self, model: S2VD) -> None:
        super().__init__()
        self.model = model

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        return self.model(frames.transpose(0, 1).unsqueeze(0)).squeeze(0).transpose(0, 1)


@register_model(
    "s2vd",
    task="video-derain",
    description="S2VD video derainer (CVPR 2021), 3-D convs over 24-frame windows: 525,260 params",
    metric_preset="y-matlab",
    preprocess=PREPROCESS,
    reference_params=REFERENCE_PARAMS,
    arg_bounds={"channels": (1, 256), "blocks": (1, 64)},
)
def s2vd(*, channels: int = 32, blocks: int = 8) -> S2VD:
    """The official derainer's shape (32 features, 8 residual blocks)."""
    return S2VD(channels=channels, blocks=blocks)
