"""Structured pruning is value-exact where it must be (docs/compress.md).

A channel whose every producer (all the convolutions and linear layers whose outputs are
added, multiplied, gated or concatenated into it) has zero weights and bias is exactly 0
after any of the architectures' activations (ReLU, ReLU6, LeakyReLU, SiLU, tanh; a sigmoid
gate only ever multiplies it). Removing exactly such channels must leave every output
unchanged up to float rounding; a channel index misaligned anywhere across a coupled group
(a concatenation's offset, a residual add, a depthwise pair, RESCAN's recurrent state, fused
gates and SE gates, MBCNN's dense stacks and tone gates, YOLOX's Focus stem, CSP/PAFPN
concatenations and decoupled head) removes a live channel instead, which the outputs show
(the shifted-index control below checks that they do). The shape and reload checks are in
tests/test_prune.py.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from torch import nn

from tests.optional import need

tp = need("torch_pruning")

from clearsight.api import prune  # noqa: E402
from clearsight.artifact import load_artifact, make_config, read_config, save_artifact  # noqa: E402
from clearsight.models.registry import build_model  # noqa: E402
from clearsight.zoo import bundled_models  # noqa: E402

ARCHS = {
    "rescan": {"channels": 8, "stages": 2, "depth": 4},  # GRU: fused gates, state, SE
    "rescan-lstm-add": {"unit": "LSTM", "mode": "add", "channels": 6, "stages": 2, "depth": 3},
    "mbcnn-light": {"n_filters": 4},
    "yolox-nano": {"num_classes": 3},
    "ssd-mobilenet-v1": {"num_classes": 4, "input_size": 128},
}
REL_TOL = 1e-5
"""Exact up to float rounding: the outputs' max difference over their max magnitude."""
SHIFTED_MIN = 1e-2
"""The control: removing the live neighbours of the dead channels changes outputs by more."""


def _build(name: str) -> nn.Module:
    """A seeded build whose outputs depend on every layer: fresh YOLOX/SSD heads start at a
    constant prior (weights ~0.01), which would hide any channel, so all weights are redrawn
    at a gain that keeps activations at O(1) through the network."""
    args = dict(ARCHS[name])
    arch = "rescan" if name.startswith("rescan") else name
    torch.manual_seed(0)
    model = build_model(arch, **args).eval()
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.Conv2d | nn.Linear):
                m.weight.normal_(0.0, 1.5 / m.weight[0].numel() ** 0.5)
                if m.bias is not None:
                    m.bias.normal_(0.0, 0.1)
    return model


def _input(model: nn.Module, seed: int = 1) -> torch.Tensor:
    size = model.input_size if getattr(model, "task", "") == "detect" else (32, 40)
    scale = 255.0 if type(model).__name__ == "YOLOXNano" else 1.0  # reads 0..255 pixels
    return scale * torch.rand(1, 3, *size, generator=torch.Generator().manual_seed(seed))


def _outputs(y: object) -> list[torch.Tensor]:
    if isinstance(y, list | tuple):
        return [t for o in y for t in _outputs(o)]
    return [y]  # type: ignore[list-item]


