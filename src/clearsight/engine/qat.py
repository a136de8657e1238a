"""Quantization-aware training: fake-quantized convolutions, trained by the usual trainer.

`train.qat.enabled: true` makes `engine/trainer.py` train the model through
`torch.ao.quantization.prepare_qat` (eager mode): every Conv2d/Linear becomes its QAT twin,
weights fake-quantized to int8 per output channel and outputs fake-quantized to uint8 with
moving-average observers (the `x86` default QAT qconfig), so training sees int8 rounding.
Why eager mode: on torch 2.14, FX `prepare_qat_fx` cannot trace RESCAN's or MBCNN's Python
control flow (stage loops, size checks) and the PT2E API (`prepare_qat_pt2e`) has moved out
of torch into torchao; eager mode swaps modules in place, so the model keeps its class,
contract and `forward`.

The NaN guard (what the seed lacked, docs/quantize.md): observers update inside the forward
pass, before the loss is known, so one NaN batch turns a scale into NaN for good even when
the optimizer step is skipped. Here

* `snapshot` keeps the quantizers' state (scales, zero points, observer ranges) before each
  step and `restore` puts it back when the step's loss, gradient norm or the new ranges are
  not finite (`nonfinite`); the trainer logs where (`{"step", "nan": where}`);
* from `freeze_step` on, observers stop (`disable_observer`): scales and zero points stay
  fixed while the weights finish adapting to them; the flags are buffers, so checkpoints,
  resume and rollback keep the phase;
* the trainer refuses to write a checkpoint or artifact holding a non-finite value.

Artifacts hold plain fp32 weights (`float_state_dict`: the QAT twins' `weight`/`bias`
without the quantizer buffers), so they load anywhere with no quantization library. The
int8 model is the QAT graph itself, exported with its trained scales as QDQ
(`exportable`, then `engine/qat_export.py`'s `qat_int8_onnx`): the trainer writes it beside
`last/` as `last.int8.onnx`, where `--precision int8` finds it.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from torch import nn

QAT_BACKENDS = ("x86", "qnnpack", "fbgemm")
_QUANT_KEYS = ("weight_fake_quant.", "activation_post_process.")


def prepare_qat_model(model: nn.Module, backend: str = "x86") -> nn.Module:
    """`model` (in place) with fake-quantized Conv2d/Linear layers, in training mode."""
    from torch.ao.quantization import get_default_qat_qconfig, prepare_qat

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notice, reduce_range note
        qconfig = get_default_qat_qconfig(backend)
        for m in model.modules():
            if type(m) in (nn.Conv2d, nn.Linear):
                m.qconfig = qconfig  # type: ignore[assignment]
        model.train()
        prepare_qat(model, inplace=True)
    return model


def is_quant_key(key: str) -> bool:
    return any(k in key for k in _QUANT_KEYS)


def snapshot(model: nn.Module, buffers: bool = False) -> dict[str, torch.Tensor]:
    """A copy of every quantizer buffer (scales, zero points, observer ranges, flags); with
    `buffers`, of every buffer too: BatchNorm's running statistics also take in a batch
    during the forward, before its loss can be found NaN (the trainer's guard undoes both)."""
    names = {n for n, _ in model.named_buffers()} if buffers else set()
    state = model.state_dict()
    return {k: v.detach().clone() for k, v in state.items() if k in names or is_quant_key(k)}


def restore(model: nn.Module, state: dict[str, torch.Tensor]) -> None:
    """Put a `snapshot` back (the observers resize their buffers as needed)."""
    model.load_state_dict(state, strict=False)


def nonfinite(model: nn.Module, quant_only: bool = False) -> list[str]:
    """Names of floating tensors (parameters and buffers) holding NaN or inf. An observer's
    range starts at (+inf, -inf) until it sees data (a layer the forward never reached), so
    for `min_val`/`max_val` only NaN counts."""
    bad = []
    for k, v in model.state_dict().items():
        if quant_only and not is_quant_key(k):
            continue
        if not v.dtype.is_floating_point or not v.numel():
            continue
        is_range = k.endswith(("min_val", "max_val"))
        if bool(torch.isnan(v).any()) if is_range else not bool(torch.isfinite(v).all()):
            bad.append(k)
    return bad


def freeze_observers(model: nn.Module) -> None:
    """Stop every observer: scales and zero points keep their current values."""
    from torch.ao.quantization import disable_observer

    model.apply(disable_observer)


def observers_frozen(model: nn.Module) -> bool:
    flags = [v for k, v in model.state_dict().items() if k.endswith("observer_enabled")]
    return bool(flags) and all(int(f.max()) == 0 for f in flags)


def exportable(model: nn.Module) -> nn.Module:
    """`model` (in place) with every fused observer + fake-quant module swapped for a plain
    `FakeQuantize` holding the same scale and zero point, observer off: torch.onnx has no
    export for the fused op (`aten::fused_moving_avg_obs_fake_quant`) and exports the plain
    one as QuantizeLinear/DequantizeLinear pairs."""
    from torch.ao.quantization import FakeQuantize
    from torch.ao.quantization.fake_quantize import FusedMovingAvgObsFakeQuantize

    per_channel = (torch.per_channel_symmetric, torch.per_channel_affine)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if not isinstance(child, FusedMovingAvgObsFakeQuantize):
                continue
            extra = {"ch_axis": child.ch_axis} if child.qscheme in per_channel else {}
            fq = FakeQuantize(
                observer=type(child.activation_post_process),
                quant_min=child.quant_min,
                quant_max=child.quant_max,
                dtype=child.dtype,
                qscheme=child.qscheme,
                **extra,
            )
            fq.scale = child.scale.detach().clone()
            fq.zero_point = child.zero_point.detach().clone()
            fq.disable_observer()
            setattr(parent, name, fq)
    return model


def float_state_dict(model: nn.Module, reference: nn.Module) -> dict[str, Any]:
    """The QAT model's weights under the float model's keys (quantizer buffers dropped)."""
    keep = set(reference.state_dict())
    state = {k: v for k, v in model.state_dict().items() if k in keep}
    missing = keep - set(state)
    if missing:
        raise KeyError(f"QAT model lacks {sorted(missing)[:3]}")
    return state
