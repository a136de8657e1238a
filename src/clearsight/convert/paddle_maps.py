"""Name tables from Paddle state dicts to clearsight modules, one per architecture.

Each table maps a clearsight module path (as `named_modules()` gives it) to the Paddle layer
that holds its weights and how they are laid out (`Site.kind`):

- `conv`: a Conv2D, `weight` [out, in/groups, kh, kw] and `bias`, the same layout as PyTorch;
- `linear`: a Linear, `weight` stored [in, out] (transposed into PyTorch's [out, in]);
- `conv_bn`: a bias-free Conv2D followed by BatchNorm2D (`weight`, `bias`, `_mean`,
  `_variance`), folded into one biased conv, because the detectors here keep batch norm
  folded (`docs/paddle.md`);
- `bandpass`: MBCNN's learnable bandpass as the Paddle baseline stores it (Keras layout):
  `it_weights` [1, 1, 64, 1] and, when saved, the inverse-DCT `kernel` [1, 1, 64 in, 64 out];
- `scale`: one scalar parameter `scale` [1].

The Paddle names are those of the Paddle ports each table cites; `docs/paddle.md` lists them.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from torch import nn

from clearsight.errors import ClearsightError


@dataclass(frozen=True)
class Site:
    """Where one clearsight module's weights live in the Paddle state dict."""

    target: str  # clearsight module path
    source: str  # Paddle layer path
    kind: str  # conv | linear | conv_bn | bandpass | scale
    conv: str = "conv"  # conv_bn: the sub-layer names of the conv and the batch norm
    bn: str = "bn"


class MappingError(ClearsightError):
    """A clearsight module has no Paddle counterpart in the table (a table bug)."""


def _sub(path: str, rules: list[tuple[str, str]]) -> str:
    for pattern, repl in rules:
        path = re.sub(pattern, repl, path)
    return path


def _kind(mod: nn.Module) -> str | None:
    from clearsight.models.mbcnn import LearnableBandpass, Scale

    if isinstance(mod, LearnableBandpass):
        return "bandpass"
    if isinstance(mod, Scale):
        return "scale"
    if isinstance(mod, nn.Conv2d):
        return "conv"
    if isinstance(mod, nn.Linear):
        return "linear"
    return None


def _weighted(model: nn.Module) -> list[tuple[str, str]]:
    """(path, kind) of every module that owns weights, in definition order."""
    out = []
    for name, mod in model.named_modules():
        kind = _kind(mod)
        if kind is not None:
            out.append((name, kind))
    return out


# -- RESCAN: the official code's names (`rnns.{i}`, `dec`), as a Paddle port keeps them ------
def rescan_sites(model: nn.Module) -> list[Site]:
    rules = [(r"^units\.", "rnns."), (r"^decoder\.", "dec.")]
    return [Site(t, _sub(t, rules), k) for t, k in _weighted(model)]


# -- MBCNN: the Paddle demoiré baseline's names (`_t1_global_block1`, `adap.it_weights`) ------
MBCNN_TOP = {
    "t1_in": "_e1_conv_rl", "t1_pre": "_e1_pre_block",
    "t2_down": "_e2_conv_rl", "t2_pre": "_e2_pre_block",
    "t3_down": "_e3_conv_rl", "t3_pre": "_e3_pre_block",
    "t3_global": "_t3_global_block", "t3_pos": "_t3_pos_block", "t3_out": "_t3_conv",
    "t2_fuse": "_t2_conv_rl", "t2_global1": "_t2_global_block1", "t2_dec_pre": "_t2_pre_block",
    "t2_global2": "_t2_global_block2", "t2_pos": "_t2_pos_block", "t2_out": "_t2_conv",
    "t1_fuse": "_t1_conv_rl", "t1_global1": "_t1_global_block1", "t1_dec_pre": "_t1_pre_block",
    "t1_global2": "_t1_global_block2", "t1_pos": "_t1_pos_block", "t1_out": "_t1_conv",
}  # fmt: skip
_MBCNN_INNER = [
    (r"\.dense\.layers\.(\d+)\.0$", r".layers.\1.conv"),  # dense stack conv+relu
    (r"\.to_freq$", ".conv3.conv"),
    (r"\.bandpass$", ".adap"),
    (r"^(_t\d_global_block\d?)\.down\.0$", r"\1.conv_rl.conv"),
    (r"^(_t\d_global_block\d?)\.mlp\.0$", r"\1.fc1"),
    (r"^(_t\d_global_block\d?)\.mlp\.2$", r"\1.fc2"),
    (r"^(_t\d_global_block\d?)\.mlp\.4$", r"\1.fc3"),
    (r"^(_t\d_global_block\d?)\.branch\.0$", r"\1.conv_rl_1.conv"),
    (r"^(_t\d_global_block\d?)\.proj\.0$", r"\1.conv_rl_2.conv"),
    (r"^(_e\d_pre_block|_t\d_pre_block)\.proj$", r"\1.conv1.conv"),
    (r"^(_t\d_pos_block)\.proj\.0$", r"\1.conv_rl.conv"),
    (r"^(_\w+_conv_rl)\.0$", r"\1.conv"),  # conv+relu sequential
    (r"^(_t\d_conv)$", r"\1.conv"),  # plain output conv
]


