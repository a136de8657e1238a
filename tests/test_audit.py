"""`audit`: each check caught by a deliberately broken small model; RESCAN passes them all."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

from clearsight.artifact import ModelConfig, make_config, save_artifact
from clearsight.cli import app
from clearsight.model_audit import audit, audit_model
from clearsight.models.registry import build_model
from clearsight.preprocess import PreprocessSpec


def cfg(preprocess: PreprocessSpec | None = None, param_count: int = 0) -> ModelConfig:
    return ModelConfig(
        architecture="test",
        arch_args={},
        task="any",
        preprocess=preprocess or PreprocessSpec(),
        metric_preset="rgb",
        param_count=param_count,
    )


class Good(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.bn = nn.BatchNorm2d(4)
        self.out = nn.Conv2d(4, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(torch.relu(self.bn(self.conv(x))))


class OverwritesBuffer(Good):
    """The MBCNN port's bug: a fixed kernel times learnable weights stored back on self."""

    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("kernel", torch.ones(3, 1, 1, 1))
        self.w = nn.Parameter(torch.full((3, 1, 1, 1), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.kernel = self.kernel * self.w  # BUG: should be a local
        return super().forward(F.conv2d(x, self.kernel, groups=3))


class ReplacesParameter(Good):
    """`self.k = nn.Parameter(self.k * self.w)`: a new leaf each call, w cut off."""

    def __init__(self) -> None:
        super().__init__()
        self.k = nn.Parameter(torch.ones(3, 1, 1, 1))
        self.w = nn.Parameter(torch.full((3, 1, 1, 1), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.k = nn.Parameter(self.k * self.w)  # BUG
        return super().forward(F.conv2d(x, self.k, groups=3))


class AssignsData(Good):
    """`self.k.data = ...` in forward: the parameter silently drifts every call."""

    def __init__(self) -> None:
        super().__init__()
        self.k = nn.Parameter(torch.ones(3, 1, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.k.data = self.k.data * 0.9  # BUG
        return super().forward(F.conv2d(x, self.k, groups=3))


class SharedBlock(Good):
    """The same block object stored under two attribute names."""

    def __init__(self) -> None:
        super().__init__()
        self.block = nn.Conv2d(3, 3, 3, padding=1)
        self.block2 = self.block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.block2(self.block(x)))


class ReplacedBlock(Good):
    """A second block assigned to one name silently replaces the first (a published bug)."""

    def __init__(self) -> None:
        super().__init__()
        self.global_block = nn.Conv2d(3, 3, 3, padding=1)
        self.global_block = nn.Conv2d(3, 3, 1)  # BUG: meant a second name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(self.global_block(x))


class UnusedLayer(Good):
    def __init__(self) -> None:
        super().__init__()
        self.extra = nn.Conv2d(3, 3, 3, padding=1)


class FourChannels(nn.Module):
    pad_multiple = 8

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # a conv that wants 4 channels, fed the spec's 3 (a model that makes 4 channels out
        # of 3 first, like MBCNN's pixel unshuffle, is consistent: test_hardening.py)
        return self.conv(x)


def run(cls: type[nn.Module], config: ModelConfig | None = None) -> dict[str, tuple[bool, str]]:
    report = audit_model(cls, config=config or cfg(), size=16)
    return {c.name: (c.passed, c.details) for c in report.checks}


def test_good_model_passes_everything_and_bn_stats_may_change() -> None:
    r = run(Good)
    assert all(ok for ok, _ in r.values()), r
    assert "normalisation statistics" in r["forward purity"][1]


def test_overwritten_buffer_fails_purity_and_two_steps() -> None:
    r = run(OverwritesBuffer)
    assert not r["forward purity"][0] and "kernel" in r["forward purity"][1]
    ok, details = r["two optimizer steps"]
    assert not ok and "step 2 failed" in details and "backward" in details
    assert r["gradient flow"][0]  # one step alone looks fine: that is why the bug survived


def test_replaced_parameter_fails_purity_gradients_and_two_steps() -> None:
    r = run(ReplacesParameter)
    assert not r["forward purity"][0] and "replaced by a new tensor: k" in r["forward purity"][1]
    assert not r["gradient flow"][0] and "no gradient: w" in r["gradient flow"][1]
    ok, details = r["two optimizer steps"]
    assert not ok and "optimizer no longer updates them): k" in details


def test_data_assignment_fails_purity() -> None:
    r = run(AssignsData)
    assert not r["forward purity"][0] and "values changed: k" in r["forward purity"][1]


def test_block_under_two_names_is_named() -> None:
    ok, details = run(SharedBlock)["structure"]
    assert not ok and "one module registered as block and block2" in details


def test_block_assigned_twice_is_caught_while_building() -> None:
    intended = sum(p.numel() for p in Good().parameters()) + 3 * 3 * 9 + 3 + 3 * 3 + 3
    ok, details = run(ReplacedBlock, cfg(param_count=intended))["structure"]
    assert not ok
    assert "assigned twice while building" in details and "ReplacedBlock.global_block" in details
    assert f"config says {intended:,} parameters" in details


def test_unused_layer_is_named() -> None:
    r = run(UnusedLayer)
    ok, details = r["structure"]
    assert not ok and "modules never called in forward: extra" in details
    assert not r["gradient flow"][0] and "extra.weight" in r["gradient flow"][1]


def test_preprocessing_inconsistent_with_model() -> None:
    ok, details = run(FourChannels, cfg(PreprocessSpec(pad_multiple=3)))["preprocessing"]
    assert not ok
    assert "pads to multiples of 8, the spec to 3" in details
    assert "first conv conv takes 4 channels" in details
    ok, details = run(Good, cfg(PreprocessSpec(std=(1.0, 0.0, 1.0))))["preprocessing"]
    assert not ok and "std" in details
    assert not audit_model(Good, config=None, size=16).by_name("preprocessing").passed


def test_rescan_passes_every_check() -> None:
    report = audit("rescan", size=16)
    assert report.ok, report.checks
    assert "matches the official figure" in report.by_name("structure").details


def test_param_count_against_artifact_config(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = build_model("rescan", channels=4, depth=3, stages=2)
    art = save_artifact(
        model,
        tmp_path / "m",
        make_config(model, "rescan", {"channels": 4, "depth": 3, "stages": 2}),
    )
    first = audit(str(art), size=16)
    assert first.ok, [c for c in first.checks if not c.passed]
    cfg_path = art / "config.json"
    cfg_path.write_text(cfg_path.read_text().replace('"param_count": ', '"param_count": 1'))
    details = audit(str(art), size=16).by_name("structure").details
    assert "config says 1" in details


def test_audit_cli_exit_codes(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, ["audit", "identity"])
    assert res.exit_code == 0 and "PASS" in res.output
    res = CliRunner().invoke(app, ["audit", "no-such-model"])
    assert res.exit_code == 1 and "unknown model" in res.output


def test_audit_cli_fails_on_a_broken_artifact(monkeypatch: pytest.MonkeyPatch) -> None:
    import clearsight.model_audit as audit_mod

    monkeypatch.setattr(
        audit_mod, "audit", lambda ref, **kw: audit_model(OverwritesBuffer, config=cfg(), size=16)
    )
    res = CliRunner().invoke(app, ["audit", "anything"])
    assert res.exit_code == 1 and "FAIL" in res.output and "check(s) failed" in res.output


def test_gradient_flow_waits_one_step_for_zero_initialised_scales() -> None:
    """A residual branch behind a scale initialised to zero (NAFNet's beta and gamma) gets
    its gradient after the first step; a branch cut off for good is still named."""
    from clearsight.model_audit import check_gradient_flow

    class Scaled(nn.Module):
        def __init__(self, dead: bool) -> None:
            super().__init__()
            self.conv = nn.Conv2d(3, 3, 3, padding=1)
            self.beta = nn.Parameter(torch.zeros(1, 3, 1, 1))
            self.dead = dead

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            branch = self.conv(x) * (0.0 if self.dead else 1.0)
            return x + branch * self.beta

    x = torch.rand(2, 3, 8, 8)
    assert check_gradient_flow(Scaled(dead=False), x).passed
    result = check_gradient_flow(Scaled(dead=True), x)
    assert not result.passed and "conv.weight" in result.details
