"""RESCAN adaptive stages: PSNR and time of all stages vs `--stages auto` on a paired set.

    python benchmarks/rescan_stages.py [--model default-derain] [--data DIR] [--limit N]
                                       [--thresholds 1e-3 ...] [--preset y-matlab]
                                       [--tile N] [--device cpu] [--json FILE]

`--model` is an artifact path, a bundled model name or an architecture name (random weights:
for a smoke test only). `--data` defaults to ../shared/data/derain/Rain100L beside the
checkout (rain/clean). Every image goes through the same `Restorer` and evaluation helper
(`clearsight.engine.evaluate.evaluate`, preset y-matlab unless `--preset`) that `clearsight
eval` uses, once with all stages and once per threshold with `--stages auto`, side by side:
the runs of one image follow each other (their order alternates from image to image), so a
busy, shared CPU slows all of them alike. One untimed warm-up image runs first. Time is the
model call only (`Restorer.timed_restore`), summed over the images; the speed-up is total
time with all stages / total time with auto. The load average is printed because the CPU
may be shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch

from clearsight.data.pairs import find_pairs
from clearsight.engine.evaluate import evaluate
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.errors import ClearsightError
from clearsight.metrics.presets import get_preset
from clearsight.models.rescan import DEFAULT_STAGE_THRESHOLD
from clearsight.zoo import resolve_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table as _table  # noqa: E402 - beside this script

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO_ROOT.parent / "shared" / "data" / "derain" / "Rain100L"


@dataclass
class Run:
    """One configuration's per-image figures."""

    label: str
    restorer: Restorer
    psnr: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    stages: list[float] = field(default_factory=list)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--model", default="default-derain", help="artifact, bundled or arch name")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="paired set (rain/clean)")
    ap.add_argument("--limit", type=int, default=None, help="first N pairs only")
    ap.add_argument(
        "--thresholds", type=float, nargs="+", default=[DEFAULT_STAGE_THRESHOLD], metavar="T"
    )
    ap.add_argument("--preset", default="y-matlab")
    ap.add_argument("--tile", type=int, default=None, help="as `clearsight eval --tile`")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    try:
        loaded = resolve_model(args.model, device=args.device)
        pairs = find_pairs(args.data)[: args.limit]
        preset = get_preset(args.preset)

        def restorer(stages: str, threshold: float = DEFAULT_STAGE_THRESHOLD) -> Restorer:
            opts = InferenceOptions(
                tile=args.tile, device=args.device, stages=stages, stage_threshold=threshold
            )
            return Restorer(loaded, opts)

        runs = [Run("all", restorer("all"))]
        runs += [Run(f"auto {t:g}", restorer("auto", t)) for t in args.thresholds]
    except ClearsightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not pairs:
        print(f"error: no pairs in {args.data}", file=sys.stderr)
        return 2
    trained = getattr(loaded.model, "stages", "?")
    print(
        f"model {args.model} ({loaded.config.architecture}, {trained} stages trained); "
        f"data {args.data} ({len(pairs)} pairs); preset {preset.name}; "
        f"{torch.get_num_threads()} threads; load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    for run in runs:  # warm-up (oneDNN primitives, allocator), not counted
        evaluate(run.restorer, pairs[:1], preset)
    for i, pair in enumerate(pairs):
        order = runs if i % 2 == 0 else runs[::-1]
        for run in order:
            res = evaluate(run.restorer, [pair], preset, data_name=str(args.data))
            r = res.images[0]
            run.psnr.append(r.metrics["psnr"])
            run.seconds.append(r.latency_ms / 1000.0)
            run.stages.extend(run.restorer.last_stages_used or [float("nan")])
        print(
            f"  {pair.name}: "
            + ", ".join(
                f"{run.label} {run.psnr[-1]:.2f} dB {run.stages[-1]:g} st {run.seconds[-1]:.2f} s"
                for run in runs
            ),
            flush=True,
        )
    base = runs[0]
    header = [
        "threshold",
        "PSNR all",
        "PSNR auto",
        "delta dB",
        "mean stages",
        "time all s",
        "time auto s",
        "speed-up",
    ]
    rows, figures = [], []
    for run in runs[1:]:
        p_all, p_auto = statistics.fmean(base.psnr), statistics.fmean(run.psnr)
        t_all, t_auto = sum(base.seconds), sum(run.seconds)
        stages = statistics.fmean(run.stages)
        rows.append(
            [
                run.label.removeprefix("auto "),
                f"{p_all:.3f}",
                f"{p_auto:.3f}",
                f"{p_auto - p_all:+.3f}",
                f"{stages:.2f}",
                f"{t_all:.2f}",
                f"{t_auto:.2f}",
                f"{t_all / t_auto:.2f}x",
            ]
        )
        figures.append(
            {
                "threshold": float(run.label.removeprefix("auto ")),
                "psnr_all": p_all,
                "psnr_auto": p_auto,
                "delta_db": p_auto - p_all,
                "mean_stages": stages,
                "stages_hist": {f"{k:g}": run.stages.count(k) for k in sorted(set(run.stages))},
                "time_all_s": t_all,
                "time_auto_s": t_auto,
                "median_all_s": statistics.median(base.seconds),
                "median_auto_s": statistics.median(run.seconds),
                "speedup": t_all / t_auto,
            }
        )
    _table(
        f"{args.model}: all {trained} stages vs auto on {args.data.name} "
        f"(n = {len(pairs)}, preset {preset.name}, total model time)",
        header,
        rows,
    )
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    if args.json is not None:
        payload = {
            "model": args.model,
            "data": str(args.data),
            "n": len(pairs),
            "preset": preset.name,
            "trained_stages": trained,
            "rows": figures,
        }
        args.json.write_text(json.dumps(payload, indent=2) + "\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
