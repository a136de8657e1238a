"""Running a detection artifact on images: boxes in image pixels with dataset category ids.

`Detector` joins the three pieces a detection model needs around its forward pass, all
read from the artifact so nothing is re-declared: the preprocessing (`detection.preprocess`,
from `config.preprocess`), the model's own decoding and NMS (`model.postprocess`), and the
label map (`config.class_ids` / `config.class_names`: contiguous label -> dataset id, name).
`detect_files` is what `clearsight detect` calls: it draws the boxes on copies of the images
and writes every detection as a COCO results file beside them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import torch
from torchvision.utils import draw_bounding_boxes

from clearsight.artifact import LoadedModel
from clearsight.atomic import atomic_write_text
from clearsight.detection.preprocess import Transform, prepare
from clearsight.errors import ClearsightError, check_unit_interval
from clearsight.io import read_image, write_image
from clearsight.models.contract import detection_labels, own_postprocess

if TYPE_CHECKING:
    from clearsight.runtime.failures import FailedFile

__all__ = [
    "DEFAULT_DETECT_MODEL",
    "RESULTS_FILE",
    "DetectRun",
    "Detections",
    "Detector",
    "image_ids",
]

DEFAULT_DETECT_MODEL = "default-detect"
RESULTS_FILE = "detections.json"
DEFAULT_SCORE_THRESHOLD = 0.3


def check_detector_options(device: str | torch.device, backend: str, precision: str) -> None:
    """`device` (one that exists here), `backend` and `precision` of a detector, checked as
    `InferenceOptions` checks a restorer's: an `OptionError` naming the option, before any
    work (`--device cuda:3` on a machine without CUDA was an internal error)."""
    from clearsight.engine.inference import check_device
    from clearsight.errors import OptionError
    from clearsight.runtime.ort_backend import BACKENDS
    from clearsight.zoo import PRECISIONS

    check_device(device)
    if backend not in BACKENDS:
        raise OptionError("backend", f"unknown backend {backend!r}; known: {', '.join(BACKENDS)}")
    if precision not in PRECISIONS:
        raise OptionError(
            "precision", f"unknown precision {precision!r}; known: {', '.join(PRECISIONS)}"
        )
    if precision == "int8" and str(device) != "cpu":
        raise OptionError(
            "precision", f"int8 runs with ONNX Runtime on the CPU; got --device {device}"
        )


@dataclass
class Detections:
    """One image's detections: xyxy boxes in image pixels, best score first."""

    boxes: torch.Tensor  # [K, 4] float32
    scores: torch.Tensor  # [K]
    labels: torch.Tensor  # [K] int64, contiguous 0..C-1
    category_ids: list[int]
    names: list[str]
    image_size: tuple[int, int]  # (H, W)

    def __len__(self) -> int:
        return int(self.scores.numel())

    def to_coco(self, image_id: int) -> list[dict[str, Any]]:
        """COCO results entries ({image_id, category_id, bbox [x, y, w, h], score})."""
        out = []
        for box, score, cid in zip(self.boxes.tolist(), self.scores.tolist(), self.category_ids,
                                   strict=True):  # fmt: skip
            x0, y0, x1, y1 = box
            out.append(
                {
                    "image_id": image_id,
                    "category_id": cid,
                    "bbox": [round(x0, 2), round(y0, 2), round(x1 - x0, 2), round(y1 - y0, 2)],
                    "score": round(float(score), 5),
                }
            )
        return out


@dataclass
class DetectRun:
    """What `detect_files` wrote: per input, its drawn copy and detections; the results file."""

    items: list[tuple[Path, Path, Detections]]
    results_path: Path
    image_ids: dict[str, int]
    failed: list[FailedFile] = field(default_factory=list)
    """Inputs that could not be read, detected or written (also in OUT/failures.csv)."""

    def summary(self) -> str:
        """'3 done, 2 failed' (the CLI's last line)."""
        return f"{len(self.items)} done, {len(self.failed)} failed"


