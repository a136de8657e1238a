"""Metrics: hand-computed values, agreement with scikit-image and pytorch_msssim, presets,
and the golden numbers of ../shared/data/README.md (mean of per-image values, paired by name)."""

from __future__ import annotations

import dataclasses
import math
from pathlib import Path

import numpy as np
import pytest
import pytorch_msssim
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from skimage.metrics import structural_similarity

from clearsight.errors import ClearsightError, PairingError, UnknownNameError
from clearsight.io import read_image, write_image
from clearsight.metrics import (
    MS_SSIM_WEIGHTS,
    PRESETS,
    MetricInputError,
    MetricPreset,
    ShapeMismatchError,
    get_preset,
    ms_ssim,
    netdisk_score,
    psnr,
    psnr_from_mse,
    rgb_to_y,
    ssim,
)


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    """MS-SSIM runs in torch; on a 2-core box shared with other jobs, two OpenMP threads wait
    on each other and run 3-5x slower than one. Restored afterwards."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def _y_formula(r: float, g: float, b: float) -> float:
    return 16 + (65.481 * r + 128.553 * g + 24.966 * b) / 255


def _sk_ssim(a: np.ndarray, b: np.ndarray, data_range: float = 255.0) -> float:
    return structural_similarity(
        a,
        b,
        gaussian_weights=True,
        sigma=1.5,
        use_sample_covariance=False,
        data_range=data_range,
        channel_axis=2 if a.ndim == 3 else None,
    )


def _noisy_pair(rng: np.random.Generator, shape: tuple[int, ...], noise: float = 20.0):
    """A smooth-ish image and a noisy copy, so SSIM is well inside (0, 1)."""
    a = rng.uniform(0, 255, shape)
    a = (a + np.roll(a, 1, axis=0) + np.roll(a, 1, axis=1)) / 3
    b = np.clip(a + rng.normal(0, noise, shape), 0, 255)
    return np.round(a), np.round(b)


def _nchw(a: np.ndarray, dtype: torch.dtype) -> torch.Tensor:
    t = torch.from_numpy(np.ascontiguousarray(a)).to(dtype)
    return (t[None] if t.ndim == 2 else t.permute(2, 0, 1))[None].contiguous()


# --------------------------------------------------------------------------------------- PSNR


def test_psnr_of_constant_images_is_hand_computed():
    a = np.full((8, 9, 3), 100.0)
    b = np.full((8, 9, 3), 110.0)
    assert psnr(a, b) == pytest.approx(20 * math.log10(255 / 10), abs=1e-12)
    assert psnr(a[..., 0], b[..., 0]) == pytest.approx(20 * math.log10(25.5), abs=1e-12)
    # the peak is a parameter
    assert psnr(a / 255, b / 255, data_range=1.0) == pytest.approx(20 * math.log10(25.5))


def test_psnr_is_over_all_pixels_and_channels():
    a = np.zeros((10, 10, 3))
    b = a.copy()
    b[3, 4, 1] = 255.0  # one wrong value among 300: MSE = 255^2 / 300
    assert psnr(a, b) == pytest.approx(10 * math.log10(300), abs=1e-12)


def test_psnr_of_identical_images_is_inf():
    a = np.random.default_rng(0).uniform(0, 255, (5, 7))
    assert psnr(a, a.copy()) == math.inf


def test_psnr_accepts_uint8_without_wraparound():
    a = np.zeros((4, 4), np.uint8)
    b = np.full((4, 4), 10, np.uint8)
    # uint8 subtraction 0 - 10 would wrap to 246
    assert psnr(a, b) == pytest.approx(20 * math.log10(25.5))
    assert psnr(b, a) == pytest.approx(20 * math.log10(25.5))


def test_metrics_reject_mismatched_or_bad_input():
    a = np.zeros((12, 12))
    with pytest.raises(ShapeMismatchError, match=r"\(12, 12\).*\(12, 13\)"):
        psnr(a, np.zeros((12, 13)))
    with pytest.raises(MetricInputError, match="NaN"):
        ssim(a, np.full((12, 12), np.nan))
    with pytest.raises(MetricInputError):
        psnr(np.zeros(5), np.zeros(5))


# ------------------------------------------------------------------------------------- colour


def test_y_of_white_and_black():
    img = np.array([[[255, 255, 255], [0, 0, 0]]], dtype=np.float64)
    for round_y in (False, True):
        y = rgb_to_y(img, round_y=round_y)
        assert y.dtype == np.float64 and y.shape == (1, 2)
        assert y[0, 0] == pytest.approx(235.0, abs=1e-12)
        assert y[0, 1] == 16.0


@pytest.mark.parametrize(
    "rgb", [(255, 0, 0), (0, 255, 0), (0, 0, 255), (10, 200, 30), (123, 45, 67), (1, 2, 254)]
)
def test_y_of_mixed_colours_follows_the_formula(rgb):
    img = np.array([[rgb]], dtype=np.float64)
    expected = _y_formula(*rgb)
    assert rgb_to_y(img, round_y=False)[0, 0] == pytest.approx(expected, abs=1e-12)
    assert rgb_to_y(img, round_y=True)[0, 0] == math.floor(expected + 0.5)


def test_y_rounds_exact_halves_away_from_zero_like_matlab():
    # 16 + (65.481*2 + 128.553*44 + 24.966*141) / 255 = 16 + 9307.5/255 = 52.5 exactly;
    # MATLAB's uint8 conversion gives 53 where np.rint (half to even) would give 52.
    img = np.array([[[2, 44, 141]]], dtype=np.float64)
    assert rgb_to_y(img, round_y=False)[0, 0] == 52.5
    assert rgb_to_y(img, round_y=True)[0, 0] == 53.0


def test_rgb_to_y_rejects_non_rgb():
    with pytest.raises(MetricInputError, match="HxWx3"):
        rgb_to_y(np.zeros((4, 4)), round_y=False)


def test_y_rounding_separates_y_matlab_from_y_basicsr():
    # output pure green (Y 144.553 -> 145), target green 254 (Y 144.049 -> 144)
    out = np.zeros((16, 16, 3), np.uint8)
    out[..., 1] = 255
    tgt = np.zeros((16, 16, 3), np.uint8)
    tgt[..., 1] = 254
    diff_unrounded = _y_formula(0, 255, 0) - _y_formula(0, 254, 0)  # 0.50413...
    basicsr = get_preset("y-basicsr").compute(out, tgt)["psnr"]
    matlab = get_preset("y-matlab").compute(out, tgt)["psnr"]
    assert basicsr == pytest.approx(20 * math.log10(255 / diff_unrounded), abs=1e-9)
    assert matlab == pytest.approx(20 * math.log10(255 / 1.0), abs=1e-9)
    assert basicsr - matlab > 5.9


# --------------------------------------------------------------------------------------- SSIM


@pytest.mark.parametrize(
    "shape",
    [(11, 11), (11, 40), (17, 23), (321, 481), (37, 50, 3), (481, 321, 3), (64, 48, 1)]
    + [(20, 30, 4)],
)
def test_ssim_equals_scikit_image(shape):
    rng = np.random.default_rng(sum(shape))
    a, b = _noisy_pair(rng, shape)
    ours = ssim(a, b)
    assert 0.05 < ours < 0.99
    assert ours == pytest.approx(_sk_ssim(a, b), abs=1e-8)


@settings(max_examples=30, deadline=None, database=None)
@given(
    h=st.integers(11, 40),
    w=st.integers(11, 40),
    channels=st.sampled_from([None, 1, 3]),
    noise=st.floats(0.0, 80.0),
    seed=st.integers(0, 2**32 - 1),
)
def test_ssim_equals_scikit_image_property(h, w, channels, noise, seed):
    shape = (h, w) if channels is None else (h, w, channels)
    a, b = _noisy_pair(np.random.default_rng(seed), shape, noise)
    assert ssim(a, b) == pytest.approx(_sk_ssim(a, b), abs=1e-8)


def test_ssim_equals_pytorch_msssim_with_a_float64_window():
    a, b = _noisy_pair(np.random.default_rng(1), (53, 71, 3))
    x = torch.arange(11, dtype=torch.float64) - 5
    g = torch.exp(-(x**2) / (2 * 1.5**2))
    win = (g / g.sum()).reshape(1, 1, 1, 11).repeat(3, 1, 1, 1)
    ref = pytorch_msssim.ssim(
        _nchw(a, torch.float64), _nchw(b, torch.float64), data_range=255, win=win
    )
    assert ssim(a, b) == pytest.approx(float(ref), abs=1e-10)


def test_ssim_basic_properties():
    a, b = _noisy_pair(np.random.default_rng(2), (30, 40, 3))
    assert ssim(a, a.copy()) == pytest.approx(1.0, abs=1e-12)
    assert ssim(a, b) == pytest.approx(ssim(b, a), abs=1e-12)
    assert ssim(a / 255, b / 255, data_range=1.0) == pytest.approx(ssim(a, b), abs=1e-9)
    # mean over channels
    per_channel = [ssim(a[..., c], b[..., c]) for c in range(3)]
    assert ssim(a, b) == pytest.approx(np.mean(per_channel), abs=1e-12)


def test_ssim_rejects_images_smaller_than_the_window():
    with pytest.raises(MetricInputError, match="11x11") as info:
        ssim(np.zeros((10, 30)), np.zeros((10, 30)))
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------------------------ MS-SSIM


@pytest.mark.parametrize("shape", [(161, 171, 3), (200, 240), (257, 163, 3)])
def test_ms_ssim_is_pytorch_msssim(shape):
    a, b = _noisy_pair(np.random.default_rng(3), shape, noise=30)
    ours = ms_ssim(a, b)
    ref32 = pytorch_msssim.ms_ssim(_nchw(a, torch.float32), _nchw(b, torch.float32), data_range=255)
    ref64 = pytorch_msssim.ms_ssim(_nchw(a, torch.float64), _nchw(b, torch.float64), data_range=255)
    assert 0.1 < ours < 0.99
    assert ours == pytest.approx(float(ref32), abs=1e-12)
    assert ours == pytest.approx(float(ref64), abs=2e-5)


def test_ms_ssim_uses_the_standard_weights():
    assert MS_SSIM_WEIGHTS == (0.0448, 0.2856, 0.3001, 0.2363, 0.1333)


def test_ms_ssim_of_identical_images_is_one():
    a, _ = _noisy_pair(np.random.default_rng(4), (170, 180, 3))
    assert ms_ssim(a, a.copy()) == pytest.approx(1.0, abs=1e-6)


@pytest.mark.parametrize("shape", [(160, 400, 3), (400, 160), (64, 64, 3)])
def test_ms_ssim_rejects_images_too_small_for_five_scales(shape):
    a = np.zeros(shape)
    with pytest.raises(MetricInputError, match="larger than 160") as info:
        ms_ssim(a, a)
    assert isinstance(info.value, ValueError)


# ------------------------------------------------------------------------------------ presets


def test_border_crop_hides_differences_in_the_border():
    rng = np.random.default_rng(5)
    tgt = rng.integers(0, 256, (40, 50, 3), dtype=np.uint8)
    out = tgt.copy()
    out[:4] = 0
    out[:, -4:] = 255  # a 4-pixel band differs
    for name in ("rgb", "y-matlab", "y-basicsr"):
        full = get_preset(name).compute(out, tgt)
        assert math.isfinite(full["psnr"]) and full["ssim"] < 0.99
        cropped = get_preset(name, crop_border=4).compute(out, tgt)
        assert cropped["psnr"] == math.inf and cropped["ssim"] == pytest.approx(1.0)
        almost = get_preset(name, crop_border=3).compute(out, tgt)
        assert math.isfinite(almost["psnr"])
    assert get_preset("rgb", crop_border=4).prepare(tgt).shape == (32, 42, 3)
    assert get_preset("y-matlab").with_crop(4).prepare(tgt).shape == (32, 42)


def test_border_crop_too_large_is_an_error():
    img = np.zeros((20, 30, 3), np.uint8)
    with pytest.raises(MetricInputError, match="crop of 10 px"):
        get_preset("rgb", crop_border=10).prepare(img)
    with pytest.raises(MetricInputError):
        get_preset("rgb", crop_border=-1)


def test_prepare_rounds_float_outputs_like_uint8():
    rng = np.random.default_rng(6)
    u8 = rng.integers(0, 256, (24, 31, 3), dtype=np.uint8)
    for preset in PRESETS.values():
        ref = preset.prepare(u8)
        assert ref.dtype == np.float64
        for dtype in (np.float32, np.float64):
            f = (u8 / 255.0).astype(dtype)
            np.testing.assert_array_equal(preset.prepare(f), ref)
        # off-grid floats round to the nearest level: +0.3 of a level rounds down
        np.testing.assert_array_equal(preset.prepare((u8 + 0.3) / 255.0), ref)
    # +0.7 of a level rounds up; values outside [0, 1] are clipped
    rgb = get_preset("rgb")
    np.testing.assert_array_equal(
        rgb.prepare((u8.astype(np.float64) + 0.7) / 255.0), np.minimum(u8 + 1.0, 255.0)
    )
    np.testing.assert_array_equal(rgb.prepare(np.full((2, 2, 3), -0.2)), np.zeros((2, 2, 3)))
    np.testing.assert_array_equal(rgb.prepare(np.full((2, 2, 3), 1.3)), np.full((2, 2, 3), 255.0))
    # an output in float and a target in uint8 compare as two uint8 images
    out = np.clip((u8 + rng.uniform(-0.45, 0.45, u8.shape)) / 255.0, 0, 1)
    assert rgb.compute(out, u8)["psnr"] == math.inf


def test_prepare_measures_a_float_image_as_it_would_be_saved(tmp_path: Path):
    # float32 values next to a half level, where float32 and float64 rounding disagree: the
    # preset must see the levels that write_image stores, so a saved output scores the same
    k = np.arange(256)
    edge = ((k + 0.5) / 255).astype(np.float32)
    near = np.stack([np.nextafter(edge, 0), edge, np.nextafter(edge, 1)], axis=-1)
    img = np.clip(near, 0, 1).astype(np.float32)[None]  # 1x256x3
    write_image(tmp_path / "o.png", img)
    saved = read_image(tmp_path / "o.png")
    rgb = get_preset("rgb")
    np.testing.assert_array_equal(rgb.prepare(img), rgb.prepare(saved))


def test_psnr_from_mse_is_the_formula_psnr_uses():
    rng = np.random.default_rng(8)
    a = rng.integers(0, 256, (8, 9, 3)).astype(np.float64)
    b = np.clip(a + rng.normal(0, 9, a.shape), 0, 255)
    assert psnr(a, b) == psnr_from_mse(float(np.mean((a - b) ** 2)))
    assert psnr_from_mse(100.0) == pytest.approx(10 * math.log10(255.0**2 / 100.0))
    assert psnr_from_mse(0.01, data_range=1.0) == pytest.approx(20.0)
    assert psnr_from_mse(0.0) == math.inf


def test_prepare_reduces_uint16_to_uint8():
    rng = np.random.default_rng(7)
    u8 = rng.integers(0, 256, (12, 13, 3), dtype=np.uint8)
    u16 = u8.astype(np.uint16) * 257
    for preset in PRESETS.values():
        np.testing.assert_array_equal(preset.prepare(u16), preset.prepare(u8))
    rgb = get_preset("rgb")
    # 257k + 128 -> k (128/257 < 0.5), 257k + 129 -> k + 1
    np.testing.assert_array_equal(rgb.prepare(np.full((1, 1, 3), 257 * 7 + 128, np.uint16)), 7.0)
    np.testing.assert_array_equal(rgb.prepare(np.full((1, 1, 3), 257 * 7 + 129, np.uint16)), 8.0)
    np.testing.assert_array_equal(rgb.prepare(np.full((1, 1, 3), 65535, np.uint16)), 255.0)


def test_prepare_converts_to_the_preset_space():
    u8 = np.random.default_rng(8).integers(0, 256, (15, 16, 3), dtype=np.uint8)
    f = u8.astype(np.float64)
    np.testing.assert_array_equal(get_preset("rgb").prepare(u8), f)
    np.testing.assert_array_equal(get_preset("y-basicsr").prepare(u8), rgb_to_y(f, round_y=False))
    np.testing.assert_array_equal(get_preset("y-matlab").prepare(u8), rgb_to_y(f, round_y=True))


@pytest.mark.parametrize(
    "img",
    [
        np.zeros((8, 8), np.uint8),
        np.zeros((8, 8, 4), np.uint8),
        np.zeros((8, 8, 3), np.int64),
        np.full((8, 8, 3), np.nan),
    ],
)
def test_prepare_rejects_what_it_cannot_measure(img):
    with pytest.raises(MetricInputError) as info:
        get_preset("rgb").prepare(img)
    assert isinstance(info.value, ClearsightError) and "\n" not in str(info.value)


def test_compute_returns_the_asked_metrics():
    rng = np.random.default_rng(9)
    tgt = rng.integers(0, 256, (170, 180, 3), dtype=np.uint8)
    out = np.clip(tgt + rng.normal(0, 8, tgt.shape), 0, 255).astype(np.uint8)
    preset = get_preset("y-matlab")
    res = preset.compute(out, tgt)
    assert set(res) == {"psnr", "ssim"}
    x, y = preset.prepare(out), preset.prepare(tgt)
    assert res["psnr"] == psnr(x, y) and res["ssim"] == ssim(x, y)
    res = preset.compute(out, tgt, ms_ssim=True)
    assert set(res) == {"psnr", "ssim", "ms_ssim"} and res["ms_ssim"] == ms_ssim(x, y)
    assert all(isinstance(v, float) for v in res.values())


def test_compute_names_both_shapes_on_mismatch():
    a = np.zeros((20, 30, 3), np.uint8)
    b = np.zeros((30, 20, 3), np.uint8)
    with pytest.raises(ShapeMismatchError, match=r"\(20, 30, 3\).*\(30, 20, 3\)") as info:
        get_preset("rgb").compute(a, b)
    assert isinstance(info.value, ValueError) and isinstance(info.value, PairingError)


def test_get_preset_unknown_name_lists_known_presets():
    with pytest.raises(UnknownNameError) as info:
        get_preset("y-matlb")
    msg = str(info.value)
    assert "'y-matlb'" in msg and "\n" not in msg
    for name in ("rgb", "y-basicsr", "y-matlab", "netdisk"):
        assert name in msg


def test_presets_are_frozen_and_with_crop_makes_a_new_one():
    base = get_preset("y-matlab")
    cropped = get_preset("y-matlab", crop_border=4)
    assert (base.crop_border, cropped.crop_border) == (0, 4)
    assert cropped == base.with_crop(4) and cropped.name == base.name
    assert PRESETS["y-matlab"].crop_border == 0
    with pytest.raises(dataclasses.FrozenInstanceError):
        base.crop_border = 2  # type: ignore[misc]
    with pytest.raises(MetricInputError):
        MetricPreset("x", "d", space="lab", round_y=False)  # type: ignore[arg-type]
    with pytest.raises(MetricInputError):
        MetricPreset("x", "d", space="rgb", round_y=True)


def test_preset_descriptions_state_the_convention():
    assert {"rgb", "y-basicsr", "y-matlab", "netdisk"} <= set(PRESETS)
    for name, preset in PRESETS.items():
        assert preset.name == name
        assert "\n" not in preset.summary
        assert "peak 255" in preset.description and "uint8" in preset.description
        assert "border crop 0 px" in preset.summary
        assert preset.to_dict()["crop_border"] == 0
    assert get_preset("rgb", crop_border=4).summary.endswith("border crop 4 px")
    assert "RGB" in PRESETS["rgb"].description
    assert "Y not rounded" in PRESETS["y-basicsr"].description
    assert "Y rounded to integers" in PRESETS["y-matlab"].description
    assert str(PRESETS["rgb"]) == PRESETS["rgb"].summary


def test_netdisk_score_by_hand():
    assert netdisk_score({"psnr": 30.0, "ms_ssim": 0.9}) == pytest.approx(0.6)
    assert netdisk_score({"psnr": 17.8, "ms_ssim": 0.8579}) == pytest.approx(0.51795)
    rng = np.random.default_rng(10)
    tgt = rng.integers(0, 256, (180, 190, 3), dtype=np.uint8)
    out = np.clip(tgt + rng.normal(0, 20, tgt.shape), 0, 255).astype(np.uint8)
    res = get_preset("netdisk").compute(out, tgt)  # MS-SSIM without being asked
    mse = np.mean((out.astype(np.float64) - tgt) ** 2)
    ref_psnr = 10 * math.log10(255**2 / mse)
    ref_ms = float(
        pytorch_msssim.ms_ssim(_nchw(out, torch.float32), _nchw(tgt, torch.float32), data_range=255)
    )
    assert res["psnr"] == pytest.approx(ref_psnr, abs=1e-9)
    assert res["ms_ssim"] == pytest.approx(ref_ms, abs=1e-9)
    assert res["score"] == pytest.approx(0.5 * ref_psnr / 100 + 0.5 * ref_ms, abs=1e-9)
    with pytest.raises(MetricInputError, match="160"):
        get_preset("netdisk").compute(tgt[:160], tgt[:160])


# ---------------------------------------------------------------------------------- real data


def _load_pairs(inp: Path, tgt: Path, names: list[str] | None = None):
    """(input, target) uint8 RGB pairs matched by file name."""
    inp_names = sorted(p.name for p in inp.iterdir())
    assert inp_names == sorted(p.name for p in tgt.iterdir()), "unpaired files"
    names = inp_names if names is None else names

    def load(p: Path) -> np.ndarray:
        with Image.open(p) as im:
            return np.asarray(im.convert("RGB"))

    return [(load(inp / n), load(tgt / n)) for n in names]


@pytest.fixture(scope="module")
def rain100l(shared_data: Path):
    d = shared_data / "derain" / "Rain100L"
    pairs = _load_pairs(d / "rain", d / "clean")
    assert len(pairs) == 100
    return pairs


@pytest.mark.realdata
@pytest.mark.parametrize(
    ("name", "golden_psnr", "golden_ssim"),
    [("y-matlab", 26.898, 0.8382), ("y-basicsr", 26.901, 0.8384), ("rgb", 25.521, 0.8247)],
)
def test_golden_rain100l(rain100l, name, golden_psnr, golden_ssim):
    preset = get_preset(name)
    results = [preset.compute(rain, clean) for rain, clean in rain100l]
    mean_psnr = float(np.mean([r["psnr"] for r in results]))
    mean_ssim = float(np.mean([r["ssim"] for r in results]))
    print(f"Rain100L {name}: PSNR {mean_psnr!r} SSIM {mean_ssim!r}")
    assert round(mean_psnr, 3) == golden_psnr
    assert round(mean_ssim, 4) == golden_ssim


@pytest.mark.realdata
def test_ssim_equals_scikit_image_on_rain100l(rain100l):
    for rain, clean in rain100l[:3]:
        for preset in (get_preset("rgb"), get_preset("y-matlab")):
            x, y = preset.prepare(rain), preset.prepare(clean)
            assert ssim(x, y) == pytest.approx(_sk_ssim(x, y), abs=1e-8)


def _mean_psnr(pairs, name: str) -> float:
    preset = get_preset(name)
    return float(np.mean([psnr(preset.prepare(a), preset.prepare(b)) for a, b in pairs]))


@pytest.mark.realdata
def test_golden_uhdm_700_psnr(shared_data: Path):
    d = shared_data / "moire" / "uhdm_700"
    pairs = _load_pairs(d / "moire", d / "clean")
    assert len(pairs) == 100
    rgb, y = _mean_psnr(pairs, "rgb"), _mean_psnr(pairs, "y-basicsr")
    print(f"uhdm_700: PSNR rgb {rgb!r} y-basicsr {y!r}")
    assert round(rgb, 3) == 18.440
    assert round(y, 3) == 20.397


@pytest.mark.realdata
def test_golden_tip2018_psnr(shared_data: Path):
    d = shared_data / "moire" / "tip2018"
    pairs = _load_pairs(d / "moire", d / "clean")
    assert len(pairs) == 5
    rgb, y = _mean_psnr(pairs, "rgb"), _mean_psnr(pairs, "y-basicsr")
    print(f"tip2018: PSNR rgb {rgb!r} y-basicsr {y!r}")
    assert round(rgb, 3) == 23.536
    assert round(y, 3) == 25.350


@pytest.mark.realdata
def test_golden_uhdm_700_netdisk(shared_data: Path):
    d = shared_data / "moire" / "uhdm_700"
    names = [f"{i:04d}.jpg" for i in range(80, 100)]
    pairs = _load_pairs(d / "moire", d / "clean", names)
    preset = get_preset("netdisk")
    results = [preset.compute(moire, clean) for moire, clean in pairs]
    means = {k: float(np.mean([r[k] for r in results])) for k in ("psnr", "ms_ssim", "score")}
    print(f"uhdm_700 0080-0099 netdisk: {means!r}")
    assert round(means["psnr"], 3) == 17.800
    assert round(means["ms_ssim"], 4) == 0.8579
    assert round(means["score"], 4) == 0.5180
