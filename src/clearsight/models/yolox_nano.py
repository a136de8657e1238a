"""YOLOX-Nano (Ge et al., 2021): a 0.9 M-parameter anchor-free COCO detector at 416x416.

The layout follows Megvii's YOLOX (Apache-2.0) with depth 0.33, width 0.25 and depthwise
convolutions: a CSPDarknet backbone (Focus stem, four stride-2 stages, SPP at the last), a
PAFPN neck and a decoupled head per level (strides 8, 16, 32). Backbone and neck keep
YOLOX's attribute names (`backbone.backbone.dark3`, `backbone.C3_p4`, ...); the head groups
each level's layers in one module (`head.levels.0.cls_convs`) where YOLOX keeps per-kind lists.

The bundled weights come from an ONNX export with batch norm folded into the convolutions,
so every "conv + BN + SiLU" of the original is a biased conv + SiLU here (`ConvAct`). That is
the same function at inference; fine-tuning with BN would need the BN layers back.

`forward` returns the raw head output [N, A, 5 + C] of the export: per anchor (x, y) grid
offsets, (w, h) log sizes in stride units, then objectness and class scores, both already
sigmoided. `postprocess` decodes boxes (grid offsets, exp w/h, strides) and runs NMS.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.models.contract import DetectionModel
from clearsight.models.registry import register_model
from clearsight.preprocess import PreprocessSpec

STRIDES = (8, 16, 32)
INPUT_SIZE = (416, 416)
NUM_CLASSES = 80

# What the bundled weights expect, checked against ONNX Runtime on COCO images (see the
# default-detect model card): BGR in 0-255 without normalisation, letterboxed at the top-left
# with grey 114, bilinear without antialiasing (YOLOX used cv2.INTER_LINEAR).
YOLOX_PREPROCESS = PreprocessSpec(
    color_order="BGR",
    value_range=(0.0, 255.0),
    resize="letterbox",
    size=INPUT_SIZE,
    extra={
        "pad_value": 114,
        "interpolation": "bilinear",
        "antialias": False,
        "letterbox_anchor": "top-left",
    },
)


class ConvAct(nn.Module):
    """Conv (BN folded in, hence the bias) + SiLU: YOLOX's BaseConv after BN folding."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, stride, padding=(k - 1) // 2, groups=groups)
        self.act = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.conv(x))