class Detector:
    """A loaded detection model with its preprocessing, postprocessing and label map."""

    def __init__(self, loaded: LoadedModel, device: str | torch.device = "cpu") -> None:
        cfg = loaded.config
        if not loaded.is_detector:
            raise ClearsightError(
                f"model {loaded.source} is a {cfg.task!r} model, not a detector (task 'detect')"
            )
        self.loaded = loaded
        self.device = torch.device(device)
        self.model = loaded.model.to(self.device).eval()
        if loaded.on_onnxruntime:
            self.model.check_runs_as_detector()
        self.postprocess: Callable[..., list[dict[str, torch.Tensor]]] = _postprocessor(loaded)
        # labels, not class outputs: SSD's background output has no label (and no class id)
        num_labels = detection_labels(self.model)
        ids = cfg.class_ids
        names = cfg.class_names
        if ids is None:
            ids = list(range(num_labels or 0))
        if names is None:
            names = [f"class {i}" for i in ids]
        if num_labels is not None and len(ids) != num_labels:
            raise ClearsightError(
                f"{loaded.source}: class_ids lists {len(ids)} classes, the model predicts "
                f"{num_labels}"
            )
        self.class_ids, self.class_names = list(ids), list(names)

    @classmethod
    def from_pretrained(
        cls,
        ref: str = DEFAULT_DETECT_MODEL,
        device: str | torch.device = "cpu",
        backend: str = "torch",
        precision: str = "fp32",
    ) -> Detector:
        """A detector from an artifact path, a bundled model name or an exported .onnx file.
        `backend="onnxruntime"`: a PyTorch detector is exported to ONNX in memory (decoded
        layout, parity-checked) and run by ONNX Runtime on the CPU, as restore's --backend.
        `precision="int8"`: `REF.int8.onnx` (`compress quantize`) on ONNX Runtime, as
        restore's --precision."""
        from clearsight.zoo import find_int8, resolve_model

        check_detector_options(device, backend, precision)
        if precision == "int8":
            return cls(resolve_model(str(find_int8(ref))), device=device)
        loaded = resolve_model(ref, device=device)
        if backend != "torch":
            from clearsight.export.onnx import to_onnxruntime

            loaded = to_onnxruntime(loaded, str(device))
        return cls(loaded, device=device)

    @torch.inference_mode()
    def detect_batch(
        self,
        images: Sequence[np.ndarray],
        score_threshold: float = DEFAULT_SCORE_THRESHOLD,
        iou_threshold: float | None = None,
        max_detections: int = 100,
    ) -> list[Detections]:
        """Detect objects in RGB HxWx3 images (same preprocessing, one forward pass)."""
        return self.detect_seen(
            self.restore_images(images), score_threshold, iou_threshold, max_detections
        )

    def restore_images(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """The images as the detector sees them: as they are here; restored first by an
        `engine.pipeline.Pipeline`, the chain built on this hook."""
        return list(images)

    @torch.inference_mode()
    def detect_seen(
        self,
        images: Sequence[np.ndarray],
        score_threshold: float = DEFAULT_SCORE_THRESHOLD,
        iou_threshold: float | None = None,
        max_detections: int = 100,
    ) -> list[Detections]:
        """`detect_batch` on images already through `restore_images`."""
        check_unit_interval("score_threshold", score_threshold)
        prepared = [prepare(img, self.loaded.config.preprocess) for img in images]
        sizes = {tuple(x.shape) for x, _ in prepared}
        if len(sizes) != 1:
            return [
                self.detect_seen([img], score_threshold, iou_threshold, max_detections)[0]
                for img in images
            ]
        batch = torch.stack([x for x, _ in prepared]).to(self.device)
        raw = self.model(batch)
        kw: dict[str, Any] = {"score_threshold": score_threshold, "max_detections": max_detections}
        if iou_threshold is not None:
            kw["iou_threshold"] = iou_threshold
        outs = self.postprocess(raw, **kw)
        return [self._to_image(o, t) for o, (_, t) in zip(outs, prepared, strict=True)]

    def detect(self, image: np.ndarray | str | os.PathLike[str], **kw: Any) -> Detections:
        """Detections for one image (an RGB array, or a path read by `clearsight.io`)."""
        img = image if isinstance(image, np.ndarray) else read_image(image)
        return self.detect_batch([img], **kw)[0]

    def _to_image(self, out: dict[str, torch.Tensor], transform: Transform) -> Detections:
        labels = out["labels"].cpu().long()
        return Detections(
            boxes=transform.boxes_to_image(out["boxes"].cpu().float()),
            scores=out["scores"].cpu().float(),
            labels=labels,
            category_ids=[self.class_ids[i] for i in labels.tolist()],
            names=[self.class_names[i] for i in labels.tolist()],
            image_size=transform.image_size,
        )

    def draw(self, image: np.ndarray, dets: Detections) -> np.ndarray:
        """A copy of `image` (uint8 RGB) with each box and its "name score" label drawn."""
        img = torch.from_numpy(np.ascontiguousarray(image)).permute(2, 0, 1)
        if img.dtype != torch.uint8:
            img = (img.float() / 257.0).round().to(torch.uint8)
        if not len(dets):
            return np.ascontiguousarray(img.permute(1, 2, 0).numpy())
        width = max(1, round(min(dets.image_size) / 250))
        colours = [_colour(i) for i in dets.labels.tolist()]
        texts = [f"{n} {s:.2f}" for n, s in zip(dets.names, dets.scores.tolist(), strict=True)]
        drawn = draw_bounding_boxes(img, dets.boxes, labels=texts, colors=colours, width=width)
        return np.ascontiguousarray(drawn.permute(1, 2, 0).numpy())

    def detect_file(
        self,
        src: str | os.PathLike[str],
        dst: str | os.PathLike[str],
        score_threshold: float = DEFAULT_SCORE_THRESHOLD,
        iou_threshold: float | None = None,
        max_detections: int = 100,
    ) -> Detections:
        """Detect in the image at `src` and write its drawn copy to `dst` (atomically): one
        file's work, the same in `detect_files` and in a Ray worker (docs/scale.md)."""
        img = read_image(src)
        dets = self.detect_batch([img], score_threshold, iou_threshold, max_detections)[0]
        write_image(dst, self.draw(img, dets))
        return dets

    def detect_files(
        self,
        inputs: Sequence[str | os.PathLike[str]],
        out_dir: str | os.PathLike[str],
        score_threshold: float = DEFAULT_SCORE_THRESHOLD,
        iou_threshold: float | None = None,
        max_detections: int = 100,
        on_image: Callable[[Path, Detections], None] | None = None,
        *,
        fail_fast: bool = False,
        on_failure: Callable[[FailedFile], None] | None = None,
    ) -> DetectRun:
        """Detect in every image of `inputs` (files or folders), write a drawn copy of each
        under `out_dir` (named as `clearsight restore` names outputs) and `out_dir/detections.json`:
        a COCO results list that scorers read as is. Image ids are the file names' numbers where
        all are numbers, as COCO's are, else positions 0..N-1; each entry also names its file.
        A file that fails is recorded (`on_failure`, `DetectRun.failed`, OUT/failures.csv) and
        the run goes on, as `clearsight.restore_files` does, unless `fail_fast`."""
        from clearsight.out_paths import check_output_folder
        from clearsight.runtime.batch import check_link, plan_outputs
        from clearsight.runtime.failures import (
            FailedFile,
            FailuresCsvError,
            failure_reason,
            sweep_output_folders,
            update_failures_csv,
        )

        check_unit_interval("score_threshold", score_threshold)  # once, before any image
        started = time.time()  # this run's start: older leftovers of dead writers are swept
        out = check_output_folder(out_dir)
        plan = plan_outputs([Path(p) for p in inputs], out)
        sweep_output_folders(out, (dst for _, dst in plan), started)
        ids = _image_ids([src for src, _ in plan])
        items: list[tuple[Path, Path, Detections]] = []
        failed: list[FailedFile] = []
        results: list[dict[str, Any]] = []
        for src, dst in plan:
            try:
                check_link(src)
                dets = self.detect_file(src, dst, score_threshold, iou_threshold, max_detections)
            except Exception as exc:
                if fail_fast:
                    raise
                failed.append(FailedFile(src, dst, failure_reason(exc)))
                if on_failure is not None:
                    on_failure(failed[-1])
                continue
            results.extend({**r, "file_name": src.name} for r in dets.to_coco(ids[str(src)]))
            items.append((src, dst, dets))
            if on_image is not None:
                on_image(src, dets)
        results_path = out / RESULTS_FILE
        atomic_write_text(results_path, json.dumps(results, indent=1) + "\n")
        run = DetectRun(items=items, results_path=results_path, image_ids=ids, failed=failed)
        try:
            update_failures_csv(out, failed)
        except FailuresCsvError as exc:
            exc.run = run
            raise
        return run


def _image_ids(paths: Sequence[Path]) -> dict[str, int]:
    return dict(zip(map(str, paths), image_ids([p.stem for p in paths]), strict=True))


def image_ids(stems: Sequence[str]) -> list[int]:
    """The COCO image id of each file of a run, from its stem: the numbers themselves when
    every stem is a distinct number (as COCO's file names are), else positions 0..N-1.
    Both engines number a run's files with this, so their results files agree."""
    if all(s.isdigit() for s in stems) and len({int(s) for s in stems}) == len(stems):
        return [int(s) for s in stems]
    return list(range(len(stems)))


def _colour(label: int) -> tuple[int, int, int]:
    """A fixed, well spread colour per label (golden-ratio hue steps)."""
    import colorsys

    r, g, b = colorsys.hsv_to_rgb((label * 0.618033988749895) % 1.0, 0.85, 0.95)
    return int(r * 255), int(g * 255), int(b * 255)


def _postprocessor(loaded: LoadedModel) -> Callable[..., list[dict[str, torch.Tensor]]]:
    """The model's own `postprocess`, or, for a bare forward (a graph run elsewhere), the
    registered architecture's (decoding and NMS are not part of such a graph)."""
    post = own_postprocess(loaded.model)
    if post is not None:
        return post  # type: ignore[no-any-return]
    from clearsight.models.registry import build_model

    reference = build_model(loaded.config.architecture, **loaded.config.arch_args)
    post = own_postprocess(reference)
    if post is None:
        raise ClearsightError(
            f"{loaded.source}: architecture {loaded.config.architecture!r} has no postprocess"
        )
    return post  # type: ignore[no-any-return]
