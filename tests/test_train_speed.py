"""Faster training with the same math: channels-last and fused gates equal the reference,
`train.amp: auto` takes bf16 only on a CPU that computes it natively, resume stays exact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from clearsight.cpu_features import CpuFeatures, detect_cpu_features
from clearsight.engine import restore_train, train_speed
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.train_config import TrainConfigError, config_from_dict
from clearsight.engine.train_speed import (
    COMPILE_MIN_STEPS,
    choose_amp,
    speed_settings,
    use_channels_last,
    use_compile,
)
from clearsight.engine.trainer import train
from clearsight.losses import build_loss
from clearsight.models import rescan_units
from clearsight.models.mbcnn import MBCNN
from clearsight.models.registry import build_model
from clearsight.models.rescan import RESCAN
from tests.train_utils import make_pairs, tiny_config, tiny_raw, train_log

CPU = torch.device("cpu")
AVX2 = CpuFeatures("AVX2")
AVX512 = CpuFeatures("AVX512")
AVX512_BF16 = CpuFeatures("AVX512", avx512_bf16=True)
AMX = CpuFeatures("AVX512", amx=True)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pairs(tmp_path_factory.mktemp("pairs"))


# ------------------------------------------------------------------ amp: auto on the CPU
@pytest.mark.parametrize(
    ("cpu", "expected"), [(AVX2, False), (AVX512, False), (AVX512_BF16, True), (AMX, True)]
)
def test_auto_amp_takes_bf16_only_where_the_cpu_has_it(cpu: CpuFeatures, expected: bool) -> None:
    on, why = choose_amp("auto", CPU, cpu)
    assert on is expected
    assert why.startswith("auto: ") and ("no native bf16" in why) is not expected


def test_explicit_amp_settings_ignore_the_cpu() -> None:
    assert choose_amp("off", CPU, AMX)[0] is False
    assert choose_amp("bf16", CPU, AVX2)[0] is True


def test_detection_reports_this_machine_consistently() -> None:
    feats = detect_cpu_features()
    assert feats.capability == torch.backends.cpu.get_cpu_capability()
    assert feats.native_bf16 == (feats.avx512_bf16 or feats.amx)
    assert choose_amp("auto", CPU)[0] is feats.native_bf16


@pytest.mark.parametrize(("cpu", "amp"), [(AVX2, "off"), (AMX, "bf16")])
def test_the_run_uses_and_logs_the_detected_choice(
    cpu: CpuFeatures, amp: str, data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(train_speed, "detect_cpu_features", lambda: cpu)
    seen: list[bool] = []
    real = restore_train.build_loss

    def spying_loss(*args: object, **kw: object):  # records whether autocast is on in the step
        fn = real(*args, **kw)  # type: ignore[arg-type]

        def loss(*a: torch.Tensor) -> torch.Tensor:
            seen.append(torch.is_autocast_enabled("cpu"))
            return fn(*a)

        return loss

    monkeypatch.setattr(restore_train, "build_loss", spying_loss)
    raw = tiny_raw(data, train={"steps": 2, "device": "cpu"})
    raw["data"]["val"] = None
    cfg = config_from_dict(raw)
    train(cfg, tmp_path, progress=False)
    assert seen == [amp == "bf16"] * 2
    first = train_log(tmp_path)[0]
    # channels-last measured faster on AVX-512 only (slower on AVX2): auto follows the CPU
    layout = "channels_last" if cpu.capability == "AVX512" else "contiguous"
    assert first["amp"] == amp and first["memory_format"] == layout
    assert cpu.describe() in first["amp_reason"]


# ------------------------------------------------------------------ channels-last
def test_memory_format_setting() -> None:
    cl, plain = RESCAN(channels=4, stages=2, depth=3), nn.Conv2d(3, 3, 3)
    # the model's measured preference, on the CPUs where it measured faster (AVX-512)
    assert use_channels_last("auto", cl, CPU, AVX512) is True
    assert use_channels_last("auto", cl, CPU, AMX) is True
    assert use_channels_last("auto", cl, CPU, AVX2) is False  # 4-6% slower there
    assert use_channels_last("auto", plain, CPU, AVX512) is False  # no preference: as before
    assert use_channels_last("auto", cl, torch.device("meta"), AVX512) is False  # CPU only
    assert use_channels_last("contiguous", cl, CPU) is False
    assert use_channels_last("channels_last", plain, CPU) is True
    assert isinstance(RESCAN.prefers_channels_last, bool)
    assert isinstance(MBCNN.prefers_channels_last, bool)
    with pytest.raises(TrainConfigError, match="train.memory_format"):
        tiny_config(Path("."), train={"memory_format": "nhwc"})


def _step(model: nn.Module, loss: str, x: torch.Tensor, y: torch.Tensor, fmt: torch.memory_format):
    """Outputs and parameter gradients of one forward + loss + backward in layout `fmt`."""
    model.zero_grad(set_to_none=True)
    model.to(memory_format=fmt)
    x, y = x.contiguous(memory_format=fmt), y.contiguous(memory_format=fmt)
    outs = model(x)
    fn = build_loss(loss, residual=bool(getattr(model, "predicts_residual", False)))
    fn(outs, x, y).backward()
    grads = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    return [o.detach().contiguous() for o in outs], grads


def _assert_close(a: tuple, b: tuple) -> None:
    for oa, ob in zip(a[0], b[0], strict=True):
        torch.testing.assert_close(oa, ob, rtol=1e-4, atol=1e-5)
    assert a[1].keys() == b[1].keys() and a[1]
    for k in a[1]:
        torch.testing.assert_close(a[1][k], b[1][k], rtol=1e-3, atol=1e-5, msg=k)


@pytest.mark.parametrize(
    ("arch", "args", "loss", "size"),
    [
        ("rescan", {"unit": "GRU", "channels": 6, "stages": 3, "depth": 4}, "rescan", 20),
        ("rescan", {"unit": "LSTM", "channels": 6, "stages": 2, "depth": 3}, "rescan", 20),
        ("mbcnn-light", {"n_filters": 4}, "mbcnn", 32),
    ],
)
def test_channels_last_equals_contiguous_forward_and_backward(
    arch: str, args: dict, loss: str, size: int
) -> None:
    torch.manual_seed(0)
    model = build_model(arch, **args)
    x, y = torch.rand(2, 3, size, size), torch.rand(2, 3, size, size)
    ref = _step(model, loss, x, y, torch.contiguous_format)
    fast = _step(model, loss, x, y, torch.channels_last)
    _assert_close(ref, fast)


def _gates_one_by_one(convs: tuple[nn.Conv2d, ...], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """The reference for `rescan_units.fused_gates`: one conv per gate, as the official code."""
    return tuple(
        F.conv2d(x, c.weight, c.bias, padding=c.padding, dilation=c.dilation) for c in convs
    )


@pytest.mark.parametrize("unit", ["GRU", "LSTM"])
@pytest.mark.parametrize("fmt", [torch.contiguous_format, torch.channels_last])
def test_fused_gates_equal_one_conv_per_gate(
    unit: str, fmt: torch.memory_format, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.manual_seed(1)
    model = build_model("rescan", unit=unit, channels=6, stages=3, depth=4)
    x, y = torch.rand(2, 3, 20, 20), torch.rand(2, 3, 20, 20)
    fused = _step(model, "rescan", x, y, fmt)
    monkeypatch.setattr(rescan_units, "fused_gates", _gates_one_by_one)
    reference = _step(model, "rescan", x, y, torch.contiguous_format)
    _assert_close(reference, fused)


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
# ------------------------------------------------------------------ exact resume
@pytest.mark.parametrize(
    ("model", "memory_format", "amp"),
    [
        ({}, "contiguous", "off"),
        ({}, "channels_last", "bf16"),
        ({}, "contiguous", "bf16"),
        ({"arch": "mbcnn-light", "args": {"n_filters": 4}}, "channels_last", "off"),
    ],
)
def test_resume_is_bit_exact_under_each_setting(
    model: dict, memory_format: str, amp: str, data: Path, tmp_path: Path
) -> None:
    sections: dict = {"train": {"memory_format": memory_format, "amp": amp, "device": "cpu"}}
    if model:
        sections.update(model=model, loss={"name": "mbcnn"})
    cfg = tiny_config(data, **sections)
    train(cfg, tmp_path / "a", progress=False)
    half = tiny_config(data, **{**sections, "train": {**sections["train"], "steps": 4}})
    train(half, tmp_path / "b", progress=False)
    train(cfg, tmp_path / "b", resume=True, progress=False)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert a["step"] == b["step"] == 8
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    opt_a, opt_b = a["optimizer"]["state"], b["optimizer"]["state"]
    assert opt_a.keys() == opt_b.keys() and opt_a
    for i in opt_a:
        assert torch.equal(opt_a[i]["exp_avg"], opt_b[i]["exp_avg"]), i
    first = train_log(tmp_path / "a")[0]
    assert first["memory_format"] == memory_format and first["amp"] == amp


# ------------------------------------------------------------------ torch.compile
class _CompiledRESCAN(RESCAN):
    """An architecture that declares it trains faster compiled (none bundled does yet)."""

    prefers_compile = True


def test_auto_layout_is_contiguous_when_compiled() -> None:
    model = _CompiledRESCAN(channels=4, stages=2, depth=3)
    long = tiny_config(Path("."), train={"compile": "auto", "steps": COMPILE_MIN_STEPS}).train
    short = tiny_config(Path("."), train={"compile": "auto", "steps": 8}).train
    compiled = speed_settings(long, model, CPU, AVX512)
    assert compiled.compiled and not compiled.channels_last  # measured slower on top
    eager = speed_settings(short, model, CPU, AVX512)
    assert not eager.compiled and eager.channels_last
    forced = tiny_config(Path("."), train={"compile": "on", "memory_format": "channels_last"}).train
    assert speed_settings(forced, model, CPU, AVX2).channels_last  # forced: kept


def test_compile_setting() -> None:
    rescan, mbcnn = _CompiledRESCAN(channels=4, stages=2, depth=3), MBCNN(n_filters=4)
    long, short = COMPILE_MIN_STEPS, COMPILE_MIN_STEPS - 1
    assert use_compile("auto", rescan, CPU, long) is True  # declared faster compiled
    assert use_compile("auto", rescan, CPU, short) is False  # too short to repay compiling
    assert use_compile("auto", mbcnn, CPU, long) is False  # measured no gain
    assert use_compile("auto", RESCAN(channels=4), CPU, long) is False  # none over eager
    assert use_compile("auto", rescan, torch.device("meta"), long) is False  # CPU only
    assert use_compile("on", mbcnn, CPU, 1) is True
    assert use_compile("off", rescan, CPU, long) is False
    with pytest.raises(TrainConfigError, match="train.compile"):
        tiny_config(Path("."), train={"compile": "yes"})
    # a bare YAML off/on is a boolean: read as the word (`--set train.compile=off`)
    assert tiny_config(Path("."), train={"compile": False, "amp": False}).train.compile == "off"
    assert tiny_config(Path("."), train={"compile": True}).train.compile == "on"
    with pytest.raises(TrainConfigError, match="train.amp"):
        tiny_config(Path("."), train={"amp": True})  # amp has no "on"


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
def test_compiled_training_matches_eager_and_resumes_exactly(data: Path, tmp_path: Path) -> None:
    """The compiled step computes the same training within float rounding, logs that it was
    compiled, and a compiled run resumed halfway ends bit-identical to an uninterrupted one."""
    section = {"memory_format": "contiguous", "amp": "off", "device": "cpu"}
    eager = train(
        tiny_config(data, train={**section, "compile": "off"}), tmp_path / "e", progress=False
    )
    cfg = tiny_config(data, train={**section, "compile": "on"})
    full = train(cfg, tmp_path / "a", progress=False)
    assert full.first_loss == pytest.approx(eager.first_loss, rel=1e-4)
    assert full.last_loss == pytest.approx(eager.last_loss, rel=1e-3)
    first = train_log(tmp_path / "a")[0]
    assert first["compile"] == "on"
    half = tiny_config(data, train={**section, "compile": "on", "steps": 4})
    train(half, tmp_path / "b", progress=False)
    train(cfg, tmp_path / "b", resume=True, progress=False)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    assert a["step"] == b["step"] == 8
    assert a["model"].keys() == load_checkpoint(tmp_path / "e")["model"].keys()  # no prefix
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
