"""`--importance energy`: channels ranked by the error their removal causes on calibration
images, their means folded into the next layers (docs/compress.md)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn

from tests.optional import need

need("torch_pruning")

from clearsight.compress.prune import prune_model  # noqa: E402
from clearsight.compress.prune_energy import collect_stats  # noqa: E402
from clearsight.errors import OptionError  # noqa: E402
from clearsight.models.contract import RestorationModel  # noqa: E402

CONST = (1, 5)
"""Channels of the first layer that are constant on every image (zero weights, bias > 0)."""


class _Net(RestorationModel):
    """3x3 conv -> ReLU -> 1x1 conv -> ReLU -> 1x1 conv: the consumers of both prunable
    groups are 1x1, so a constant channel is constant at the border too."""

    output_kind = "image"

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Conv2d(3, 8, 3, padding=1)
        self.b = nn.Conv2d(8, 8, 1)
        self.c = nn.Conv2d(8, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))

    def restore(self, x: torch.Tensor, **kwargs: object) -> torch.Tensor:
        return self(x)

    def prune_protected(self) -> list[nn.Module]:
        return [self.c]


def _net() -> _Net:
    torch.manual_seed(0)
    net = _Net().eval()
    with torch.no_grad():
        for m in (net.a, net.b, net.c):
            m.weight.normal_(0.0, 0.5)
            m.bias.normal_(0.0, 0.1)
        for k in CONST:  # tiny weights, so an l1 ranking removes them first
            net.a.weight[k] = 0.0
            net.a.bias[k] = 0.7 + 0.1 * k
        # b's channels all vary: its smallest-variance channels go, with some error
    return net


def _images(n: int = 4) -> list[torch.Tensor]:
    gen = torch.Generator().manual_seed(3)
    return [torch.rand(1, 3, 24, 20, generator=gen) for _ in range(n)]


def _diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a - b).abs().max() / b.abs().max())


def test_stats_are_the_consumers_input_mean_and_variance():
    net = _net()
    xs = _images()
    stats = collect_stats(net, xs)
    h = torch.cat([torch.relu(net.a(x)) for x in xs]).detach().double()
    mean, var = stats[net.b]
    torch.testing.assert_close(mean, h.mean(dim=(0, 2, 3)))
    torch.testing.assert_close(var, h.var(dim=(0, 2, 3), unbiased=False), rtol=1e-6, atol=1e-9)
    assert float(var[list(CONST)].max()) < 1e-20  # the constant channels


def test_constant_channels_go_first_and_their_means_are_kept():
    """At 2 of 8 channels per group the constant channels of `a` are exactly the ones removed,
    and folding their means into `b` keeps the output; l1 removes the same channels (their
    weights are zero) but loses the constant, so its output moves."""
    xs = _images()
    x = torch.rand(1, 3, 30, 26, generator=torch.Generator().manual_seed(9))
    want = _net()(x).detach()

    energy = _net()
    prune_model(energy, ratio=0.2, importance="energy", calibration=xs)
    assert energy.a.out_channels < 8
    kept_bias = energy.a.bias.detach()
    assert not any(torch.isclose(kept_bias, torch.tensor(0.7 + 0.1 * k)).any() for k in CONST)

    l1 = _net()
    prune_model(l1, ratio=0.2, importance="l1")
    assert l1.a.out_channels == energy.a.out_channels

    with torch.no_grad():
        e_err, l_err = _diff(energy(x), want), _diff(l1(x), want)
    # b lost varying channels too (both rankings), so neither is exact; the constants'
    # loss is what separates them
    assert e_err < 0.5 * l_err, (e_err, l_err)


def test_removing_only_constant_channels_is_exact():
    """Protect b as well: only `a`'s group is pruned, and energy removes its two constant
    channels, compensated exactly."""
    xs = _images()
    x = torch.rand(1, 3, 30, 26, generator=torch.Generator().manual_seed(9))
    net = _net()
    want = net(x).detach()
    net.prune_protected = lambda: [net.b, net.c]  # type: ignore[method-assign]
    prune_model(net, ratio=0.2, importance="energy", calibration=xs)
    assert net.a.out_channels == 6
    with torch.no_grad():
        assert _diff(net(x), want) < 1e-5


def test_energy_needs_calibration_and_the_cli_says_so(tmp_path):
    with pytest.raises(OptionError, match="calibration"):
        prune_model(_net(), ratio=0.2, importance="energy")
    with pytest.raises(OptionError, match="only with it"):  # l1 would ignore the images
        prune_model(_net(), ratio=0.2, importance="l1", calibration=[torch.rand(1, 3, 16, 16)])
    from typer.testing import CliRunner

    from clearsight.cli import app

    base = ["compress", "prune", "rescan", "--ratio", "0.2", "-o", str(tmp_path / "o")]
    for extra in (["--importance", "energy"], ["--calibration", str(tmp_path)]):
        r = CliRunner().invoke(app, base + extra)
        assert r.exit_code != 0 and "--calibration" in r.output, extra


def test_cli_prunes_a_detector_on_a_folder_of_images(tmp_path):
    """End to end on the tiny SSD: calibrated on two images, saved, reloaded."""
    from typer.testing import CliRunner

    from clearsight.artifact import load_artifact, save_artifact
    from clearsight.cli import app
    from tests.helpers import tiny_ssd

    lm = tiny_ssd()
    src = tmp_path / "ssd"
    save_artifact(lm.model, src, lm.config)
    imgs = tmp_path / "imgs"
    imgs.mkdir()
    rng = np.random.default_rng(0)
    for i in range(2):
        Image.fromarray(rng.integers(0, 255, (40, 50, 3), dtype=np.uint8)).save(imgs / f"{i}.png")
    out = tmp_path / "pruned"
    r = CliRunner().invoke(
        app,
        [
            "compress",
            "prune",
            str(src),
            "--ratio",
            "0.1",
            "--importance",
            "energy",
            "--calibration",
            str(imgs),
            "-o",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "energy" in r.output
    loaded = load_artifact(out)
    assert sum(p.numel() for p in loaded.model.parameters()) > 0
