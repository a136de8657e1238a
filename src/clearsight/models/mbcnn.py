"""MBCNN: multi-scale bandpass CNN for image demoiréing (Zheng et al., CVPR 2020).

Faithful to the structure of the official (Keras, inference-only) code:

- the input is 2x space-to-depth'd (12 channels); features live at 1/2, 1/4 and 1/8 with
  `2n` channels (`n` = nFilters);
- a *pre block* is five densely concatenated dilated 3x3 conv+ReLU layers (`n` each), a 3x3
  conv to 64 channels, the learnable bandpass (a fixed 8x8 inverse-DCT 1x1 kernel whose input
  frequencies are scaled by learnable non-negative weights, initialised to 1), a 1x1 conv to
  `2n`, a learnable scale (0.1) and a residual connection;
- a *global (tone) block* pools a stride-2 conv (`4n`) over the whole image, runs it through
  dense layers `16n-8n-4n` and multiplies a 1x1 conv branch by the result;
- a *pos block* is the dense stack followed by a 1x1 conv+ReLU to `2n`;
- outputs at 1/4, 1/2 and full resolution come from a 3x3 conv to 12 channels + depth-to-space;
- optional (`tone_head=True`, not in the paper): a global colour/tone branch, `ToneHead`, maps
  the five global vectors to one 3x3 colour matrix and bias per image, applied to every output.
  Its last layer starts at zero, so the matrix starts as the identity and the bias as zero:
  weights of a model without the head load into one with it and give the very same output.

Space-to-depth and depth-to-space use TensorFlow's channel order (block offset major, colour
minor), so the official weights map onto this module one to one.

Two traps of the field's ports are designed out: the bandpass kernel product is computed into a
local on every call (never assigned back to an attribute, which breaks backprop), and each of the
five global blocks has its own attribute name (a duplicated name silently drops one).

Large images: the global blocks pool over the whole image, so naive tiles would each see their
own tone. `restore_tiled` computes the five global vectors once for the whole image and shares
them with every tile (see `shared_global_vectors`). They come from one untiled forward on the
image itself when it has at most `stats_pixels` (1 MP) pixels, so the statistics are exact
there, else on an antialiased downscale to that budget. Why not an exact streaming pass: the
network's convolutional reach is about 344 px, so exact tiles would need that much halo (a
256 px tile would compute 944 px), or five layer-synchronous passes that keep full-resolution
feature maps (about 0.5 GB each at 4K with nFilters 32) between the global blocks; the one
small forward costs a fraction of the tiles and measured within ~37 dB of the untiled output
at a 2x downscale (seeded random weights; 58-66 dB with whole-image statistics).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.errors import ClearsightError
from clearsight.models.contract import RestorationModel, TiledRestore, TilingLimits
from clearsight.models.registry import register_model
from clearsight.preprocess import downscale_to_pixels, pad_to_multiple
from clearsight.tiling import tiled_apply

DCT_SIZE = 8
BANDPASS_CHANNELS = DCT_SIZE * DCT_SIZE  # the conv that feeds the bandpass has 64 outputs
DILATIONS_A = (1, 2, 3, 2, 1)  # 1/2 resolution
DILATIONS_B = (1, 2, 3, 2, 1)  # 1/4
DILATIONS_C = (1, 2, 2, 2, 1)  # 1/8
PAD_MULTIPLE = 8  # space-to-depth (2) then two stride-2 convs (4): features at 1/8
DEFAULT_STATS_PIXELS = 1024 * 1024
DEFAULT_HALO = 32
# Untiled up to 1 MP (about 1.3 GB for mbcnn-light); above it, 512-pixel tiles keep the
# halo overhead low (measured: 128-256 tiles were ~4x slower than untiled at 1024x1024).
MAX_UNTILED_PIXELS = 1024 * 1024
DEFAULT_TILE = 512


class MBCNNConfigError(ClearsightError, ValueError):
    """A bad MBCNN constructor or inference argument."""


def space_to_depth(x: torch.Tensor, scale: int = 2) -> torch.Tensor:
    """TensorFlow's space_to_depth on NCHW: channel index = (dy * scale + dx) * C + c."""
    n, c, h, w = x.shape
    x = x.view(n, c, h // scale, scale, w // scale, scale)
    return x.permute(0, 3, 5, 1, 2, 4).reshape(n, scale * scale * c, h // scale, w // scale)


def depth_to_space(x: torch.Tensor, scale: int = 2) -> torch.Tensor:
    """Inverse of `space_to_depth` (TensorFlow's depth_to_space on NCHW)."""
    n, c, h, w = x.shape
    oc = c // (scale * scale)
    x = x.view(n, scale, scale, oc, h, w)
    return x.permute(0, 3, 4, 1, 5, 2).reshape(n, oc, h * scale, w * scale)


def idct_kernel() -> torch.Tensor:
    """The fixed 8x8 inverse-DCT as a [64 out, 64 in, 1, 1] conv kernel.

    Input channel u*8+v holds the (u, v) DCT coefficient; output channel i*8+j the spatial
    sample (i, j): out[i,j] = sum_uv a(u) a(v) cos((2i+1)u pi/16) cos((2j+1)v pi/16) in[u,v].
    """
    k = torch.zeros(BANDPASS_CHANNELS, BANDPASS_CHANNELS, dtype=torch.float64)
    a = [math.sqrt(1.0 / DCT_SIZE)] + [math.sqrt(2.0 / DCT_SIZE)] * (DCT_SIZE - 1)
    for i in range(DCT_SIZE):
        for j in range(DCT_SIZE):
            for u in range(DCT_SIZE):
                for v in range(DCT_SIZE):
                    c = math.cos((2 * i + 1) * u * math.pi / 16) * math.cos(
                        (2 * j + 1) * v * math.pi / 16
                    )
                    k[i * DCT_SIZE + j, u * DCT_SIZE + v] = a[u] * a[v] * c
    return k.float()[:, :, None, None]


class LearnableBandpass(nn.Module):
    """Fixed inverse-DCT 1x1 conv whose 64 input frequencies are scaled by learnable weights.

    The kernel is a buffer (it moves with `.to()` and is saved, but is not trained); the weights
    are a parameter initialised to 1 and kept non-negative like the official `NonNeg`
    constraint: the forward uses `relu(weight)` (the non-negativity applied to the weights
    themselves, never to the product) and `constrain_()` projects the stored values after an
    optimizer step if a trainer wants the exact Keras behaviour. The scaled kernel is a local.
    """

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kernel", idct_kernel())
        self.weight = nn.Parameter(torch.ones(BANDPASS_CHANNELS))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = F.relu(self.weight)
        kernel = self.kernel * w[None, :, None, None]  # a local: never stored
        return F.conv2d(x, kernel)

    @torch.no_grad()
    def constrain_(self) -> None:
        """Project the stored weights onto >= 0 (Keras NonNeg), e.g. after optimizer.step()."""
        self.weight.clamp_(min=0.0)


class Scale(nn.Module):
    """Multiply by one learnable scalar (official ScaleLayer, initialised to 0.1)."""

    def __init__(self, init: float) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([float(init)]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


def _conv(cin: int, cout: int, k: int, *, dilation: int = 1, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, k, stride=stride, padding=dilation * (k // 2), dilation=dilation)


def _conv_relu(cin: int, cout: int, k: int, *, dilation: int = 1, stride: int = 1) -> nn.Module:
    return nn.Sequential(_conv(cin, cout, k, dilation=dilation, stride=stride), nn.ReLU(True))


class DenseStack(nn.Module):
    """Dilated 3x3 conv+ReLU layers, each output concatenated in front of its input."""

    def __init__(self, channels: int, n: int, dilations: Sequence[int]) -> None:
        super().__init__()
        layers = [_conv_relu(channels + i * n, n, 3, dilation=d) for i, d in enumerate(dilations)]
        self.layers = nn.ModuleList(layers)
        self.out_channels = channels + len(dilations) * n

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.cat([layer(x), x], dim=1)
        return x


class PreBlock(nn.Module):
    """Dense stack, 3x3 conv to 64, learnable bandpass, 1x1 conv, scale 0.1, residual."""

    def __init__(self, n: int, dilations: Sequence[int]) -> None:
        super().__init__()
        self.dense = DenseStack(2 * n, n, dilations)
        self.to_freq = _conv(self.dense.out_channels, BANDPASS_CHANNELS, 3)
        self.bandpass = LearnableBandpass()
        self.proj = _conv(BANDPASS_CHANNELS, 2 * n, 1)
        self.scale = Scale(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        t = self.bandpass(self.to_freq(self.dense(x)))
        return x + self.scale(self.proj(t))


class PosBlock(nn.Module):
    """Dense stack, then 1x1 conv+ReLU back to 2n channels."""

    def __init__(self, n: int, dilations: Sequence[int]) -> None:
        super().__init__()
        self.dense = DenseStack(2 * n, n, dilations)
        self.proj = _conv_relu(self.dense.out_channels, 2 * n, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(self.dense(x))


class GlobalBlock(nn.Module):
    """Tone block: a whole-image pooled vector (stride-2 conv, GAP, dense 16n-8n-4n) gates a
    1x1 conv branch, then 1x1 conv+ReLU back to 2n.

    Inference-only override: while `shared` is set (by `MBCNN.shared_global_vectors`) the block
    uses that [N, 4n] vector instead of pooling its own input, so tiles of one image share the
    whole image's tone; while `record` is a list, every vector used is appended to it.
    """

    def __init__(self, n: int) -> None:
        super().__init__()
        self.down = _conv_relu(2 * n, 4 * n, 3, stride=2)
        self.mlp = nn.Sequential(
            nn.Linear(4 * n, 16 * n),
            nn.ReLU(True),
            nn.Linear(16 * n, 8 * n),
            nn.ReLU(True),
            nn.Linear(8 * n, 4 * n),
        )
        self.branch = _conv_relu(2 * n, 4 * n, 1)
        self.proj = _conv_relu(4 * n, 2 * n, 1)
        self.shared: torch.Tensor | None = None
        self.record: list[torch.Tensor] | None = None

    def vector(self, x: torch.Tensor) -> torch.Tensor:
        """The [N, 4n] gate computed from this input's own global average."""
        return self.mlp(self.down(x).mean(dim=(2, 3)))

    def forward(self, x: torch.Tensor, sink: list[torch.Tensor] | None = None) -> torch.Tensor:
        """The gated features; the vector used is also appended to `sink` (the tone head's
        input) when one is given."""
        v = self.shared if self.shared is not None else self.vector(x)
        if self.record is not None:
            self.record.append(v)
        if sink is not None:
            sink.append(v)
        return self.proj(self.branch(x) * v[:, :, None, None])


TONE_PARAMS = 12  # a 3x3 colour matrix and a 3-vector bias


class ToneHead(nn.Module):
    """Global colour/tone branch: one 3x3 colour matrix M and bias b per image, y -> M y + b.

    Demoiréing targets differ from their inputs by a global tone change as well as by the
    moiré (docs/architecture.md §5.1); this branch gives that change its own few parameters
    instead of leaving it to the convolutions. It reads only the five global vectors, which
    are already whole-image statistics and shared by every tile
    (`MBCNN.shared_global_vectors`, the ONNX statistics graph), so tiles of one image get one
    matrix. The last layer is zero at initialisation: M = I and b = 0 exactly, so the output
    is the plain model's, bit for bit.
    """

    def __init__(self, in_features: int, hidden: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_features, hidden), nn.ReLU(True), nn.Linear(hidden, TONE_PARAMS)
        )
        nn.init.zeros_(self.mlp[-1].weight)
        nn.init.zeros_(self.mlp[-1].bias)

    def params(self, vectors: Sequence[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """([N, 3, 3] matrix, [N, 3] bias) from the global vectors."""
        p = self.mlp(torch.cat(list(vectors), dim=1))
        eye = torch.eye(3, dtype=p.dtype, device=p.device)
        return p[:, :9].reshape(-1, 3, 3) + eye, p[:, 9:]

    def forward(
        self, vectors: Sequence[torch.Tensor], images: Sequence[torch.Tensor]
    ) -> list[torch.Tensor]:
        m, b = self.params(vectors)
        # (M y)_i = sum_j M_ij y_j as three broadcast products: exact for M = I (1*y + 0*y'),
        # and plain Mul/Add ops in an exported graph
        return [
            sum(m[:, :, j, None, None] * y[:, j : j + 1] for j in range(3)) + b[:, :, None, None]
            for y in images
        ]


class MBCNN(RestorationModel):
    """Multi-scale bandpass CNN; `forward` returns [1/4, 1/2, full] images for training."""

    pad_multiple = PAD_MULTIPLE
    receptive_radius = None  # global pooling: every output pixel sees the whole image
    tiling = TilingLimits(default_tile=DEFAULT_TILE, max_untiled_pixels=MAX_UNTILED_PIXELS)
    # NHWC weights and batches on CPU, for inference (faster oneDNN convolutions) and training:
    # benchmarks/train_speed.py (mbcnn-light, batch 4 of 128x128) on a 2-core AVX2 CPU measured
    # 1.04x and 1.36x faster than contiguous (two identical rows of one heavily shared run:
    # noisy, never slower).
    prefers_channels_last = True

    def __init__(self, *, n_filters: int = 64, tone_head: bool = False) -> None:
        super().__init__()
        if not isinstance(n_filters, int) or isinstance(n_filters, bool) or n_filters < 1:
            raise MBCNNConfigError(f"MBCNN n_filters must be an int >= 1, got {n_filters!r}")
        if not isinstance(tone_head, bool):
            raise MBCNNConfigError(f"MBCNN tone_head must be true or false, got {tone_head!r}")
        n = self.n_filters = n_filters
        c = 2 * n
        # encoder
        self.t1_in = _conv_relu(12, c, 3)
        self.t1_pre = PreBlock(n, DILATIONS_A)
        self.t2_down = _conv_relu(c, c, 3, stride=2)
        self.t2_pre = PreBlock(n, DILATIONS_B)
        self.t3_down = _conv_relu(c, c, 3, stride=2)
        self.t3_pre = PreBlock(n, DILATIONS_C)
        # 1/8 -> output at 1/4
        self.t3_global = GlobalBlock(n)
        self.t3_pos = PosBlock(n, DILATIONS_C)
        self.t3_out = _conv(c, 12, 3)
        # 1/4 -> output at 1/2
        self.t2_fuse = _conv_relu(c + 3, c, 1)
        self.t2_global1 = GlobalBlock(n)
        self.t2_dec_pre = PreBlock(n, DILATIONS_B)
        self.t2_global2 = GlobalBlock(n)
        self.t2_pos = PosBlock(n, DILATIONS_B)
        self.t2_out = _conv(c, 12, 3)
        # 1/2 -> full-resolution output
        self.t1_fuse = _conv_relu(c + 3, c, 1)
        self.t1_global1 = GlobalBlock(n)
        self.t1_dec_pre = PreBlock(n, DILATIONS_A)
        self.t1_global2 = GlobalBlock(n)
        self.t1_pos = PosBlock(n, DILATIONS_A)
        self.t1_out = _conv(c, 12, 3)
        # optional global colour/tone branch on the five 4n-wide global vectors
        self.tone = ToneHead(5 * 4 * n, 4 * n) if tone_head else None

    def config(self) -> dict[str, Any]:
        """The constructor arguments (what an artifact stores); `tone_head` only when on, so
        artifacts without the branch keep their stored arguments."""
        cfg: dict[str, Any] = {"n_filters": self.n_filters}
        if self.tone is not None:
            cfg["tone_head"] = True
        return cfg

    def global_blocks(self) -> list[GlobalBlock]:
        """The five global blocks in execution order."""
        return [m for m in self.modules() if isinstance(m, GlobalBlock)]

    def constrain_(self) -> None:
        """Apply the official weight constraints (bandpass weights >= 0) in place."""
        for m in self.modules():
            if isinstance(m, LearnableBandpass):
                m.constrain_()

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """[1/4, 1/2, full]-resolution images; H and W must be multiples of `pad_multiple`."""
        h, w = x.shape[-2:]
        if h % PAD_MULTIPLE or w % PAD_MULTIPLE:
            raise MBCNNConfigError(
                f"MBCNN.forward needs H and W divisible by {PAD_MULTIPLE}, got {h}x{w} "
                "(use restore(), which pads)"
            )
        vs: list[torch.Tensor] | None = [] if self.tone is not None else None
        t1 = self.t1_pre(self.t1_in(space_to_depth(x)))
        t2 = self.t2_pre(self.t2_down(t1))
        t3 = self.t3_pre(self.t3_down(t2))
        t3 = self.t3_pos(self.t3_global(t3, vs))
        out4 = depth_to_space(self.t3_out(t3))
        u2 = self.t2_fuse(torch.cat([out4, t2], dim=1))
        u2 = self.t2_global2(self.t2_dec_pre(self.t2_global1(u2, vs)), vs)
        out2 = depth_to_space(self.t2_out(self.t2_pos(u2)))
        u1 = self.t1_fuse(torch.cat([t1, out2], dim=1))
        u1 = self.t1_global2(self.t1_dec_pre(self.t1_global1(u1, vs)), vs)
        out1 = depth_to_space(self.t1_out(self.t1_pos(u1)))
        if self.tone is None or vs is None:
            return [out4, out2, out1]
        # the coarse outputs feed the finer scales untoned (as without the head); the tone
        # is applied last, to what training supervises and inference returns
        return self.tone(vs, [out4, out2, out1])

    # -- inference --------------------------------------------------------------------------
    @torch.no_grad()
    def restore(self, x: torch.Tensor) -> torch.Tensor:
        """Full-resolution restored image, any H and W (padded to 8 and cropped back)."""
        h, w = x.shape[-2:]
        y = self(pad_to_multiple(x, PAD_MULTIPLE))[-1]
        return y[..., :h, :w].contiguous()

    @contextlib.contextmanager
    def shared_global_vectors(self, vectors: Sequence[torch.Tensor]) -> Iterator[None]:
        """Inference only: make the five global blocks use `vectors` instead of pooling."""
        blocks = self.global_blocks()
        if self.training:
            raise MBCNNConfigError("shared global vectors are for inference; call .eval() first")
        if len(vectors) != len(blocks):
            raise MBCNNConfigError(f"expected {len(blocks)} global vectors, got {len(vectors)}")
        try:
            for b, v in zip(blocks, vectors, strict=True):
                b.shared = v
            yield
        finally:
            for b in blocks:
                b.shared = None

    @torch.no_grad()
    def global_vectors(
        self, x: torch.Tensor, *, max_pixels: int | None = DEFAULT_STATS_PIXELS
    ) -> list[torch.Tensor]:
        """The five global-block vectors of the whole image `x` (inference).

        Computed by one untiled forward on the image itself when it has at most `max_pixels`
        pixels (None: always), else on an antialiased bicubic downscale to that budget.
        """
        x = downscale_to_pixels(x, max_pixels, PAD_MULTIPLE)
        blocks = self.global_blocks()
        records: list[list[torch.Tensor]] = [[] for _ in blocks]
        try:
            for b, r in zip(blocks, records, strict=True):
                b.record = r
            self.restore(x)
        finally:
            for b in blocks:
                b.record = None
        return [r[0] for r in records]

    @torch.no_grad()
    def restore_tiled(
        self,
        x: torch.Tensor,
        *,
        tile: int = 512,
        halo: int = DEFAULT_HALO,
        blend: int | None = None,
        stats_pixels: int | None = DEFAULT_STATS_PIXELS,
        progress: Callable[[int, int], None] | None = None,
    ) -> torch.Tensor:
        """`restore(x)` with bounded memory: tone-consistent overlapping tiles.

        The global vectors come once from the whole image (`global_vectors`, with
        `stats_pixels` as its budget) and are shared by every tile, so all tiles get the
        whole image's tone. Tiles are `tile` pixels plus `halo` of context, blended over
        `blend` pixels (default halo // 2) by `clearsight.tiling.tiled_apply`. Not exact (the
        network's convolutional reach is ~344 px), but the seams are below float-visible
        levels for natural images at the defaults; see tests/test_mbcnn.py.
        """
        if tile < PAD_MULTIPLE:
            raise MBCNNConfigError(f"tile must be >= {PAD_MULTIPLE}, got {tile}")
        if halo < 0:
            raise MBCNNConfigError(f"halo must be >= 0, got {halo}")
        blend = halo // 2 if blend is None else blend
        vectors = self.global_vectors(x, max_pixels=stats_pixels)
        with self.shared_global_vectors(vectors):
            return tiled_apply(
                self.restore, x, tile=tile, halo=halo, blend=blend, progress=progress
            )

    # -- the contract's hooks for tiling and export ---------------------------------------
    def tiled_path(self) -> TiledRestore | None:
        return self.restore_tiled

    def prune_protected(self) -> list[nn.Module] | None:
        """The three output convs (12 channels: 3 colours x the 2x2 depth-to-space) and each
        pre block's conv into the bandpass (64 channels: the 8x8 DCT's frequencies)."""
        outs: list[nn.Module] = [self.t3_out, self.t2_out, self.t1_out]
        if self.tone is not None:  # its 12 outputs are the colour matrix and bias
            outs.append(self.tone.mlp[-1])
        return outs + [m.to_freq for m in self.modules() if isinstance(m, PreBlock)]

    def init_optional_keys(self) -> list[str]:
        """The tone head's weights: it starts as the identity, so a model trained without it
        (e.g. default-demoire) initialises one with it and gives the same output."""
        if self.tone is None:
            return []
        return [f"tone.{k}" for k in self.tone.state_dict()]

    def init_optional_args(self) -> list[str]:
        """`tone_head`: the switch that adds the tone head's weights."""
        return ["tone_head"] if self.tone is not None else []

    def export_graph(self) -> tuple[nn.Module, list[str]]:
        """The forward on a padded input, the full-resolution output first."""
        return _MbcnnGraph(self), ["output", "out_quarter", "out_half"]

    def stats_layout(self) -> dict[str, Any] | None:
        """The five tone vectors are shared, with PyTorch's tiling defaults; None for a pruned
        model whose tone vectors ended up with different widths (one [N, sites, C] tensor
        cannot hold them; its ONNX tiles then pool on their own)."""
        widths = {b.mlp[-1].out_features for b in self.global_blocks()}
        if len(widths) != 1:
            return None
        return {
            "kind": "mbcnn-tone-vectors",
            "sites": len(self.global_blocks()),
            "channels": widths.pop(),
            "halo": DEFAULT_HALO,
            "blend": DEFAULT_HALO // 2,
            "exact_given_stats": False,
            "stats_pixels": DEFAULT_STATS_PIXELS,
            "default_tile": DEFAULT_TILE,
            "max_untiled_pixels": MAX_UNTILED_PIXELS,
        }

    @contextlib.contextmanager
    def global_stats_hooks(
        self, shared: torch.Tensor | None = None
    ) -> Iterator[list[torch.Tensor]]:
        """Each global block records the tone vector it pooled (or takes `shared[:, k]`)."""
        rec: list[torch.Tensor] = []
        blocks = self.global_blocks()
        if shared is not None:
            with self.shared_global_vectors([shared[:, k] for k in range(len(blocks))]):
                yield rec
            return
        for b in blocks:
            b.record = rec  # each block appends the vector it pooled
        try:
            yield rec
        finally:
            for b in blocks:
                b.record = None


class _MbcnnGraph(nn.Module):
    """MBCNN's forward on a padded input for export: the full-resolution output first."""

    def __init__(self, model: MBCNN) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        quarter, half, full = self.model(x)
        return full, quarter, half


def _mbcnn(n_filters: int, tone_head: bool) -> MBCNN:
    return MBCNN(n_filters=n_filters, tone_head=tone_head)


@register_model(
    "mbcnn",
    task="demoire",
    description="MBCNN (CVPR 2020), nFilters 64, learnable bandpass: 14,192,041 params",
    metric_preset="rgb",
    reference_params=14_192_041,
    arg_bounds={"n_filters": (1, 256)},
)
def mbcnn(*, n_filters: int = 64, tone_head: bool = False) -> MBCNN:
    """MBCNN as published (nFilters 64); `tone_head` adds the global colour/tone branch."""
    return _mbcnn(n_filters, tone_head)


@register_model(
    "mbcnn-light",
    task="demoire",
    description="MBCNN light, nFilters 32: 3,899,433 params",
    metric_preset="rgb",
    reference_params=3_899_433,
    arg_bounds={"n_filters": (1, 256)},
)
def mbcnn_light(*, n_filters: int = 32, tone_head: bool = False) -> MBCNN:
    """MBCNN with half the width (the official "light" setting); `tone_head` as for mbcnn."""
    return _mbcnn(n_filters, tone_head)
