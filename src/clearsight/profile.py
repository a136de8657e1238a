"""Model complexity and speed: parameters, MACs per pixel, latency and peak memory.

MACs are counted by `measure/macs.py` (`count_macs`). Latency
is the median of `runs` timed runs after one warm-up, through the same `Restorer` that
`clearsight restore` uses. Peak memory is the growth of the peak RSS over the RSS after
loading the model, measured in a fresh subprocess per backend (sizes in increasing order, so
each figure is that size's own peak).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clearsight.artifact import LoadedModel, build_from_config, save_artifact
from clearsight.errors import ClearsightError
from clearsight.measure.macs import count_macs
from clearsight.models.registry import count_parameters


def structure_of(loaded: LoadedModel) -> nn.Module:
    """A PyTorch module with the artifact's structure (an ONNX model is rebuilt from its
    config; MACs and parameter counts do not depend on the weights)."""
    if loaded.on_onnxruntime:  # at its real widths when pruned
        return build_from_config(loaded.config, source=loaded.source).eval()
    return loaded.model


def parse_sizes(text: str) -> list[tuple[int, int]]:
    """'256,512' or '321x481' -> [(256, 256), (512, 512)]."""
    sizes = []
    for part in (p.strip() for p in text.split(",")):
        try:
            h, _, w = part.lower().partition("x")
            hw = (int(h), int(w or h))
        except ValueError:
            raise ClearsightError(f"--sizes: bad size {part!r} in {text!r}; e.g. 256,512") from None
        if min(hw) < 1:
            raise ClearsightError(f"--sizes: size {part!r} must be positive")
        sizes.append(hw)
    return sizes


# -- timing ---------------------------------------------------------------------------------
def _rss_mb() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def peak_rss_mb() -> float:
    """This process's peak resident set in MiB: VmHWM on Linux, which starts afresh at exec.
    ru_maxrss does not: a child started by fork or vfork reports at least its parent's RSS,
    so a measuring subprocess of a large process would measure its parent."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024.0


def _time_sizes(
    run: Callable[[torch.Tensor], Any],
    sizes: Sequence[tuple[int, int]],
    runs: int,
    memory: bool,
) -> list[dict[str, Any]]:
    """Median latency (ms) of `run` on a seeded [1, 3, H, W] input at each size (one warm-up
    first), with every run's time; peak RSS growth since the call if `memory`."""
    base = _rss_mb()
    rows = []
    for h, w in sorted(sizes, key=lambda s: s[0] * s[1]):
        x = torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(h * w))
        run(x)  # warm-up
        times = []
        for _ in range(max(1, runs)):
            t0 = time.perf_counter()
            run(x)
            times.append((time.perf_counter() - t0) * 1000.0)
        row: dict[str, Any] = {"size": f"{h}x{w}", "latency_ms": statistics.median(times)}
        row["runs_ms"] = times
        if memory:
            row["peak_mb"] = max(0.0, peak_rss_mb() - base)
        rows.append(row)
    return rows


def time_restorer(
    loaded: LoadedModel,
    sizes: Sequence[tuple[int, int]],
    runs: int = 3,
    tile: int | None = None,
    memory: bool = False,
) -> list[dict[str, Any]]:
    """Median latency (ms) at each size through a `Restorer`; peak RSS growth if `memory`."""
    from clearsight.engine.inference import InferenceOptions, Restorer

    restorer = Restorer(loaded, InferenceOptions(tile=tile))
    m = max(8, int(restorer.net.pad_multiple))
    restorer.restore(torch.rand(1, 3, m, m))  # load kernels and libraries before the baseline
    return _time_sizes(restorer.restore, sizes, runs, memory)


@torch.no_grad()
def time_detector(
    loaded: LoadedModel,
    sizes: Sequence[tuple[int, int]],
    runs: int = 3,
    memory: bool = False,
) -> list[dict[str, Any]]:
    """`time_restorer` for a detector: the network's forward on one [1, 3, H, W] input at
    each size (its fixed input size in practice), without pre- and postprocessing."""
    model = loaded.model.eval()
    if sizes:
        model(torch.rand(1, 3, *min(sizes)))  # load kernels and libraries before the baseline
    return _time_sizes(model, sizes, runs, memory)


def time_model(
    loaded: LoadedModel,
    sizes: Sequence[tuple[int, int]],
    runs: int = 3,
    tile: int | None = None,
    memory: bool = False,
) -> list[dict[str, Any]]:
    """`time_detector` for a detector, else `time_restorer`."""
    if loaded.is_detector:
        return time_detector(loaded, sizes, runs, memory)
    return time_restorer(loaded, sizes, runs, tile, memory)


