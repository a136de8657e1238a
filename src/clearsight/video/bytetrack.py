"""ByteTrack (Zhang et al., "ByteTrack: Multi-Object Tracking by Associating Every Detection
Box", ECCV 2022) for `detect_video(track=True)`, written here rather than imported.

Why here: Roboflow's `trackers` (the maintained home of the ByteTrack that `supervision`
removed in 0.31) declares `opencv-python`, the desktop build of the `cv2` that clearsight's
`opencv-python-headless` also provides. pip installs both into one `cv2/` folder: the one
installed last wins, the desktop build needs the system's libGL, and uninstalling either
removes `cv2` for both. Every `trackers` release since 2.2 declares it, and pip has no way
to substitute one distribution for another, so `--track` would need an install step outside
`pip install clearsight`. docs/video.md has the trade-off.

The algorithm and its defaults follow `trackers` 2.6's `ByteTrackTracker` step for step
(an 8-state corner Kalman filter, two IoU associations solved by
`scipy.optimize.linear_sum_assignment`, timestamps for a variable frame rate, ids from 0),
so the ids equal that library's on the same boxes (tests/test_bytetrack.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

_MEASUREMENT_NOISE = 0.1  # R = 0.1 I: the original ByteTrack tuning
_PROCESS_NOISE = 0.01  # Q = 0.01 I for one nominal frame
_NOMINAL_STEP_SECONDS = 0.004
"""A step within 4 ms of one frame period counts as one frame (timestamps carry rounding)."""


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of every box of `a` (n, 4) with every box of `b` (m, 4), both x0, y0, x1, y1."""
    if len(a) == 0 or len(b) == 0:
        return np.zeros((len(a), len(b)), dtype=np.float64)
    area_a = (a[:, 2] - a[:, 0]) * (a[:, 3] - a[:, 1])
    area_b = (b[:, 2] - b[:, 0]) * (b[:, 3] - b[:, 1])
    top_left = np.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = np.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = np.prod(np.clip(bottom_right - top_left, 0, None), axis=2)
    union = area_a[:, None] + area_b[None, :] - inter
    return np.where(union > 0, inter / np.where(union > 0, union, 1.0), 0.0)


def _transition(step: float) -> np.ndarray:
    """Constant velocity over `step` frames: each corner moves by its velocity times step."""
    f = np.eye(8)
    f[range(4), range(4, 8)] = step
    return f


def _process_noise(step: float, rate: float) -> np.ndarray:
    """The one-frame Q near one frame, else white-noise acceleration scaled to the gap."""
    if abs(step - 1.0) <= _NOMINAL_STEP_SECONDS * rate:
        return np.eye(8) * _PROCESS_NOISE
    q = np.zeros((8, 8))
    for p in range(4):
        v = p + 4
        q[p, p] = _PROCESS_NOISE * step**4 / 4.0
        q[p, v] = q[v, p] = _PROCESS_NOISE * step**3 / 2.0
        q[v, v] = _PROCESS_NOISE * step**2
    return q


@dataclass
class _Track:
    """One object: a Kalman filter over its box corners and their velocities."""

    state: np.ndarray  # (8,): x0, y0, x1, y1 and their velocities
    covariance: np.ndarray = field(default_factory=lambda: np.eye(8))
    track_id: int = -1  # -1 until confirmed
    hits_in_a_row: int = 1  # the first box counts
    frames_missed: int = 0
    seconds_missed: float = 0.0

    @classmethod
    def start(cls, box: np.ndarray) -> _Track:
        return cls(state=np.concatenate([np.asarray(box, dtype=np.float64), np.zeros(4)]))

    @property
    def box(self) -> np.ndarray:
        return self.state[:4]

    def predict(self, step: float, rate: float, seconds: float | None) -> None:
        f = _transition(step)
        self.state = f @ self.state
        self.covariance = f @ self.covariance @ f.T + _process_noise(step, rate)
        if self.frames_missed > 0:
            self.hits_in_a_row = 0
        self.frames_missed += 1
        self.seconds_missed = self.seconds_missed + seconds if seconds is not None else 0.0

    def update(self, box: np.ndarray) -> None:
        p = self.covariance
        s = p[:4, :4] + np.eye(4) * _MEASUREMENT_NOISE
        gain = p[:, :4] @ np.linalg.inv(s)
        self.state = self.state + gain @ (np.asarray(box, dtype=np.float64) - self.state[:4])
        keep = np.eye(8)
        keep[:, :4] -= gain
        self.covariance = keep @ p @ keep.T + gain @ gain.T * _MEASUREMENT_NOISE  # Joseph form
        self.frames_missed = 0
        self.seconds_missed = 0.0
        self.hits_in_a_row += 1


