"""Training losses for detectors, with the trainer's signature `loss(outputs, inputs, targets)`.

`outputs` is the model's raw forward output, `targets` one dict per image with `boxes`
([K, 4] xyxy in network-input pixels) and `labels` ([K] contiguous labels, the artifact's
`class_ids` order), as `detection.train_data` yields them.

`multibox`: SSD's loss as the TF Object Detection API's ssd_mobilenet_v1 COCO configs train the
model that `ssd-mobilenet-v1-coco` was converted from (README, "Training detectors"):

- matching (ArgMaxMatcher): each anchor takes the ground-truth box it overlaps most; it is a
  positive at IoU >= 0.5, else background; then every ground-truth box also claims its own
  best anchor (force_match_for_each_row), so no object goes unmatched;
- localization: smooth L1 (Huber, delta 1) on the box encodings of the positives, against
  targets encoded with the model's box coder (scale factors 10, 10, 5, 5);
- classification: sigmoid cross-entropy (the API's weighted_sigmoid; the converted TFLite
  head scores with a sigmoid, and its post-processing reads the object columns only) over the
  object-class outputs, one-hot targets, all zero for background anchors. The background
  column is left out: in the converted weights it scores about 0.004 on every anchor,
  object or not (measured on coco128), so it was not trained towards 1 on background, and
  teaching it now would cost ~5.5 nats per anchor and pull the fine-tuned weights away;
- hard negative mining: of the background anchors, only the 3 x (number of positives) with the
  highest classification loss count, per image (max_negatives_per_positive 3; the API's
  additional NMS among mined boxes at IoU 0.99 only drops near-duplicates and is left out);
- both terms are summed and divided by the number of positives in the batch.

`yolox`: YOLOX's loss with SimOTA assignment (`YoloxLoss`, `simota_assign`).

Written here because torchvision's SSD loss is softmax-based with a different box coder and
matcher, and no maintained library ships YOLOX's assignment apart from its training code;
the losses must be the ones the converted weights were trained with.
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
    "YoloxLoss",
    "build_detection_loss",
    "hard_negative_mask",
    "match_anchors",
    "simota_assign",
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
    `input_size` and a background class output at index 0, which it ignores (see the module
    docstring)."""

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
        # float32 whatever the autocast: matching and encoded targets need the precision
        encodings, logits = outputs[0].float(), outputs[1].float()
        anchors = self.model[0].anchors.float()
        with torch.no_grad():
            enc_t, cls_t, pos = self.targets(targets, anchors)
        onehot = F.one_hot(cls_t, logits.shape[-1])[..., 1:].to(logits.dtype)
        cls_loss = F.binary_cross_entropy_with_logits(
            logits[..., 1:], onehot, reduction="none"
        ).sum(-1)
        neg = hard_negative_mask(cls_loss, pos, self.neg_pos_ratio)
        n_pos = pos.sum().clamp_min(1).to(encodings.dtype)
        loc = F.smooth_l1_loss(encodings[pos], enc_t[pos], beta=1.0, reduction="sum") / n_pos
        cls = (cls_loss[pos].sum() + cls_loss[neg].sum()) / n_pos
        self.last = {"loc": loc.detach(), "cls": cls.detach(), "positives": pos.sum(),
                     "negatives": neg.sum()}  # fmt: skip
        return loc + cls


# -- YOLOX --------------------------------------------------------------------------------------
YOLOX_CENTER_RADIUS = 1.5
YOLOX_TOPK = 10
YOLOX_IOU_WEIGHT = 5.0


