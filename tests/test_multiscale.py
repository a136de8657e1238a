"""Multi-scale test-time prediction: resize, restore, resize back, average with the ensemble."""

from __future__ import annotations

import pytest
import torch
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.engine.inference import InferenceOptions, Restorer, parse_scales
from tests.helpers import MultipleOf8Net, TinyConvNet, loaded


def _x(h: int, w: int, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.rand(1, 3, h, w, generator=g)


@pytest.mark.parametrize("ensemble", ["none", "flip"])
def test_scale_one_is_the_plain_prediction(ensemble):
    net = TinyConvNet()
    x = _x(37, 53)
    plain = Restorer(loaded(net), InferenceOptions(ensemble=ensemble)).restore(x)
    same = Restorer(loaded(net), InferenceOptions(ensemble=ensemble, scales=(1.0,))).restore(x)
    assert torch.equal(plain, same)


@pytest.mark.parametrize("h,w", [(37, 53), (64, 64), (9, 31)])
@pytest.mark.parametrize("scales", [(1.0, 0.75), (0.5,), (1.0, 1.3, 0.6)])
def test_output_size_always_equals_the_input(h, w, scales):
    r = Restorer(loaded(MultipleOf8Net()), InferenceOptions(scales=scales, ensemble="flip"))
    out = r.restore(_x(h, w))
    assert out.shape == (1, 3, h, w)


def test_scales_average_the_resized_predictions():
    net = MultipleOf8Net()  # y = x / 2: every scale predicts about the same image
    x = torch.full((1, 3, 40, 48), 0.8)
    out = Restorer(loaded(net), InferenceOptions(scales=(1.0, 0.5))).restore(x)
    assert torch.allclose(out, torch.full_like(out, 0.4), atol=1e-5)


def test_progress_counts_every_scale_and_view():
    seen = []
    r = Restorer(loaded(TinyConvNet()), InferenceOptions(scales=(1.0, 0.5), ensemble="flip"))
    r.restore(_x(20, 20), progress=lambda d, t: seen.append((d, t)))
    assert seen[-1] == (4, 4)


@pytest.mark.parametrize(
    "scales,match",
    [((), "at least one"), ((0.0,), "outside"), ((float("nan"),), "outside"), ((5.0,), "outside"),
     (("1",), "not a number"), ("1.0", "sequence")],
)  # fmt: skip
def test_bad_scales_are_a_clear_error(scales, match):
    with pytest.raises(ValueError, match=match):
        Restorer(loaded(TinyConvNet()), InferenceOptions(scales=scales))


def test_parse_scales():
    assert parse_scales("1.0, 0.75") == (1.0, 0.75)
    with pytest.raises(ValueError, match="bad scale 'x'"):
        parse_scales("1.0,x")
    with pytest.raises(ValueError, match="bad scale ''"):
        parse_scales("1.0,")


def test_cli_rejects_bad_scales_with_one_line(tmp_path):
    img = tmp_path / "a.png"
    from clearsight.io import write_image

    write_image(img, (torch.rand(3, 16, 16)).numpy().transpose(1, 2, 0))
    res = CliRunner().invoke(
        app, ["restore", str(img), "-m", "identity", "-o", str(tmp_path / "o"), "--scales", "1,0"]
    )
    assert res.exit_code == 1
    assert "--scales" in res.output and "outside" in res.output
    res = CliRunner().invoke(
        app,
        ["restore", str(img), "-m", "identity", "-o", str(tmp_path / "o"), "--scales", "1.0,0.75"],
    )
    assert res.exit_code == 0, res.output
    assert (tmp_path / "o" / "a.png").exists()


def test_eval_takes_scales_too(tmp_path):
    res = CliRunner().invoke(
        app, ["eval", "-m", "identity", "-d", str(tmp_path), "--scales", "1.0,abc"]
    )
    assert res.exit_code == 1
    assert "--scales" in res.output and "bad scale 'abc'" in res.output