def mbcnn_sites(model: nn.Module) -> list[Site]:
    sites = []
    for t, k in _weighted(model):
        top, _, rest = t.partition(".")
        if top not in MBCNN_TOP:
            raise MappingError(f"MBCNN module {t} has no Paddle name in the table")
        sites.append(Site(t, _sub(MBCNN_TOP[top] + ("." + rest if rest else ""), _MBCNN_INNER), k))
    return sites


# -- SSD-MobileNet-v1: PaddleDetection's MobileNet names (`conv2_1._depthwise_conv`) ---------
SSD_BLOCKS = (
    "conv2_1", "conv2_2", "conv3_1", "conv3_2", "conv4_1", "conv4_2",
    "conv5_1", "conv5_2", "conv5_3", "conv5_4", "conv5_5", "conv5_6", "conv6",
)  # fmt: skip


def ssd_sites(model: nn.Module) -> list[Site]:
    sites = []
    for t, _ in _weighted(model):
        if m := re.fullmatch(r"blocks\.(\d+)\.(dw|pw)\.0", t):
            part = "_depthwise_conv" if m[2] == "dw" else "_pointwise_conv"
            src, kind = f"backbone.{SSD_BLOCKS[int(m[1])]}.{part}", "conv_bn"
        elif m := re.fullmatch(r"extras\.(\d+)\.(reduce|conv)\.0", t):
            part = "pointwise_conv" if m[2] == "reduce" else "normal_conv"
            src, kind = f"backbone.conv7_{int(m[1]) + 1}.{part}", "conv_bn"
        elif t == "conv0.0":
            src, kind = "backbone.conv1", "conv_bn"
        elif m := re.fullmatch(r"(box|class)_heads\.(\d+)", t):
            src, kind = f"ssd_head.{'boxes' if m[1] == 'box' else 'scores'}{m[2]}", "conv"
        else:
            raise MappingError(f"SSD module {t} has no Paddle name in the table")
        sites.append(Site(t, src, kind, conv="_conv", bn="_batch_norm"))
    return sites


# -- YOLOX-Nano: Megvii's YOLOX names (BaseConv = conv + bn), as its Paddle ports keep them --
_YOLOX_HEAD = [
    (r"^head\.levels\.(\d+)\.stem$", r"head.stems.\1"),
    (r"^head\.levels\.(\d+)\.(cls_convs|reg_convs)\.", r"head.\2.\1."),
    (r"^head\.levels\.(\d+)\.(cls|reg|obj)_pred$", r"head.\2_preds.\1"),
]


def yolox_sites(model: nn.Module) -> list[Site]:
    sites = []
    for t, _ in _weighted(model):
        if t.endswith("_pred"):
            sites.append(Site(t, _sub(t, _YOLOX_HEAD), "conv"))
        elif t.endswith(".conv"):  # ConvAct.conv: Megvii's BaseConv has conv + bn
            sites.append(Site(t, _sub(t[: -len(".conv")], _YOLOX_HEAD), "conv_bn"))
        else:
            raise MappingError(f"YOLOX module {t} has no Paddle name in the table")
    return sites


TABLES: dict[str, Callable[[nn.Module], list[Site]]] = {
    "mbcnn": mbcnn_sites,
    "mbcnn-light": mbcnn_sites,
    "rescan": rescan_sites,
    "ssd-mobilenet-v1": ssd_sites,
    "yolox-nano": yolox_sites,
}