@contextlib.contextmanager
def _model_file(loaded: LoadedModel, backend: str) -> Iterator[Path]:
    """`loaded` as a file a subprocess can load: an artifact folder or an exported .onnx."""
    with tempfile.TemporaryDirectory(prefix="clearsight-profile-") as d:
        is_onnx = loaded.on_onnxruntime
        if backend == "onnxruntime" or is_onnx:
            if is_onnx:
                src = Path(loaded.source)
                if not src.is_file():
                    raise ClearsightError(f"{loaded.source}: cannot re-open the ONNX model")
                yield src
                return
            from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx

            path, _ = export_onnx(loaded, Path(d) / "model.onnx", parity_sizes=PARITY_SIZES_QUICK)
            yield path
            return
        if loaded.config.architecture == "test":  # pragma: no cover - test helper models
            raise ClearsightError("unregistered models cannot be profiled in a subprocess")
        yield save_artifact(loaded.model, Path(d) / "model", loaded.config)


def measure_in_subprocess(
    loaded: LoadedModel,
    backend: str,
    sizes: Sequence[tuple[int, int]],
    runs: int = 3,
    tile: int | None = None,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """`time_model` with memory, in a fresh Python process (clean RSS baseline)."""
    with _model_file(loaded, backend) as path:
        args = {
            "model": str(path),
            "sizes": [list(s) for s in sizes],
            "runs": runs,
            "tile": tile,
            "threads": threads or torch.get_num_threads(),
        }
        argv = [sys.executable, "-m", "clearsight.profile", "--worker", json.dumps(args)]
        return run_json_worker(argv, f"profile worker ({backend})")


def run_json_worker(argv: list[str], label: str) -> Any:
    """Run a measuring subprocess and return the JSON on the last line of its output; a
    failure is a one-line error with `label` and the last line of its stderr."""
    proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise ClearsightError(f"{label} failed: {tail}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _worker(spec: str) -> None:
    import warnings

    from clearsight.zoo import resolve_model

    args = json.loads(spec)
    torch.set_num_threads(int(args["threads"]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        loaded = resolve_model(args["model"])
    sizes = [tuple(s) for s in args["sizes"]]
    rows = time_model(loaded, sizes, args["runs"], args["tile"], memory=True)
    print(json.dumps(rows))


# -- the report -----------------------------------------------------------------------------
@dataclass
class ScoredRun:
    """What every scored comparison records about its run: the (first) model, the data and
    the metric preset it was scored on, how many images, and the machine's threads and load
    (the spread of its timings depends on them). `QuantReport`, `BenchmarkReport` and the
    multi-model profile table extend it with their rows."""

    model: str
    data: str
    preset: str
    n_images: int
    threads: int
    load_average: tuple[float, float, float]


@dataclass
class ProfileReport:
    model: str
    architecture: str
    params: int
    macs_per_pixel: float
    macs_by_type: dict[str, int]
    mac_size: str
    threads: int
    latency: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def profile_model(
    loaded: LoadedModel,
    *,
    sizes: Sequence[tuple[int, int]] = ((256, 256), (512, 512)),
    backends: Sequence[str] | None = None,
    runs: int = 3,
    tile: int | None = None,
    memory: bool = True,
    mac_size: tuple[int, int] = (256, 256),
) -> ProfileReport:
    """Parameters, MACs per pixel and per-backend latency (and peak memory) of `loaded`.

    `backends` defaults to torch for a PyTorch model and onnxruntime for an `.onnx` file
    (which has no PyTorch backend).
    """
    from clearsight.export.onnx import to_onnxruntime
    from clearsight.runtime.ort_backend import check_backend

    is_onnx = loaded.on_onnxruntime
    backends = list(backends or (["onnxruntime"] if is_onnx else ["torch"]))
    for b in backends:
        check_backend(b)
    if is_onnx and "torch" in backends:
        raise ClearsightError(
            f"{loaded.source} is an ONNX model: profile it with --backend onnxruntime"
        )
    structure = structure_of(loaded)
    macs = count_macs(structure, *mac_size)
    report = ProfileReport(
        model=loaded.source,
        architecture=loaded.config.architecture,
        params=count_parameters(structure),
        macs_per_pixel=macs.per_pixel,
        macs_by_type=macs.by_type,
        mac_size=f"{mac_size[0]}x{mac_size[1]}",
        threads=torch.get_num_threads(),
        load_average=os.getloadavg(),
    )
    for b in backends:
        if memory:
            report.latency[b] = measure_in_subprocess(loaded, b, sizes, runs, tile)
        else:
            target = to_onnxruntime(loaded) if b == "onnxruntime" else loaded
            report.latency[b] = time_restorer(target, sizes, runs, tile)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="internal: the profile worker process")
    parser.add_argument("--worker", required=True)
    _worker(parser.parse_args().worker)
