"""PyTorch eager vs ONNX Runtime: latency and peak memory of the restoration models.

    python benchmarks/export_speed.py [--models rescan mbcnn mbcnn-light] [--sizes 512 1024]
                                      [--runs 3] [--threads N]

Random (seeded) weights; each model goes through the same `Restorer` that `clearsight
restore` uses, with its defaults: images above 512x512 are tiled, PyTorch through the model's
own tiled path (RESCAN: exact layer-synchronous; MBCNN: tiles sharing whole-image tone
vectors), ONNX Runtime untiled (both models pool globally; see engine/ort_backend.py).
ONNX Runtime gets the model exported in memory (parity-checked at 64x96 and 67x93).

Every backend runs in a fresh subprocess (`clearsight.profile.measure_in_subprocess`):
latency is the median of `--runs` runs after one warm-up; peak memory is the growth of the
peak RSS over the RSS after loading the model and one tiny warm-up. Targets at 1024x1024
through the fastest backend: RESCAN <= 3.0 s and <= 1 GB, MBCNN <= 6.0 s and <= 3 GB. The
CPU may be shared: the load average is printed at the start and the end.
"""

from __future__ import annotations

import argparse
import os
import warnings

import torch

from clearsight.models.registry import list_specs
from clearsight.profile import count_macs, measure_in_subprocess
from clearsight.zoo import resolve_model

TARGETS = {"rescan": (3.0, 1024.0), "mbcnn": (6.0, 3072.0), "mbcnn-light": (6.0, 3072.0)}
BACKENDS = ("torch", "onnxruntime")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["rescan", "mbcnn", "mbcnn-light"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    registered = {s.name for s in list_specs()}
    models = [m for m in args.models if m in registered]
    big = max(args.sizes)
    print(
        f"torch {torch.__version__} | {args.threads} threads | runs {args.runs} (median) | "
        f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at start"
    )
    header = ["model", "backend"] + [f"{s}x{s} s" for s in args.sizes]
    header += [f"peak MB @{big}", "target s", "target MB", "ok"]
    lines = [header]
    for name in models:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = resolve_model(name)
        macs = count_macs(loaded.model, 256, 256).per_pixel
        sizes = [(s, s) for s in args.sizes]
        results = {
            b: measure_in_subprocess(loaded, b, sizes, args.runs, threads=args.threads)
            for b in BACKENDS
        }
        t_target, m_target = TARGETS.get(name, (float("inf"), float("inf")))
        best = min(BACKENDS, key=lambda b: results[b][-1]["latency_ms"])
        for b in BACKENDS:
            rows = results[b]
            secs = [r["latency_ms"] / 1000 for r in rows]
            peak = rows[-1]["peak_mb"]
            ok = secs[-1] <= t_target and peak <= m_target
            lines.append(
                [name, b + (" *" if b == best else "")]
                + [f"{s:.2f}" for s in secs]
                + [f"{peak:.0f}", f"{t_target:.1f}", f"{m_target:.0f}", "yes" if ok else "no"]
            )
        print(f"{name}: {macs / 1e3:,.1f} k MACs/pixel")
    widths = [max(len(r[i]) for r in lines) for i in range(len(header))]
    for r in lines:
        print(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
    print(
        f"* fastest backend at {big}x{big}. load average "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end."
    )


if __name__ == "__main__":
    main()
