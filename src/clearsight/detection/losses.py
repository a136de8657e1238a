"""Training losses for detectors, with the trainer's signature `loss(outputs, inputs, targets)`.

`outputs` is the model's raw forward output, `targets` one dict per image with `boxes`
([K, 4] xyxy in network-input pixels) and `labels` ([K] contiguous labels, the artifact's
`class_ids` order), as `data.coco_detection` yields them.

`multibox`: SSD's loss as the TF Object Detection API's ssd_mobilenet_v1 COCO configs train the
model that `ssd-mobilenet-v1-coco` was converted from (docs/training.md, "Training detectors"):

- matching (ArgMaxMatcher): each anchor takes the ground-truth box it overlaps most; it is a
  positive at IoU >= 0.5, else background; then every ground-truth box also claims its own
  best anchor (force_match_for_each_row), so no object goes unmatched;
- localization: smooth L1 (Huber, delta 1) on the box encodings of the positives, against
  targets encoded with the model's box coder (scale factors 10, 10, 5, 5);
- classification: sigmoid cross-entropy over all class outputs, background column included
  (the API's weighted_sigmoid; the converted TFLite head scores with a sigmoid too), one-hot
  targets;
- hard negative mining: of the background anchors, only the 3 x (number of positives) with the
  highest classification loss count, per image (max_negatives_per_positive 3; the API's
  additional NMS among mined boxes at IoU 0.99 only drops near-duplicates and is left out);
- both terms are summed and divided by the number of positives in the batch.

Written here because torchvision's SSD loss is softmax-based with a different box coder and
matcher; the API's loss is what the converted weights were trained with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torchvision.ops import box_iou

from clearsight.errors import UnknownNameError
from clearsight.models.ssd_mobilenet_v1 import encode_boxes

__all__ = [
    "DETECTION_LOSSES",
    "MultiboxLoss",
    "build_detection_loss",
    "hard_negative_mask",
    "match_anchors",
]

MATCH_THRESHOLD = 0.5
NEG_POS_RATIO = 3

Target = dict[str, torch.Tensor]


def anchors_xyxy(anchors: torch.Tensor) -> torch.Tensor:
    """(yc, xc, h, w) anchors -> (x0, y0, x1, y1)."""
    yc, xc, h, w = anchors.unbind(-1)
    return torch.stack([xc - w / 2, yc - h / 2, xc + w / 2, yc + h / 2], dim=-1)


def match_anchors(
    anchors: torch.Tensor, gt_boxes: torch.Tensor, threshold: float = MATCH_THRESHOLD
) -> torch.Tensor:
    """Index of the ground-truth box each anchor is matched to, -1 for background.

    `anchors` (yc, xc, h, w) and `gt_boxes` (x0, y0, x1, y1) in the same units. Threshold
    matching first, then each ground-truth box forces its best anchor (where two boxes share
    a best anchor, the first box wins, as the API's argmax does).
    """
    a = anchors.shape[0]
    k = gt_boxes.shape[0]
    if k == 0:
        return torch.full((a,), -1, dtype=torch.long, device=anchors.device)
    iou = box_iou(gt_boxes, anchors_xyxy(anchors))  # [K, A]
    best_iou, best_gt = iou.max(dim=0)
    matched = torch.where(best_iou >= threshold, best_gt, torch.full_like(best_gt, -1))
    forced = torch.full((a,), k, dtype=torch.long, device=anchors.device)
    rows = torch.arange(k, device=anchors.device)
    forced.scatter_reduce_(0, iou.argmax(dim=1), rows, reduce="amin")
    return torch.where(forced < k, forced, matched)


def hard_negative_mask(
    cls_loss: torch.Tensor, positive: torch.Tensor, ratio: int = NEG_POS_RATIO
) -> torch.Tensor:
    """[N, A] bool: per image, the `ratio` x positives background anchors of highest loss."""
    loss = cls_loss.detach().masked_fill(positive, -torch.inf)
    order = loss.argsort(dim=1, descending=True)
    rank = torch.empty_like(order)
    rank.scatter_(1, order, torch.arange(order.shape[1], device=order.device).expand_as(order))
    budget = (positive.sum(dim=1, keepdim=True) * ratio).clamp_max((~positive).sum(1, True))
    return (rank < budget) & ~positive


class MultiboxLoss(nn.Module):
    """SSD's multibox loss for a model with `anchors` (yc, xc, h, w; normalized),
    `input_size` and a background class output at index 0 (see the module docstring)."""

    def __init__(
        self,
        model: nn.Module,
        threshold: float = MATCH_THRESHOLD,
        neg_pos_ratio: int = NEG_POS_RATIO,
    ) -> None:
        super().__init__()
        # in a list: the loss reads the model's anchors but must not own its parameters
        self.model = [model]
        self.threshold, self.neg_pos_ratio = threshold, neg_pos_ratio
        self.last: dict[str, torch.Tensor] = {}
        """The last call's terms (loc, cls, positives, negatives), detached, for tests."""

    def targets(
        self, targets: Sequence[Target], anchors: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(encoded box targets [N,A,4], raw class targets [N,A] with 0 = background,
        positive mask [N,A]) for a batch."""
        h, w = self.model[0].input_size
        scale = torch.tensor([w, h, w, h], dtype=anchors.dtype, device=anchors.device)
        enc, cls, pos = [], [], []
        for t in targets:
            boxes = t["boxes"].to(anchors) / scale
            idx = match_anchors(anchors, boxes, self.threshold)
            p = idx >= 0
            safe = idx.clamp_min(0)
            if boxes.shape[0]:
                enc.append(encode_boxes(boxes[safe], anchors))
                cls.append(torch.where(p, t["labels"].to(anchors.device)[safe] + 1, 0))
            else:
                enc.append(torch.zeros_like(anchors))
                cls.append(torch.zeros_like(idx))
            pos.append(p)
        return torch.stack(enc), torch.stack(cls), torch.stack(pos)

    def forward(
        self, outputs: tuple[torch.Tensor, torch.Tensor], inputs: Any, targets: Sequence[Target]
    ) -> torch.Tensor:
        encodings, logits = outputs
        anchors = self.model[0].anchors.to(encodings.dtype)
        with torch.no_grad():
            enc_t, cls_t, pos = self.targets(targets, anchors)
        onehot = F.one_hot(cls_t, logits.shape[-1]).to(logits.dtype)
        cls_loss = F.binary_cross_entropy_with_logits(logits, onehot, reduction="none").sum(-1)
        neg = hard_negative_mask(cls_loss, pos, self.neg_pos_ratio)
        n_pos = pos.sum().clamp_min(1).to(encodings.dtype)
        loc = F.smooth_l1_loss(encodings[pos], enc_t[pos], beta=1.0, reduction="sum") / n_pos
        cls = (cls_loss[pos].sum() + cls_loss[neg].sum()) / n_pos
        self.last = {"loc": loc.detach(), "cls": cls.detach(), "positives": pos.sum(),
                     "negatives": neg.sum()}  # fmt: skip
        return loc + cls


DETECTION_LOSSES: dict[str, Callable[[nn.Module], nn.Module]] = {"multibox": MultiboxLoss}


def build_detection_loss(name: str, model: nn.Module) -> nn.Module:
    """The detection loss `name` bound to `model` (its anchors, input size, head layout)."""
    if name not in DETECTION_LOSSES:
        raise UnknownNameError(
            f"loss.name: {name!r} is not a detection loss; known: {', '.join(DETECTION_LOSSES)}"
        )
    return DETECTION_LOSSES[name](model)
