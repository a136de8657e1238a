"""How training steps are computed, without changing the math: bf16 autocast or fp32, the
memory layout, torch.compile. Chosen per device and architecture from what was measured
(`benchmarks/train_speed.py`); the first log line of a run says what was chosen and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from clearsight.cpu_features import CpuFeatures, detect_cpu_features
from clearsight.engine.train_config import TrainSection
from clearsight.models.contract import as_restoration_model

__all__ = [
    "COMPILE_MIN_STEPS",
    "SpeedSettings",
    "choose_amp",
    "speed_settings",
    "use_channels_last",
    "use_compile",
]

COMPILE_MIN_STEPS = 500
"""`train.compile: auto` compiles only runs this long: compiling RESCAN's training step took
about 2 minutes on a 2-core CPU, which only a run of hundreds of steps repays."""


@dataclass(frozen=True)
class SpeedSettings:
    """How the steps are computed: bf16 autocast or fp32, and the memory layout."""

    amp: bool
    channels_last: bool
    why: str
    compiled: bool = False
    """Why amp was (not) chosen, e.g. 'auto: AVX2, no native bf16'."""

    def describe(self) -> str:
        layout = "channels-last" if self.channels_last else "contiguous"
        compiled = ", torch.compile" if self.compiled else ""
        return f"train: {'bf16 autocast' if self.amp else 'fp32'}, {layout}{compiled} ({self.why})"

    def log_fields(self) -> dict[str, str]:
        """Strings only: TensorBoard takes the numeric fields of a log record as scalars."""
        return {
            "amp": "bf16" if self.amp else "off",
            "memory_format": "channels_last" if self.channels_last else "contiguous",
            "amp_reason": self.why,
            "compile": "on" if self.compiled else "off",
        }


def choose_amp(
    setting: str, device: torch.device, cpu: CpuFeatures | None = None
) -> tuple[bool, str]:
    """`train.amp` resolved on `device`: (bf16 on?, why). `cpu` defaults to this machine's.

    "auto" takes bf16 only where it is native: a CUDA device that supports it, or a CPU with
    AVX512-BF16 or AMX. On other CPUs bf16 is emulated and slower than fp32, so never there.
    """
    if setting == "off":
        return False, "train.amp: off"
    if setting == "bf16":
        return True, "train.amp: bf16"
    if device.type == "cuda":
        ok = torch.cuda.is_bf16_supported()
        return ok, f"auto: CUDA device {'with' if ok else 'without'} bf16"
    if device.type != "cpu":
        return False, f"auto: bf16 untested on {device.type}"
    feats = cpu if cpu is not None else detect_cpu_features()
    return feats.native_bf16, f"auto: {feats.describe()}"


def use_channels_last(
    setting: str, model: nn.Module, device: torch.device, cpu: CpuFeatures | None = None
) -> bool:
    """`train.memory_format` resolved: "auto" follows the architecture's measured preference
    (`prefers_channels_last`, a class attribute of the model) on CPUs with AVX-512 only.

    Measured with `benchmarks/train_speed.py`: channels-last trained RESCAN about 1.3x
    faster on a 2-core AVX-512 CPU, but 4-6% slower (RESCAN and mbcnn-light alike) on a
    2-core AVX2 CPU, where oneDNN's NHWC kernels lose to the plain ones. `cpu` defaults to
    this machine's (tests inject one).
    """
    if setting != "auto":
        return setting == "channels_last"
    if device.type != "cpu" or not as_restoration_model(model).prefers_channels_last:
        return False
    feats = cpu if cpu is not None else detect_cpu_features()
    return feats.capability.upper().startswith("AVX512")


def use_compile(setting: str, model: nn.Module, device: torch.device, steps: int) -> bool:
    """`train.compile` resolved: "auto" compiles architectures that measured faster compiled
    than their best eager step (`prefers_compile`; none of the bundled ones so far, see
    `benchmarks/train_speed.py` and the note in models/rescan.py)
    on CPU, in runs long enough to repay the compile time (`COMPILE_MIN_STEPS`)."""
    if setting != "auto":
        return setting == "on"
    return (
        device.type == "cpu"
        and as_restoration_model(model).prefers_compile
        and steps >= COMPILE_MIN_STEPS
    )


def speed_settings(
    t: TrainSection, model: nn.Module, device: torch.device, cpu: CpuFeatures | None = None
) -> SpeedSettings:
    amp, why = choose_amp(t.amp, device, cpu)
    compiled = use_compile(t.compile, model, device, t.steps)
    # A compiled step picks its own layouts: channels-last on top measured slower (RESCAN,
    # AVX-512: 7.6 s against 5.8 s contiguous, bf16), so "auto" keeps contiguous there.
    auto_layout = t.memory_format == "auto" and compiled
    layout = False if auto_layout else use_channels_last(t.memory_format, model, device, cpu)
    return SpeedSettings(amp, layout, why, compiled)
