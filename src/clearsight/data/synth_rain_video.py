"""Synthetic rainy videos: the image rain model (`clearsight.data.synth_rain`) set in motion.

Rain in a video is not fresh noise every frame: a streak is a drop falling along its own
line. So each streak layer (direction, length, density, width, brightness drawn once per
clip from the preset's ranges, as for an image) is drawn once, larger than the frame and
seamlessly tiling (`streak_layer(periodic=True)`), and each frame shows a window of it that
moves along the layer's streak direction at the layer's own speed, wrapping around. Layers
with longer streaks (nearer, or faster drops: longer motion blur) move faster. The
composition (added or screen-blended streaks, and the static haze of heavy rain) is the image
synthesiser's, so a frame of a clip looks like an image of `synth rain` with the same preset.

`clearsight.video.synth_rain.synth_rain_video` runs this over a video file or a folder of
frames (the video readers live above `data/`, docs/architecture.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from clearsight.data.synth_common import check_clip_frame
from clearsight.data.synth_rain import (
    PRESETS,
    RainConfig,
    _blend,
    _depth_proxy,
    _u,
    preset_config,
    streak_layer,
)
from clearsight.errors import OptionError

SPEED_PER_LENGTH = (0.6, 1.2)
"""A layer's speed in pixels per frame, as a multiple of its streak length (the streak is the
drop's motion blur during the exposure, which is a fraction of the frame interval)."""
CANVAS_SCALE = 2
"""The layer is drawn this many times the frame's sides, so a streak wrapping around does not
come back into view for a while."""


@dataclass(frozen=True)
class MovingLayer:
    """One streak layer of a clip: a tiling HbxWb field and its velocity (pixels per frame)."""

    field: np.ndarray
    velocity: tuple[float, float]
    """(down, right) displacement per frame, along the layer's streaks."""

    def offset(self, t: int) -> tuple[int, int]:
        """Where frame `t`'s content has moved to, in whole pixels (rounded, not accumulated,
        so the rain never drifts off its line)."""
        return (int(round(t * self.velocity[0])), int(round(t * self.velocity[1])))

    def at(self, t: int, h: int, w: int) -> np.ndarray:
        """The HxW window frame `t` shows: the field shifted by `offset(t)`, wrapping around."""
        dy, dx = self.offset(t)
        hb, wb = self.field.shape
        rows = (np.arange(h) - dy) % hb
        cols = (np.arange(w) - dx) % wb
        return self.field[np.ix_(rows, cols)]


def clip_layers(h: int, w: int, rng: np.random.Generator, cfg: RainConfig) -> list[MovingLayer]:
    """The streak layers of a clip with HxW frames, drawn once from `cfg`'s ranges."""
    hb, wb = CANVAS_SCALE * h, CANVAS_SCALE * w
    dominant = float(rng.uniform(-cfg.angle_range, cfg.angle_range))
    n_layers = int(rng.integers(cfg.layers[0], cfg.layers[1] + 1))
    layers = []
    for _ in range(n_layers):
        length = _u(rng, cfg.length)
        angle = dominant + float(rng.uniform(-cfg.jitter, cfg.jitter))
        field = streak_layer(
            hb, wb, rng,
            density=_u(rng, cfg.density), length=length, width=_u(rng, cfg.width),
            brightness=_u(rng, cfg.brightness), angle=angle, periodic=True,
        )  # fmt: skip
        speed = length * _u(rng, SPEED_PER_LENGTH)
        a = np.deg2rad(angle)  # from vertical, as `streak_layer` draws it: falling down its line
        layers.append(MovingLayer(field, (speed * float(np.cos(a)), speed * float(np.sin(a)))))
    return layers


def rainy_clip(
    frames: Iterable[np.ndarray], seed: int, preset: str | RainConfig = "light"
) -> Iterator[np.ndarray]:
    """The rainy version of each HxWx3 uint8 RGB frame, in order (the frames are not modified).

    Everything random is drawn once, from `np.random.default_rng(seed)`, when the first frame
    arrives: the same seed gives the same rain. `preset` is a preset name (`mixed` draws light
    or heavy once for the whole clip) or a `RainConfig`.
    """
    rng = np.random.default_rng(seed)
    if isinstance(preset, RainConfig):
        cfg = preset
    elif preset in PRESETS:
        cfg = preset_config(preset, rng)
    else:
        raise OptionError("preset", f"must be one of {', '.join(PRESETS)}, got {preset!r}")
    size: tuple[int, int] | None = None
    layers: list[MovingLayer] = []
    haze: tuple[np.ndarray, float] | None = None
    for t, frame in enumerate(frames):
        h, w = check_clip_frame(frame, t, size, "rain")
        if size is None:
            size = (h, w)
            layers = clip_layers(h, w, rng, cfg)
            if cfg.haze[1] > 0:
                beta, veil = _u(rng, cfg.haze), _u(rng, cfg.veil)
                haze = (np.exp(-beta * _depth_proxy(h, w, rng))[..., None], veil)
        rain = np.zeros((h, w), np.float32)
        for layer in layers:
            rain = _blend(rain, layer.at(t, h, w), cfg.blend)
        out = _blend(frame.astype(np.float32) / 255.0, rain[..., None], cfg.blend)
        if haze is not None:
            trans, veil = haze
            out = out * trans + veil * (1.0 - trans)
        yield np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)
