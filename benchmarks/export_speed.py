"""PyTorch eager vs ONNX Runtime: latency and peak memory of the restoration models.

    python benchmarks/export_speed.py [--models rescan mbcnn mbcnn-light] [--sizes 512 1024]
                                      [--runs 3] [--threads N] [--no-tiled]
                                      [--stats-pixels 262144] [--session-options]

Random (seeded) weights; each model goes through the same `Restorer` that `clearsight
restore` uses. `torch` runs its defaults: images above 512x512 are tiled (MBCNN: above
1 MP) through the model's own tiled path (RESCAN: exact layer-synchronous; MBCNN: tiles
sharing whole-image tone vectors). ONNX Runtime gets the model exported to a file
(parity-checked at 64x96 and 67x93); `onnxruntime untiled` runs it untiled (`--tile 0`).

The `onnxruntime tiled` row (at the largest size, for RESCAN and MBCNN) makes ONNX Runtime
tile with shared whole-image statistics (runtime/ort_backend.py): tiles of the model's
default tile size (512), statistics from an antialiased downscale to `--stats-pixels`
(default 512x512, a 2x downscale at 1024x1024). That is what the Restorer does by default
for RESCAN above 512x512; MBCNN's defaults (untiled up to 1 MP, statistics from up to 1 MP)
would run a 1024x1024 image untiled.

Every backend runs in a fresh subprocess (`clearsight.profile.measure_in_subprocess`, or this
script's own worker for the tiled row): latency is the median of `--runs` runs after one
warm-up; peak memory is the growth of the peak RSS over the RSS after loading the model and
one tiny warm-up. Targets at 1024x1024 through the fastest backend: RESCAN <= 3.0 s and
<= 1 GB, MBCNN <= 6.0 s and <= 3 GB. The CPU may be shared: the load average is printed at
the start and the end.

`--session-options` instead times ONNX Runtime session-option variants side by side on one
exported graph (the first model, the smallest size, rounds interleaved): the settings
`make_session` uses against no NCHWc layout (ORT_ENABLE_EXTENDED), no spinning, parallel
execution, and two one-thread sessions running two images at once.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from clearsight.errors import ClearsightError
from clearsight.measure.macs import count_macs
from clearsight.models.contract import as_restoration_model
from clearsight.models.registry import list_specs
from clearsight.profile import measure_in_subprocess, run_json_worker, time_restorer
from clearsight.zoo import resolve_model

TARGETS = {"rescan": (3.0, 1024.0), "mbcnn": (6.0, 3072.0), "mbcnn-light": (6.0, 3072.0)}
UNTILED = "onnxruntime untiled"
TILED = "onnxruntime tiled"


def _export(name: str, folder: str) -> Path:
    from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = resolve_model(name)
        path, _ = export_onnx(loaded, Path(folder) / "model.onnx", parity_sizes=PARITY_SIZES_QUICK)
    return path


def _tiled_worker(spec: str) -> None:
    """In a fresh process: the Restorer forced to tile an exported model (shared stats)."""
    args = json.loads(spec)
    torch.set_num_threads(int(args["threads"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = resolve_model(args["model"])
        model = loaded.model
        if getattr(model, "shared_stats", None) is None:
            raise SystemExit(f"{args['model']}: no shared-statistics graphs (not tiled)")
        model.stats_pixels = int(args["stats_pixels"])
        sizes = [tuple(s) for s in args["sizes"]]
        rows = time_restorer(loaded, sizes, args["runs"], model.tiling.default_tile, memory=True)
    print(json.dumps(rows))


def measure_tiled(
    name: str, size: int, runs: int, threads: int, stats_pixels: int
) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory(prefix="clearsight-bench-") as d:
        spec = {
            "model": str(_export(name, d)),
            "sizes": [[size, size]],
            "runs": runs,
            "threads": threads,
            "stats_pixels": stats_pixels,
        }
        argv = [sys.executable, __file__, "--tiled-worker", json.dumps(spec)]
        try:
            return run_json_worker(argv, f"tiled worker ({name})")
        except ClearsightError as exc:
            raise SystemExit(str(exc)) from None


def compare_session_options(name: str, size: int, runs: int, threads: int) -> None:
    """Median latency of one exported graph under several session-option variants."""
    import numpy as np
    import onnxruntime as ort

    def session(
        path: Path,
        *,
        threads: int = threads,
        extended: bool = False,
        no_spin: bool = False,
        parallel: bool = False,
    ) -> ort.InferenceSession:
        o = ort.SessionOptions()
        o.intra_op_num_threads = threads
        o.inter_op_num_threads = 2 if parallel else 1
        mode = ort.ExecutionMode
        o.execution_mode = mode.ORT_PARALLEL if parallel else mode.ORT_SEQUENTIAL
        level = ort.GraphOptimizationLevel
        o.graph_optimization_level = level.ORT_ENABLE_EXTENDED if extended else level.ORT_ENABLE_ALL
        if no_spin:
            o.add_session_config_entry("session.intra_op.allow_spinning", "0")
        o.log_severity_level = 3
        return ort.InferenceSession(str(path), sess_options=o, providers=["CPUExecutionProvider"])

    x = np.random.default_rng(0).random((1, 3, size, size), dtype=np.float32)
    with tempfile.TemporaryDirectory(prefix="clearsight-bench-") as d:
        path = _export(name, d)
        variants = {
            f"make_session (ALL, {threads} threads, sequential)": session(path),
            "ORT_ENABLE_EXTENDED (no NCHWc layout)": session(path, extended=True),
            "allow_spinning 0": session(path, no_spin=True),
            "ORT_PARALLEL, 2 inter-op threads": session(path, parallel=True),
        }
        one = session(path, threads=1)
    pool = ThreadPoolExecutor(threads)

    def workers() -> None:
        list(pool.map(lambda _: one.run(None, {"input": x}), range(threads)))

    labels = [*variants, f"{threads} one-thread sessions at once (per image)"]
    times: dict[str, list[float]] = {k: [] for k in labels}
    for s in variants.values():
        s.run(None, {"input": x})
    workers()
    for _ in range(max(1, runs)):
        for k, s in variants.items():
            t0 = time.perf_counter()
            s.run(None, {"input": x})
            times[k].append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        workers()
        times[labels[-1]].append((time.perf_counter() - t0) / threads)
    pool.shutdown()
    print(f"{name} at {size}x{size}, median of {runs} interleaved rounds:")
    for k in labels:
        print(f"  {k:48s} {statistics.median(times[k]):6.3f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", nargs="+", default=["rescan", "mbcnn", "mbcnn-light"])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-tiled", action="store_true", help="skip the onnxruntime tiled row")
    ap.add_argument("--stats-pixels", type=int, default=512 * 512)
    ap.add_argument("--session-options", action="store_true")
    ap.add_argument("--tiled-worker", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.tiled_worker:
        _tiled_worker(args.tiled_worker)
        return
    torch.set_num_threads(args.threads)
    registered = {s.name for s in list_specs()}
    models = [m for m in args.models if m in registered]
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print(
        f"torch {torch.__version__} | {args.threads} threads | runs {args.runs} (median) | "
        f"load average {load} at start"
    )
    if args.session_options:
        compare_session_options(models[0], min(args.sizes), args.runs, args.threads)
        print(f"load average {' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end.")
        return
    big = max(args.sizes)
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
            "torch": measure_in_subprocess(loaded, "torch", sizes, args.runs, threads=args.threads),
            UNTILED: measure_in_subprocess(
                loaded, "onnxruntime", sizes, args.runs, tile=0, threads=args.threads
            ),
        }
        # global pooling (RESCAN's SE, MBCNN's tone blocks): tiles share whole-image statistics
        if not args.no_tiled and as_restoration_model(loaded.model).stats_layout() is not None:
            rows = measure_tiled(name, big, args.runs, args.threads, args.stats_pixels)
            results[TILED] = [{"latency_ms": float("nan")}] * (len(sizes) - 1) + rows
        t_target, m_target = TARGETS.get(name, (float("inf"), float("inf")))
        best = min(results, key=lambda b: results[b][-1]["latency_ms"])
        for b, rows in results.items():
            secs = [r["latency_ms"] / 1000 for r in rows]
            peak = rows[-1]["peak_mb"]
            ok = secs[-1] <= t_target and peak <= m_target
            lines.append(
                [name, b + (" *" if b == best else "")]
                + [f"{s:.2f}" if s == s else "-" for s in secs]
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
        f"* fastest backend at {big}x{big}. {TILED}: tiles of 512 px, statistics from at most "
        f"{args.stats_pixels:,} pixels. load average "
        f"{' '.join(f'{v:.2f}' for v in os.getloadavg())} at the end."
    )


if __name__ == "__main__":
    main()
