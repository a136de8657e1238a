"""Tiled against untiled output of ESDNet and NAFNet at their default sizes, initialised at
random (seeded): the largest absolute difference and how many pixels differ at 8 bits.

    OMP_NUM_THREADS=1 python benchmarks/tile_gap.py --size 1024 --tile 512

Random weights are a stand-in for released ones (none ship here); NAFNet's block scales,
zero at initialisation, are set to N(0, 0.1) so that no block is the identity.
"""

from __future__ import annotations

import argparse
import time

import torch

from clearsight.models.registry import build_model


def _model(arch: str) -> torch.nn.Module:
    torch.manual_seed(0)
    model = build_model(arch).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith(("beta", "gamma")):
                p.normal_(0.0, 0.1)
    return model


def _image(size: int) -> torch.Tensor:
    """A smooth image with edges and texture (random noise would be a pathological input)."""
    g = torch.Generator().manual_seed(1)
    coarse = torch.rand(1, 3, size // 32, size // 32, generator=g)
    x = torch.nn.functional.interpolate(coarse, size=(size, size), mode="bicubic")
    return (x + 0.05 * torch.rand(1, 3, size, size, generator=g)).clamp(0, 1)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--tile", type=int, default=512)
    parser.add_argument("--arch", nargs="+", default=["nafnet", "esdnet"])
    ns = parser.parse_args()
    x = _image(ns.size)
    for arch in ns.arch:
        model = _model(arch)
        with torch.no_grad():
            t0 = time.perf_counter()
            whole = model.final_output(x).clamp(0, 1)
            t1 = time.perf_counter()
            tiled = model.restore_tiled(x, tile=ns.tile).clamp(0, 1)
            t2 = time.perf_counter()
        diff = (tiled - whole).abs()
        q = ((tiled * 255).round() != (whole * 255).round()).any(1).float().mean().item()
        print(
            f"{arch} {ns.size}x{ns.size} tile {ns.tile}: max abs {diff.max().item():.2e}, "
            f"mean {diff.mean().item():.2e}, 8-bit pixels differing {100 * q:.3f}%, "
            f"untiled {t1 - t0:.1f} s, tiled {t2 - t1:.1f} s"
        )


if __name__ == "__main__":
    main()