def _run(model: nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    with torch.no_grad():
        return _outputs(model(x))


def _rel_diff(got: list[torch.Tensor], want: list[torch.Tensor]) -> float:
    assert [g.shape for g in got] == [w.shape for w in want]
    return max(float((g - w).abs().max() / w.abs().max()) for g, w in zip(got, want, strict=True))


def _graph(model: nn.Module, x: torch.Tensor) -> tp.DependencyGraph:
    """The dependency graph as `compress/prune.py` traces it (inside `prune_tracing()`)."""
    with warnings.catch_warnings(), model.prune_tracing():
        warnings.filterwarnings("ignore", message="Unwrapped parameters detected")
        return tp.DependencyGraph().build_dependency(model, x)


def _kill(dg: tp.DependencyGraph, group: tp.dependency.Group) -> int:
    """Zero the weights and bias of every producer of the group's channels; the number of
    producing layers (more than one: the channels are coupled across layers)."""
    producers = 0
    for dep, idxs in group:
        m = dep.target.module
        if dg.is_out_channel_pruning_fn(dep.handler) and isinstance(m, nn.Conv2d | nn.Linear):
            m.weight.data[idxs] = 0.0
            if m.bias is not None:
                m.bias.data[idxs] = 0.0
            producers += 1
    return producers


def _dead_plan(
    model: nn.Module, x: torch.Tensor, share: float, seed: int = 2
) -> tuple[tp.DependencyGraph, list[tuple[nn.Module, object, list[int], int]], int]:
    """Kill `share` of the channels (at least one, never all) of every prunable group, at
    seeded random positions: (graph, [(root layer, its pruning fn, dead idxs, width)],
    number of groups whose channels several layers produce)."""
    dg = _graph(model, x)
    gen = torch.Generator().manual_seed(seed)
    plan, coupled = [], 0
    for group in dg.get_all_groups(ignored_layers=list(model.prune_protected())):
        root, fn, width = group[0].dep.target.module, group[0].dep.handler, len(group[0].idxs)
        if width < 2:
            continue
        k = min(max(1, int(share * width)), width - 1)
        idxs = sorted(torch.randperm(width, generator=gen)[:k].tolist())
        coupled += _kill(dg, dg.get_pruning_group(root, fn, idxs)) > 1
        plan.append((root, fn, idxs, width))
    return dg, plan, coupled


def _prune_plan(dg: tp.DependencyGraph, plan: list, shift: int = 0) -> None:
    """Remove each group's planned channels (moved by `shift` positions: the control)."""
    for root, fn, idxs, width in plan:
        dg.get_pruning_group(root, fn, sorted({(i + shift) % width for i in idxs})).prune()


@pytest.mark.parametrize("name", list(ARCHS))
def test_removing_dead_channels_by_index_changes_no_output(name: str) -> None:
    """Every prunable group of the architecture, a quarter of its channels dead: removing
    exactly them keeps the outputs; removing their neighbours instead does not."""
    x = _input(_build(name))
    model = _build(name)
    dg, plan, coupled = _dead_plan(model, x, share=0.25)
    assert coupled >= 2, "the coupled structures (adds, concats, gates) are exercised"
    want = _run(model, x)
    _prune_plan(dg, plan)
    assert _rel_diff(_run(model, x), want) < REL_TOL

    control = _build(name)
    dg, plan, _ = _dead_plan(control, x, share=0.25)
    _prune_plan(dg, plan, shift=1)
    assert _rel_diff(_run(control, x), want) > SHIFTED_MIN


@pytest.mark.parametrize("name", list(ARCHS))
def test_the_l1_pruner_removes_dead_channels_exactly_and_the_artifact_reloads(
    name: str, tmp_path: Path
) -> None:
    """The product path (`api.prune`: `prune_model` with l1, its MAC-driven rounds and the
    saved widths): half of every group dead, a 10% MAC cut removes only dead channels
    (their L1 is 0, every live one's is not), so the reloaded artifact gives the same
    outputs as the source."""
    model = _build(name)
    x = _input(model)
    _dead_plan(model, x, share=0.5)
    arch = "rescan" if name.startswith("rescan") else name
    src = save_artifact(model, tmp_path / "src", make_config(model, arch, ARCHS[name]))
    want = _run(model, x)
    path, result = prune(src, tmp_path / "pruned", ratio=0.1, importance="l1")
    assert result.after.params < result.before.params and read_config(path).widths
    assert _rel_diff(_run(result.model, x), want) < REL_TOL
    assert _rel_diff(_run(load_artifact(path).model, x), want) < REL_TOL


def test_the_bundled_detector_prunes_dead_channels_exactly() -> None:
    """The same on the converted YOLOX-Nano weights (`default-detect`), whose folded batch
    norms give every layer a bias: dead channels in every group, removed, change nothing."""
    if "default-detect" not in bundled_models():
        pytest.skip("default-detect is not bundled")
    model = load_artifact(bundled_models()["default-detect"]).model.eval()
    x = _input(model)
    dg, plan, coupled = _dead_plan(model, x, share=0.25)
    assert coupled >= 10
    want = _run(model, x)
    _prune_plan(dg, plan)
    assert _rel_diff(_run(model, x), want) < REL_TOL
