"""detect_video: a drawn copy of a video and one JSON line of boxes per frame, with tracking."""

from __future__ import annotations

import threading
from pathlib import Path

import numpy as np
import pytest
import torch

from clearsight.engine.detector import Detections, Detector
from clearsight.engine.inference import Restorer
from clearsight.errors import OptionError, VideoReadError
from clearsight.io import write_image
from clearsight.video import VideoReader
from clearsight.video.detect import detect_video, read_jsonl
from tests.helpers import tiny_ssd
from tests.video_utils import audio_packets, decoded_frames, decoded_times, make_video, vfr_pts


def _square_scene(t: int, w: int = 64, h: int = 48) -> np.ndarray:
    """A dark frame with a bright 12x12 square moving 3 px right per frame."""
    img = np.full((h, w, 3), 30, np.uint8)
    img[18:30, 4 + 3 * t : 16 + 3 * t] = 240
    return img


class SquareDetector(Detector):
    """Finds the bright square (pixels > 200 in every channel) and calls it a person: a
    detector whose true boxes are known, with the real Detector's drawing. `scores[i]` is
    the square's score in call i (0.9 by default); `ghost` adds a fixed weak box elsewhere."""

    def __init__(self, scores: dict[int, float] | None = None, ghost: float | None = None):
        self.class_ids, self.class_names = [1], ["person"]
        self.calls = 0
        self.scores = scores or {}
        self.ghost = ghost

    def detect_batch(self, images, score_threshold=0.3, iou_threshold=None, max_detections=100):  # type: ignore[no-untyped-def, override]
        out = []
        for img in images:
            found: list[tuple[list[float], float]] = []
            ys, xs = np.nonzero(img.min(axis=2) > 200)
            if len(xs):
                box = [xs.min(), ys.min(), xs.max() + 1, ys.max() + 1]
                found.append(([float(v) for v in box], self.scores.get(self.calls, 0.9)))
            if self.ghost is not None:
                found.append(([40.0, 36.0, 52.0, 46.0], self.ghost))
            self.calls += 1
            found = [(b, s) for b, s in found if s >= score_threshold]
            k = len(found)
            out.append(
                Detections(
                    boxes=torch.tensor([b for b, _ in found]).reshape(k, 4).float(),
                    scores=torch.tensor([s for _, s in found]).float(),
                    labels=torch.zeros(k, dtype=torch.long),
                    category_ids=[1] * k,
                    names=["person"] * k,
                    image_size=img.shape[:2],
                )
            )
        return out


def test_drawn_video_keeps_frames_timestamps_audio_and_jsonl_has_a_line_per_frame(
    tmp_path: Path,
) -> None:
    src = tmp_path / "clip.mp4"
    make_video(src, w=64, h=48, n=8, audio="aac")
    detector = Detector(tiny_ssd())
    result = detect_video(detector, src, tmp_path / "out", score_threshold=0.3)
    assert result.video == tmp_path / "out" / "clip.mp4"
    assert result.jsonl == tmp_path / "out" / "clip.jsonl"
    assert result.frames == 8 and result.tracks is None
    assert decoded_times(result.video) == pytest.approx([t / 1000 for t in vfr_pts(8)])
    assert audio_packets(result.video) == audio_packets(src)
    with VideoReader(result.video) as r:
        assert (r.info.width, r.info.height) == (64, 48)
    rows = read_jsonl(result.jsonl)
    assert [r["frame"] for r in rows] == list(range(8))
    assert [r["time"] for r in rows] == pytest.approx([t / 1000 for t in vfr_pts(8)])
    boxes = [d for r in rows for d in r["detections"]]
    assert len(boxes) == result.detections > 0  # the tiny SSD's heads are confident
    for d in boxes:
        x, y, w, h = d["bbox"]
        assert min(x, y, w, h) >= 0 and x + w <= 64.01 and y + h <= 48.01
        assert d["score"] >= 0.3 and "track_id" not in d
        assert (d["category_id"], d["label"]) in {
            (1, "person"), (18, "dog"), (44, "bottle"), (90, "toothbrush")
        }  # fmt: skip
    # the drawn frames differ from the input where boxes were drawn
    with VideoReader(src) as r:
        inputs = [f.image.astype(int) for f in r.frames()]
    drawn = [f.astype(int) for f in decoded_frames(result.video)]
    with_boxes = [i for i, r in enumerate(rows) if r["detections"]]
    assert all(np.abs(drawn[i] - inputs[i]).max() > 100 for i in with_boxes)


