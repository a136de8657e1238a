"""Moiré synthesis: deterministic, same size, visibly moiréd, periodic, and aligned."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.data.pairs import find_pairs
from clearsight.data.synth_moire import MoireConfig, pair_seed, synthesize_moire
from clearsight.io import read_image, write_image
from clearsight.metrics import psnr


def _clean(h: int = 96, w: int = 128, seed: int = 0) -> np.ndarray:
    """A smooth photo-like image: colour gradients, a few soft blobs, mild texture."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w] / max(h, w)
    img = np.stack([0.3 + 0.5 * xx, 0.4 + 0.3 * yy, 0.7 - 0.4 * xx * yy], -1)
    for _ in range(4):
        cy, cx, r = rng.uniform(0, 1, 3)
        img += 0.2 * np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (0.02 + 0.05 * r))[..., None]
    img += rng.normal(0, 0.01, img.shape)
    return np.clip(np.rint(img * 255), 0, 255).astype(np.uint8)


def _peakiness(img: np.ndarray) -> float:
    """Strongest spectral peak of the high-passed, Hann-windowed image (per channel, so colour
    moiré counts) over the mean spectral power: ~15-25 for the clean images here, ~1000 with
    moiré."""
    g = img.astype(np.float32)
    hp = g - cv2.GaussianBlur(g, (0, 0), 3)
    win = np.outer(np.hanning(g.shape[0]), np.hanning(g.shape[1]))[..., None]
    power = np.abs(np.fft.fft2(hp * win, axes=(0, 1))) ** 2
    return float(power.max() / power.mean())


def _lowpass(img: np.ndarray) -> np.ndarray:
    return cv2.GaussianBlur(img.astype(np.float32).mean(2), (0, 0), 4).ravel()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_pair_is_same_size_moired_periodic_and_aligned(seed):
    clean = _clean(seed=seed)
    moire, target = synthesize_moire(clean, pair_seed(seed, "a.png", 0))
    assert moire.shape == target.shape == clean.shape
    assert moire.dtype == target.dtype == np.uint8
    assert np.array_equal(target, clean)  # default: the target is the clean image itself
    assert 15.0 < psnr(moire, target) < 30.0
    assert _peakiness(moire) > 10 * _peakiness(target)
    assert np.corrcoef(_lowpass(moire), _lowpass(target))[0, 1] > 0.95


def test_same_seed_same_pair_other_seed_other_pair():
    clean = _clean()
    a = synthesize_moire(clean, pair_seed(3, "x.png", 0))
    b = synthesize_moire(clean, pair_seed(3, "x.png", 0))
    c = synthesize_moire(clean, pair_seed(4, "x.png", 0))
    assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    assert not np.array_equal(a[0], c[0])


def test_match_tone_applies_the_capture_tone_to_the_target():
    clean = _clean()
    moire, target = synthesize_moire(clean, pair_seed(0, "a", 0), MoireConfig(match_tone=True))
    assert not np.array_equal(target, clean)
    plain_moire, _ = synthesize_moire(clean, pair_seed(0, "a", 0))
    assert np.array_equal(moire, plain_moire)  # same draws, only the target changes
    assert psnr(moire, target) > psnr(moire, clean) - 1.0


def test_bad_inputs_are_clear_errors():
    with pytest.raises(ValueError, match="uint8"):
        synthesize_moire(np.zeros((16, 16, 3), np.float32), np.random.default_rng(0))
    with pytest.raises(ValueError, match="too small"):
        synthesize_moire(np.zeros((4, 16, 3), np.uint8), np.random.default_rng(0))


def test_cli_writes_aligned_pairs_deterministically(tmp_path):
    src = tmp_path / "clean_src"
    src.mkdir()
    write_image(src / "a.png", _clean(40, 56, 0))
    write_image(src / "b.jpg", _clean(48, 40, 1))
    runner = CliRunner()
    for out in ("o1", "o2"):
        res = runner.invoke(
            app,
            ["synth", "moire", "--clean", str(src), "--out", str(tmp_path / out),
             "--per-image", "2", "--seed", "7"],
        )  # fmt: skip
        assert res.exit_code == 0, res.output
    pairs = find_pairs(tmp_path / "o1")
    assert len(pairs) == 4
    for p in pairs:
        a, b = read_image(p.input), read_image(p.target)
        assert a.shape == b.shape
        again = read_image(tmp_path / "o2" / "moire" / p.input.name)
        assert np.array_equal(a, again)
    res = runner.invoke(
        app, ["synth", "moire", "--clean", str(src), "--out", str(tmp_path / "o3"),
              "--per-image", "0"],
    )  # fmt: skip
    assert res.exit_code == 1 and "--per-image" in res.output
