"""RESCAN: structure pinned to the official parameter counts, training semantics, and the exact
tiled inference path (bounded memory, global SE statistics) checked against the untiled one.

Tiny images and 8 channels wherever the exact architecture is not what is tested.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from clearsight.errors import ClearsightError
from clearsight.models import build_model, get_spec
from clearsight.models.registry import count_parameters
from clearsight.models.rescan import RESCAN, UNITS

TOL = 1e-4


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors run faster on one thread, and a shared, busy CPU makes multi-threaded
    tiny ops wait on descheduled threads (seconds per test instead of milliseconds)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _lively(model: RESCAN, seed: int = 0) -> RESCAN:
    """Re-initialise with He-scaled weights and visible biases, so that every stage, gate and
    SE scale moves the output (default init leaves some of it nearly constant)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            if p.ndim == 1:
                p.copy_(torch.randn(p.shape, generator=g) * 0.1)
            else:
                fan_in = p[0].numel()
                p.copy_(torch.randn(p.shape, generator=g) * (2.0 / fan_in) ** 0.5)
    return model.eval()


def _image(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


# -- structure ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "unit", "count"),
    [
        ("rescan", "GRU", 149_823),
        ("rescan-lstm", "LSTM", 197_367),
        ("rescan-rnn", "RNN", 54_735),
        ("rescan-conv", "Conv", 28_695),
    ],
)
def test_parameter_counts_match_official(name: str, unit: str, count: int) -> None:
    model = build_model(name)
    assert model.unit == unit
    assert count_parameters(model) == count
    spec = get_spec(name)
    assert spec.task == "derain" and spec.metric_preset == "y-matlab"
    assert spec.default_args()["unit"] == unit
    assert f"{count:,}" in spec.description


def test_default_layout_is_the_official_one() -> None:
    model = RESCAN()
    assert [u.dilation for u in model.units] == [1, 1, 2, 4, 8]
    assert [(u.in_ch, u.out_ch) for u in model.units] == [(3, 24)] + [(24, 24)] * 4
    assert model.units[1].se.fc[0].out_features == 6  # SE hidden width 6, not 24 // 6
    assert model.pad_multiple == 1
    # without SE there is no SE parameter at all
    assert count_parameters(RESCAN(use_se=False)) == 149_823 - 6 * (24 * 6 + 6 + 6 * 24 + 24)


def test_unknown_unit_or_mode_is_a_clear_value_error() -> None:
    with pytest.raises(ValueError, match="GRU, LSTM, RNN, Conv"):
        RESCAN(unit="Transformer")
    with pytest.raises(ValueError, match="full, add"):
        RESCAN(mode="sum")
    with pytest.raises(ClearsightError, match="unit"):
        build_model("rescan", unit="gru2")
    for bad in ({"channels": 0}, {"stages": 0}, {"depth": 2}):
        with pytest.raises(ValueError):
            RESCAN(**bad)
    assert RESCAN(unit="lstm", mode="Add").config()["unit"] == "LSTM"


# -- forward semantics --------------------------------------------------------------------


def test_forward_returns_every_stage() -> None:
    torch.manual_seed(0)
    model = RESCAN(channels=8, stages=3).eval()
    x = _image(2, 3, 48, 64)
    outs = model(x)
    assert isinstance(outs, list) and len(outs) == 3
    assert all(o.shape == x.shape for o in outs)


def test_odd_size_default_architecture() -> None:
    model = RESCAN().eval()
    x = _image(1, 3, 321, 481)
    with torch.no_grad():
        outs = model(x.contiguous(memory_format=torch.channels_last))
    assert len(outs) == 4 and all(o.shape == (1, 3, 321, 481) for o in outs)
    assert torch.isfinite(outs[-1]).all()


def test_add_mode_adds_the_detached_previous_output() -> None:
    add = _lively(RESCAN(channels=8, stages=2, mode="add")).train()
    full = RESCAN(channels=8, stages=2, mode="full").train()
    full.load_state_dict(add.state_dict())
    x = _image(1, 3, 24, 32)
    a, f = add(x), full(x)
    for o in (*a, *f):
        o.retain_grad()
    torch.testing.assert_close(a[1], f[1] + f[0], atol=1e-6, rtol=0)
    a[1].sum().backward()
    f[1].sum().backward()
    # The only gradient reaching stage 0's output is through stage 1's input (rainy - rain):
    # the addition contributes none (it would add exactly 1 everywhere).
    assert a[0].grad is not None
    torch.testing.assert_close(a[0].grad, f[0].grad, atol=1e-6, rtol=0)


