"""The work a request hands to an inference thread: decode, run, encode, inside a private
folder that is removed before the thread returns.

The upload is written under a fixed, server-chosen name and decoded by `clearsight.io`
(EXIF orientation, pixel limit read from the header before decoding); the restored image
is written by `clearsight.io.write_image` exactly as `clearsight restore` writes it, so the
PNG bytes match the command's for the same input and options.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError, ImageReadError
from clearsight.serve.sniff import extension

if TYPE_CHECKING:
    import numpy as np

    from clearsight.engine.inference import InferenceOptions
    from clearsight.serve.registry import ServedModel

UPLOAD_STEM = "upload"


class Abandoned(Exception):
    """The request timed out; the thread stops at its next tile."""


class TooManyPixels(ClearsightError):
    """The decoded image would exceed the pixel limit (a decompression bomb, or just big)."""


@dataclass
class Job:
    """One request's inputs, and a flag the event loop sets when it stops waiting."""

    data: bytes
    fmt: str
    root: Path
    max_pixels: int | None
    cancelled: threading.Event = field(default_factory=threading.Event)

    def check(self, *_: Any) -> None:
        """Tile-progress hook: leave the model's loop once the request is abandoned."""
        if self.cancelled.is_set():
            raise Abandoned()


def _decode(job: Job, folder: Path) -> np.ndarray:
    """Decode the upload; errors name "the uploaded image", never the private path."""
    from clearsight.io import image_size, read_image, resolve_max_pixels

    path = folder / f"{UPLOAD_STEM}{extension(job.fmt)}"
    path.write_bytes(job.data)
    try:
        width, height = image_size(path)
        limit = resolve_max_pixels(job.max_pixels)
        if width * height > limit:
            raise TooManyPixels(
                f"the uploaded image is {width}x{height} = {width * height:,} pixels, over "
                f"the server's limit of {limit:,} pixels"
            )
        return read_image(path, max_pixels=job.max_pixels)
    except ImageReadError as exc:
        raise ImageReadError(str(exc).replace(str(path), "the uploaded image")) from None


def restore_job(
    job: Job, served: ServedModel, options: InferenceOptions
) -> tuple[bytes, dict[str, Any]]:
    """The restored image as PNG bytes (the upload's bit depth) and facts about the run."""
    from clearsight.engine.inference import Restorer
    from clearsight.io import image_to_tensor, tensor_to_image, write_image

    folder = Path(tempfile.mkdtemp(dir=job.root))
    try:
        img = _decode(job, folder)
        restorer = Restorer(served.loaded, options)
        out_t, ms = restorer.timed_restore(image_to_tensor(img), job.check)
        job.check()
        out = folder / "restored.png"
        dtype = img.dtype
        write_image(out, tensor_to_image(out_t, dtype=dtype), bit_depth=8 * dtype.itemsize)
        used = restorer.last_stages_used if options.stages != "all" else None
        facts = {
            "latency_ms": round(ms, 2),
            "width": int(img.shape[1]),
            "height": int(img.shape[0]),
            "stages": list(used) if used else None,
        }
        return out.read_bytes(), facts
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def detect_job(
    job: Job, served: ServedModel, score_threshold: float, draw: bool, detector: Any = None
) -> tuple[list[dict[str, Any]], bytes | None, dict[str, Any]]:
    """COCO results (image_id 0, plus each box's class name), the drawn copy as PNG bytes
    when asked, and facts about the run. `detector`: a chain (`engine.pipeline.Pipeline`)
    to run instead of the served detector itself."""
    import time

    from clearsight.io import write_image

    folder = Path(tempfile.mkdtemp(dir=job.root))
    try:
        img = _decode(job, folder)
        detector = detector if detector is not None else served.detector
        t0 = time.perf_counter()
        dets = detector.detect_batch([img], score_threshold=score_threshold)[0]
        ms = (time.perf_counter() - t0) * 1000.0
        job.check()
        results = [{**r, "name": name} for r, name in zip(dets.to_coco(0), dets.names, strict=True)]
        drawn = None
        if draw:
            out = folder / "detections.png"
            write_image(out, detector.draw(img, dets))
            drawn = out.read_bytes()
        facts = {
            "latency_ms": round(ms, 2),
            "width": int(img.shape[1]),
            "height": int(img.shape[0]),
        }
        if getattr(detector, "last_restored", None):
            facts["restored"] = bool(detector.last_restored[0])
        return results, drawn, facts
    finally:
        shutil.rmtree(folder, ignore_errors=True)
