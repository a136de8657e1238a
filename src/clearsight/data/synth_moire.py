"""Synthetic moiré pairs: a screen-camera simulation (in the spirit of LCDMoiré / TIP2018).

For each clean RGB image:

1. **Display.** Every pixel becomes a 3x3 block of vertical R, G, B sub-pixel stripes (scaled
   by 3, so the mean light is unchanged), then a slight optical blur in display space.
2. **Camera geometry.** The camera frame sees the display through a random homography (a view
   slightly wider than the screen, jittered corners: perspective, rotation and a pitch that
   beats against the sub-pixel grid) and a barrel lens distortion.
3. **Sensor.** The camera samples that view at its own pixel grid (aliasing: the moiré), keeps
   one colour per pixel through an RGGB colour-filter array, adds read noise, and OpenCV
   demosaics it back to RGB; then a small camera blur.
4. **Alignment.** The camera image is warped back through the inverse lens and homography onto
   the clean image's pixel grid, so the pair is aligned pixel for pixel and of the same size.
5. **Tone.** A random global tone change (gamma, per-channel gains, contrast, offset), as real
   captures differ in tone from their source.

The clean target is the clean image itself (`match_tone=False`, the default, like real
demoiré data, where the model must also undo the tone change); with `match_tone=True` the
same tone change is applied to the target, so the pair differs only by moiré, blur and noise.
Everything is drawn from one `numpy.random.Generator`: the same seed gives the same pair.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from clearsight.data.synth_common import (
    SynthReport,
    check_clean,
    pair_seed,
    read_as_uint8,
    synth_sources,
)
from clearsight.io import to_uint8

__all__ = ["MoireConfig", "SynthReport", "pair_seed", "synth_moire_folder", "synthesize_moire"]

SUBPIXELS = 3
_BAYER_RGGB = getattr(cv2, "COLOR_BayerRGGB2RGB", None)
if _BAYER_RGGB is None:  # OpenCV 4 names the RGGB pattern "BG" (it counts from the 2nd row)
    _BAYER_RGGB = cv2.COLOR_BayerBG2RGB


@dataclass(frozen=True)
class MoireConfig:
    """Ranges the random draws come from (uniform unless said otherwise)."""

    margin: tuple[float, float] = (0.03, 0.12)
    """How much wider than the screen the camera sees, per side (sets the beat frequency)."""
    corner_jitter: float = 0.03
    """Perspective: corner displacement as a fraction of the image size."""
    rotation_deg: float = 4.0
    barrel: tuple[float, float] = (0.0, 0.08)
    """Radial coefficient k: ideal = distorted * (1 + k r^2), r = 1 at the half-diagonal."""
    display_blur: tuple[float, float] = (0.8, 1.1)
    """Optical blur sigma in display sub-pixels before the camera samples."""
    camera_blur: tuple[float, float] = (0.0, 0.6)
    """Blur sigma in camera pixels after demosaicing."""
    noise: tuple[float, float] = (1.0, 4.0)
    """Read-noise sigma on the mosaic, in 8-bit levels."""
    gamma: tuple[float, float] = (0.8, 1.25)
    gain: tuple[float, float] = (0.85, 1.15)
    contrast: tuple[float, float] = (0.8, 1.1)
    offset: tuple[float, float] = (-0.05, 0.05)
    match_tone: bool = False


def _u(rng: np.random.Generator, lo_hi: tuple[float, float]) -> float:
    return float(rng.uniform(lo_hi[0], lo_hi[1]))


def _display(clean: np.ndarray, sigma: float) -> np.ndarray:
    """HxWx3 float in [0,1] -> (3H)x(3W)x3 sub-pixel stripes (mean preserved), blurred."""
    h, w, _ = clean.shape
    disp = np.zeros((h * SUBPIXELS, w * SUBPIXELS, 3), np.float32)
    up = np.repeat(clean, SUBPIXELS, axis=0)  # rows: full-height stripes
    for c in range(3):
        disp[:, c::SUBPIXELS, c] = up[:, :, c] * SUBPIXELS
    if sigma > 0:
        disp = cv2.GaussianBlur(disp, (0, 0), sigma)
    return disp


def _homography(h: int, w: int, cfg: MoireConfig, rng: np.random.Generator) -> np.ndarray:
    """Camera pixel coordinates (undistorted) -> display sub-pixel coordinates, drawn from
    `cfg`'s ranges."""
    m = _u(rng, cfg.margin)
    a = float(rng.uniform(-cfg.rotation_deg, cfg.rotation_deg))
    jitter = rng.uniform(-1, 1, size=(4, 2)) * cfg.corner_jitter
    return homography(h, w, m, a, jitter)


