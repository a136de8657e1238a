"""`clearsight benchmark`: one model through every backend, side by side.

Rows: PyTorch eager (the model as loaded), PyTorch tuned (channels-last weights, inference
mode), and ONNX Runtime fp32 (exported in memory, parity-checked). Columns: file size
(safetensors / .onnx), parameters, MACs per pixel, the data set's PSNR under the model's
metric preset and its difference from eager, and latency at each size (median of runs,
through the same `Restorer` as `restore`).

What "tuned" keeps, measured at 256x256 on this 2-core AMD EPYC (AVX2, no avx512_bf16/AMX;
shared, so +-2x noise): channels-last weights gave no measurable gain (RESCAN already runs
channels-last inside `restore`; MBCNN-light 0.46 s either way) and stay exact (diff 8e-8), so
the row is kept as the reference "best settings" run; bf16 autocast is emulated here and was
9x slower for RESCAN (7.6 s vs 0.85 s) and ~290x for MBCNN-light (134 s vs 0.46 s), with
diffs of 7e-4; `torch.compile` took 50-60 s to compile per input shape (every new image
size recompiles) and ran RESCAN slower (2.2 s vs 1.0 s), so neither is used. `--quick` uses
one run and at most two images (for tests).
"""

from __future__ import annotations

import copy
import os
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from clearsight.artifact import LoadedModel, save_artifact
from clearsight.measure.macs import count_macs
from clearsight.profile import ScoredRun, structure_of, time_restorer

ROWS = ("PyTorch eager", "PyTorch tuned (channels_last)", "ONNX Runtime fp32")


@dataclass
class BenchRow:
    name: str
    file_mb: float
    params: int
    macs_per_pixel: float
    psnr: float | None
    psnr_diff: float | None
    latency_ms: dict[str, float] = field(default_factory=dict)
    note: str = ""

    def cells(self, sizes: list[str]) -> list[str]:
        """The row as table cells, for the rich table and the plain-text rendering alike."""
        return [
            self.name,
            f"{self.file_mb:.2f}",
            f"{self.params:,}",
            f"{self.macs_per_pixel / 1e3:,.1f}k",
            "-" if self.psnr is None else f"{self.psnr:.3f}",
            "-" if self.psnr_diff is None else f"{self.psnr_diff:+.4f}",
        ] + [f"{self.latency_ms[s]:.0f}" for s in sizes]


@dataclass
class BenchmarkReport(ScoredRun):
    rows: list[BenchRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _safetensors_mb(loaded: LoadedModel) -> float:
    with tempfile.TemporaryDirectory() as d:
        p = save_artifact(loaded.model, Path(d) / "m.safetensors", copy.deepcopy(loaded.config))
        return p.stat().st_size / 2**20


def _channels_last(loaded: LoadedModel) -> LoadedModel:
    model = copy.deepcopy(loaded.model).to(memory_format=torch.channels_last)
    return LoadedModel(model=model, config=loaded.config, source=loaded.source)


def _psnr(loaded: LoadedModel, pairs: Sequence[Any], preset_name: str) -> float:
    from clearsight.engine.evaluate import evaluate
    from clearsight.engine.inference import Restorer
    from clearsight.metrics.presets import get_preset

    result = evaluate(Restorer(loaded), pairs, get_preset(preset_name))
    return float(result.summary()["psnr"]["mean"])


def benchmark_model(
    loaded: LoadedModel,
    data: str | os.PathLike[str],
    *,
    sizes: Sequence[int] = (512, 1024),
    runs: int = 3,
    quick: bool = False,
    preset: str | None = None,
    max_images: int | None = None,
) -> BenchmarkReport:
    """Benchmark `loaded` on the pairs in `data` through every row of `ROWS`."""
    from clearsight.data.pairs import find_pairs
    from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx_bytes

    if loaded.on_onnxruntime:
        from clearsight.errors import ClearsightError

        raise ClearsightError("benchmark needs a PyTorch model (artifact or architecture name)")
    pairs = find_pairs(data)
    if max_images is not None:
        pairs = pairs[: max(0, max_images)]
    if quick:
        pairs, runs = pairs[:2], 1
    preset_name = preset or loaded.config.metric_preset
    structure = structure_of(loaded)
    macs = count_macs(structure, 256, 256).per_pixel
    params = sum(p.numel() for p in structure.parameters())
    report = BenchmarkReport(
        model=loaded.source,
        data=str(data),
        preset=preset_name,
        n_images=len(pairs),
        threads=torch.get_num_threads(),
        load_average=os.getloadavg(),
    )
    st_mb = _safetensors_mb(loaded)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        onnx_bytes, parity = export_onnx_bytes(loaded, parity_sizes=PARITY_SIZES_QUICK)
    from clearsight.runtime.ort_backend import load_onnx

    ort_loaded = load_onnx(onnx_bytes, source=f"{loaded.source} (onnxruntime)")
    ort_loaded = LoadedModel(
        ort_loaded.model, loaded.config, ort_loaded.source, backend=ort_loaded.backend
    )
    variants = [
        (ROWS[0], loaded, st_mb, ""),
        (ROWS[1], _channels_last(loaded), st_mb, ""),
        (ROWS[2], ort_loaded, len(onnx_bytes) / 2**20, f"parity {parity.max_abs_diff:.1e}"),
    ]
    eager_psnr: float | None = None
    for name, variant, mb, note in variants:
        psnr = _psnr(variant, pairs, preset_name) if pairs else None
        if eager_psnr is None:
            eager_psnr = psnr
        diff = None if psnr is None or eager_psnr is None else psnr - eager_psnr
        lat = {}
        for s in sizes:
            lat[f"{s}x{s}"] = time_restorer(variant, [(s, s)], runs)[0]["latency_ms"]
        report.rows.append(BenchRow(name, mb, params, macs, psnr, diff, lat, note))
    return report
