"""Synthetic moiré videos: the image moiré model (`clearsight.data.synth_moire`) with a moving
camera.

Moiré in a video of a screen is not fresh every frame: it is the beat between the screen's
sub-pixel grid and the camera's pixels, so it drifts and turns as the camera's view of the
screen changes, and it does so smoothly because a hand or a tripod head moves smoothly. So
the camera's geometry (how much wider than the screen it sees, its rotation, the perspective
of its four corners, and a sideways shift) is drawn once per clip as the image synthesiser
draws it, then moves along a smooth path: each parameter adds a sum of two sinusoids with
their own periods and phases (`CameraMotion`), so consecutive frames see nearly the same
geometry and their moiré moves coherently. Whatever belongs to the camera (the lens's barrel,
the display and camera blur, the read-noise level, the capture's tone change) is drawn once
per clip; the read noise itself is new in every frame, as a sensor's is.

`clearsight.video.synth_moire.synth_moire_video` runs this over a video file or a folder of
frames (the video readers live above `data/`, docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from clearsight.data.synth_common import check_clip_frame
from clearsight.data.synth_moire import MoireConfig, _tone, _u, capture, homography
from clearsight.errors import OptionError
from clearsight.io import to_uint8


@dataclass(frozen=True)
class CameraMotion:
    """How far and how fast the camera's geometry wanders (each parameter: the peak of each
    of its two sinusoids; periods in frames, drawn uniformly from `period`)."""

    margin: float = 0.004
    """The view's extra width per side (the image default draws it from 0.03-0.12)."""
    angle_deg: float = 0.4
    jitter: float = 0.003
    """Each corner's perspective offset, as a fraction of the display's sides."""
    shift: float = 1.5
    """The view's sideways shift, in display sub-pixels (a third of a screen pixel each)."""
    period: tuple[float, float] = (40.0, 160.0)

    def __post_init__(self) -> None:
        for name in ("margin", "angle_deg", "jitter", "shift"):
            value = getattr(self, name)
            if not value >= 0.0:
                raise OptionError(f"motion {name}", f"must be >= 0, got {value!r}")
        lo, hi = self.period
        if not 2.0 <= lo <= hi:
            raise OptionError("motion period", f"must be 2 <= low <= high, got {self.period}")


N_PATHS = 1 + 1 + 8 + 2  # margin, angle, the 4 corners' (x, y) jitter, the (x, y) shift


class CameraPath:
    """The camera's geometry at every frame: base values plus smooth, bounded wandering."""

    def __init__(
        self, base: tuple[float, float, np.ndarray], motion: CameraMotion, rng: np.random.Generator
    ) -> None:
        self.margin, self.angle, self.jitter = base
        self.motion = motion
        self.periods = rng.uniform(*motion.period, size=(N_PATHS, 2))
        self.phases = rng.uniform(0.0, 2.0 * np.pi, size=(N_PATHS, 2))
        self.amplitude = np.array(
            [motion.margin, motion.angle_deg] + [motion.jitter] * 8 + [motion.shift] * 2
        )

    def offsets(self, t: float) -> np.ndarray:
        """The N_PATHS parameter offsets at frame `t`: each in [-2, 2] x its amplitude."""
        waves = np.sin(2.0 * np.pi * t / self.periods + self.phases).sum(axis=1)
        return self.amplitude * waves

    def homography(self, t: float, h: int, w: int) -> np.ndarray:
        """Frame `t`'s camera -> display homography for HxW frames (`synth_moire.homography`)."""
        d = self.offsets(t)
        margin = max(self.margin + float(d[0]), 0.0)
        jitter = self.jitter + d[2:10].reshape(4, 2)
        return homography(h, w, margin, self.angle + float(d[1]), jitter, (d[10], d[11]))


def moire_clip(
    frames: Iterable[np.ndarray],
    seed: int,
    cfg: MoireConfig | None = None,
    motion: CameraMotion | None = None,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(moiré, target) for each HxWx3 uint8 RGB frame, in order (the frames are not modified).

    Everything random is drawn from `np.random.default_rng(seed)`: the clip's camera, lens,
    blur, noise level, tone and camera path when the first frame arrives (in the order the
    image synthesiser draws them), then each frame's read noise: the same seed gives the same
    clip. The target is the frame itself (with `cfg.match_tone`, the frame with the capture's
    tone change).
    """
    cfg = cfg or MoireConfig()
    motion = motion or CameraMotion()
    rng = np.random.default_rng(seed)
    size: tuple[int, int] | None = None
    path: CameraPath | None = None
    for t, frame in enumerate(frames):
        h, w = check_clip_frame(frame, t, size, "moiré")
        if size is None:
            size = (h, w)
            base = (
                _u(rng, cfg.margin),
                float(rng.uniform(-cfg.rotation_deg, cfg.rotation_deg)),
                rng.uniform(-1, 1, size=(4, 2)) * cfg.corner_jitter,
            )
            k = _u(rng, cfg.barrel)
            blurs = (_u(rng, cfg.display_blur), _u(rng, cfg.camera_blur))
            s_noise = _u(rng, cfg.noise)
            tone = (_u(rng, cfg.gamma), rng.uniform(*cfg.gain, size=3), _u(rng, cfg.contrast),
                    _u(rng, cfg.offset))  # fmt: skip
            path = CameraPath(base, motion, rng)
        assert path is not None
        src = frame.astype(np.float32) / 255.0
        noise = rng.standard_normal((h, w)).astype(np.float32) * (s_noise / 255.0)
        moire = capture(src, path.homography(t, h, w), k, blurs, noise, tone)
        target = _tone(src, tone) if cfg.match_tone else src
        yield to_uint8(moire), to_uint8(target)
