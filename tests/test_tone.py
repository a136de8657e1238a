"""The oracle tone fit: removes global per-channel gain and offset, and nothing else."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from clearsight.metrics import MetricInputError, ShapeMismatchError, psnr
from clearsight.metrics.tone import mean_level_shift, tone_fitted


def _target(seed: int = 0, shape: tuple[int, ...] = (32, 40, 3)) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(40, 200, size=shape)


@settings(max_examples=25, deadline=None)
@given(
    gains=st.lists(st.floats(0.3, 2.0), min_size=3, max_size=3),
    offsets=st.lists(st.floats(-30, 30), min_size=3, max_size=3),
)
def test_a_per_channel_affine_tone_change_is_undone(gains: list[float], offsets: list[float]):
    target = _target()
    # the target is the output after a tone change, inside [0, 255] so no clipping hides it
    output = (target - np.array(offsets)) / np.array(gains)
    assert np.allclose(tone_fitted(output, target), target, atol=1e-9)


def test_structure_errors_are_not_removed():
    target = _target(1)
    noise = np.random.default_rng(2).normal(0, 10, size=target.shape)
    noisy = target + noise
    toned = 0.7 * noisy + 25.0
    fitted_psnr = psnr(tone_fitted(toned, target), target)
    # the fit undoes the tone change (plain PSNR is far lower) but not the noise: it lands
    # within a hair of the noisy image's own PSNR, never above the best affine possible
    assert psnr(toned, target) < fitted_psnr - 5
    assert fitted_psnr == pytest.approx(psnr(noisy, target), abs=0.15)


def test_channels_are_fitted_separately():
    target = _target(3)
    output = target.copy()
    output[..., 0] = target[..., 0] * 0.5  # only red is off
    fitted = tone_fitted(output, target)
    assert np.allclose(fitted, target, atol=1e-9)


def test_gray_and_flat_images():
    target = _target(4, (16, 16))
    assert np.allclose(tone_fitted(target * 0.5 + 10, target), target)
    flat = np.full((8, 8, 3), 100.0)
    # a flat output can only be moved to the target's mean
    assert np.allclose(
        tone_fitted(flat, target[:8, :8, None].repeat(3, 2)).mean(), target[:8, :8].mean()
    )


def test_result_is_clipped_to_the_data_range():
    target = np.zeros((4, 4, 3))
    target[0, 0] = 255.0
    fitted = tone_fitted(np.random.default_rng(5).uniform(0, 255, (4, 4, 3)), target)
    assert fitted.min() >= 0.0 and fitted.max() <= 255.0


def test_bad_input_is_named():
    with pytest.raises(ShapeMismatchError, match="tone_fitted"):
        tone_fitted(np.zeros((4, 4, 3)), np.zeros((4, 5, 3)))
    with pytest.raises(MetricInputError, match="data_range"):
        tone_fitted(np.zeros((4, 4)), np.zeros((4, 4)), data_range=0)


def test_mean_level_shift():
    a = _target(6)
    assert mean_level_shift(a, a + 12.5) == pytest.approx(12.5)
    assert mean_level_shift(a + 3, a) == pytest.approx(-3)
