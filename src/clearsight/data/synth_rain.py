"""Synthetic rain pairs: streak layers plus, for heavy rain, veiling haze.

The model is the one the Rain100L/Rain100H generators and the RESCAN paper use:
a rainy image is the clean background with one or more additive streak layers composited
on top, and heavy rain also scatters light (a veil that grows with distance). Per image:

1. **Direction.** One dominant falling angle; every layer jitters it a little, so streaks
   vary in direction as they do in real rain (the RESCAN notes insist on this).
2. **Streak layers.** Sparse random drops (density, brightness variation), widened by a small
   Gaussian (width), smeared along the layer's angle by a line kernel (length: motion blur),
   normalised so the brightest streaks reach the layer's brightness. Light rain draws 1-2
   layers of many dim, short-to-medium, 1-2 pixel wide streaks; heavy rain 3-4 longer,
   wider, brighter ones.
3. **Composition.** Light rain is added (`clip(B + R)`), as in Rain100L, whose rain layer is
   grey whatever the background; heavy rain is screen-blended, `1 - (1 - B)(1 - R)`, which
   brightens dark areas more than bright ones and never overflows.
4. **Haze** (heavy): `I = J t + A (1 - t)` with `t = exp(-beta d)`; the depth proxy `d` grows
   towards the top of the frame with smooth low-frequency variation, `A` a light grey veil.

The presets are calibrated against the real benchmarks: `light` gives a rainy-vs-clean RGB
PSNR near Rain100L's 25.5 dB, `heavy` near Rain100H's ~12 dB (see tests/test_synth_rain.py).
`light` also matches the structure of Rain100L's rain layer, not just its PSNR: the share of
pixels the rain brightens by more than 10 levels (14%), the 90th/99th percentiles of the
brightening (18/64 levels) and the streaks' width and length (autocorrelation of the streak
mask across and along them); `python benchmarks/rain_realism.py` prints these side by side.
`mixed` draws light for three pairs in four and heavy for the rest. Every random number comes
from one generator seeded by (seed, file name, copy index): the same seed gives the same pair,
whatever the file order or the number of worker processes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
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
from clearsight.metrics.image_metrics import psnr_from_mse

PRESETS = ("light", "heavy", "mixed")
MIXED_LIGHT_FRACTION = 3 / 4
BLENDS = ("add", "screen")


@dataclass(frozen=True)
class RainConfig:
    """Ranges the random draws come from (uniform)."""

    layers: tuple[int, int]
    """Number of streak layers, inclusive."""
    density: tuple[float, float]
    """Fraction of pixels that start a drop, per layer."""
    length: tuple[float, float]
    """Streak length in pixels (motion blur)."""
    width: tuple[float, float]
    """Gaussian sigma of a drop before smearing, in pixels."""
    brightness: tuple[float, float]
    """Peak streak intensity (0..1) per layer."""
    angle_range: float = 30.0
    """The dominant angle is drawn within +-angle_range degrees of vertical."""
    jitter: float = 6.0
    """Per-layer angle jitter, degrees."""
    haze: tuple[float, float] = (0.0, 0.0)
    """Haze strength beta; 0 turns haze off."""
    veil: tuple[float, float] = (0.6, 0.85)
    """Atmospheric light A."""
    blend: str = "screen"
    """How streaks meet the background: "add" (clip(B + R)) or "screen"."""

    def __post_init__(self) -> None:
        if self.blend not in BLENDS:
            raise ValueError(f"blend must be one of {', '.join(BLENDS)}, got {self.blend!r}")


LIGHT = RainConfig(
    layers=(1, 2),
    density=(0.0007, 0.002),
    length=(15.0, 50.0),
    width=(0.45, 1.0),
    brightness=(0.15, 0.5),
    angle_range=20.0,
    blend="add",
)
HEAVY = RainConfig(
    layers=(3, 4),
    density=(0.002, 0.005),
    length=(20.0, 45.0),
    width=(0.8, 1.6),
    brightness=(0.6, 0.95),
    haze=(0.3, 0.8),
)


def _u(rng: np.random.Generator, lo_hi: tuple[float, float]) -> float:
    return float(rng.uniform(*lo_hi))


def _line_kernel(length: float, angle_deg: float) -> np.ndarray:
    """A normalised anti-aliased line of `length` pixels at `angle_deg` from vertical."""
    size = int(np.ceil(length)) | 1
    k = np.zeros((size, size), np.float32)
    c = size // 2
    a = np.deg2rad(angle_deg)
    dx, dy = np.sin(a) * (length - 1) / 2, np.cos(a) * (length - 1) / 2
    shift = 4  # sub-pixel end points for an anti-aliased line
    p0 = (int(round((c - dx) * 16)), int(round((c - dy) * 16)))
    p1 = (int(round((c + dx) * 16)), int(round((c + dy) * 16)))
    cv2.line(k, p0, p1, 1.0, 1, cv2.LINE_AA, shift)
    return k / max(float(k.sum()), 1e-6)


def streak_layer(
    h: int, w: int, rng: np.random.Generator, *, density: float, length: float, width: float,
    brightness: float, angle: float, periodic: bool = False,
) -> np.ndarray:  # fmt: skip
    """One HxW float32 streak layer in [0, 1].

    `periodic` makes it tile seamlessly (a streak leaving one side re-enters on the opposite
    one), so moving rain can wrap around (`clearsight.data.synth_rain_video`).
    """
    drops = (rng.random((h, w), dtype=np.float32) < density).astype(np.float32)
    drops *= rng.uniform(0.4, 1.0, size=(h, w)).astype(np.float32)
    # OpenCV's filters have no wrap-around border: pad by the blur and smear reach instead
    m = int(np.ceil(length + 4 * width)) + 2 if periodic else 0
    if m:
        drops = np.pad(drops, m, mode="wrap")
    drops = cv2.GaussianBlur(drops, (0, 0), width)
    layer = cv2.filter2D(drops, -1, _line_kernel(length, angle), borderType=cv2.BORDER_REFLECT)
    if m:
        layer = np.ascontiguousarray(layer[m:-m, m:-m])
    nz = layer[layer > 1e-4]
    if nz.size == 0:
        return np.zeros((h, w), np.float32)
    peak = float(np.percentile(nz, 99.5))
    return np.clip(layer * (brightness / max(peak, 1e-6)), 0.0, 1.0)


def _depth_proxy(h: int, w: int, rng: np.random.Generator) -> np.ndarray:
    """Distance proxy in [0, 1]: far at the top of the frame, with smooth random variation."""
    y = np.linspace(1.0, 0.0, h, dtype=np.float32)[:, None] * np.ones((1, w), np.float32)
    coarse = rng.random((4, 4)).astype(np.float32)
    wobble = cv2.resize(coarse, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(0.75 * y + 0.25 * wobble, 0.0, 1.0)


def _blend(base: np.ndarray, streaks: np.ndarray, mode: str) -> np.ndarray:
    """Streaks over a base (0-1 floats): added, or screen-blended `1 - (1 - B)(1 - R)`."""
    if mode == "add":
        return base + streaks
    return 1.0 - (1.0 - base) * (1.0 - streaks)


def synthesize_rain(clean: np.ndarray, rng: np.random.Generator, cfg: RainConfig) -> np.ndarray:
    """The rainy HxWx3 uint8 RGB image for the uint8 RGB `clean` (which is not modified)."""
    h, w = check_clean(clean, "rain")
    img = clean.astype(np.float32) / 255.0
    dominant = float(rng.uniform(-cfg.angle_range, cfg.angle_range))
    n_layers = int(rng.integers(cfg.layers[0], cfg.layers[1] + 1))
    rain = np.zeros((h, w), np.float32)
    for _ in range(n_layers):
        layer = streak_layer(
            h, w, rng,
            density=_u(rng, cfg.density), length=_u(rng, cfg.length), width=_u(rng, cfg.width),
            brightness=_u(rng, cfg.brightness),
            angle=dominant + float(rng.uniform(-cfg.jitter, cfg.jitter)),
        )  # fmt: skip
        rain = _blend(rain, layer, cfg.blend)
    out = _blend(img, rain[..., None], cfg.blend)
    if cfg.haze[1] > 0:
        beta, veil = _u(rng, cfg.haze), _u(rng, cfg.veil)
        t = np.exp(-beta * _depth_proxy(h, w, rng))[..., None]
        out = out * t + veil * (1.0 - t)
    return np.clip(np.rint(out * 255.0), 0, 255).astype(np.uint8)


def preset_config(preset: str, rng: np.random.Generator) -> RainConfig:
    """The config for `preset`; `mixed` draws light or heavy from `rng`."""
    if preset == "light":
        return LIGHT
    if preset == "heavy":
        return HEAVY
    if preset == "mixed":
        return LIGHT if rng.random() < MIXED_LIGHT_FRACTION else HEAVY
    raise ValueError(f"unknown rain preset {preset!r}; known: {', '.join(PRESETS)}")


def rain_pair(clean: np.ndarray, seed: int, name: str, k: int, preset: str) -> np.ndarray:
    """The rainy version `k` of the clean image called `name` (deterministic)."""
    rng = pair_seed(seed, name, k)
    return synthesize_rain(clean, rng, preset_config(preset, rng))


def rain_layer_stats(rainy: np.ndarray, clean: np.ndarray) -> dict[str, float]:
    """How a rain layer looks, measured from an aligned uint8 RGB pair (real or synthetic).

    PSNR alone cannot tell a few bright hairlines from many dim, wide streaks; these figures
    can, and they are what the `light` preset was tuned to match on Rain100L:
    `psnr` (RGB, dB); `covered` (share of pixels brightened by more than 10 levels);
    `p90`/`p99` (percentiles of the brightening, levels); `across1`/`across2` (autocorrelation
    of the streak mask 1 and 2 pixels sideways: width); `along4`/`along8` (4 and 8 pixels
    down: length); `grey` (mean spread between channels where it rains; ~0 for added rain).
    """
    d = (rainy.astype(np.float32) - clean.astype(np.float32)) / 255.0
    g = d.mean(axis=2)
    mask = g > 10.0 / 255.0
    m = mask.astype(np.float32) - float(mask.mean())
    var = max(float((m * m).mean()), 1e-12)

    def corr(dy: int, dx: int) -> float:
        return float((m[: m.shape[0] - dy, : m.shape[1] - dx] * m[dy:, dx:]).mean()) / var

    p90, p99 = np.percentile(g * 255.0, [90, 99])
    return {
        "psnr": psnr_from_mse(max(float(np.mean(d**2)), 1e-12), data_range=1.0),
        "covered": float(mask.mean()),
        "p90": float(p90),
        "p99": float(p99),
        "across1": corr(0, 1),
        "across2": corr(0, 2),
        "along4": corr(4, 0),
        "along8": corr(8, 0),
        "grey": float((d.max(axis=2) - d.min(axis=2))[mask].mean()) * 255.0 if mask.any() else 0.0,
    }


def _one_file(
    args: tuple[Path, Path, int, int, str, int | None],
) -> list[Path]:
    from clearsight.io import write_image

    f, out, per_image, seed, preset, max_pixels = args
    img = read_as_uint8(f, max_pixels)
    written = []
    for k in range(per_image):
        name = f"{f.stem}_{k}.png"
        write_image(out / "rain" / name, rain_pair(img, seed, f.name, k, preset))
        write_image(out / "clean" / name, img)
        written.append(out / "rain" / name)
    return written


def synth_rain_folder(
    clean_dir: Path,
    out: Path,
    *,
    preset: str = "mixed",
    per_image: int = 1,
    seed: int = 0,
    workers: int = 0,
    max_pixels: int | None = None,
    on_pair: Callable[[Path], None] | None = None,
) -> SynthReport:
    """Write `per_image` pairs per clean image: OUT/rain/NAME_k.png and OUT/clean/NAME_k.png.

    The clean side is the decoded clean image written losslessly (PNG), so the pair is
    aligned pixel for pixel. `workers` > 0 spreads files over processes (same output).
    """
    from clearsight.errors import ClearsightError

    if preset not in PRESETS:
        raise ClearsightError(f"--preset must be one of {', '.join(PRESETS)}, got {preset!r}")
    if workers < 0:
        raise ClearsightError(f"--workers must be >= 0, got {workers}")
    files = synth_sources(clean_dir, out, per_image, "rain")
    jobs = [(f, out, per_image, seed, preset, max_pixels) for f in files]
    n = 0
    with contextlib.ExitStack() as stack:
        pool = stack.enter_context(ProcessPoolExecutor(workers)) if workers else None
        for written in pool.map(_one_file, jobs) if pool else map(_one_file, jobs):
            for p in written:
                n += 1
                if on_pair is not None:
                    on_pair(p)
    return SynthReport(pairs=n, out=out)
