"""This CPU's fp32 throughput, and the compute floor it puts under the restoration models.

    python benchmarks/cpu_floor.py [--size 1024] [--runs 5] [--threads N] [--json FILE]

The project's speed targets (1024x1024: RESCAN <= 3.0 s, MBCNN <= 6.0 s) were set from a quoted
kernel peak of about 460 GFLOP/s. This script measures what the kernels actually reach here,
side by side in one run:

* matrix multiply (`torch.mm`, MKL) at 2048 and 4096: the best any fp32 kernel does;
* the convolutions the models are made of, at `--size` squared: RESCAN's fused gate conv
  (24 -> 72 channels, 3x3, dilation 1 and 4) and MBCNN's 64 -> 64 3x3, in PyTorch
  (channels-last, oneDNN) and in ONNX Runtime (a one-node graph, the session options
  `clearsight` uses);

then, from the models' MAC counts (`clearsight.measure.macs.count_macs`), the time each would take
at `--size` if every MAC ran at the best measured rate. Median of `--runs` after a warm-up;
1 MAC = 2 FLOP. The CPU may be shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from clearsight.measure.macs import count_macs
from clearsight.models.registry import build_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import median_time, print_table  # noqa: E402 - beside this script

QUOTED_PEAK_GFLOPS = 460.0  # docs/architecture.md §5.4: the figure the speed targets came from
TARGETS_S = {"rescan": 3.0, "mbcnn": 6.0, "mbcnn-light": 6.0}


def isa_flags() -> str:
    try:
        flags = Path("/proc/cpuinfo").read_text().split("flags", 2)[1].split("\n", 1)[0].split()
    except (OSError, IndexError):
        return "unknown"
    keep = [
        f for f in flags if f in ("avx2", "fma", "avx512f", "avx512_vnni", "avx_vnni", "amx_bf16")
    ]
    return " ".join(keep) or "no AVX2"


def ort_conv_session(cin: int, cout: int, dilation: int, threads: int) -> Any:
    """A one-Conv ONNX graph in the session `clearsight`'s ONNX Runtime backend makes."""
    from onnx import TensorProto, helper, numpy_helper

    from clearsight.runtime.ort_backend import make_session

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((cout, cin, 3, 3)).astype(np.float32), "w")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "b")
    node = helper.make_node(
        "Conv", ["x", "w", "b"], ["y"], pads=[dilation] * 4, dilations=[dilation] * 2
    )
    graph = helper.make_graph(
        [node], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, cin, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, cout, "h", "w"])],
        initializer=[w, b],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return make_session(model.SerializeToString(), threads)


def kernel_rates(size: int, runs: int, threads: int) -> list[tuple[str, float]]:
    """(kernel, GFLOP/s) for the matrix multiplies and the models' convolutions at `size`
    squared, in PyTorch and ONNX Runtime: the best of them is the fp32 rate the floor uses
    (also imported by `restore_speed.py`, which prints the floor beside its timings)."""
    kernels: list[tuple[str, float]] = []  # (name, GFLOP/s)
    for n in (2048, 4096):
        a, b = torch.randn(n, n), torch.randn(n, n)
        t, _ = median_time(partial(torch.mm, a, b), runs)
        kernels.append((f"matmul {n}", 2 * n**3 / t / 1e9))
    s = size
    for cin, cout, dil in ((24, 72, 1), (24, 72, 4), (64, 64, 1)):
        flop = 2 * cin * cout * 9 * s * s
        x = torch.randn(1, cin, s, s).to(memory_format=torch.channels_last)
        w = torch.randn(cout, cin, 3, 3).to(memory_format=torch.channels_last)
        with torch.no_grad():
            t, _ = median_time(partial(F.conv2d, x, w, padding=dil, dilation=dil), runs)
        kernels.append((f"conv {cin}->{cout} d{dil} torch", flop / t / 1e9))
        sess = ort_conv_session(cin, cout, dil, threads)
        xn = np.random.default_rng(0).standard_normal((1, cin, s, s)).astype(np.float32)
        t, _ = median_time(partial(sess.run, None, {"x": xn}), runs)
        kernels.append((f"conv {cin}->{cout} d{dil} onnxruntime", flop / t / 1e9))
    return kernels


def floor_seconds(arch: str, size: int, gflops: float) -> tuple[float, float]:
    """(MACs, seconds) of `arch` at `size` squared with every MAC at `gflops` (1 MAC = 2 FLOP)."""
    macs = count_macs(build_model(arch).eval(), 256, 256).per_pixel * size * size
    return macs, 2 * macs / (gflops * 1e9)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"threads {args.threads}, ISA: {isa_flags()}, load {os.getloadavg()[0]:.2f}")

    s = args.size
    kernels = kernel_rates(s, args.runs, args.threads)
    best = max(g for _, g in kernels)
    print_table(
        f"fp32 kernel throughput ({s}x{s} for convolutions; median of {args.runs})",
        ["kernel", "GFLOP/s", "share of quoted 460"],
        [[k, f"{g:.1f}", f"{g / QUOTED_PEAK_GFLOPS:.0%}"] for k, g in kernels],
    )

    rows, floors = [], {}
    for arch in ("rescan", "mbcnn-light", "mbcnn"):
        macs, at_best = floor_seconds(arch, s, best)
        at_quoted = 2 * macs / (QUOTED_PEAK_GFLOPS * 1e9)
        floors[arch] = {"macs": macs, "floor_s": at_best, "quoted_floor_s": at_quoted}
        rows.append([
            arch, f"{macs / 1e9:.1f} G", f"{at_quoted:.2f} s", f"{at_best:.2f} s",
            f"{TARGETS_S[arch]:.1f} s" if s == 1024 else "-",
        ])  # fmt: skip
    print_table(
        f"Compute floor at {s}x{s}: every MAC at the rate named",
        ["model", "MACs", "at quoted 460 GFLOP/s", f"at best measured {best:.0f}", "target"],
        rows,
    )
    print(f"load at the end {os.getloadavg()[0]:.2f}")
    if args.json:
        payload = {"kernels_gflops": dict(kernels), "best_gflops": best, "floors": floors}
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