class DWConv(nn.Module):
    """Depthwise k x k conv then pointwise 1x1 conv, each with SiLU."""

    def __init__(self, cin: int, cout: int, k: int, stride: int = 1) -> None:
        super().__init__()
        self.dconv = ConvAct(cin, cin, k, stride, groups=cin)
        self.pconv = ConvAct(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pconv(self.dconv(x))


class Bottleneck(nn.Module):
    def __init__(self, ch: int, shortcut: bool) -> None:
        super().__init__()
        self.conv1 = ConvAct(ch, ch, 1)
        self.conv2 = DWConv(ch, ch, 3)
        self.use_add = shortcut

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.conv2(self.conv1(x))
        return y + x if self.use_add else y


class CSPLayer(nn.Module):
    """Cross-stage partial block: half the channels go through `n` bottlenecks."""

    def __init__(self, cin: int, cout: int, n: int, shortcut: bool = True) -> None:
        super().__init__()
        hidden = cout // 2
        self.conv1 = ConvAct(cin, hidden, 1)
        self.conv2 = ConvAct(cin, hidden, 1)
        self.conv3 = ConvAct(2 * hidden, cout, 1)
        self.m = nn.Sequential(*[Bottleneck(hidden, shortcut) for _ in range(n)])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.conv1(x)
        b = self.conv2(x)
        return self.conv3(torch.cat([self.m(a), b], dim=1))


class SPPBottleneck(nn.Module):
    def __init__(self, cin: int, cout: int, kernels: tuple[int, ...] = (5, 9, 13)) -> None:
        super().__init__()
        hidden = cin // 2
        self.conv1 = ConvAct(cin, hidden, 1)
        self.m = nn.ModuleList(nn.MaxPool2d(k, stride=1, padding=k // 2) for k in kernels)
        self.conv2 = ConvAct(hidden * (len(kernels) + 1), cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv1(x)
        return self.conv2(torch.cat([x, *(pool(x) for pool in self.m)], dim=1))


class Focus(nn.Module):
    """Space-to-depth by 2 (top-left, bottom-left, top-right, bottom-right) then a 3x3 conv."""

    def __init__(self, cin: int, cout: int) -> None:
        super().__init__()
        self.conv = ConvAct(cin * 4, cout, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tl, bl = x[..., ::2, ::2], x[..., 1::2, ::2]
        tr, br = x[..., ::2, 1::2], x[..., 1::2, 1::2]
        return self.conv(torch.cat([tl, bl, tr, br], dim=1))


class CSPDarknet(nn.Module):
    def __init__(self, width: tuple[int, ...], depth: int) -> None:
        super().__init__()
        c0, c1, c2, c3, c4 = width
        self.stem = Focus(3, c0)
        self.dark2 = nn.Sequential(DWConv(c0, c1, 3, 2), CSPLayer(c1, c1, depth))
        self.dark3 = nn.Sequential(DWConv(c1, c2, 3, 2), CSPLayer(c2, c2, 3 * depth))
        self.dark4 = nn.Sequential(DWConv(c2, c3, 3, 2), CSPLayer(c3, c3, 3 * depth))
        self.dark5 = nn.Sequential(
            DWConv(c3, c4, 3, 2), SPPBottleneck(c4, c4), CSPLayer(c4, c4, depth, shortcut=False)
        )

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x = self.dark2(self.stem(x))
        p3 = self.dark3(x)
        p4 = self.dark4(p3)
        return p3, p4, self.dark5(p4)


class PAFPN(nn.Module):
    """Top-down then bottom-up feature pyramid over the backbone's strides 8, 16 and 32."""

    def __init__(self, width: tuple[int, ...], depth: int) -> None:
        super().__init__()
        _, _, c2, c3, c4 = width
        self.backbone = CSPDarknet(width, depth)
        self.lateral_conv0 = ConvAct(c4, c3, 1)
        self.C3_p4 = CSPLayer(2 * c3, c3, depth, shortcut=False)
        self.reduce_conv1 = ConvAct(c3, c2, 1)
        self.C3_p3 = CSPLayer(2 * c2, c2, depth, shortcut=False)
        self.bu_conv2 = DWConv(c2, c2, 3, 2)
        self.C3_n3 = CSPLayer(2 * c2, c3, depth, shortcut=False)
        self.bu_conv1 = DWConv(c3, c3, 3, 2)
        self.C3_n4 = CSPLayer(2 * c3, c4, depth, shortcut=False)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        x2, x1, x0 = self.backbone(x)
        fpn_out0 = self.lateral_conv0(x0)
        f_out0 = self.C3_p4(torch.cat([_up2(fpn_out0), x1], dim=1))
        fpn_out1 = self.reduce_conv1(f_out0)
        pan_out2 = self.C3_p3(torch.cat([_up2(fpn_out1), x2], dim=1))
        pan_out1 = self.C3_n3(torch.cat([self.bu_conv2(pan_out2), fpn_out1], dim=1))
        pan_out0 = self.C3_n4(torch.cat([self.bu_conv1(pan_out1), fpn_out0], dim=1))
        return pan_out2, pan_out1, pan_out0


def _up2(x: torch.Tensor) -> torch.Tensor:
    return F.interpolate(x, scale_factor=2.0, mode="nearest")


class HeadLevel(nn.Module):
    """One level of the decoupled head: a 1x1 stem, then separate class and box branches."""

    def __init__(self, cin: int, hidden: int, num_classes: int) -> None:
        super().__init__()
        self.stem = ConvAct(cin, hidden, 1)
        self.cls_convs = nn.Sequential(DWConv(hidden, hidden, 3), DWConv(hidden, hidden, 3))
        self.reg_convs = nn.Sequential(DWConv(hidden, hidden, 3), DWConv(hidden, hidden, 3))
        self.cls_pred = nn.Conv2d(hidden, num_classes, 1)
        self.reg_pred = nn.Conv2d(hidden, 4, 1)
        self.obj_pred = nn.Conv2d(hidden, 1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        cls = self.cls_pred(self.cls_convs(x))
        reg_feat = self.reg_convs(x)
        reg, obj = self.reg_pred(reg_feat), self.obj_pred(reg_feat)
        return torch.cat([reg, obj.sigmoid(), cls.sigmoid()], dim=1)


class YOLOXHead(nn.Module):
    def __init__(self, in_channels: tuple[int, ...], hidden: int, num_classes: int) -> None:
        super().__init__()
        self.levels = nn.ModuleList(HeadLevel(c, hidden, num_classes) for c in in_channels)

    def forward(self, feats: tuple[torch.Tensor, ...]) -> torch.Tensor:
        outs = [lvl(f).flatten(2) for lvl, f in zip(self.levels, feats, strict=True)]
        return torch.cat(outs, dim=2).permute(0, 2, 1)


class YOLOXNano(DetectionModel):
    """YOLOX-Nano: raw head output from `forward`, boxes from `postprocess`."""

    task = "detect"
    input_size: tuple[int, int] = INPUT_SIZE
    num_classes: int = NUM_CLASSES
    strides: tuple[int, ...] = STRIDES

    def __init__(self, num_classes: int = NUM_CLASSES, input_size: int = INPUT_SIZE[0]) -> None:
        super().__init__()
        if input_size % max(STRIDES):
            raise ValueError(f"input_size must be a multiple of {max(STRIDES)}, got {input_size}")
        self.num_classes = num_classes
        self.input_size = (input_size, input_size)
        width = (16, 32, 64, 128, 256)
        self.backbone = PAFPN(width, depth=1)
        self.head = YOLOXHead(width[2:], hidden=64, num_classes=num_classes)
        self._init_fresh()

    @torch.no_grad()
    def _init_fresh(self, prior: float = 0.01) -> None:
        """Weights for training from scratch (converted weights replace them): He-normal
        convolutions, the first one divided by the 0..255 input range, and YOLOX's own prior
        of 0.01 on the objectness and class biases. Without the batch norms (folded) the
        activations still fade through the network (SiLU's slope is 1/2 near 0) and a larger
        gain tips them into blowing up under Adam: from scratch, this model learns slowly;
        it is meant to be fine-tuned from the converted weights."""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                nn.init.zeros_(m.bias)
        # the network reads pixels in 0..255 (YOLOX_PREPROCESS): scale the first conv to match
        stem = next(m for m in self.modules() if isinstance(m, nn.Conv2d))
        stem.weight /= YOLOX_PREPROCESS.value_range[1]
        bias = -math.log((1 - prior) / prior)
        for level in self.head.levels:
            for pred in (level.cls_pred, level.obj_pred):
                nn.init.normal_(pred.weight, std=0.01)
                nn.init.constant_(pred.bias, bias)
            nn.init.normal_(level.reg_pred.weight, std=0.01)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """[N,3,H,W] preprocessed batch -> [N, A, 5 + C]: (x, y, log w, log h) raw, obj, cls."""
        return self.head(self.backbone(x))

    def prune_protected(self) -> list[nn.Module] | None:
        """Each level's class, box and objectness outputs (their widths are the raw output's
        columns)."""
        return [m for lvl in self.head.levels for m in (lvl.cls_pred, lvl.reg_pred, lvl.obj_pred)]

    def decode(self, raw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The detection contract's decode: (xyxy boxes in network-input pixels [N, A, 4],
        per-class scores objectness x class score [N, A, 80])."""
        return self.decode_boxes(raw), raw[..., 4:5] * raw[..., 5:]

    def decode_boxes(
        self, raw: torch.Tensor, input_size: tuple[int, int] | None = None
    ) -> torch.Tensor:
        """Raw output -> [N, A, 4] xyxy boxes in network-input pixels."""
        h, w = input_size or self.input_size
        grids, scales = [], []
        for s in self.strides:
            gh, gw = h // s, w // s
            yv, xv = torch.meshgrid(
                torch.arange(gh, device=raw.device), torch.arange(gw, device=raw.device),
                indexing="ij",
            )  # fmt: skip
            grids.append(torch.stack([xv, yv], dim=-1).reshape(-1, 2))
            scales.append(torch.full((gh * gw, 1), float(s), device=raw.device))
        grid = torch.cat(grids).to(raw.dtype)
        stride = torch.cat(scales).to(raw.dtype)
        if grid.shape[0] != raw.shape[1]:
            raise ValueError(
                f"raw output has {raw.shape[1]} anchors, input size {h}x{w} gives {grid.shape[0]}"
            )
        cxcy = (raw[..., :2] + grid) * stride
        half = torch.exp(raw[..., 2:4]) * stride / 2
        return torch.cat([cxcy - half, cxcy + half], dim=-1)

    def postprocess(
        self,
        raw: torch.Tensor,
        score_threshold: float = 0.001,
        iou_threshold: float = 0.65,
        max_detections: int = 100,
        input_size: tuple[int, int] | None = None,
    ) -> list[dict[str, torch.Tensor]]:
        """Per image: `boxes` (xyxy, network-input pixels), `scores` (obj x best class score),
        `labels` (0..C-1), after class-wise NMS, best first, at most `max_detections`."""
        # imported here, not at the top: see SSDMobileNetV1.postprocess
        from torchvision.ops import batched_nms

        boxes = self.decode_boxes(raw, input_size)
        cls_score, labels = raw[..., 5:].max(dim=-1)
        scores = raw[..., 4] * cls_score
        results = []
        for b, s, lab in zip(boxes, scores, labels, strict=True):
            keep = s > score_threshold
            b, s, lab = b[keep], s[keep], lab[keep]
            idx = batched_nms(b, s, lab, iou_threshold)[:max_detections]
            results.append({"boxes": b[idx], "scores": s[idx], "labels": lab[idx]})
        return results


@register_model(
    "yolox-nano",
    task="detect",
    description="YOLOX-Nano COCO detector, 416x416, 80 classes (0.9 M params, BN folded).",
    metric_preset="coco-bbox",
    preprocess=YOLOX_PREPROCESS,
)
def yolox_nano(*, num_classes: int = NUM_CLASSES, input_size: int = INPUT_SIZE[0]) -> YOLOXNano:
    return YOLOXNano(num_classes=num_classes, input_size=input_size)