def _associate(iou: np.ndarray, minimum: float) -> tuple[list[tuple[int, int]], list[int]]:
    """Optimal track-box pairs with IoU >= minimum, and the tracks left unmatched."""
    pairs: list[tuple[int, int]] = []
    if iou.size:
        from scipy.optimize import linear_sum_assignment  # here: scipy takes a while to load

        rows, cols = linear_sum_assignment(iou, maximize=True)
        pairs = [(int(r), int(c)) for r, c in zip(rows, cols, strict=True) if iou[r, c] >= minimum]
    matched = {r for r, _ in pairs}
    return pairs, [r for r in range(iou.shape[0]) if r not in matched]


class ByteTrack:
    """Online multi-object tracking over one video: `update` once per frame, in order.

    Boxes at or above `high_threshold` are matched to the tracks first; the weaker ones may
    then continue a track left unmatched (an object partly hidden), never start one. A new
    track needs a box at or above `activation_threshold` and gets its id on its
    `confirm_frames`-th consecutive frame; a lost track waits `lost_buffer` frames at 30 fps
    (scaled to `frame_rate`; in seconds when timestamps are given) for its object to return.
    """

    def __init__(
        self,
        frame_rate: float = 30.0,
        *,
        activation_threshold: float = 0.7,
        high_threshold: float = 0.6,
        minimum_iou: float = 0.1,
        lost_buffer: int = 30,
        confirm_frames: int = 2,
    ) -> None:
        if not (math.isfinite(frame_rate) and frame_rate > 0):
            raise ValueError(f"frame_rate must be positive, got {frame_rate!r}")
        self.frame_rate = float(frame_rate)
        self.activation_threshold = activation_threshold
        self.high_threshold = high_threshold
        self.minimum_iou = minimum_iou
        self.confirm_frames = confirm_frames
        self.max_frames_missed = 0 if lost_buffer == 0 else max(
            1, math.ceil(frame_rate / 30.0 * lost_buffer)
        )  # fmt: skip
        self.max_seconds_missed = lost_buffer / 30.0
        self.tracks: list[_Track] = []
        self._next_id = 0
        self._last_time: float | None = None

    def _timing(self, time: float | None) -> tuple[float, float | None, bool]:
        """(step in frames, seconds since the last frame, skip the frame)."""
        if time is None:
            self._last_time = None
            return 1.0, None, False
        if not math.isfinite(time) or (self._last_time is not None and time < self._last_time):
            return 0.0, None, True
        if self._last_time is None:
            self._last_time = time
            return 1.0, 1.0 / self.frame_rate, False
        seconds = time - self._last_time
        self._last_time = time
        return seconds * self.frame_rate, seconds, False

    def _within_budget(self, track: _Track, timed: bool) -> bool:
        if timed:
            return track.seconds_missed <= self.max_seconds_missed
        return track.frames_missed <= self.max_frames_missed

    def _confirm(self, track: _Track) -> None:
        if track.hits_in_a_row >= self.confirm_frames and track.track_id == -1:
            track.track_id = self._next_id
            self._next_id += 1

    def update(
        self, boxes: np.ndarray, scores: np.ndarray, time: float | None = None
    ) -> list[int | None]:
        """Track one frame's boxes (n, 4: x0, y0, x1, y1) and scores (n,) at `time` (seconds;
        None: one frame after the last). Returns each box's track id in input order, None
        for a box on no confirmed track."""
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 4)
        scores = np.asarray(scores, dtype=np.float64).reshape(-1)
        ids: list[int | None] = [None] * len(boxes)
        step, seconds, skip = self._timing(time)
        if skip or (not self.tracks and not len(boxes)):
            return ids
        timed = seconds is not None
        if step > 0.0:
            for track in self.tracks:
                track.predict(step, self.frame_rate, seconds)
        if timed:  # a track lost for longer than the budget is not revived with a stale id
            self.tracks = [t for t in self.tracks if self._within_budget(t, True)]

        high = np.flatnonzero(scores >= self.high_threshold)
        low = np.flatnonzero(scores < self.high_threshold)
        predicted = np.array([t.box for t in self.tracks]).reshape(-1, 4)

        pairs, unmatched = _associate(box_iou(predicted, boxes[high]), self.minimum_iou)
        for row, col in pairs:
            self._continue(self.tracks[row], boxes[high[col]])
            ids[high[col]] = self.tracks[row].track_id
        matched_high = {c for _, c in pairs}

        rest = [self.tracks[r] for r in unmatched]
        pairs, _ = _associate(box_iou(predicted[unmatched], boxes[low]), self.minimum_iou)
        for row, col in pairs:
            self._continue(rest[row], boxes[low[col]])
            ids[low[col]] = rest[row].track_id

        for col, k in enumerate(high):
            if col not in matched_high and scores[k] >= self.activation_threshold:
                self.tracks.append(_Track.start(boxes[k]))

        self.tracks = [
            t
            for t in self.tracks
            if self._within_budget(t, timed)
            and (t.track_id != -1 or t.hits_in_a_row >= self.confirm_frames or not t.frames_missed)
        ]
        return [None if i is None or i < 0 else i for i in ids]

    def _continue(self, track: _Track, box: np.ndarray) -> None:
        track.update(box)
        self._confirm(track)