def aligned_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of each box in `a` with the box at the same index in `b` (xyxy), [K]."""
    lt = torch.maximum(a[:, :2], b[:, :2])
    rb = torch.minimum(a[:, 2:], b[:, 2:])
    inter = (rb - lt).clamp_min(0).prod(dim=1)
    area_a = (a[:, 2:] - a[:, :2]).clamp_min(0).prod(dim=1)
    area_b = (b[:, 2:] - b[:, :2]).clamp_min(0).prod(dim=1)
    return inter / (area_a + area_b - inter).clamp_min(1e-9)


def simota_assign(
    centers: torch.Tensor,
    strides: torch.Tensor,
    pred_boxes: torch.Tensor,
    scores: torch.Tensor,
    gt_boxes: torch.Tensor,
    gt_labels: torch.Tensor,
    topk: int = YOLOX_TOPK,
    radius: float = YOLOX_CENTER_RADIUS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """YOLOX's SimOTA for one image: (anchor indices, their ground-truth indices, the IoU of
    each matched prediction with its box).

    Candidates are anchors whose centre lies within `radius` strides of a box centre; the
    cost of a (box, candidate) pair is the class BCE of sqrt(cls x obj) + 3 x -log(IoU),
    plus 1e5 where the anchor is outside that box's centre region. Each box takes its k
    cheapest candidates, k = sum of its top-10 IoUs (at least 1); an anchor claimed twice
    stays with the cheaper box. `scores` [A, C] are cls x obj probabilities.
    """
    gt_c = (gt_boxes[:, :2] + gt_boxes[:, 2:]) / 2
    r = radius * strides[None, :]
    in_center = ((centers[None, :, 0] - gt_c[:, None, 0]).abs() < r) & (
        (centers[None, :, 1] - gt_c[:, None, 1]).abs() < r
    )  # [K, A]
    cand = in_center.any(dim=0).nonzero().squeeze(1)
    empty = torch.zeros(0, dtype=torch.long, device=centers.device)
    if cand.numel() == 0:
        return empty, empty, pred_boxes.new_zeros(0)
    ious = box_iou(gt_boxes, pred_boxes[cand])  # [K, F]
    onehot = F.one_hot(gt_labels, scores.shape[1]).to(scores.dtype)
    p = scores[cand].sqrt().clamp(1e-6, 1 - 1e-6)  # [F, C]
    cls_cost = -(onehot @ p.log().T + (1 - onehot) @ (1 - p).log().T)  # BCE summed over C
    cost = cls_cost + 3.0 * -torch.log(ious + 1e-8) + 1e5 * (~in_center[:, cand])
    k = min(topk, cand.numel())
    dynamic_k = ious.topk(k, dim=1).values.sum(1).int().clamp_min(1)
    matching = torch.zeros_like(cost, dtype=torch.bool)
    for g in range(gt_boxes.shape[0]):
        matching[g, cost[g].topk(int(dynamic_k[g]), largest=False).indices] = True
    shared = matching.sum(0) > 1
    if shared.any():
        best = cost[:, shared].argmin(dim=0)
        matching[:, shared] = False
        matching[best, shared.nonzero().squeeze(1)] = True
    matched = matching.any(dim=0)
    gt_idx = matching[:, matched].int().argmax(dim=0)
    return cand[matched], gt_idx, ious[:, matched].gather(0, gt_idx[None]).squeeze(0)


class YoloxLoss(nn.Module):
    """YOLOX's training loss (Ge et al., 2021) with SimOTA assignment (`simota_assign`):
    5 x IoU loss (1 - IoU^2) on the matched boxes, objectness BCE on every anchor (1 for the
    matched), class BCE on the matched with IoU-valued targets, each divided by the number of
    matches. YOLOX's extra L1 term of the last 15 epochs is left out.

    The head emits sigmoided scores (the exported graph's layout, `models/yolox_nano.py`);
    the BCE terms take logits recovered by `torch.logit` in float64, the same values
    wherever the float32 sigmoid has not saturated (|logit| < ~16)."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = [model]  # read, not owned (its parameters stay the model's)
        self.last: dict[str, torch.Tensor] = {}

    def forward(
        self, outputs: torch.Tensor, inputs: torch.Tensor, targets: Sequence[Target]
    ) -> torch.Tensor:
        model = self.model[0]
        outputs = outputs.float()  # float32 whatever the autocast (box decoding, matching)
        h, w = inputs.shape[-2:]
        boxes = model.decode_boxes(outputs, (int(h), int(w)))  # [N, A, 4] xyxy pixels
        centers, strides = _yolox_grid(model.strides, int(h), int(w), outputs)
        obj = outputs[..., 4]
        cls = outputs[..., 5:]
        obj_t = torch.zeros_like(obj)
        iou_terms, cls_terms = [], []
        n_fg = 0
        for i, t in enumerate(targets):
            gt = t["boxes"].to(boxes)
            if gt.shape[0] == 0:
                continue
            labels = t["labels"].to(boxes.device)
            with torch.no_grad():
                scores = (cls[i] * obj[i, :, None]).detach().float()
                a_idx, g_idx, iou = simota_assign(
                    centers, strides, boxes[i].detach().float(), scores, gt.float(), labels
                )
            obj_t[i, a_idx] = 1.0
            n_fg += a_idx.numel()
            iou_terms.append(1 - aligned_iou(boxes[i, a_idx], gt[g_idx]) ** 2)
            cls_t = F.one_hot(labels[g_idx], cls.shape[-1]).to(cls) * iou[:, None].to(cls)
            cls_terms.append(_bce(cls[i, a_idx], cls_t))
        n = max(n_fg, 1)
        zero = outputs.sum() * 0
        loss_iou = (torch.cat(iou_terms).sum() if iou_terms else zero) / n
        loss_cls = (torch.cat([c.reshape(-1) for c in cls_terms]).sum() if cls_terms else zero) / n
        loss_obj = _bce(obj, obj_t).sum() / n
        self.last = {"iou": loss_iou.detach(), "obj": loss_obj.detach(),
                     "cls": loss_cls.detach(), "matches": torch.tensor(n_fg)}  # fmt: skip
        return YOLOX_IOU_WEIGHT * loss_iou + loss_obj + loss_cls


def _bce(prob: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """Elementwise BCE of sigmoided `prob` through its logit (float64, see `YoloxLoss`)."""
    logit = torch.logit(prob.double(), eps=1e-12)
    return F.binary_cross_entropy_with_logits(logit, target.double(), reduction="none").to(
        prob.dtype
    )


def _yolox_grid(
    strides: Sequence[int], h: int, w: int, like: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Anchor centres [A, 2] (x, y pixels) and strides [A], in the head's output order."""
    centers, out = [], []
    for s in strides:
        ys, xs = torch.meshgrid(
            torch.arange(h // s, device=like.device), torch.arange(w // s, device=like.device),
            indexing="ij",
        )  # fmt: skip
        centers.append((torch.stack([xs, ys], -1).reshape(-1, 2).float() + 0.5) * s)
        out.append(torch.full((xs.numel(),), float(s), device=like.device))
    return torch.cat(centers), torch.cat(out)


DETECTION_LOSSES: dict[str, Callable[[nn.Module], nn.Module]] = {
    "multibox": MultiboxLoss,
    "yolox": YoloxLoss,
}


def build_detection_loss(name: str, model: nn.Module) -> nn.Module:
    """The detection loss `name` bound to `model` (its anchors, input size, head layout)."""
    if name not in DETECTION_LOSSES:
        raise UnknownNameError(
            f"loss.name: {name!r} is not a detection loss; known: {', '.join(DETECTION_LOSSES)}"
        )
    return DETECTION_LOSSES[name](model)