def test_restore_is_input_minus_last_output_and_stages_prefix() -> None:
    model = _lively(RESCAN(channels=8, stages=3))
    x = _image(1, 3, 40, 56)
    with torch.no_grad():
        outs = model(x)
    torch.testing.assert_close(model.restore(x), x - outs[-1], atol=1e-6, rtol=0)
    for k in (1, 2, 3):
        torch.testing.assert_close(model.restore(x, stages=k), x - outs[k - 1], atol=1e-6, rtol=0)
    assert not torch.allclose(model.restore(x, stages=1), model.restore(x), atol=1e-3)
    for bad in (0, 4):
        with pytest.raises(ValueError):
            model.restore(x, stages=bad)


# -- exact tiled inference ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "mode", "use_se"), list(itertools.product(UNITS, ("full", "add"), (True, False)))
)
def test_tiled_equals_untiled(unit: str, mode: str, use_se: bool) -> None:
    model = _lively(RESCAN(unit=unit, mode=mode, use_se=use_se, channels=8))
    x = _image(1, 3, 37, 53)
    ref = model.restore(x)
    # 7 and 16 do not divide 37x53; 64 is larger than the whole image (a single tile).
    for tile in (7, 16, 64):
        y = model.restore_tiled(x, tile=tile)
        assert y.shape == x.shape and y.dtype == x.dtype
        assert (y - ref).abs().max().item() <= TOL, tile
    y = model.restore_tiled(x, tile=16, stages=2)
    assert (y - model.restore(x, stages=2)).abs().max().item() <= TOL


@pytest.mark.parametrize("unit", UNITS)
def test_tiled_equals_untiled_odd_size(unit: str) -> None:
    model = _lively(RESCAN(unit=unit, channels=8))
    x = _image(2, 3, 97, 131)  # a batch: SE statistics are per image
    ref = model.restore(x)
    for tile in (32, 45):
        assert (model.restore_tiled(x, tile=tile) - ref).abs().max().item() <= TOL


def test_tiled_default_architecture() -> None:
    model = _lively(RESCAN())
    x = _image(1, 3, 97, 131)
    y = model.restore_tiled(x, tile=48)
    assert (y - model.restore(x)).abs().max().item() <= TOL
    assert not y.is_inference()  # usable in ordinary code (in-place ops, autograd)


def test_tiled_on_worker_threads_is_deterministic_and_restores_threads() -> None:
    """With 2 intra-op threads, tiles run on 2 worker threads (one thread each)."""
    model = _lively(RESCAN(channels=8))
    x = _image(1, 3, 45, 61)
    serial = model.restore_tiled(x, tile=12)  # this module runs on one thread
    torch.set_num_threads(2)
    try:
        calls: list[int] = []
        parallel = model.restore_tiled(x, tile=12, progress=lambda d, t: calls.append(d))
        again = model.restore_tiled(x, tile=12)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    assert calls == list(range(1, len(calls) + 1))
    assert torch.equal(parallel, again)  # SE sums are reduced in tile order
    assert (parallel - serial).abs().max().item() <= 1e-6
    assert (parallel - model.restore(x)).abs().max().item() <= TOL


def test_global_se_makes_naive_tiling_wrong() -> None:
    """Guard for the test above: these images are sensitive to where SE pools."""
    model = _lively(RESCAN(channels=8))
    x = _image(1, 3, 48, 64)
    crop = model.restore(x[..., :24, :32])[..., 8:-8, 8:-8]
    whole = model.restore(x)[..., :24, :32][..., 8:-8, 8:-8]
    assert (crop - whole).abs().max().item() > 10 * TOL


def test_tiled_progress_and_arguments() -> None:
    model = RESCAN(channels=8, stages=2).eval()
    x = _image(1, 3, 40, 50)
    calls: list[tuple[int, int]] = []
    model.restore_tiled(x, tile=16, progress=lambda d, t: calls.append((d, t)))
    totals = {t for _, t in calls}
    assert len(totals) == 1
    total = totals.pop()
    assert [d for d, _ in calls] == list(range(1, total + 1))
    assert total == 2 * (len(model.units) + 2) * 3 * 4  # stages * steps * tiles
    with pytest.raises(ValueError):
        model.restore_tiled(x, tile=0)
    with pytest.raises(ValueError):
        model.restore_tiled(x[:, :1])
    with pytest.raises(ValueError):
        model.restore_tiled(x, stages=3)


# -- training -----------------------------------------------------------------------------


def _loss(model: RESCAN, rainy: torch.Tensor, clean: torch.Tensor) -> torch.Tensor:
    rain = rainy - clean
    return sum(torch.mean((o - rain) ** 2) for o in model(rainy))


