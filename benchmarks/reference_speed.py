"""Clearsight's default against each port's reference code: one table, one run, same input.

    python benchmarks/reference_speed.py [--rows rescan s2vd] [--sizes 512 1024]
                                         [--runs 3] [--threads N] [--json FILE]

Every row times the reference implementation and what clearsight runs by default on the
same input, with the same threads, in the same process: each path runs once (warm-up, and
its output), then `--runs` rounds in which both run in turn (interleaved, so a change in the
machine's load hits both alike); the median per path, their ratio, and the largest absolute
difference between the two outputs (fp32 on both sides, so it should be float rounding).

Rows (`ROWS`; another port adds its own `Row` builder there):

* `rescan`: the official RESCAN code (`../shared/peers/rescan_official` or
  `$CLEARSIGHT_RESCAN_SOURCE`, unchanged, with default-derain's weights loaded into it,
  `x - model(x)[-1]`) against `Restorer` on default-derain with the command line's default,
  `--backend auto` (torch for RESCAN: untiled up to 512x512, exact layer-synchronous tiles
  above). Square sizes from `--sizes`.
* `s2vd`: the official S2VD network (`networks/derain_net.py` of github.com/zsyOAOA/S2VD,
  with its released `model_states/derainer_rho05.pt`; folder from `CLEARSIGHT_S2VD_SOURCE`,
  default `/work/data/s2vd`, as the tests) run window by window as its
  `test_NTURain_synthetic.py` does, against `restore_frames` on video-derain (the same
  windows, `Windowed`'s default tiling) on a 26-frame clip at 128x128 (`--s2vd-size`).

A row whose reference code is absent is printed as skipped with the reason; nothing of the
reference code is copied into the package. Input: the first BSDS background with light
synthetic rain (seeded noise where the data is absent), resized; S2VD's clip is that image
shifted by one pixel per frame.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import sys
import time
import types
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script
from restore_speed import (  # noqa: E402 - beside this script
    OFFICIAL_DIR,
    _cpu,
    _official_restore,
    official_rescan,
    test_image,
)

S2VD_SOURCE = Path(os.environ.get("CLEARSIGHT_S2VD_SOURCE", "/work/data/s2vd"))
Run = Callable[[], torch.Tensor]


@dataclass
class Pair:
    """The two paths of a row, each a call that returns its output as [.., 3, H, W]."""

    reference: Run
    clearsight: Run


@dataclass
class Row:
    """One line of the table. `build` returns the two paths, or a string: why the row is
    skipped (the reference code or its weights are absent)."""

    model: str
    size: str
    reference: str
    clearsight: str
    build: Callable[[], Pair | str]
    result: dict[str, Any] = field(default_factory=dict)


# -- RESCAN ----------------------------------------------------------------------------------
def rescan_rows(sizes: list[int]) -> Iterator[Row]:
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.zoo import resolve_model

    def build(size: int) -> Pair | str:
        loaded = resolve_model("default-derain")
        net = official_rescan(loaded.model.state_dict())
        if net is None:
            return f"official RESCAN code not found at {OFFICIAL_DIR}"
        restorer = Restorer(loaded, InferenceOptions(backend="auto"))
        x = test_image(size)
        return Pair(lambda: _official_restore(net, x), lambda: restorer.restore(x))

    for size in sizes:
        yield Row(
            "RESCAN (default-derain)",
            f"{size}x{size}",
            "official code (XiaLiPKU/RESCAN e28d1d7c)",
            "Restorer, --backend auto",
            lambda size=size: build(size),
        )


# -- S2VD ------------------------------------------------------------------------------------
def _official_s2vd_class() -> type[torch.nn.Module] | None:
    """The official `DerainNet`, imported from its folder under a private package name."""
    folder = S2VD_SOURCE / "networks"
    if not (folder / "derain_net.py").is_file():
        return None
    pkg = "_s2vd_official_networks"
    if pkg not in sys.modules:
        package = types.ModuleType(pkg)
        package.__path__ = [str(folder)]
        sys.modules[pkg] = package
    return importlib.import_module(f"{pkg}.derain_net").DerainNet


def _official_s2vd_clip(
    net: torch.nn.Module, clip: torch.Tensor, truncate: int = 24
) -> torch.Tensor:
    """The official test's window loop (test_NTURain_synthetic.py), restated: windows of
    `truncate` frames with 2 frames of context each side, context frames dropped."""
    n = clip.shape[2]
    starts = list(range(0, n, truncate))
    ends = [*range(truncate, n, truncate), n]
    ext_starts = [0, *(s - 2 for s in starts[1:])]
    ext_ends = [*(e + 2 for e in ends[:-1]), n]
    out = torch.zeros_like(clip)
    with torch.no_grad():
        for i, (s, e, es, ee) in enumerate(zip(starts, ends, ext_starts, ext_ends, strict=True)):
            y = net(clip[:, :, es:ee]).clamp_(0.0, 1.0)
            lo = 0 if i == 0 else 2
            hi = y.shape[2] - (0 if i == len(starts) - 1 else 2)
            out[0, :, s:e] = y[0, :, lo:hi]
    return out


def s2vd_rows(size: int, frames: int = 26) -> Iterator[Row]:
    from clearsight.engine.video_window import restore_frames, video_model
    from clearsight.zoo import resolve_model

    def build() -> Pair | str:
        cls = _official_s2vd_class()
        weights = S2VD_SOURCE / "model_states" / "derainer_rho05.pt"
        if cls is None or not weights.is_file():
            return f"official S2VD code or weights not found at {S2VD_SOURCE}"
        net = cls(n_features=32, n_resblocks=8).eval()
        net.load_state_dict(torch.load(weights, weights_only=True, map_location="cpu"))
        image = test_image(size + frames)[0]
        clip = torch.stack([image[:, i : i + size, i : i + size] for i in range(frames)], 1)
        clip = clip[None].contiguous()  # [1, 3, T, H, W]
        video = video_model(resolve_model("video-derain"))

        def ours() -> torch.Tensor:
            frames_in = [clip[0, :, t] for t in range(frames)]
            return torch.stack(list(restore_frames(frames_in, video)), 1)[None]

        return Pair(lambda: _official_s2vd_clip(net, clip), ours)

    yield Row(
        "S2VD (video-derain)",
        f"{frames} frames {size}x{size}",
        "official network (zsyOAOA/S2VD), its test's windows",
        "restore_frames, default tiling",
        build,
    )


ROWS: dict[str, Callable[[argparse.Namespace], Iterator[Row]]] = {
    "rescan": lambda a: rescan_rows(a.sizes),
    "s2vd": lambda a: s2vd_rows(a.s2vd_size),
}
"""Row builders by name; a port with reference code adds its own here."""


# -- timing ----------------------------------------------------------------------------------
def measure(pair: Pair, runs: int) -> dict[str, Any]:
    """Warm-up and outputs, then `runs` interleaved rounds; medians, ratio and max |diff|."""
    ref_out, ours_out = pair.reference(), pair.clearsight()
    times: dict[str, list[float]] = {"reference": [], "clearsight": []}
    for _ in range(runs):
        for name, fn in (("reference", pair.reference), ("clearsight", pair.clearsight)):
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)
    med = {k: statistics.median(v) for k, v in times.items()}
    diff = float((ref_out.float() - ours_out.float()).abs().max())
    return {**med, "speedup": med["reference"] / med["clearsight"], "max_abs_diff": diff}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", choices=sorted(ROWS), default=sorted(ROWS))
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--s2vd-size", type=int, default=128)
    ap.add_argument("--runs", type=int, default=3, help="Timed rounds after the warm-up.")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    warnings.simplefilter("ignore")
    load = os.getloadavg()[0]
    print(f"{_cpu()} | {args.threads} threads | torch {torch.__version__} | load {load:.2f}")
    rows = [row for name in args.rows for row in ROWS[name](args)]
    for row in rows:
        pair = row.build()
        row.result = {"skipped": pair} if isinstance(pair, str) else measure(pair, args.runs)
        print(f"{row.model} {row.size}: {row.result}", flush=True)
    table = []
    for row in rows:
        r = row.result
        if "skipped" in r:
            table.append([row.model, row.size, "-", "-", "skipped", r["skipped"]])
            continue
        table.append([
            row.model, row.size, f"{r['reference']:.2f}", f"{r['clearsight']:.2f}",
            f"{r['speedup']:.2f}x", f"{r['max_abs_diff']:.1e}",
        ])  # fmt: skip
    print_table(
        f"reference code against clearsight's default, median of {args.runs} interleaved "
        f"rounds (seconds); load average {load:.2f} -> {os.getloadavg()[0]:.2f}",
        ["model", "input", "reference s", "clearsight s", "reference / clearsight",
         "max |diff|"],
        table,
    )  # fmt: skip
    if args.json:
        payload = [
            {"model": r.model, "input": r.size, "reference": r.reference,
             "clearsight": r.clearsight, **r.result}
            for r in rows
        ]  # fmt: skip
        args.json.write_text(json.dumps({"cpu": _cpu(), "threads": args.threads, "rows": payload}))


if __name__ == "__main__":
    main()
