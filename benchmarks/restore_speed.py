"""Restore speed side by side: the official RESCAN code against clearsight's backends.

    python benchmarks/restore_speed.py [--sizes 512 1024] [--runs 3] [--threads N]
                                       [--calibration-images 4] [--untiled] [--no-demoire]
                                       [--no-memory] [--write-table] [--json FILE]
                                       [--paths torch 'onnxruntime fp32' ...]

One run on one machine, so the ratios hold from machine to machine (the seconds do not):

* `official`: the official RESCAN code (`../shared/peers/rescan_official`, or
  `$CLEARSIGHT_RESCAN_SOURCE`; MIT, unchanged; skipped with a message where that folder is
  absent), fp32, `x - model(x)[-1]` under
  `torch.no_grad`, with default-derain's trained weights loaded into it (the parameter
  names differ only in `rnns`/`dec` against `units`/`decoder`);
* `torch`: clearsight's `Restorer` on default-derain with its defaults (what `restore
  --backend torch` runs: untiled up to 512x512, exact layer-synchronous tiles above);
* `onnxruntime fp32`: the same model exported to ONNX, through the same `Restorer`;
* `onnxruntime int8`: `compress quantize`'s default static int8 (QDQ, per-channel) of that
  export, calibrated on synthetic rain over the first `--calibration-images` BSDS
  backgrounds of `derain/bsds_clean`;
* `fp32 floor`: `cpu_floor.py`'s bound, RESCAN's MACs at the best fp32 kernel rate
  measured here in the same run.

`--paths` times only the named paths (and skips the floor): `onnxruntime fp32 NCHWc` is the
ONNX Runtime session as it was before RESCAN's sessions left out the NCHWc layout pass and
kept the arena between tiles, for a before/after comparison in one run
(`docs/export.md#onnx-runtime-backend`). `--untiled` adds each clearsight path with
`--tile 0`. Input: the first BSDS background (`derain/bsds_clean` of `../shared/data` or
`$CLEARSIGHT_SHARED_DATA`) with synthetic rain, resized to each square size (random where
the data is absent); every path's output is compared with the official one (max |diff|,
PSNR in dB). `--no-demoire` drops default-demoire (mbcnn-light, torch
against onnxruntime fp32), which `--write-table` needs for `backend auto`.

Timing: each path runs once (warm-up, and its output), then `--runs` rounds in which every
path runs once in turn (interleaved, so a change in the machine's load hits all paths
alike); the median per path. Peak memory of each path at the largest size: a fresh process
runs it once and reports its VmHWM growth (the peak resident set from after loading the
model to after the run; `--no-memory` skips it). The load average is printed: on a shared
CPU every figure is slower, the ratios much less so.

`--write-table` writes `src/clearsight/assets/backend_table.json` from the torch and
onnxruntime fp32 medians (with this CPU's name and the load average): the table `--backend
auto` reads (`clearsight/engine/backend_table.py`).
"""

from __future__ import annotations

import argparse
import datetime
import importlib
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script
from cpu_floor import floor_seconds, isa_flags, kernel_rates  # noqa: E402 - beside this script

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"  # beside the checkout; or the folders named by the variables
OFFICIAL_DIR = Path(
    os.environ.get("CLEARSIGHT_RESCAN_SOURCE", SHARED / "peers" / "rescan_official")
)
BSDS = Path(os.environ.get("CLEARSIGHT_SHARED_DATA", SHARED / "data")) / "derain" / "bsds_clean"
TABLE = ROOT / "src" / "clearsight" / "assets" / "backend_table.json"
DERAIN, DEMOIRE = "default-derain", "default-demoire"


# -- the models --------------------------------------------------------------------------
def official_rescan(weights: dict[str, torch.Tensor]) -> torch.nn.Module | None:
    """The official RESCAN network with `weights` (clearsight's names), or None when the
    peer code is absent. Its `settings.py` must be importable as `settings`."""
    if not (OFFICIAL_DIR / "model.py").is_file():
        return None
    sys.path.insert(0, str(OFFICIAL_DIR))
    try:
        official = importlib.import_module("model")
    finally:
        sys.path.remove(str(OFFICIAL_DIR))
    net = official.RESCAN().eval()
    renamed = {
        k.replace("units.", "rnns.", 1).replace("decoder.", "dec.", 1): v
        for k, v in weights.items()
    }
    net.load_state_dict(renamed)
    return net