def homography(
    h: int,
    w: int,
    margin: float,
    angle_deg: float,
    jitter: np.ndarray,
    shift: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray:
    """The camera's view of an HxW image's display: camera pixel coordinates (undistorted)
    -> display sub-pixel coordinates. The view is `margin` wider than the screen per side,
    rotated by `angle_deg`, its corners moved by `jitter` (4x2, fractions of the display's
    sides: perspective) and the whole by `shift` (x, y display sub-pixels)."""
    dh, dw = h * SUBPIXELS, w * SUBPIXELS
    cx, cy = (dw - 1) / 2, (dh - 1) / 2
    hx, hy = dw / 2 * (1 + 2 * margin), dh / 2 * (1 + 2 * margin)
    corners = np.array([[-hx, -hy], [hx, -hy], [hx, hy], [-hx, hy]], np.float64)
    a = np.deg2rad(angle_deg)
    rot = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    corners = corners @ rot.T
    corners += np.asarray(jitter, np.float64) * np.array([dw, dh])
    corners += np.array([cx + shift[0], cy + shift[1]])
    src = np.array([[0, 0], [w - 1, 0], [w - 1, h - 1], [0, h - 1]], np.float64)
    return cv2.getPerspectiveTransform(src.astype(np.float32), corners.astype(np.float32))


def _apply_h(hm: np.ndarray, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    d = hm[2, 0] * x + hm[2, 1] * y + hm[2, 2]
    return (hm[0, 0] * x + hm[0, 1] * y + hm[0, 2]) / d, (
        hm[1, 0] * x + hm[1, 1] * y + hm[1, 2]
    ) / d


def _lens(h: int, w: int, k: float) -> tuple[Callable, Callable]:
    """Barrel distortion as (distorted -> ideal, ideal -> distorted) on pixel coordinates."""
    cx, cy = (w - 1) / 2, (h - 1) / 2
    r0 = np.hypot(cx, cy)

    def to_ideal(u: np.ndarray, v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        qx, qy = (u - cx) / r0, (v - cy) / r0
        f = 1 + k * (qx * qx + qy * qy)
        return cx + qx * f * r0, cy + qy * f * r0

    def to_distorted(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        px, py = (x - cx) / r0, (y - cy) / r0
        qx, qy = px.copy(), py.copy()
        for _ in range(20):  # fixed point of q = p / (1 + k |q|^2): converges for small k
            f = 1 + k * (qx * qx + qy * qy)
            qx, qy = px / f, py / f
        return cx + qx * r0, cy + qy * r0

    return to_ideal, to_distorted


def _tone(img: np.ndarray, params: tuple[float, np.ndarray, float, float]) -> np.ndarray:
    gamma, gains, contrast, offset = params
    out = np.clip(img, 0, 1) ** gamma * gains
    out = (out - 0.5) * contrast + 0.5 + offset
    return np.clip(out, 0, 1)


def synthesize_moire(
    clean: np.ndarray, rng: np.random.Generator, cfg: MoireConfig | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(moiré, target): two HxWx3 uint8 RGB images aligned with the uint8 RGB `clean`."""
    cfg = cfg or MoireConfig()
    h, w = check_clean(clean, "moiré")
    src = clean.astype(np.float32) / 255.0
    # draw every random number up front, in a fixed order
    hm = _homography(h, w, cfg, rng)
    k = _u(rng, cfg.barrel)
    s_disp, s_cam, s_noise = _u(rng, cfg.display_blur), _u(rng, cfg.camera_blur), _u(rng, cfg.noise)
    tone = (_u(rng, cfg.gamma), rng.uniform(*cfg.gain, size=3), _u(rng, cfg.contrast),
            _u(rng, cfg.offset))  # fmt: skip
    noise = rng.standard_normal((h, w)).astype(np.float32) * (s_noise / 255.0)

    moire = capture(src, hm, k, (s_disp, s_cam), noise, tone)
    target = _tone(src, tone) if cfg.match_tone else src
    return to_uint8(moire), to_uint8(target)


def capture(
    src: np.ndarray,
    hm: np.ndarray,
    k: float,
    blurs: tuple[float, float],
    noise: np.ndarray,
    tone: tuple[float, np.ndarray, float, float],
) -> np.ndarray:
    """The screen capture of the HxWx3 float image `src` (steps 1-5 above) through the
    homography `hm` and barrel `k`, with (display, camera) blur sigmas, the HxW read `noise`
    (in [0, 1] units) and the tone change: HxWx3 float in [0, 1], aligned with `src`."""
    h, w = src.shape[:2]
    s_disp, s_cam = blurs
    disp = _display(src, s_disp)
    to_ideal, to_distorted = _lens(h, w, k)
    # camera image: each camera pixel samples the display at H(lens(u, v))
    v, u = np.mgrid[0:h, 0:w].astype(np.float64)
    dx, dy = _apply_h(hm, *to_ideal(u, v))
    cam = cv2.remap(
        disp, dx.astype(np.float32), dy.astype(np.float32), cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_CONSTANT, borderValue=(0, 0, 0),
    )  # fmt: skip
    # RGGB colour-filter array, read noise, 8-bit raw, OpenCV demosaicing
    mosaic = np.empty((h, w), np.float32)
    mosaic[0::2, 0::2] = cam[0::2, 0::2, 0]
    mosaic[0::2, 1::2] = cam[0::2, 1::2, 1]
    mosaic[1::2, 0::2] = cam[1::2, 0::2, 1]
    mosaic[1::2, 1::2] = cam[1::2, 1::2, 2]
    raw = np.clip(np.rint((mosaic + noise) * 255.0), 0, 255).astype(np.uint8)
    rgb = cv2.cvtColor(raw, _BAYER_RGGB).astype(np.float32) / 255.0
    if s_cam > 0.05:
        rgb = cv2.GaussianBlur(rgb, (0, 0), s_cam)
    # back onto the clean grid: clean pixel (x, y) is display block centre (3x + 1, 3y + 1)
    ideal_x, ideal_y = _apply_h(np.linalg.inv(hm), u * SUBPIXELS + 1.0, v * SUBPIXELS + 1.0)
    cu, cv_ = to_distorted(ideal_x, ideal_y)
    aligned = cv2.remap(
        rgb, cu.astype(np.float32), cv_.astype(np.float32), cv2.INTER_LINEAR,
        borderMode=cv2.BORDER_REFLECT,
    )  # fmt: skip
    return _tone(aligned, tone)


def synth_moire_folder(
    clean_dir: Path,
    out: Path,
    *,
    per_image: int = 1,
    seed: int = 0,
    cfg: MoireConfig | None = None,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Write `per_image` synthetic pairs per clean image: OUT/moire/NAME_k.png + OUT/clean/."""
    from clearsight.io import write_image

    files = synth_sources(clean_dir, out, per_image, "moire")
    n = 0
    for f in files:
        img = read_as_uint8(f, max_pixels)
        for k in range(per_image):
            moire, target = synthesize_moire(img, pair_seed(seed, f.name, k), cfg)
            name = f"{f.stem}_{k}.png"
            write_image(out / "moire" / name, moire)
            write_image(out / "clean" / name, target)
            n += 1
            if on_pair is not None:
                on_pair(out / "moire" / name)
    return SynthReport(pairs=n, out=out)