def test_tracking_keeps_one_id_for_a_moving_square(tmp_path: Path) -> None:
    src = tmp_path / "square.mkv"
    frames = [_square_scene(t) for t in range(10)]
    make_video(src, w=64, h=48, n=10, audio=None, images=frames, pts=[40 * i for i in range(10)])
    # the square's score dips under the threshold in frames 4-5 (an occlusion, say); a weak
    # ghost box that never reaches the threshold sits in a corner all along
    detector = SquareDetector(scores={4: 0.2, 5: 0.2}, ghost=0.2)
    result = detect_video(detector, src, tmp_path / "out", track=True, crf=0)
    rows = read_jsonl(result.jsonl)
    assert len(rows) == 10 and all(len(r["detections"]) == 1 for r in rows)  # no ghost
    xs = [r["detections"][0]["bbox"][0] for r in rows]
    assert xs == pytest.approx([4 + 3 * t for t in range(10)], abs=1)
    assert [r["detections"][0]["score"] for r in rows][3:7] == pytest.approx([0.9, 0.2, 0.2, 0.9])
    ids = [r["detections"][0]["track_id"] for r in rows]
    # ByteTrack confirms a track on its second frame; from then on one id, the dip included
    assert ids[0] is None and ids[1] is not None and set(ids[1:]) == {ids[1]}
    assert result.tracks == 1 and result.detections == 10

    untracked = detect_video(SquareDetector(scores={4: 0.2, 5: 0.2}, ghost=0.2), src,
                             tmp_path / "plain")  # fmt: skip
    counts = [len(r["detections"]) for r in read_jsonl(untracked.jsonl)]
    assert counts == [1, 1, 1, 1, 0, 0, 1, 1, 1, 1]  # without tracking the dip is lost


def test_frame_folder_source_is_named_after_the_folder(tmp_path: Path) -> None:
    folder = tmp_path / "shots"
    folder.mkdir()
    for t in range(3):
        write_image(folder / f"{t + 1:05d}.png", _square_scene(t))
    result = detect_video(SquareDetector(), folder, tmp_path / "out", fps=10)
    assert result.video.name == "shots.mp4" and result.frames == 3
    assert decoded_times(result.video) == pytest.approx([0.0, 0.1, 0.2])
    assert [r["time"] for r in read_jsonl(result.jsonl)] == pytest.approx([0.0, 0.1, 0.2])


def test_bad_input_is_one_line_and_a_failure_leaves_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(VideoReadError, match=r"^video not found: .*missing\.mp4$"):
        detect_video(SquareDetector(), tmp_path / "missing.mp4", out)
    src = tmp_path / "clip.mp4"
    make_video(src, w=64, h=48, n=6, audio=None, images=[_square_scene(t) for t in range(6)])
    with pytest.raises(OptionError, match=r"score_threshold: must be in \[0, 1\], got 1.5"):
        detect_video(SquareDetector(), src, out, score_threshold=1.5)
    with pytest.raises(OptionError, match=r"^detector: expected a Detector, got Restorer$"):
        detect_video(Restorer.from_pretrained("identity"), src, out)

    class Failing(SquareDetector):
        def detect_batch(self, images, *a, **k):  # type: ignore[no-untyped-def, override]
            if self.calls == 3:
                raise RuntimeError("detector failed on frame 4")
            return super().detect_batch(images, *a, **k)

    with pytest.raises(RuntimeError, match="frame 4"):  # one frame per call: fails at frame 4
        detect_video(Failing(), src, out, batch_size=1)
    assert not out.exists() or list(out.iterdir()) == []
    # the reader and writer threads ended (other tests of this process may leave their own)
    assert not [t for t in threading.enumerate() if t.name.startswith("clearsight-video")]
    with pytest.raises(RuntimeError, match="frame 4"):
        detect_video(Failing(), src, out, keep_partial=True, batch_size=1)
    assert len(read_jsonl(out / "clip.jsonl")) == 3
    assert len(decoded_times(out / "clip.mp4")) == 3
