"""SSD with a MobileNet-v1 backbone, laid out as the TF Object Detection API builds it.

The layout follows the API's `ssd_mobilenet_v1` feature extractor so that its trained
weights (e.g. the quantized COCO model converted by `clearsight.convert.tflite_ssd`) load
one tensor per convolution: MobileNet-v1 (depthwise separable 3x3 + 1x1 convolutions, ReLU6,
batch norm folded into the conv biases), four extra stride-2 layers, and a 1x1 box and
class predictor on six feature maps (Conv2d_11_pointwise, Conv2d_13_pointwise, the extras).
TF's "SAME" padding puts the odd pixel of padding at the bottom/right, so the convolutions
pad explicitly (`_SameConv2d`) instead of using PyTorch's symmetric padding; otherwise every
stride-2 feature map is shifted by half a pixel.

`forward` returns the raw head outputs (box encodings and class logits, background at index
0); `postprocess` decodes them against the anchors and runs NMS.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.models.contract import DetectionModel
from clearsight.models.registry import register_model
from clearsight.preprocess import PreprocessSpec

# MobileNet-v1 at depth 1.0: (output channels, stride of the depthwise conv) of blocks 1..13.
_MOBILENET_BLOCKS = (
    (64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
    (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1),
)  # fmt: skip
# The extra layers' output depths at depth 1.0 (each preceded by a 1x1 conv to half of it).
_EXTRA_DEPTHS = (512, 256, 256, 128)

# The API's box coder (FasterRcnnBoxCoder) scale factors for (y, x, h, w).
BOX_CODER_SCALES = (10.0, 10.0, 5.0, 5.0)
# The API's ssd_anchor_generator settings in the ssd_mobilenet_v1 COCO configs.
ANCHOR_MIN_SCALE = 0.2
ANCHOR_MAX_SCALE = 0.95
ANCHOR_ASPECT_RATIOS = (1.0, 2.0, 0.5, 3.0, 0.3333)
FEATURE_MAP_SIZES_300 = (19, 10, 5, 3, 2, 1)
# Initial sigmoid score of each object class in a fresh class head (`_init_class_prior`).
CLASS_PRIOR = 0.01


def _depth(d: int, multiplier: float, min_depth: int = 16) -> int:
    return max(int(d * multiplier), min_depth)


class _SameConv2d(nn.Conv2d):
    """Conv2d with TensorFlow's "SAME" padding (the extra row/column at the bottom/right)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pads = []
        for size, k, s in zip(
            (x.shape[-1], x.shape[-2]), self.kernel_size[::-1], self.stride[::-1], strict=True
        ):
            total = max((math.ceil(int(size) / s) - 1) * s + k - int(size), 0)
            pads += [total // 2, total - total // 2]
        if any(pads):
            x = F.pad(x, pads)
        return super().forward(x)


def _conv_relu6(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        _SameConv2d(cin, cout, k, stride=stride, groups=groups, bias=True), nn.ReLU6()
    )


class _SeparableBlock(nn.Module):
    """A depthwise 3x3 (with its stride) then a pointwise 1x1, each followed by ReLU6."""

    def __init__(self, cin: int, cout: int, stride: int) -> None:
        super().__init__()
        self.dw = _conv_relu6(cin, cin, 3, stride=stride, groups=cin)
        self.pw = _conv_relu6(cin, cout, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pw(self.dw(x))


class _ExtraBlock(nn.Module):
    """1x1 conv to half the depth, then a stride-2 3x3 conv (the API's extra feature maps)."""

    def __init__(self, cin: int, cout: int, mid: int) -> None:
        super().__init__()
        self.reduce = _conv_relu6(cin, mid, 1)
        self.conv = _conv_relu6(mid, cout, 3, stride=2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(self.reduce(x))


def ssd_anchor_boxes(
    feature_map_sizes: tuple[int, ...] = FEATURE_MAP_SIZES_300,
    min_scale: float = ANCHOR_MIN_SCALE,
    max_scale: float = ANCHOR_MAX_SCALE,
    aspect_ratios: tuple[float, ...] = ANCHOR_ASPECT_RATIOS,
    interpolated_scale_aspect_ratio: float = 1.0,
    reduce_boxes_in_lowest_layer: bool = True,
) -> torch.Tensor:
    """The API's `create_ssd_anchors` for square inputs: [A, 4] as (yc, xc, h, w), normalized.

    Scales are spaced linearly from `min_scale` to `max_scale` over the layers, each layer
    adds a box at the geometric mean of its scale and the next one's (1.0 after the last),
    and the lowest layer has just three boxes (scale 0.1 at 1:1, and its scale at 2:1, 1:2).
    Order: row, column, then box, the order of the heads' reshaped outputs.
    """
    n = len(feature_map_sizes)
    scales = [min_scale + (max_scale - min_scale) * i / (n - 1) for i in range(n)] + [1.0]
    out = []
    for layer, size in enumerate(feature_map_sizes):
        scale, scale_next = scales[layer], scales[layer + 1]
        if layer == 0 and reduce_boxes_in_lowest_layer:
            specs = [(0.1, 1.0), (scale, 2.0), (scale, 0.5)]
        else:
            specs = [(scale, ar) for ar in aspect_ratios]
            if interpolated_scale_aspect_ratio > 0:
                specs.append((math.sqrt(scale * scale_next), interpolated_scale_aspect_ratio))
        s = torch.tensor([sp[0] for sp in specs], dtype=torch.float64)
        r = torch.tensor([sp[1] for sp in specs], dtype=torch.float64).sqrt()
        heights, widths = s / r, s * r
        centers = (torch.arange(size, dtype=torch.float64) + 0.5) / size
        yc, xc = torch.meshgrid(centers, centers, indexing="ij")
        k = len(specs)
        grid = torch.stack(
            [
                yc[..., None].expand(size, size, k),
                xc[..., None].expand(size, size, k),
                heights.expand(size, size, k),
                widths.expand(size, size, k),
            ],
            dim=-1,
        )
        out.append(grid.reshape(-1, 4))
    return torch.cat(out).to(torch.float32)


def decode_boxes(encodings: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Box encodings (ty, tx, th, tw) against anchors (yc, xc, h, w) -> normalized
    (x0, y0, x1, y1), the API's FasterRcnnBoxCoder with scale factors (10, 10, 5, 5)."""
    sy, sx, sh, sw = BOX_CODER_SCALES
    ya, xa, ha, wa = anchors.unbind(-1)
    ty, tx, th, tw = encodings.unbind(-1)
    yc = ty / sy * ha + ya
    xc = tx / sx * wa + xa
    h = torch.exp(th / sh) * ha
    w = torch.exp(tw / sw) * wa
    return torch.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], dim=-1)


def encode_boxes(boxes: torch.Tensor, anchors: torch.Tensor) -> torch.Tensor:
    """Normalized (x0, y0, x1, y1) boxes against anchors (yc, xc, h, w) -> encodings
    (ty, tx, th, tw): the inverse of `decode_boxes` (training targets)."""
    sy, sx, sh, sw = BOX_CODER_SCALES
    ya, xa, ha, wa = anchors.unbind(-1)
    x0, y0, x1, y1 = boxes.unbind(-1)
    h = (y1 - y0).clamp_min(1e-8)
    w = (x1 - x0).clamp_min(1e-8)
    ty = ((y0 + y1) / 2 - ya) / ha * sy
    tx = ((x0 + x1) / 2 - xa) / wa * sx
    return torch.stack([ty, tx, torch.log(h / ha) * sh, torch.log(w / wa) * sw], dim=-1)


class SSDMobileNetV1(DetectionModel):
    """SSD-MobileNet-v1 (TF Object Detection API layout); see the module docstring."""

    task = "detect"

    def __init__(
        self, num_classes: int = 91, depth_multiplier: float = 0.75, input_size: int = 300
    ) -> None:
        super().__init__()
        self.num_classes = num_classes  # including the background at index 0
        self.input_size = (input_size, input_size)
        c0 = _depth(32, depth_multiplier)
        self.conv0 = _conv_relu6(3, c0, 3, stride=2)
        blocks, cin = [], c0
        for cout, stride in _MOBILENET_BLOCKS:
            cout = _depth(cout, depth_multiplier)
            blocks.append(_SeparableBlock(cin, cout, stride))
            cin = cout
        self.blocks = nn.ModuleList(blocks)
        extras, feature_channels = [], [_depth(512, depth_multiplier), cin]
        for d in _EXTRA_DEPTHS:
            cout = _depth(d, depth_multiplier)
            extras.append(_ExtraBlock(cin, cout, _depth(d // 2, depth_multiplier)))
            feature_channels.append(cout)
            cin = cout
        self.extras = nn.ModuleList(extras)
        self.boxes_per_location = (3, 6, 6, 6, 6, 6)
        self.box_heads = nn.ModuleList(
            nn.Conv2d(c, a * 4, 1)
            for c, a in zip(feature_channels, self.boxes_per_location, strict=True)
        )
        self.class_heads = nn.ModuleList(
            nn.Conv2d(c, a * num_classes, 1)
            for c, a in zip(feature_channels, self.boxes_per_location, strict=True)
        )
        self._init_fresh()
        sizes = [input_size]
        for _ in range(5):  # conv0 .. block 11 reach /16, then stride-2 steps
            sizes.append(math.ceil(sizes[-1] / 2))
        fm = tuple([sizes[4]] + [math.ceil(sizes[4] / 2 ** (i + 1)) for i in range(5)])
        self.feature_map_sizes = fm
        self.register_buffer("anchors", ssd_anchor_boxes(fm), persistent=False)

    @torch.no_grad()
    def _init_fresh(self, prior: float = CLASS_PRIOR) -> None:
        """Weights for training from scratch (converted or trained weights replace them).

        The batch norms are folded into the convolutions here, so nothing rescales the
        activations: PyTorch's default init shrinks them layer by layer until the heads see
        almost nothing of the image. He-normal weights (fan-in, ReLU gain) keep their scale.
        The class head starts every sigmoid score at `prior`, as sigmoid detection heads are
        initialized (RetinaNet): at zero logits every anchor would score 0.5 for every class,
        and hard negative mining, which trains only 3 negatives per positive a step, takes
        long to push the rest down. (The background column, which the loss and the
        post-processing ignore, starts there too, where the converted model has it.)"""
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_in", nonlinearity="relu")
                nn.init.zeros_(m.bias)
        for head in (*self.box_heads, *self.class_heads):
            nn.init.normal_(head.weight, std=0.01)
        logit = math.log((1 - prior) / prior)
        for head in self.class_heads:
            head.bias.fill_(-logit)

    @property
    def num_labels(self) -> int:
        """Labels `postprocess` emits: the class outputs less the background at index 0."""
        return self.num_classes - 1

    def features(self, x: torch.Tensor) -> list[torch.Tensor]:
        """The six feature maps the heads read."""
        x = self.conv0(x)
        feats = []
        for i, block in enumerate(self.blocks):
            x = block(x)
            if i == 10:  # Conv2d_11_pointwise
                feats.append(x)
        feats.append(x)  # Conv2d_13_pointwise
        for extra in self.extras:
            x = extra(x)
            feats.append(x)
        return feats

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """[N,3,H,W] -> (box encodings [N,A,4] as (ty,tx,th,tw), class logits [N,A,C])."""
        boxes, logits = [], []
        n = x.shape[0]
        for f, bh, ch in zip(self.features(x), self.box_heads, self.class_heads, strict=True):
            boxes.append(bh(f).permute(0, 2, 3, 1).reshape(n, -1, 4))
            logits.append(ch(f).permute(0, 2, 3, 1).reshape(n, -1, self.num_classes))
        return torch.cat(boxes, 1), torch.cat(logits, 1)

    def prune_protected(self) -> list[nn.Module] | None:
        """The box and class predictors of the six feature maps (anchors x 4 box codes and
        anchors x classes: their widths are the raw output's layout)."""
        return [*self.box_heads, *self.class_heads]

    def decode(self, raw: tuple[torch.Tensor, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Raw outputs -> (boxes [N,A,4] xyxy in input pixels, sigmoid scores [N,A,C] with the
        background at 0)."""
        encodings, logits = raw
        boxes = decode_boxes(encodings, self.anchors)
        h, w = self.input_size
        scale = torch.tensor([w, h, w, h], dtype=boxes.dtype, device=boxes.device)
        return boxes * scale, torch.sigmoid(logits)

    def postprocess(
        self,
        raw: tuple[torch.Tensor, torch.Tensor],
        score_threshold: float = 0.01,
        iou_threshold: float = 0.6,
        max_detections: int = 100,
        class_agnostic: bool = True,
    ) -> list[dict[str, torch.Tensor]]:
        """Per image `boxes` (xyxy, input pixels), `scores`, `labels` (0..C-2: label k is the
        raw class k+1, background excluded).

        `class_agnostic=True` is the TFLite post-processing op's fast NMS (the defaults are its
        IoU 0.6 and one class per box): each anchor keeps its best class and all boxes compete
        in one NMS. False: every (anchor, class) pair above the threshold, NMS per class.
        """
        # imported here: torchvision.ops imports torch._dynamo (seconds), which every
        # `clearsight` command would pay for at start-up through the model registry
        from torchvision.ops import batched_nms, nms

        boxes, scores = self.decode(raw)
        scores = scores[..., 1:]
        out = []
        for b, s in zip(boxes, scores, strict=True):
            if class_agnostic:
                best, labels = s.max(dim=1)
                keep = best > score_threshold
                b, best, labels = b[keep], best[keep], labels[keep]
                idx = nms(b, best, iou_threshold)
            else:
                anchor, labels = (s > score_threshold).nonzero(as_tuple=True)
                b, best = b[anchor], s[anchor, labels]
                idx = batched_nms(b, best, labels, iou_threshold)
            idx = idx[:max_detections]
            out.append({"boxes": b[idx], "scores": best[idx], "labels": labels[idx]})
        return out


# Input: RGB 0..255 stretched to 300x300 (bilinear without antialiasing, as OpenCV's
# INTER_LINEAR: it reproduces the reference AP, PIL's antialiased bilinear costs ~0.9 AP),
# then (x - 128) / 128: the TFLite file's uint8 input (scale 1/128, zero point 128) as floats.
SSD_PREPROCESS = PreprocessSpec(
    color_order="RGB",
    value_range=(0.0, 255.0),
    mean=(128.0, 128.0, 128.0),
    std=(128.0, 128.0, 128.0),
    resize="fixed",
    size=(300, 300),
    extra={"interpolation": "bilinear", "antialias": False},
)


@register_model(
    "ssd-mobilenet-v1",
    task="detect",
    description="SSD with a MobileNet-v1 backbone (TF Object Detection API layout), 300x300.",
    metric_preset="coco",
    preprocess=SSD_PREPROCESS,
)
def ssd_mobilenet_v1(
    num_classes: int = 91, depth_multiplier: float = 0.75, input_size: int = 300
) -> SSDMobileNetV1:
    return SSDMobileNetV1(
        num_classes=num_classes, depth_multiplier=depth_multiplier, input_size=input_size
    )
