"""ByteTrack written here (video/bytetrack.py): the ids on a scripted scene are those that
Roboflow's `trackers` 2.6.1 `ByteTrackTracker` gave on the same boxes (recorded once with
that library and written below), with timestamps and without."""

from __future__ import annotations

import numpy as np
import pytest

from clearsight.video.bytetrack import ByteTrack, box_iou


def _scene(f: int) -> tuple[np.ndarray, np.ndarray]:
    """Frame f of 30: A moves right, its score dips under 0.5 in frames 8-10; B moves left
    and down and is missed in frames 18-19; C is a static weak box (0.4) that never starts
    a track; D appears in frame 12 and is missed in frames 20-27."""
    boxes, scores = [], []

    def add(x: float, y: float, w: float, h: float, score: float) -> None:
        boxes.append([x, y, x + w, y + h])
        scores.append(score)

    add(10 + 5 * f, 20, 30, 30, 0.2 if 8 <= f <= 10 else 0.9)
    if not 18 <= f <= 19:
        add(200 - 4 * f, 25 + f, 40, 40, 0.8)
    add(300, 200, 20, 20, 0.4)
    if f >= 12 and not 20 <= f <= 27:
        add(50 + 3 * f, 150, 25, 35, 0.7)
    return np.array(boxes).reshape(-1, 4), np.array(scores)


def _times() -> list[float]:
    """25 fps with one gap of three frame periods after frame 14."""
    t, out = 0.0, []
    for f in range(30):
        out.append(round(t, 6))
        t += 0.12 if f == 14 else 0.04
    return out


def _run(tracker: ByteTrack, timed: bool) -> list[list[int | None]]:
    return [tracker.update(*_scene(f), t if timed else None) for f, t in enumerate(_times())]


_ = None
# trackers 2.6.1, ByteTrackTracker(frame_rate=25, track_activation_threshold=0.5,
# high_conf_det_threshold=0.5), default buffer: the same with and without timestamps
DEFAULT_BUFFER = (
    [[_, _, _]] + [[0, 1, _]] * 11 + [[0, 1, _, _]] + [[0, 1, _, 2]] * 5 + [[0, _, 2]] * 2
    + [[0, 1, _]] * 8 + [[0, 1, _, 2]] * 2
)  # fmt: skip
# the same with lost_track_buffer=3 (0.1 s at 25 fps): the 0.12 s gap loses every track
# when timed; frame by frame, D is lost for longer than 3 frames and comes back as a new id
SHORT_BUFFER_TIMED = (
    [[0, 1, _, _], [0, 1, _, 2], [0, 1, _, 2], [_, _, _, _]]
    + [[3, 4, _, 5]] * 2
    + [[3, _, 5]] * 2
    + [[3, _, _]]
    + [[3, 6, _]] * 7
    + [[3, 6, _, _], [3, 6, _, 7]]
)
SHORT_BUFFER_FRAMES = (
    [[0, 1, _, _]] + [[0, 1, _, 2]] * 5 + [[0, _, 2]] * 2 + [[0, 1, _]] * 8
    + [[0, 1, _, _], [0, 1, _, 3]]
)  # fmt: skip


@pytest.mark.parametrize("timed", [True, False])
def test_ids_equal_the_trackers_librarys_on_a_scripted_scene(timed: bool) -> None:
    tracker = ByteTrack(25.0, activation_threshold=0.5, high_threshold=0.5)
    assert _run(tracker, timed) == DEFAULT_BUFFER


@pytest.mark.parametrize("timed", [True, False])
def test_a_lost_track_past_its_buffer_comes_back_with_a_new_id(timed: bool) -> None:
    tracker = ByteTrack(25.0, activation_threshold=0.5, high_threshold=0.5, lost_buffer=3)
    expected = SHORT_BUFFER_TIMED if timed else SHORT_BUFFER_FRAMES
    assert _run(tracker, timed)[12:] == expected


def test_a_weak_box_continues_a_track_but_never_starts_one() -> None:
    tracker = ByteTrack(25.0, activation_threshold=0.5, high_threshold=0.5)
    weak = np.array([[0.0, 0.0, 10.0, 10.0]])
    assert [tracker.update(weak, np.array([0.4]), 0.04 * i) for i in range(5)] == [[None]] * 5
    assert tracker.tracks == []


def test_a_frame_earlier_than_the_last_is_skipped() -> None:
    tracker = ByteTrack(25.0)
    box, score = np.array([[0.0, 0.0, 10.0, 10.0]]), np.array([0.9])
    assert tracker.update(box, score, 1.0) == [None]
    assert tracker.update(box, score, 0.5) == [None]  # skipped: the track is not confirmed
    assert tracker.update(box, score, 1.04) == [0]


def test_box_iou_and_bad_rate() -> None:
    a = np.array([[0.0, 0.0, 10.0, 10.0], [0.0, 0.0, 0.0, 0.0]])
    b = np.array([[5.0, 5.0, 15.0, 15.0], [0.0, 0.0, 10.0, 10.0], [20.0, 20.0, 30.0, 30.0]])
    assert box_iou(a, b) == pytest.approx(np.array([[25 / 175, 1.0, 0.0], [0.0, 0.0, 0.0]]))
    assert box_iou(a, b[:0]).shape == (2, 0)
    with pytest.raises(ValueError, match="frame_rate must be positive"):
        ByteTrack(0.0)
