"""Inference engine: same size out, exact tiling, padding, self-ensemble."""

from __future__ import annotations

import pytest
import torch

from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.preprocess import PreprocessSpec
from clearsight.tiling import tiled_apply
from tests.helpers import GlobalMeanNet, MultipleOf8Net, TinyConvNet, loaded


def _x(h: int, w: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 3, h, w, generator=g)


@pytest.mark.parametrize("h,w", [(321, 481), (64, 64), (17, 130)])
@pytest.mark.parametrize("tile", [32, 50, 100])
def test_generic_tiling_equals_untiled_when_halo_covers_receptive_field(h, w, tile):
    net = TinyConvNet()
    x = _x(h, w)
    with torch.no_grad():
        ref = net.restore(x)
        out = tiled_apply(net.restore, x, tile=tile, halo=net.receptive_radius)
    assert out.shape == ref.shape
    assert (out - ref).abs().max().item() < 1e-5


def test_blending_still_exact_when_halo_minus_blend_covers_receptive_field():
    net = TinyConvNet()
    x = _x(97, 131)
    with torch.no_grad():
        ref = net.restore(x)
        out = tiled_apply(net.restore, x, tile=40, halo=6 + 8, blend=8)
    assert (out - ref).abs().max().item() < 1e-5


def test_too_small_halo_is_not_exact():
    """The equality above is not vacuous: a halo short of the receptive field breaks it."""
    net = TinyConvNet()
    x = _x(97, 131)
    with torch.no_grad():
        ref = net.restore(x)
        out = tiled_apply(net.restore, x, tile=40, halo=2)
    assert (out - ref).abs().max().item() > 1e-4


def test_tiling_progress_reports_every_tile():
    calls = []
    tiled_apply(
        lambda t: t, _x(100, 100), tile=40, halo=0, progress=lambda d, t: calls.append((d, t))
    )
    assert calls == [(i, 9) for i in range(1, 10)]


@pytest.mark.parametrize("h,w", [(321, 481), (33, 17)])
def test_restorer_keeps_size_and_pads_to_multiple(h, w):
    r = Restorer(loaded(MultipleOf8Net()), InferenceOptions(tile=0))
    x = _x(h, w)
    y = r.restore(x)
    assert y.shape == x.shape
    assert torch.allclose(y, x * 0.5, atol=1e-6)


def test_restorer_tiles_above_pixel_budget_and_matches_untiled():
    net = TinyConvNet()
    x = _x(150, 170)
    untiled = Restorer(loaded(net), InferenceOptions(tile=0)).restore(x)
    tiled = Restorer(loaded(net), InferenceOptions(max_untiled_pixels=64 * 64)).restore(x)
    calls = []
    Restorer(loaded(net), InferenceOptions(tile=64)).restore(x, lambda d, t: calls.append(t))
    assert calls and calls[-1] == 9  # 150x170 in 64-pixel tiles: 3 x 3
    assert (tiled - untiled).abs().max().item() < 1e-5


def test_global_model_gets_blended_tiles_without_visible_seams():
    x = _x(128, 128)
    ref = Restorer(loaded(GlobalMeanNet()), InferenceOptions(tile=0)).restore(x)
    out = Restorer(loaded(GlobalMeanNet()), InferenceOptions(tile=48)).restore(x)
    assert out.shape == ref.shape
    # per-tile means differ from the global one, so it is approximate, but never wild
    assert (out - ref).abs().max().item() < 0.1


def test_ensemble_of_equivariant_model_is_the_model_and_of_others_is_not():
    x = _x(40, 56)
    for tta in ("flip", "x8"):
        # a pointwise-plus-global-mean model commutes with flips and rotations
        eq = Restorer(loaded(GlobalMeanNet()), InferenceOptions(ensemble=tta)).restore(x)
        assert (eq - Restorer(loaded(GlobalMeanNet())).restore(x)).abs().max().item() < 1e-6
        # a generic conv net does not, so the ensemble changes its output
        net = TinyConvNet()
        ens = Restorer(loaded(net), InferenceOptions(ensemble=tta)).restore(x)
        assert ens.shape == x.shape
        assert (ens - Restorer(loaded(net)).restore(x)).abs().max().item() > 1e-4


def test_x8_ensemble_averages_the_eight_views():
    class Asym(torch.nn.Module):
        def restore(self, x):  # depends on orientation: adds a horizontal ramp
            ramp = torch.linspace(0, 1, x.shape[-1]).view(1, 1, 1, -1)
            return x * 0 + ramp

    x = _x(16, 16)
    out = Restorer(loaded(Asym()), InferenceOptions(ensemble="x8")).restore(x)
    # the dihedral average of a ramp is the same ramp in every direction: constant 0.5 mean
    views = []
    for k in range(8):
        t = x.flip(-1) if k >= 4 else x
        t = torch.rot90(t, k % 4, dims=(-2, -1))
        y = torch.linspace(0, 1, t.shape[-1]).view(1, 1, 1, -1).expand_as(t)
        y = torch.rot90(y, -(k % 4), dims=(-2, -1))
        views.append(y.flip(-1) if k >= 4 else y)
    expected = torch.stack(views).mean(0)
    assert torch.allclose(out, expected.clamp(0, 1), atol=1e-6)
    assert abs(out.mean().item() - 0.5) < 1e-5


def test_preprocess_spec_is_applied_and_inverted():
    seen = {}

    class Spy(torch.nn.Module):
        def restore(self, x):
            seen["x"] = x.clone()
            return x

    spec = PreprocessSpec(
        color_order="BGR", value_range=(0.0, 255.0), mean=(127.5,) * 3, std=(127.5,) * 3
    )
    x = _x(8, 8)
    y = Restorer(loaded(Spy(), spec)).restore(x)
    expected_in = (x.flip(1) * 255 - 127.5) / 127.5
    assert torch.allclose(seen["x"], expected_in, atol=1e-5)
    assert torch.allclose(y, x, atol=1e-5)


def test_unknown_ensemble_is_rejected():
    with pytest.raises(ValueError, match="unknown ensemble"):
        Restorer(loaded(TinyConvNet()), InferenceOptions(ensemble="x4"))  # type: ignore[arg-type]


def test_channels_last_models_restore_the_same_values() -> None:
    """MBCNN asks for NHWC weights on CPU (faster convolutions): same output, default layout."""
    import warnings

    from clearsight.zoo import resolve_model

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = resolve_model("mbcnn-light")
        ref_model = resolve_model("mbcnn-light").model.eval()
    x = torch.rand(1, 3, 40, 56, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        ref = ref_model.restore(x)
    restorer = Restorer(plain, InferenceOptions(tile=0))
    conv = next(m for m in restorer.model.modules() if isinstance(m, torch.nn.Conv2d))
    assert conv.weight.is_contiguous(memory_format=torch.channels_last)
    out = restorer.restore(x)
    assert out.is_contiguous() and torch.allclose(out, ref.clamp(0, 1), atol=1e-5)
