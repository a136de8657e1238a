"""COCO-format detection data as training batches: augmented image-box pairs in the model's
own input space.

Each sample is drawn as the restoration data are (`data.augment.draw_seed`): the random draw
is a pure function of (seed, epoch, index), so a resumed run sees the same crops and flips.
Augmentation moves the image and its boxes together (torchvision transforms v2 on an `Image`
and `tv_tensors.BoundingBoxes`): photometric distortion, SSD's IoU crop (a crop that keeps
at least part of some box at a drawn IoU), horizontal flip, then `SanitizeBoundingBoxes`
drops boxes the crop reduced to nothing. The last step is `detection.preprocess.prepare`
with the artifact's `PreprocessSpec`: the very function inference uses, so the network is
trained on exactly what it will see (the Astar contest's preprocessing trap, see
docs/architecture.md §6).

Targets: `boxes` [K, 4] xyxy in network-input pixels and `labels` [K], the index of each
annotation's category id in `class_ids` (the artifact's label map). Crowd regions are left
out of training targets.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset
from torchvision import tv_tensors
from torchvision.transforms import v2

from clearsight.data.augment import draw_seed
from clearsight.data.coco import CocoDataset, CocoFormatError, load_coco
from clearsight.detection.preprocess import prepare
from clearsight.preprocess import PreprocessSpec

__all__ = ["CocoDetectionDataset", "Target", "collate_detection", "detection_augment"]

Target = dict[str, torch.Tensor]


def detection_augment() -> v2.Transform:
    """The joint image-box augmentation (before the model's own resize)."""
    return v2.Compose(
        [
            v2.RandomPhotometricDistort(p=0.5),
            v2.RandomIoUCrop(),
            v2.RandomHorizontalFlip(p=0.5),
            v2.SanitizeBoundingBoxes(min_size=1.0),
        ]
    )


def collate_detection(
    batch: list[tuple[torch.Tensor, Target]],
) -> tuple[torch.Tensor, list[Target]]:
    """Stack the inputs; keep the per-image targets (their box counts differ) as a list."""
    return torch.stack([x for x, _ in batch]), [t for _, t in batch]


class CocoDetectionDataset(Dataset[tuple[torch.Tensor, Target]]):
    """A COCO-format set (instances JSON + images) as (model input, target) samples."""

    collate_fn = staticmethod(collate_detection)

    def __init__(
        self,
        dataset: CocoDataset,
        spec: PreprocessSpec,
        class_ids: list[int],
        *,
        augment: bool,
        seed: int = 0,
        repeat: int = 1,
    ) -> None:
        self.coco, self.spec, self.class_ids = dataset, spec, list(class_ids)
        self.augment, self.seed, self.repeat = augment, int(seed), int(repeat)
        self.root = dataset.annotation_file.parent
        label_of = {cid: i for i, cid in enumerate(self.class_ids)}
        self._labels: list[np.ndarray] = []
        for entry in dataset.images:
            labels = []
            for cid, crowd in zip(entry.category_ids, entry.iscrowd, strict=True):
                if crowd:
                    continue
                if int(cid) not in label_of:
                    raise CocoFormatError(
                        f"{dataset.annotation_file}: image {entry.file_name} has category id "
                        f"{int(cid)}, which the model's class map does not list"
                    )
                labels.append(label_of[int(cid)])
            self._labels.append(np.array(labels, dtype=np.int64))
        if not dataset.images:
            raise CocoFormatError(f"{dataset.annotation_file}: no images")
        self.transform = detection_augment()
        # RandomIoUCrop needs a box to measure a crop against: images without any get the rest
        self.transform_no_boxes = v2.Compose(
            [v2.RandomPhotometricDistort(p=0.5), v2.RandomHorizontalFlip(p=0.5)]
        )
        # Shared memory, so that set_epoch reaches persistent DataLoader workers too.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()
        self.teacher_spec: PreprocessSpec | None = None
        """Distillation: when set, each target also holds `teacher_input`, the same augmented
        image through this spec, and `teacher_to_input`, the affine (ax, ay, bx, by) that
        maps the teacher's input pixels to this model's (x -> a x + b)."""

    @classmethod
    def from_folder(
        cls, root: str | os.PathLike[str], spec: PreprocessSpec, class_ids: list[int], **kw: Any
    ) -> CocoDetectionDataset:
        """Open the COCO-format folder `root` (annotations/instances_*.json + images)."""
        from clearsight.data.coco import find_coco_set

        ann, images = find_coco_set(root)
        return cls(load_coco(ann, images), spec, class_ids, **kw)

    def set_epoch(self, epoch: int) -> None:
        self._epoch.fill_(int(epoch))

    def files(self) -> list[Path]:
        """The annotation file and every image (what `data_hash` fingerprints)."""
        return [self.coco.annotation_file, *(e.path for e in self.coco.images)]

    def __len__(self) -> int:
        return len(self.coco.images) * self.repeat

    def raw_sample(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Image `i` (HxWx3 uint8), its non-crowd boxes (xyxy image pixels) and labels."""
        entry = self.coco.images[i]
        boxes = entry.boxes[~entry.iscrowd].astype(np.float32)
        return self.coco.image(i), boxes, self._labels[i]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, Target]:
        k = index % len(self.coco.images)
        image, boxes, labels = self.raw_sample(k)
        if image.dtype != np.uint8:
            image = np.rint(image / 257.0).astype(np.uint8)
        if self.augment:
            image, boxes, labels = self._augment(image, boxes, labels, index)
        x, transform = prepare(image, self.spec)
        b = transform.boxes_to_input(torch.from_numpy(boxes).reshape(-1, 4)).float()
        h, w = transform.input_size  # scaling can round a border box a hair past the edge
        b[:, 0::2] = b[:, 0::2].clamp(0, w)
        b[:, 1::2] = b[:, 1::2].clamp(0, h)
        target = {"boxes": b, "labels": torch.from_numpy(labels).long()}
        if self.teacher_spec is not None:
            target["teacher_input"], tt = prepare(image, self.teacher_spec)
            ax, ay = transform.scale_x / tt.scale_x, transform.scale_y / tt.scale_y
            bx, by = transform.pad_x - ax * tt.pad_x, transform.pad_y - ay * tt.pad_y
            target["teacher_to_input"] = torch.tensor([ax, ay, bx, by], dtype=torch.float32)
        return x, target

    def _augment(
        self, image: np.ndarray, boxes: np.ndarray, labels: np.ndarray, index: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """One draw of the joint augmentation, seeded by (seed, epoch, index)."""
        h, w = image.shape[:2]
        chw = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
        sample = {
            "image": tv_tensors.Image(chw),
            "boxes": tv_tensors.BoundingBoxes(
                torch.from_numpy(boxes).reshape(-1, 4), format="XYXY", canvas_size=(h, w)
            ),
            "labels": torch.from_numpy(labels),
        }
        seed = draw_seed(self.seed, int(self._epoch.item()), index)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            out = (self.transform if len(labels) else self.transform_no_boxes)(sample)
        img = out["image"].permute(1, 2, 0).numpy()
        return img, out["boxes"].numpy().astype(np.float32), out["labels"].numpy()
