"""The before/after table of a quantization: fp32 ONNX Runtime vs int8 ONNX Runtime.

Per row: file size, PSNR against the ground truth under the model's metric preset (when the
data has targets), PSNR of the int8 output against the fp32 output (uint8 RGB, peak 255:
how far quantization moved the pixels, whatever the model's quality) and ONNX Runtime
latency at each size (median of runs, through the same `Restorer` as `restore`). Both
models run in one process, one after the other, so their ratio holds on this machine even
when its absolute speed does not.
"""

from __future__ import annotations

import os
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.artifact import LoadedModel
from clearsight.data.pairs import ImagePair
from clearsight.profile import ScoredRun

Data = str | os.PathLike[str] | Sequence[ImagePair]


@dataclass
class QuantRow:
    name: str
    file_mb: float
    psnr: float | None
    """Mean PSNR against the targets (the preset's convention); None without targets."""
    psnr_vs_fp32: float | None
    """Mean PSNR of this row's outputs against fp32's (uint8 RGB); None for fp32 itself."""
    latency_ms: dict[str, float] = field(default_factory=dict)
    runs_ms: dict[str, list[float]] = field(default_factory=dict)
    """Every timed run (the spread says how loaded the machine was)."""


@dataclass
class QuantReport(ScoredRun):
    rows: list[QuantRow] = field(default_factory=list)

    @property
    def psnr_loss(self) -> float | None:
        """dB lost against the targets by int8 (positive: worse)."""
        a, b = self.rows[0].psnr, self.rows[1].psnr
        return None if a is None or b is None else a - b

    def speedup(self, size: str) -> float:
        return self.rows[0].latency_ms[size] / self.rows[1].latency_ms[size]

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        for row in out["rows"]:  # JSON has no infinity: identical outputs read "inf"
            if row["psnr_vs_fp32"] == float("inf"):
                row["psnr_vs_fp32"] = "inf"
        out["psnr_loss_db"] = self.psnr_loss
        sizes = list(self.rows[0].latency_ms) if self.rows else []
        out["speedup"] = {s: self.speedup(s) for s in sizes}
        return out

    def table(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows as text cells (the CLI draws them, benchmarks print them)."""
        sizes = list(self.rows[0].latency_ms) if self.rows else []
        head = ["precision", "file MB", "PSNR", "dPSNR", "PSNR vs fp32"]
        head += [f"{s} ms" for s in sizes] + [f"{s} speedup" for s in sizes]
        body = []
        base = self.rows[0]
        for r in self.rows:
            d = None if r.psnr is None or base.psnr is None else r.psnr - base.psnr
            body.append(
                [
                    r.name,
                    f"{r.file_mb:.2f}",
                    "-" if r.psnr is None else f"{r.psnr:.3f}",
                    "-" if d is None else f"{d:+.3f}",
                    "-" if r.psnr_vs_fp32 is None else f"{r.psnr_vs_fp32:.2f}",
                ]
                + [f"{r.latency_ms[s]:.0f}" for s in sizes]
                + [f"{base.latency_ms[s] / r.latency_ms[s]:.2f}x" for s in sizes]
            )
        return head, body


def _mean_psnr(values: list[float]) -> float | None:
    """Mean of the finite values; inf when every output was identical; None for none."""
    finite = [v for v in values if np.isfinite(v)]
    if finite:
        return statistics.fmean(finite)
    return float("inf") if values else None


def _inputs_and_targets(
    data: str | os.PathLike[str], limit: int | None
) -> list[tuple[Path, Path | None]]:
    """Pairs when `data` holds them (input, target), else its images without targets."""
    from clearsight.data.pairs import find_pairs, pair_folders
    from clearsight.errors import ClearsightError
    from clearsight.io import list_images

    if not isinstance(data, str | os.PathLike):
        items: list[tuple[Path, Path | None]] = [(p.input, p.target) for p in data]
        return items if limit is None else items[: max(0, limit)]
    try:
        pair_folders(Path(data))
    except ClearsightError:
        items = [(p, None) for p in list_images(data)]
    else:
        items = [(p.input, p.target) for p in find_pairs(data)]
    return items if limit is None else items[: max(0, limit)]


def quant_report(
    fp32: LoadedModel,
    int8: LoadedModel,
    data: Data,
    *,
    fp32_mb: float,
    int8_mb: float,
    sizes: Sequence[int] = (512,),
    runs: int = 3,
    max_images: int | None = None,
    preset: str | None = None,
) -> QuantReport:
    """Score and time `fp32` and `int8` (both ONNX Runtime) on `data` (pairs, or images)."""
    import torch

    from clearsight.engine.inference import Restorer
    from clearsight.io import image_to_tensor, read_image, tensor_to_image, to_uint8
    from clearsight.metrics.image_metrics import psnr
    from clearsight.metrics.presets import get_preset
    from clearsight.profile import time_restorer

    items = _inputs_and_targets(data, max_images)
    preset_name = preset or fp32.config.metric_preset
    metric = get_preset(preset_name)
    runners = (Restorer(fp32), Restorer(int8))
    gt: list[list[float]] = [[], []]
    vs_fp32: list[float] = []
    for inp_path, tgt_path in items:
        x = image_to_tensor(read_image(inp_path))
        outs = [tensor_to_image(r.restore(x), dtype=np.uint8) for r in runners]
        vs_fp32.append(psnr(outs[1], outs[0]))
        if tgt_path is not None:
            tgt = to_uint8(read_image(tgt_path))
            for k in (0, 1):
                gt[k].append(float(metric.compute(outs[k], tgt)["psnr"]))
    report = QuantReport(
        model=fp32.source,
        data=str(data) if isinstance(data, str | os.PathLike) else f"{len(items)} pairs",
        preset=preset_name,
        n_images=len(items),
        threads=torch.get_num_threads(),
        load_average=os.getloadavg(),
    )
    # size by size, fp32 then int8 at once: a change in the machine's load hits both
    timings: list[dict[str, dict[str, Any]]] = [{}, {}]
    for size in sizes:
        for k, model in enumerate((fp32, int8)):
            timings[k][f"{size}x{size}"] = time_restorer(model, [(size, size)], runs)[0]
    for k, (name, mb) in enumerate((("fp32", fp32_mb), ("int8", int8_mb))):
        timed = timings[k]
        report.rows.append(
            QuantRow(
                name=name,
                file_mb=mb,
                psnr=statistics.fmean(gt[k]) if gt[k] else None,
                psnr_vs_fp32=None if k == 0 else _mean_psnr(vs_fp32),
                latency_ms={size: t["latency_ms"] for size, t in timed.items()},
                runs_ms={size: list(t["runs_ms"]) for size, t in timed.items()},
            )
        )
    return report