@pytest.mark.parametrize("unit", UNITS)
def test_training_step_gives_every_parameter_a_finite_gradient(unit: str) -> None:
    # With stages >= 2 every parameter is used (stage 0 skips the h-convs and, for GRU,
    # conv_xr; for LSTM conv_xf), so every one gets a gradient.
    torch.manual_seed(0)
    model = RESCAN(unit=unit, channels=8, stages=2).train()
    rainy, clean = _image(2, 3, 24, 32, seed=2), _image(2, 3, 24, 32, seed=3)
    _loss(model, rainy, clean).backward()
    for name, p in model.named_parameters():
        assert p.grad is not None, name
        assert torch.isfinite(p.grad).all(), name
        # An SE block's 6 hidden ReLUs may all be off at a random init (zero gradient for its
        # Linear weights, as in the official code); every convolution must learn.
        if ".conv_" in name or name.startswith("decoder.0") or name.startswith("decoder.3"):
            assert p.grad.abs().sum() > 0, name


def test_first_stage_alone_leaves_state_convs_unused() -> None:
    """Documents the one legitimate exception: a single stage has no recurrent state."""
    torch.manual_seed(0)
    model = RESCAN(channels=8, stages=1).train()
    _loss(model, _image(1, 3, 16, 16, seed=2), _image(1, 3, 16, 16, seed=3)).backward()
    unused = {n for n, p in model.named_parameters() if p.grad is None}
    assert unused == {
        f"units.{k}.conv_{g}.{t}"
        for k in range(5)
        for g in ("xr", "hz", "hr", "hn")
        for t in ("weight", "bias")
    }


def test_two_optimizer_steps_without_retain_graph() -> None:
    torch.manual_seed(0)
    model = RESCAN(channels=8, stages=2).train()
    opt = torch.optim.Adam(model.parameters(), lr=5e-3)
    rainy, clean = _image(2, 3, 24, 32, seed=2), _image(2, 3, 24, 32, seed=3)
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for _ in range(2):
        opt.zero_grad()
        loss = _loss(model, rainy, clean)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(torch.isfinite(torch.tensor(losses)))
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters(), strict=True))


def test_inference_changes_no_parameter_or_buffer() -> None:
    model = _lively(RESCAN(channels=8, stages=2))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    x = _image(1, 3, 24, 32)
    model.train()(x)
    model.eval()(x)
    model.restore(x)
    model.restore_tiled(x, tile=10)
    after = model.state_dict()
    assert before.keys() == after.keys()
    assert all(torch.equal(before[k], after[k]) for k in before)
    assert all(p.requires_grad for p in model.parameters())


# -- receptive field ----------------------------------------------------------------------


def test_receptive_radius_values() -> None:
    assert RESCAN().receptive_radius is None  # SE pools over the whole image
    assert RESCAN(use_se=False).receptive_radius == 83
    for unit in ("LSTM", "RNN", "Conv"):
        assert RESCAN(unit=unit, use_se=False).receptive_radius == 68


@pytest.mark.filterwarnings("ignore:`torch.jit.script` is deprecated:FutureWarning")  # torch.func
@pytest.mark.parametrize(
    ("unit", "mode", "stages", "depth"),
    [(u, "full", 4, 7) for u in UNITS] + [("GRU", "add", 2, 5)],
)
def test_receptive_radius_is_tight(unit: str, mode: str, stages: int, depth: int) -> None:
    """Perturb one pixel and see how far the last output changes: exactly the radius.

    A finite perturbation (float64) must not change anything beyond the radius (a safe
    bound). Far-away effects are too small to show against O(1) outputs, so tightness is
    checked with the infinitesimal perturbation (forward-mode derivative), whose support is
    exact: the reported radius is tight, not just an upper bound.
    """
    model = RESCAN(unit=unit, mode=mode, channels=4, stages=stages, depth=depth, use_se=False)
    model = model.double().eval()
    radius = model.receptive_radius
    assert radius is not None
    size = 2 * radius + 9
    c = size // 2
    x = _image(1, 3, size, size).double()

    def reach(changed: torch.Tensor) -> int:
        ys, xs = torch.nonzero(changed.abs().sum(dim=(0, 1)), as_tuple=True)
        return int(max((ys - c).abs().max(), (xs - c).abs().max()))

    bumped = x.clone()
    bumped[0, :, c, c] += 1.0
    with torch.no_grad():
        assert reach(model(bumped)[-1] - model(x)[-1]) <= radius
    tangent = torch.zeros_like(x)
    tangent[0, :, c, c] = 1.0
    _, dout = torch.func.jvp(lambda inp: model(inp)[-1], (x,), (tangent,))
    assert reach(dout) == radius
