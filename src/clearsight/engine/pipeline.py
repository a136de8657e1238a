"""A detector behind a restoration model: derain (or demoiré) in memory, then detect.

`Pipeline` is a `Detector` whose images pass through a restorer first, so everything that
runs a detector (`detect_files`, `evaluate_coco_set`, `detect_video`, the server, the Ray
workers) runs the chain unchanged. Boxes are found on the restored image and drawn on the
input (restoration keeps the image's size, so the coordinates are the same);
`save_restored` also writes what the detector saw.

`restore="auto"` restores only the images that look rainy (`detection.rain_measure`: a
rain-streak score at or above `RAIN_THRESHOLD`) with the bundled `default-derain`
(`"auto:MODEL"` with another model); the others are detected as they are, so dry photos
keep the detector's own accuracy and cost nothing extra.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import torch

from clearsight.artifact import LoadedModel
from clearsight.detection.rain_measure import RAIN_THRESHOLD, streak_score
from clearsight.engine.detector import (
    DEFAULT_DETECT_MODEL,
    DEFAULT_SCORE_THRESHOLD,
    Detections,
    Detector,
)
from clearsight.errors import OptionError
from clearsight.io import read_image, write_image

__all__ = [
    "AUTO",
    "AUTO_MODEL",
    "ImageRestorer",
    "Pipeline",
    "check_restore_model",
    "load_restorer",
    "parse_restore",
]

AUTO = "auto"
AUTO_MODEL = "default-derain"


class ImageRestorer(Protocol):
    """What the chain needs of a restorer: `engine.inference.Restorer` has it."""

    def restore_image(self, image: np.ndarray) -> np.ndarray: ...


def parse_restore(restore: str) -> tuple[str, bool]:
    """(model reference, gated) for a `--restore` value: "auto" is the bundled derainer
    gated by the rain measure, "auto:REF" the model REF gated, anything else REF always."""
    if not isinstance(restore, str) or not restore.strip():
        raise OptionError("restore", f"expected a model name or 'auto', got {restore!r}")
    if restore == AUTO:
        return AUTO_MODEL, True
    if restore.startswith(AUTO + ":"):
        ref = restore[len(AUTO) + 1 :]
        if not ref:
            raise OptionError("restore", "'auto:' needs a model after the colon")
        return ref, True
    return restore, False


def check_restore_model(ref: str, *, video: bool = False) -> None:
    """Refuse, in one line naming --restore, a detector, or a video model for images."""
    from clearsight.families import Family
    from clearsight.zoo import model_family

    family = model_family(ref)
    if family is Family.DETECTION:
        raise OptionError("restore", f"{ref} is a detector, not a restoration model")
    if family is Family.VIDEO and not video:
        raise OptionError(
            "restore", f"{ref} is a video model: it restores videos, not single images"
        )


def load_restorer(ref: str, device: str | torch.device = "cpu", **options: Any) -> Any:
    """A `Restorer` for the image restoration model `ref` (`Restorer.from_pretrained`)."""
    from clearsight.engine.inference import Restorer

    check_restore_model(ref)
    return Restorer.from_pretrained(ref, device=str(device), **options)


class Pipeline(Detector):
    """Restore, then detect: a `Detector` that hands the detector restored images."""

    def __init__(
        self,
        loaded: LoadedModel,
        device: str | torch.device = "cpu",
        *,
        restorer: ImageRestorer | None = None,
        gated: bool = False,
        threshold: float = RAIN_THRESHOLD,
        save_restored: str | os.PathLike[str] | None = None,
    ) -> None:
        super().__init__(loaded, device=device)
        self.restorer = restorer
        self.gated = gated
        self.threshold = float(threshold)
        self.save_restored = Path(save_restored) if save_restored is not None else None
        self.last_scores: list[float | None] = []
        """The rain score of each image of the last call (None where not gated)."""
        self.last_restored: list[bool] = []
        """Whether each image of the last call was restored."""
        self._out_root: Path | None = None  # `detect_files`' folder, while it runs

    @classmethod
    def from_pretrained(  # type: ignore[override]
        cls,
        ref: str = DEFAULT_DETECT_MODEL,
        device: str | torch.device = "cpu",
        backend: str = "torch",
        precision: str = "fp32",
        *,
        restore: str | ImageRestorer | None = None,
        gated: bool = False,
        save_restored: str | os.PathLike[str] | None = None,
        **restore_options: Any,
    ) -> Pipeline:
        """The detector `ref` (as `Detector.from_pretrained`) behind `restore`: a restorer,
        a restoration model reference, "auto" or "auto:REF" (see `parse_restore`), or None
        (detect directly). `restore_options` go to `Restorer.from_pretrained` (tile, ...)."""
        detector = Detector.from_pretrained(ref, device=device, backend=backend,
                                            precision=precision)  # fmt: skip
        return cls.around(detector, restore, gated=gated, save_restored=save_restored,
                          **restore_options)  # fmt: skip

    @classmethod
    def around(
        cls,
        detector: Detector,
        restore: str | ImageRestorer | None,
        *,
        gated: bool = False,
        save_restored: str | os.PathLike[str] | None = None,
        **restore_options: Any,
    ) -> Pipeline:
        """`detector` (already loaded) behind `restore` (as in `from_pretrained`)."""
        restorer: ImageRestorer | None
        if isinstance(restore, str):
            ref, auto = parse_restore(restore)
            gated = gated or auto
            restorer = load_restorer(ref, detector.device, **restore_options)
        else:
            restorer = restore
        if restorer is not None and not hasattr(restorer, "restore_image"):
            raise OptionError("restore", f"expected a restorer, got {type(restorer).__name__}")
        return cls(detector.loaded, detector.device, restorer=restorer, gated=gated,
                   save_restored=save_restored)  # fmt: skip

    def wants_restoring(self, image: np.ndarray) -> tuple[bool, float | None]:
        """(restore it?, its rain score or None when not gated)."""
        if self.restorer is None:
            return False, None
        if not self.gated:
            return True, None
        score = streak_score(image)
        return score >= self.threshold, score

    def restore_images(self, images: Sequence[np.ndarray]) -> list[np.ndarray]:
        """What the detector sees: each image restored (where the gate says so)."""
        seen, scores, restored = [], [], []
        for img in images:
            yes, score = self.wants_restoring(img)
            scores.append(score)
            restored.append(yes)
            seen.append(self._restore_one(img) if yes else img)
        self.last_scores, self.last_restored = scores, restored
        return seen

    def _restore_one(self, image: np.ndarray) -> np.ndarray:
        assert self.restorer is not None
        out = self.restorer.restore_image(image)
        if out.shape != image.shape:
            raise OptionError(
                "restore",
                f"the restorer returned a {out.shape} image for a {image.shape} one; "
                "the chain needs a model that keeps the image's size",
            )
        return out

    def detect_file(
        self,
        src: str | os.PathLike[str],
        dst: str | os.PathLike[str],
        score_threshold: float = DEFAULT_SCORE_THRESHOLD,
        iou_threshold: float | None = None,
        max_detections: int = 100,
    ) -> Detections:
        """As `Detector.detect_file`, on the restored image; boxes drawn on the input, and
        the restored image written under `save_restored` (named as `dst`) when set."""
        img = read_image(src)
        seen = self.restore_images([img])[0]
        dets = self.detect_seen([seen], score_threshold, iou_threshold, max_detections)[0]
        if self.save_restored is not None:
            write_image(self.save_restored / self._relative(Path(dst)), seen)
        write_image(dst, self.draw(img, dets))
        return dets

    def detect_files(self, inputs: Sequence[Any], out_dir: Any, *args: Any, **kw: Any) -> Any:
        """As `Detector.detect_files`; restored images land under `save_restored` at the
        drawn copies' paths relative to `out_dir`."""
        self._out_root = Path(out_dir)
        try:
            return super().detect_files(inputs, out_dir, *args, **kw)
        finally:
            self._out_root = None

    def _relative(self, dst: Path) -> Path:
        root = self._out_root
        if root is not None and dst.is_relative_to(root):
            return dst.relative_to(root)
        return Path(dst.name)
