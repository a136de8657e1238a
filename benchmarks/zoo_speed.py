"""clearsight's default against the authors' code, side by side in one process: ESDNet and
NAFNet (ClearView's Mid shape), same random weights, same input, same threads.

    OMP_NUM_THREADS=1 PYTHONPATH=src:. python benchmarks/zoo_speed.py --nafnet 512 --esdnet 512

The reference networks come from the authors' code as the parity tests find it
(tests/reference_code.py); the reference row runs their test procedure (NAFNet's forward,
which pads; ESDNet's mean-colour pad, forward and crop), the clearsight row
`Restorer.restore` with default options on an artifact imported from the reference's own
state dict. Each row alternates the two, `--runs` times each; it reports the median wall
time and the median CPU time of this process (`time.process_time`, which other processes
on a shared machine disturb less), their ratios, and the max abs difference of the outputs.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from clearsight.convert.torch_import import import_torch
from clearsight.engine.inference import Restorer
from tests.reference_code import reference_esdnet, reference_esdnet_test, reference_nafnet


def _randomise(net: torch.nn.Module, std: float) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return net.eval()


def _time(fn: Callable[[], torch.Tensor]) -> tuple[float, float, torch.Tensor]:
    w0, c0 = time.perf_counter(), time.process_time()
    y = fn()
    return time.perf_counter() - w0, time.process_time() - c0, y


def _row(name: str, ref_fn, ours_fn, runs: int) -> str:
    with torch.no_grad():
        ref_fn(), ours_fn()  # warm-up (oneDNN primitives, allocator)
        rw, rc, ow, oc = [], [], [], []
        for _ in range(runs):
            w, c, ref_y = _time(ref_fn)
            rw.append(w), rc.append(c)
            w, c, our_y = _time(ours_fn)
            ow.append(w), oc.append(c)
    diff = (ref_y.clamp(0, 1) - our_y).abs().max().item()  # the Restorer clamps to [0, 1]
    med = statistics.median
    return (
        f"| {name} | {med(rw):.2f} | {med(ow):.2f} | {med(rw) / med(ow):.2f}x | "
        f"{med(rc):.2f} | {med(oc):.2f} | {med(rc) / med(oc):.2f}x | {diff:.1e} |"
    )


def _input(size: str) -> torch.Tensor:
    """A random image of `size` ("N" for NxN, or "WxH")."""
    w, _, h = size.partition("x")
    return torch.rand(1, 3, int(h or w), int(w))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--nafnet", nargs="*", default=["512"], help="sizes: N or WxH")
    parser.add_argument("--esdnet", nargs="*", default=["512"], help="sizes: N or WxH")
    parser.add_argument("--runs", type=int, default=3)
    ns = parser.parse_args()
    print(f"threads {torch.get_num_threads()}, torch {torch.__version__}")
    print(
        "| model, input | reference s | clearsight s | ratio | reference CPU s | "
        "clearsight CPU s | CPU ratio | max abs diff |"
    )
    print("|---|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        if ns.nafnet:
            ref = _randomise(
                reference_nafnet(
                    width=32, middle_blk_num=4, enc_blk_nums=[2, 2, 4, 8], dec_blk_nums=[2, 2, 2, 2]
                ),
                0.05,
            )
            torch.save(ref.state_dict(), Path(tmp) / "n.pth")
            import_torch(Path(tmp) / "n.pth", "nafnet", Path(tmp) / "nafnet")
            ours = Restorer.from_pretrained(str(Path(tmp) / "nafnet"))
            for size in ns.nafnet:
                x = _input(size)
                print(
                    _row(
                        f"NAFNet {size}",
                        lambda x=x: ref(x),
                        lambda x=x: ours.restore(x),
                        ns.runs,
                    )
                )
        if ns.esdnet:
            ref = _randomise(
                reference_esdnet(
                    en_feature_num=48, en_inter_num=32, de_feature_num=64, de_inter_num=32,
                    sam_number=1,
                ),
                0.02,
            )  # fmt: skip
            torch.save(ref.state_dict(), Path(tmp) / "e.pth")
            import_torch(Path(tmp) / "e.pth", "esdnet", Path(tmp) / "esdnet")
            ours = Restorer.from_pretrained(str(Path(tmp) / "esdnet"))
            for size in ns.esdnet:
                x = _input(size)
                print(
                    _row(
                        f"ESDNet {size}",
                        lambda x=x: reference_esdnet_test(ref, x),
                        lambda x=x: ours.restore(x),
                        ns.runs,
                    )
                )


if __name__ == "__main__":
    main()