def _official_restore(net: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return (x - net(x)[-1]).clamp(0.0, 1.0)


def _restorer(model: Any, tile: int | None = None, blocked_layout: bool | None = None) -> Any:
    """`Restorer` on `model` (a bundled name, or an .onnx path run by ONNX Runtime).
    `blocked_layout=True`: the ONNX Runtime session as it was before RESCAN's sessions
    left out the NCHWc pass and kept the arena between tiles (for a before/after row)."""
    from clearsight.artifact import LoadedModel
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.runtime.ort_backend import load_onnx
    from clearsight.zoo import resolve_model

    opts = InferenceOptions(tile=tile, backend="torch")
    if isinstance(model, Path):  # an .onnx file: its own config (ONNX Runtime)
        restorer = Restorer(load_onnx(model, blocked_layout=blocked_layout), opts)
        restorer.model.shrink_every_tile = bool(blocked_layout)
        return restorer
    loaded = model if isinstance(model, LoadedModel) else resolve_model(model)
    return Restorer(loaded, opts)


def _quantize(loaded: Any, n_images: int, tmp: Path) -> tuple[bytes, bytes]:
    """(fp32, int8) ONNX bytes of `loaded`; int8 calibrated as `quant_speed.py` does."""
    from quant_speed import calibration_dir

    from clearsight.compress.quantize import QuantizeOptions, quantize_model

    calib = calibration_dir(DERAIN, n_images, tmp)
    result = quantize_model(loaded, calib, QuantizeOptions(max_images=n_images))
    return result.fp32_data, result.data


def _fp32_onnx(loaded: Any) -> bytes:
    from clearsight.compress.quantize import fp32_onnx

    return fp32_onnx(loaded)


# -- inputs and scores -------------------------------------------------------------------
def test_image(size: int) -> torch.Tensor:
    """[1,3,size,size] in [0,1]: the first BSDS background with light synthetic rain,
    resized; seeded noise where the data is absent."""
    files = sorted(BSDS.glob("*.jpg")) if BSDS.is_dir() else []
    if not files:
        return torch.rand(1, 3, size, size, generator=torch.Generator().manual_seed(size))
    from clearsight.data.synth_rain import rain_pair
    from clearsight.io import image_to_tensor, read_image

    rainy = rain_pair(read_image(files[0]), 0, files[0].stem, 0, "light")
    x = image_to_tensor(rainy)
    return F.interpolate(x, size=(size, size), mode="bicubic", antialias=True).clamp(0, 1)


def psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    mse = float(((a - b) ** 2).mean())
    return math.inf if mse == 0 else 10 * math.log10(1.0 / mse)


# -- memory in a fresh process ---------------------------------------------------------------
def _probe(path: str, size: int, files: dict[str, str]) -> None:
    """Subprocess body: build `path`'s model, run it once at `size`, print the VmHWM."""
    from clearsight.profile import peak_rss_mb  # VmHWM: a child's own peak, not its parent's

    warnings.simplefilter("ignore")
    run = _builders(files)[path]()
    x = test_image(size)
    base = peak_rss_mb()
    t0 = time.perf_counter()
    run(x)
    seconds = time.perf_counter() - t0
    print(json.dumps({"base_mb": base, "peak_mb": peak_rss_mb(), "seconds": seconds}))


def memory(path: str, size: int, threads: int, files: dict[str, str]) -> dict[str, float]:
    cmd = [sys.executable, __file__, "--probe", path, "--sizes", str(size)]
    cmd += ["--threads", str(threads), "--files", json.dumps(files)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


# -- the paths ---------------------------------------------------------------------------------
Run = Callable[[torch.Tensor], torch.Tensor]


def _builders(files: dict[str, str]) -> dict[str, Callable[[], Run]]:
    """Path name -> a function that builds it (in this process) and returns its run.
    `files`: the ONNX files ("fp32", "int8") the ONNX Runtime paths load."""
    from clearsight.zoo import resolve_model

    def official() -> Run:
        net = official_rescan(resolve_model(DERAIN).model.state_dict())
        assert net is not None
        return lambda x: _official_restore(net, x)

    def restorer(
        model: Any, tile: int | None = None, blocked: bool | None = None
    ) -> Callable[[], Run]:
        return lambda: _restorer(model, tile, blocked).restore

    out: dict[str, Callable[[], Run]] = {}
    if (OFFICIAL_DIR / "model.py").is_file():
        out["official"] = official
    out["torch"] = restorer(DERAIN)
    out["torch untiled"] = restorer(DERAIN, 0)
    for kind in ("fp32", "int8"):
        if kind in files:
            out[f"onnxruntime {kind}"] = restorer(Path(files[kind]))
            out[f"onnxruntime {kind} untiled"] = restorer(Path(files[kind]), 0)
    if "fp32" in files:  # the session as it was before the NCHWc pass was left out for RESCAN
        out["onnxruntime fp32 NCHWc"] = restorer(Path(files["fp32"]), None, True)
    out["demoire torch"] = restorer(DEMOIRE)
    if "demoire" in files:
        out["demoire onnxruntime fp32"] = restorer(Path(files["demoire"]))
    return out


def time_interleaved(runs: dict[str, Run], x: torch.Tensor, rounds: int) -> dict[str, Any]:
    """Warm-up (and output) of every path, then `rounds` rounds of one call each in turn."""
    outputs = {name: run(x) for name, run in runs.items()}
    times: dict[str, list[float]] = {name: [] for name in runs}
    cpu: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(rounds):
        for name, run in runs.items():
            t0, c0 = time.perf_counter(), time.process_time()
            run(x)
            times[name].append(time.perf_counter() - t0)
            cpu[name].append(time.process_time() - c0)
    return {
        "median": {n: statistics.median(t) for n, t in times.items()},
        "cpu": {n: statistics.median(t) for n, t in cpu.items()},
        "outputs": outputs,
    }


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()} x{os.cpu_count()} ({isa_flags()})"
    except OSError:
        pass
    return f"{platform.machine()} x{os.cpu_count()}"


def write_table(results: dict[int, dict[str, float]], loads: list[float], threads: int) -> Path:
    """The `backend auto` table from this run's torch and onnxruntime fp32 medians."""
    import onnxruntime

    from clearsight.atomic import atomic_write_text

    pairs = {"rescan": ("torch", "onnxruntime fp32")}
    pairs["mbcnn-light"] = ("demoire torch", "demoire onnxruntime fp32")
    archs: dict[str, dict[str, dict[str, float]]] = {}
    for arch, (t, o) in pairs.items():
        for size, med in results.items():
            if t in med and o in med:
                entry = {"torch": round(med[t], 4), "onnxruntime": round(med[o], 4)}
                archs.setdefault(arch, {})[str(size)] = entry
    table = {
        "note": "Median seconds through the Restorer's defaults (fp32), measured side by side "
        "by the command below; `--backend auto` picks the faster backend per architecture "
        "and nearest size. Another CPU may rank them differently: rerun the command there.",
        "command": " ".join(["python", "benchmarks/restore_speed.py", *sys.argv[1:]]),
        "cpu": _cpu(),
        "threads": threads,
        "torch": torch.__version__,
        "onnxruntime": onnxruntime.__version__,
        "measured": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "load_average": [round(v, 2) for v in loads],
        "architectures": archs,
    }
    atomic_write_text(TABLE, json.dumps(table, indent=2) + "\n")
    return TABLE


def _ratio(a: float | None, b: float | None) -> str:
    return "-" if a is None or b is None else f"{a / b:.2f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 1024])
    ap.add_argument("--runs", type=int, default=3, help="Timed rounds after the warm-up.")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--calibration-images", type=int, default=4)
    ap.add_argument("--untiled", action="store_true", help="Also time every path with tile 0.")
    ap.add_argument("--no-demoire", action="store_true", help="RESCAN rows only.")
    ap.add_argument("--no-memory", action="store_true", help="Skip the peak-memory probes.")
    ap.add_argument("--write-table", action="store_true", help="Write the backend auto table.")
    ap.add_argument(
        "--paths",
        nargs="+",
        default=None,
        help="Only these paths (e.g. torch 'onnxruntime fp32' 'onnxruntime fp32 NCHWc').",
    )
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--probe", help=argparse.SUPPRESS)
    ap.add_argument("--files", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    if args.probe:
        _probe(args.probe, args.sizes[0], json.loads(args.files))
        return
    if args.write_table and (args.no_demoire or args.paths):
        ap.error("--write-table needs every default path (drop --no-demoire and --paths)")
    warnings.simplefilter("ignore")  # export tracing chatter; speed and memory only
    loads = [os.getloadavg()[0]]
    print(
        f"{_cpu()} | {args.threads} threads | torch {torch.__version__} | "
        f"load average {loads[0]:.2f} at start",
        flush=True,
    )
    if not OFFICIAL_DIR.is_dir():
        print(f"official RESCAN code not found at {OFFICIAL_DIR}: its rows are skipped")

    from clearsight.zoo import resolve_model

    with tempfile.TemporaryDirectory(prefix="restore-speed-") as tmp_dir:
        tmp = Path(tmp_dir)
        files: dict[str, str] = {}
        if args.paths and not any("int8" in n for n in args.paths):
            fp32, int8 = _fp32_onnx(resolve_model(DERAIN)), None
        else:
            fp32, int8 = _quantize(resolve_model(DERAIN), args.calibration_images, tmp)
        for kind, data in (("fp32", fp32), ("int8", int8)):
            if data is None:
                continue
            (tmp / f"{kind}.onnx").write_bytes(data)
            files[kind] = str(tmp / f"{kind}.onnx")
        if not args.no_demoire and (not args.paths or any("demoire" in n for n in args.paths)):
            (tmp / "demoire.onnx").write_bytes(_fp32_onnx(resolve_model(DEMOIRE)))
            files["demoire"] = str(tmp / "demoire.onnx")
        builders = _builders(files)
        names = [n for n in builders if args.untiled or not n.endswith("untiled")]
        names = [n for n in names if n != "onnxruntime fp32 NCHWc" or args.paths]
        if args.paths:
            unknown = sorted(set(args.paths) - set(builders))
            if unknown:
                ap.error(f"unknown --paths {unknown}; known: {', '.join(builders)}")
            names = [n for n in builders if n in args.paths]
        if args.no_demoire:
            names = [n for n in names if not n.startswith("demoire")]

        big = max(args.sizes)
        mem: dict[str, dict[str, float]] = {}
        if not args.no_memory:
            for name in names:
                mem[name] = memory(name, big, args.threads, files)
                print(f"memory {name}: {mem[name]['peak_mb'] - mem[name]['base_mb']:.0f} MB")

        # the compute floor (skipped with --paths: a quick side-by-side of chosen paths)
        kernels = [] if args.paths else kernel_rates(big, args.runs, args.threads)
        best = max((g for _, g in kernels), default=None)
        runs = {name: builders[name]() for name in names}
        results: dict[int, dict[str, float]] = {}
        cpu_s: dict[int, dict[str, float]] = {}
        diffs: dict[int, dict[str, tuple[float, float]]] = {}
        for size in args.sizes:
            x = test_image(size)
            r = time_interleaved(runs, x, args.runs)
            results[size], cpu_s[size] = r["median"], r["cpu"]
            ref = r["outputs"].get("official")
            diffs[size] = {}
            for name, y in r["outputs"].items():
                if ref is not None and not name.startswith("demoire"):
                    diffs[size][name] = (float((y - ref).abs().max()), psnr(y, ref))
            print(f"{size}x{size} done, load average {os.getloadavg()[0]:.2f}", flush=True)
        loads.append(os.getloadavg()[0])

    rows = []
    for size in args.sizes:
        med = results[size]
        off = med.get("official")
        floor_s = None if best is None else floor_seconds("rescan", size, best)[1]
        if floor_s is not None:
            rows.append([f"{size}", "fp32 floor", f"{floor_s:.2f}", _ratio(off, floor_s)])
            rows[-1] += ["1.00x", "-", "-", "-"]
        for name in names:
            if name.startswith("demoire"):
                continue
            s = med[name]
            diff = diffs[size].get(name)
            rows.append([
                f"{size}", name, f"{s:.2f}", _ratio(off, s), _ratio(s, floor_s),
                "-" if diff is None else f"{diff[0]:.1e}",
                "-" if diff is None else f"{diff[1]:.1f}",
                f"{mem[name]['peak_mb'] - mem[name]['base_mb']:.0f}"
                if name in mem and size == big else "-",
            ])  # fmt: skip
    print_table(
        f"RESCAN (default-derain), median of {args.runs} interleaved rounds (seconds); "
        f"load average {loads[0]:.2f} -> {loads[-1]:.2f}",
        ["size", "path", "seconds", "official / path", "path / floor", "max |diff| vs "
         "official", "PSNR vs official", f"peak MB at {big}"],
        rows,
    )  # fmt: skip
    if any(n.startswith("demoire") for n in names):
        demo = []
        for size in args.sizes:
            med = results[size]
            t, o = med.get("demoire torch"), med.get("demoire onnxruntime fp32")
            floor_s = None if best is None else floor_seconds("mbcnn-light", size, best)[1]
            for name in ("demoire torch", "demoire onnxruntime fp32"):
                if name in med:
                    peak = mem.get(name) if size == big else None
                    demo.append([
                        f"{size}", name.removeprefix("demoire "), f"{med[name]:.2f}",
                        _ratio(med[name], floor_s),
                        "-" if peak is None else f"{peak['peak_mb'] - peak['base_mb']:.0f}",
                    ])  # fmt: skip
            demo.append([f"{size}", "torch / onnxruntime", _ratio(t, o), "-", "-"])
        print_table(
            f"default-demoire (mbcnn-light), median of {args.runs} rounds (seconds)",
            ["size", "path", "seconds", "path / floor", f"peak MB at {big}"],
            demo,
        )
    int8_line = []
    for size in args.sizes:
        med = results[size]
        ratio = _ratio(med.get("onnxruntime fp32"), med.get("onnxruntime int8"))
        int8_line.append(f"{size}: {ratio}")
    if "onnxruntime int8" in names:
        print(f"onnxruntime int8 speed-up over its fp32: {', '.join(int8_line)}")
    for size in args.sizes:  # wall and CPU seconds (all threads) against torch's
        t_wall, t_cpu = results[size].get("torch"), cpu_s[size].get("torch")
        vs = [
            f"{n} {_ratio(results[size][n], t_wall)} (CPU {_ratio(cpu_s[size][n], t_cpu)})"
            for n in names
            if n.startswith("onnxruntime")
        ]
        print(f"{size}: path / torch: {'; '.join(vs)}")
    if best is not None:
        print(f"best fp32 kernel here {best:.0f} GFLOP/s ({max(kernels, key=lambda k: k[1])[0]})")
    print(f"load average {loads[0]:.2f} at start, {os.getloadavg()[0]:.2f} at the end")
    if args.write_table:
        print(f"backend auto table written to {write_table(results, loads, args.threads)}")
    if args.json:
        payload = {
            "cpu": _cpu(),
            "threads": args.threads,
            "load_average": loads,
            "best_gflops": best,
            "median_s": {str(k): v for k, v in results.items()},
            "median_cpu_s": {str(k): v for k, v in cpu_s.items()},
            "vs_official": {str(k): v for k, v in diffs.items()},
            "memory": mem,
        }
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
