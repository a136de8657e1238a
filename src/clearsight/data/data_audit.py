"""Content checks on decoded pairs, for `clearsight check-data`.

Beyond names and sizes, paired sets carry bugs that only the pixels show:

- misaligned pairs: the input matches its target clearly better when shifted by a few
  pixels (searched within +-`SHIFT_RADIUS` on a centre crop of the grey images, so it stays
  fast on any size);
- duplicate targets: one clean image stored under several names (legitimate when an image
  has several degraded renderings, as Rain100L's 003 and 004, but worth knowing: a train/test
  split by name can leak it);
- extreme pairs: input identical to target, or a PSNR below a floor (wrong file paired);
- colour-order suspicion: the pair matches far better with R and B swapped (a BGR file).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from clearsight.data.pairs import ImagePair
from clearsight.io import to_uint8
from clearsight.metrics.image_metrics import psnr_from_mse

SHIFT_RADIUS = 4
SHIFT_CROP = 160
SHIFT_GAIN_DB = 1.5
"""A shift is reported when it raises the crop's PSNR by at least this much."""
SWAP_GAIN_DB = 3.0
"""A pair is colour-suspect when swapping R and B raises its PSNR by at least this much."""
DEFAULT_PSNR_FLOOR = 10.0


@dataclass(frozen=True)
class Misaligned:
    pair: ImagePair
    shift: tuple[int, int]
    """(dy, dx): input[y + dy, x + dx] matches target[y, x] best."""
    psnr_at_zero: float
    psnr_shifted: float


@dataclass
class ContentReport:
    checked: int = 0
    psnr_floor: float = DEFAULT_PSNR_FLOOR
    misaligned: list[Misaligned] = field(default_factory=list)
    duplicate_targets: list[list[Path]] = field(default_factory=list)
    identical: list[ImagePair] = field(default_factory=list)
    low_psnr: list[tuple[ImagePair, float]] = field(default_factory=list)
    colour_swapped: list[tuple[ImagePair, float, float]] = field(default_factory=list)

    def problems(self) -> list[str]:
        out = [
            f"misaligned: {m.pair.input} vs {m.pair.target}: shifting the input by "
            f"(dy={m.shift[0]}, dx={m.shift[1]}) px raises PSNR {m.psnr_at_zero:.2f} -> "
            f"{m.psnr_shifted:.2f} dB"
            for m in self.misaligned
        ]
        out += [f"identical pair: {p.input} equals {p.target}" for p in self.identical]
        out += [
            f"extreme pair: {p.input} vs {p.target}: PSNR {v:.2f} dB is below the floor of "
            f"{self.psnr_floor:g} dB (wrong target?)"
            for p, v in self.low_psnr
        ]
        out += [
            f"colour order: {p.input} vs {p.target}: PSNR {a:.2f} dB, {b:.2f} dB with R and B "
            "swapped (one of them is BGR?)"
            for p, a, b in self.colour_swapped
        ]
        return out

    def warnings(self) -> list[str]:
        out = []
        for group in self.duplicate_targets:
            same_file = len({hashlib.sha1(p.read_bytes()).digest() for p in group}) == 1
            how = "identical files" if same_file else "same pixels, different files"
            out.append(
                f"duplicate targets: {', '.join(str(p) for p in group)} hold the same image "
                f"({how}; fine for several renderings of one scene, but keep them on one side "
                "of a train/test split)"
            )
        return out

    def summary(self) -> str:
        return (
            f"{self.checked} pairs: {len(self.misaligned)} misaligned, "
            f"{len(self.duplicate_targets)} duplicate target group(s), "
            f"{len(self.identical) + len(self.low_psnr)} extreme, "
            f"{len(self.colour_swapped)} colour-swapped"
        )


def _mse(a: np.ndarray, b: np.ndarray) -> float:
    d = a.astype(np.float32) - b.astype(np.float32)
    return float(np.mean(d * d))


def _grey(img: np.ndarray) -> np.ndarray:
    return img.astype(np.float32) @ np.array([0.299, 0.587, 0.114], dtype=np.float32)


def best_shift(
    inp: np.ndarray, tgt: np.ndarray, radius: int = SHIFT_RADIUS, crop: int = SHIFT_CROP
) -> tuple[tuple[int, int], float, float]:
    """((dy, dx), PSNR at (0, 0), PSNR at the best shift) on a centre crop of the grey images."""
    h, w = tgt.shape[:2]
    ch, cw = min(crop, h - 2 * radius), min(crop, w - 2 * radius)
    if ch < 8 or cw < 8:
        return (0, 0), math.nan, math.nan
    gi, gt = _grey(inp), _grey(tgt)
    y0, x0 = (h - ch) // 2, (w - cw) // 2
    ref = gt[y0 : y0 + ch, x0 : x0 + cw]
    best, best_mse, zero_mse = (0, 0), math.inf, math.inf
    for dy in range(-radius, radius + 1):
        for dx in range(-radius, radius + 1):
            cand = gi[y0 + dy : y0 + dy + ch, x0 + dx : x0 + dx + cw]
            mse = float(np.mean((cand - ref) ** 2))
            if (dy, dx) == (0, 0):
                zero_mse = mse
            if mse < best_mse - 1e-9 or (mse <= best_mse + 1e-9 and (dy, dx) == (0, 0)):
                best, best_mse = (dy, dx), mse
    return best, psnr_from_mse(zero_mse), psnr_from_mse(best_mse)


def _digest(img: np.ndarray) -> str:
    h = hashlib.sha1(str(img.shape).encode())
    h.update(np.ascontiguousarray(img).tobytes())
    return h.hexdigest()


def audit_pairs(
    pairs: Sequence[ImagePair],
    arrays: dict[Path, np.ndarray],
    *,
    psnr_floor: float = DEFAULT_PSNR_FLOOR,
) -> ContentReport:
    """Content checks on `pairs` whose decoded images are in `arrays` (others are skipped)."""
    report = ContentReport(psnr_floor=psnr_floor)
    by_digest: dict[str, list[Path]] = {}
    for tgt_path in dict.fromkeys(p.target for p in pairs):
        if tgt_path in arrays:
            by_digest.setdefault(_digest(arrays[tgt_path]), []).append(tgt_path)
    report.duplicate_targets = [sorted(g) for g in by_digest.values() if len(g) > 1]
    for pair in pairs:
        if pair.input not in arrays or pair.target not in arrays:
            continue
        inp, tgt = to_uint8(arrays[pair.input]), to_uint8(arrays[pair.target])
        if inp.shape != tgt.shape:
            continue
        report.checked += 1
        if np.array_equal(inp, tgt):
            report.identical.append(pair)
            continue
        psnr = psnr_from_mse(_mse(inp, tgt))
        if psnr < psnr_floor:
            report.low_psnr.append((pair, psnr))
        swapped = psnr_from_mse(_mse(inp[..., ::-1], tgt))
        if swapped - psnr >= SWAP_GAIN_DB:
            report.colour_swapped.append((pair, psnr, swapped))
        shift, at_zero, shifted = best_shift(inp, tgt)
        if shift != (0, 0) and shifted - at_zero >= SHIFT_GAIN_DB:
            report.misaligned.append(Misaligned(pair, shift, at_zero, shifted))
    return report
