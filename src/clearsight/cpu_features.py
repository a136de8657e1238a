"""What this CPU computes natively: decides whether bf16 autocast speeds training up or down.

bf16 autocast on a CPU is only fast where the hardware multiplies bf16 itself: AVX512-BF16
(Cooper Lake, Sapphire Rapids and later Xeons, AMD Zen 4 and later) or Intel AMX tiles
(Sapphire Rapids and later, whose AMX always includes AMX-BF16). Elsewhere (AVX2-only,
plain AVX-512) oneDNN emulates bf16 by converting to fp32 and back, which is slower than
fp32. The detection asks PyTorch's own runtime probes (`torch.cpu._is_avx512_bf16_supported`,
`torch.cpu._is_amx_tile_supported`, backed by cpuinfo/oneDNN's CPUID checks) rather than
parsing /proc/cpuinfo, so it works the same on every OS PyTorch supports. Tests inject a
`CpuFeatures` of their own instead of probing.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

__all__ = ["CpuFeatures", "detect_cpu_features"]


@dataclass(frozen=True)
class CpuFeatures:
    """The CPU properties that training speed choices depend on."""

    capability: str
    """`torch.backends.cpu.get_cpu_capability()`: the ATen kernel level (e.g. AVX2, AVX512)."""
    avx512_bf16: bool = False
    amx: bool = False

    @property
    def native_bf16(self) -> bool:
        """True where bf16 matrix math runs in hardware (AVX512-BF16 or AMX)."""
        return self.avx512_bf16 or self.amx

    def describe(self) -> str:
        """One line for the run log, e.g. 'AVX2, no native bf16'."""
        native = [n for n, ok in (("AVX512-BF16", self.avx512_bf16), ("AMX", self.amx)) if ok]
        return f"{self.capability}, " + (
            f"native bf16 ({' + '.join(native)})" if native else "no native bf16"
        )


def _probe(name: str) -> bool:
    """One of torch.cpu's private CPUID probes; False where this PyTorch lacks it."""
    fn: Callable[[], bool] | None = getattr(torch.cpu, name, None)
    try:
        return bool(fn()) if fn is not None else False
    except RuntimeError:  # a probe that cannot run here says "no"
        return False


@functools.cache
def detect_cpu_features() -> CpuFeatures:
    """This machine's features (probed once per process)."""
    return CpuFeatures(
        capability=str(torch.backends.cpu.get_cpu_capability()),
        avx512_bf16=_probe("_is_avx512_bf16_supported"),
        amx=_probe("_is_amx_tile_supported"),
    )
