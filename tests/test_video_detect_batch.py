"""detect_video batches frames per detector call; the boxes are those of one frame at a time
(up to float rounding: a batched convolution may sum in another order, which moved one box
edge by 0.01 px, the JSON's last digit, on 2 of 24 frames of a 640-pixel clip)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import cv2
import numpy as np
import pytest

from clearsight.engine.detector import Detector
from clearsight.errors import OptionError
from clearsight.io import read_image, write_image
from clearsight.video.detect import detect_video, read_jsonl

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "coffee.jpg"


class Counting:
    """A real detector that records how many frames each call got."""

    def __init__(self, detector: Detector) -> None:
        self.detector = detector
        self.calls: list[int] = []

    def detect_batch(self, images: list[np.ndarray], *args: Any, **kw: Any) -> Any:
        self.calls.append(len(images))
        return self.detector.detect_batch(images, *args, **kw)

    def draw(self, image: np.ndarray, dets: Any) -> np.ndarray:
        return self.detector.draw(image, dets)


@pytest.fixture(scope="module")
def pan(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """7 numbered frames: the example photo, shrunk, panning 5 px a frame."""
    photo = read_image(EXAMPLE)
    small = cv2.resize(photo, (192, round(192 * photo.shape[0] / photo.shape[1])))
    folder = tmp_path_factory.mktemp("pan") / "pan"
    for i in range(7):
        write_image(folder / f"{i + 1:05d}.png", np.roll(small, 5 * i, axis=1))
    return folder


def _same_boxes(a: list[dict[str, Any]], b: list[dict[str, Any]]) -> None:
    """The same frames, boxes, labels and track ids; coordinates and scores equal up to one
    step of the JSON's rounding."""
    assert [r["frame"] for r in a] == [r["frame"] for r in b]
    for ra, rb in zip(a, b, strict=True):
        da, db = ra["detections"], rb["detections"]
        assert [(d["label"], d.get("track_id")) for d in da] == [
            (d["label"], d.get("track_id")) for d in db
        ]
        for x, y in zip(da, db, strict=True):
            assert x["bbox"] == pytest.approx(y["bbox"], abs=0.011)
            assert x["score"] == pytest.approx(y["score"], abs=2e-5)


@pytest.mark.parametrize("track", [False, True])
def test_batches_of_4_find_the_boxes_of_one_frame_at_a_time(
    pan: Path, tmp_path: Path, track: bool
) -> None:
    detector = Detector.from_pretrained("default-detect")
    rows = {}
    for batch in (1, 4):
        counting = Counting(detector)
        out = tmp_path / f"b{batch}"
        result = detect_video(counting, pan, out, fps=10, track=track, batch_size=batch)
        assert counting.calls == ([1] * 7 if batch == 1 else [4, 3])
        rows[batch] = read_jsonl(out / "pan.jsonl")
        assert result.frames == 7
    assert sum(len(r["detections"]) for r in rows[1]) > 0  # something was found
    _same_boxes(rows[4], rows[1])


def test_a_bad_batch_size_is_one_line_naming_it(pan: Path, tmp_path: Path) -> None:
    with pytest.raises(OptionError, match="batch_size: must be a whole number >= 1"):
        detect_video("default-detect", pan, tmp_path / "o", fps=10, batch_size=0)


def test_keep_partial_keeps_the_batches_done_before_a_failure(tmp_path: Path) -> None:
    from tests.test_video_detect import SquareDetector, _square_scene

    class FailsOnFrame6(SquareDetector):
        def detect_batch(self, images, *a, **k):  # type: ignore[no-untyped-def, override]
            if self.calls <= 5 < self.calls + len(images):
                raise RuntimeError("detector failed on frame 6")
            return super().detect_batch(images, *a, **k)

    src = tmp_path / "sq"
    for t in range(9):
        write_image(src / f"{t + 1:03d}.png", _square_scene(t))
    with pytest.raises(RuntimeError, match="frame 6"):
        detect_video(FailsOnFrame6(), src, tmp_path / "o", fps=10, keep_partial=True)
    assert [r["frame"] for r in read_jsonl(tmp_path / "o" / "sq.jsonl")] == [0, 1, 2, 3]
