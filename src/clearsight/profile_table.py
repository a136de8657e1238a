"""`clearsight profile A B [C ...]`: one before/after table for a compression.

One row per model, the first the "before"; every later row also carries its ratios to the
first (costs) and its differences from it (quality). Per row:

- parameters, counted on the model's structure (an `.onnx` file, int8 included, is rebuilt
  from the config in its metadata, at its real widths when pruned);
- restoration: MACs per pixel (`measure.macs.count_macs` at 256x256: the count per pixel does not
  depend on the size). Quantization changes the arithmetic's precision, not its amount, so
  an int8 model's MACs per pixel equal its fp32 model's;
- detectors: the Astar contest's MAdds in millions (`measure/madds.py`): on the contest
  adapter at 300x300 for a PyTorch detector (as `astar-score` counts it), on the graph for an
  `.onnx` file; halved when the model is quantized, as the contest halved it;
- file size: the `.onnx` file, or the artifact's `model.safetensors`;
- latency (median of `runs`, after a warm-up) and peak memory (the growth of peak RSS, in a
  fresh process per backend: `profile.measure_in_subprocess`) at the working size: a square
  `size` for restoration (default 512, `DEFAULT_RESTORE_SIZE`), a detector's own input size.
  A PyTorch model runs in PyTorch and in ONNX Runtime (exported in memory, parity-checked);
  an `.onnx` file only in ONNX Runtime;
- quality with `data`: PSNR and SSIM (`engine/evaluate.py`, the first model's metric preset
  for every row) on pairs; COCO AP (`detection/evaluate.py`) and the Astar contest's mAP and
  score (`detection/astar.py`; PyTorch detectors and `--layout astar` files only) on a COCO
  folder.

A value that was not measured is None (a dash in the table) with a note saying why; no
figure is ever estimated.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from clearsight.artifact import WEIGHTS_FILE, LoadedModel, build_from_config
from clearsight.errors import ClearsightError
from clearsight.families import Family
from clearsight.measure.macs import count_macs
from clearsight.profile import ScoredRun, measure_in_subprocess, time_model

DEFAULT_RESTORE_SIZE = 512
MAC_SIZE = (256, 256)
COSTS = (
    "params",
    "macs_per_pixel",
    "madds_m",
    "file_mb",
    "torch_ms",
    "onnxruntime_ms",
    "torch_peak_mb",
    "onnxruntime_peak_mb",
)
"""Fields whose ratio to the first row is reported (`ModelRow.ratios`)."""
QUALITY = ("psnr", "ssim", "ap", "astar_map", "astar_score")
"""Fields whose difference from the first row is reported (`ModelRow.deltas`)."""


@dataclass
class ModelRow:
    """One model's figures; None where not measured (see `notes`)."""

    model: str
    architecture: str
    task: str
    format: str
    """pytorch, onnx fp32 or onnx int8."""
    size: str
    """The working size (HxW) latency and memory were measured at."""
    params: int | None = None
    macs_per_pixel: float | None = None
    madds_m: float | None = None
    madds_quantized: bool | None = None
    """Whether `madds_m` is the contest's halved figure."""
    file_mb: float | None = None
    torch_ms: float | None = None
    onnxruntime_ms: float | None = None
    torch_peak_mb: float | None = None
    onnxruntime_peak_mb: float | None = None
    psnr: float | None = None
    ssim: float | None = None
    ap: float | None = None
    astar_map: float | None = None
    astar_score: float | None = None
    runs_ms: dict[str, list[float]] = field(default_factory=dict)
    """Every timed run per backend (their spread says how loaded the machine was)."""
    load_average: tuple[float, float, float] | None = None
    """The machine's load average when this row's timing ended."""
    ratios: dict[str, float | None] = field(default_factory=dict)
    """COSTS fields: this row / the first row."""
    deltas: dict[str, float | None] = field(default_factory=dict)
    """QUALITY fields: this row - the first row."""
    notes: list[str] = field(default_factory=list)


@dataclass
class ProfileTable(ScoredRun):
    """The before/after table; `model` is the first ("before") model."""

    task: str = ""
    family: str = ""
    size: str = ""
    mac_size: str = f"{MAC_SIZE[0]}x{MAC_SIZE[1]}"
    runs: int = 3
    rows: list[ModelRow] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def table(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows as text cells, one column per model and one row per figure (a
        terminal fits that); later models show "(0.50x)" ratios to the first model's costs
        and "(+0.12)" differences from its quality."""
        detect = self.family == Family.DETECTION.value
        lines: list[tuple[str, str, str]] = [
            ("format", "format", "{}"),
            ("params", "parameters", "{:,.0f}"),
            ("madds_m", "contest MAdds (M)", "{:,.1f}")
            if detect
            else ("macs_per_pixel", f"kMACs/pixel (at {self.mac_size})", "{:,.1f}"),
            ("file_mb", "file MB", "{:.2f}"),
            ("torch_ms", "PyTorch ms", "{:,.1f}"),
            ("onnxruntime_ms", "ONNX Runtime ms", "{:,.1f}"),
            ("torch_peak_mb", "PyTorch peak MB", "{:,.0f}"),
            ("onnxruntime_peak_mb", "ONNX Runtime peak MB", "{:,.0f}"),
        ]
        if detect:
            lines += [
                ("ap", "COCO AP", "{:.4f}"),
                ("astar_map", "Astar mAP", "{:.4f}"),
                ("astar_score", "Astar score", "{:.2f}"),
            ]
        else:
            lines += [("psnr", "PSNR", "{:.3f}"), ("ssim", "SSIM", "{:.4f}")]
        head = ["", *(row.model for row in self.rows)]
        body = []
        for name, title, fmt in lines:
            cells = [title]
            for i, row in enumerate(self.rows):
                value = getattr(row, name)
                halved = " halved (int8)" if name == "madds_m" and row.madds_quantized else ""
                if name == "macs_per_pixel" and value is not None:
                    value = value / 1e3
                text = "-" if value is None else fmt.format(value) + halved
                if i and value is not None:
                    if row.ratios.get(name) is not None:
                        text += f" ({row.ratios[name]:.2f}x)"
                    elif row.deltas.get(name) is not None:
                        text += " (" + fmt.replace("{:", "{:+").format(row.deltas[name]) + ")"
                cells.append(text)
            body.append(cells)
        return head, body


# -- per-row figures ------------------------------------------------------------------------
def _is_onnx(loaded: LoadedModel) -> bool:
    return loaded.on_onnxruntime


def _format(loaded: LoadedModel) -> str:
    if not _is_onnx(loaded):
        return "pytorch"
    from clearsight.export.onnx_precision import precision_of

    return f"onnx {precision_of(loaded.model.export_info)}"


def _structure(loaded: LoadedModel) -> torch.nn.Module:
    """A PyTorch module with the model's structure (an ONNX file rebuilt from its config)."""
    if _is_onnx(loaded):
        return build_from_config(loaded.config, source=loaded.source).eval()
    return loaded.model


def file_mb(ref: str) -> float | None:
    """Size of what `ref` names on disk: an `.onnx` or `.safetensors` file, or an artifact
    folder's weights; None for an architecture name (nothing on disk)."""
    from clearsight.zoo import bundled_models

    path = Path(ref)
    if not path.exists():
        path = bundled_models().get(ref, path)
    if path.is_dir():
        path = path / WEIGHTS_FILE
    return path.stat().st_size / 2**20 if path.is_file() else None


def _working_size(loaded: LoadedModel, size: int | None) -> tuple[int, int]:
    if loaded.is_detector:
        return tuple(int(v) for v in loaded.model.input_size)  # type: ignore[return-value]
    return (size or DEFAULT_RESTORE_SIZE,) * 2  # type: ignore[return-value]


def _contest_madds(loaded: LoadedModel, row: ModelRow) -> None:
    from clearsight.detection.astar import CONTEST_SIZE, ContestAdapter
    from clearsight.measure.madds import count_madds, count_madds_onnx

    try:
        if _is_onnx(loaded):
            data = loaded.model.model_data
            count = count_madds_onnx(data if isinstance(data, bytes) else str(data))
        else:
            count = count_madds(ContestAdapter(loaded.model, loaded.config), CONTEST_SIZE)
    except (ClearsightError, ValueError) as exc:
        row.notes.append(f"MAdds not counted: {exc}")
        return
    row.madds_m, row.madds_quantized = count.madds, count.quantized


def _time(loaded: LoadedModel, row: ModelRow, hw: tuple[int, int], runs: int, memory: bool) -> None:
    from clearsight.export.onnx import to_onnxruntime

    backends = ["onnxruntime"] if _is_onnx(loaded) else ["torch", "onnxruntime"]
    for b in backends:
        try:
            if memory:
                (timed,) = measure_in_subprocess(loaded, b, [hw], runs)
            else:
                target = to_onnxruntime(loaded) if b == "onnxruntime" else loaded
                (timed,) = time_model(target, [hw], runs)
        except ClearsightError as exc:
            row.notes.append(f"{b} not timed: {exc}")
            continue
        setattr(row, f"{b}_ms", float(timed["latency_ms"]))
        row.runs_ms[b] = [float(t) for t in timed["runs_ms"]]
        if "peak_mb" in timed:
            setattr(row, f"{b}_peak_mb", float(timed["peak_mb"]))


def _restoration_quality(
    loaded: LoadedModel, row: ModelRow, pairs: Sequence[Any], preset: str
) -> None:
    from clearsight.engine.evaluate import evaluate
    from clearsight.engine.inference import Restorer
    from clearsight.metrics.presets import get_preset

    summary = evaluate(Restorer(loaded), pairs, get_preset(preset)).summary()
    row.psnr = summary["psnr"]["mean"]
    row.ssim = summary["ssim"]["mean"]


def coco_subset(raw: dict[str, Any], ids: set[int]) -> dict[str, Any]:
    """The COCO ground truth restricted to the images `ids` (AP over only those)."""
    return {
        **raw,
        "images": [im for im in raw["images"] if im["id"] in ids],
        "annotations": [a for a in raw.get("annotations", []) if a["image_id"] in ids],
    }


def _detection_quality(
    loaded: LoadedModel, row: ModelRow, data: Path, max_images: int | None
) -> int:
    """COCO AP and the Astar figures; returns how many images AP was computed on."""
    from clearsight.data.coco import load_coco
    from clearsight.detection.astar import astar_score
    from clearsight.detection.detector import Detector
    from clearsight.detection.evaluate import detect_dataset, find_coco_set
    from clearsight.metrics.coco_eval import evaluate_coco

    n = 0
    try:
        detector = Detector(loaded)
    except ClearsightError as exc:
        row.notes.append(f"AP not measured: {exc}")
    else:
        dataset = load_coco(*find_coco_set(data))
        if max_images is not None:
            dataset.images = dataset.images[: max(0, max_images)]
        gt = coco_subset(dataset.raw, {im.id for im in dataset.images})
        dets = detect_dataset(detector, dataset)
        row.ap = float(evaluate_coco(gt, dets, class_ids=detector.class_ids).ap)
        n = len(dataset.images)
    fmt_ok = not _is_onnx(loaded) or loaded.model.layout == "astar"
    if not fmt_ok:
        row.notes.append("Astar score: only PyTorch detectors and --layout astar files")
        return n
    try:
        result = astar_score(loaded, data, limit=max_images)
    except ClearsightError as exc:
        row.notes.append(f"Astar score not measured: {exc}")
        return n
    row.astar_map, row.astar_score = result.map, result.score
    return n


def _compare(rows: list[ModelRow]) -> None:
    base = rows[0]
    for row in rows[1:]:
        for name in COSTS:
            a, b = getattr(base, name), getattr(row, name)
            row.ratios[name] = None if a in (None, 0) or b is None else b / a
        for name in QUALITY:
            a, b = getattr(base, name), getattr(row, name)
            row.deltas[name] = None if a is None or b is None else b - a


def profile_models(
    refs: Sequence[str],
    *,
    data: str | os.PathLike[str] | None = None,
    size: int | None = None,
    runs: int = 3,
    memory: bool = True,
    max_images: int | None = None,
    preset: str | None = None,
    on_step: Callable[[str], None] | None = None,
) -> ProfileTable:
    """The before/after table of `refs` (model names, artifact paths or `.onnx` files; the
    first is "before"). All must be detectors, or all restoration models."""
    from clearsight.zoo import resolve_model

    if not refs:
        raise ClearsightError("profile: no model given")
    if runs < 1:
        raise ClearsightError(f"--runs must be >= 1, got {runs}")
    if max_images is not None and data is None:
        raise ClearsightError("--max-images limits --data; give --data too")
    if size is not None and size < 8:
        raise ClearsightError(f"--size must be >= 8, got {size}")
    step = on_step or (lambda _text: None)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        models = [(ref, resolve_model(ref)) for ref in refs]
    kinds = {ref: lm.config.task for ref, lm in models}
    if len({lm.family for _, lm in models}) > 1:
        listing = ", ".join(f"{r} ({t})" for r, t in kinds.items())
        raise ClearsightError(f"profile: detectors and restoration models in one table: {listing}")
    detect = models[0][1].is_detector
    preset_name = "" if detect else (preset or models[0][1].config.metric_preset)
    pairs: list[Any] = []
    if data is not None and not detect:
        from clearsight.data.pairs import find_pairs

        pairs = find_pairs(data)
        if max_images is not None:
            pairs = pairs[: max(0, max_images)]
    report = ProfileTable(
        model=refs[0],
        data="" if data is None else str(data),
        preset="coco-ap" if detect and data is not None else preset_name,
        n_images=len(pairs),
        threads=torch.get_num_threads(),
        load_average=os.getloadavg(),
        task="detect" if detect else models[0][1].config.task,
        family=models[0][1].family.value,
        size="",
        runs=runs,
    )
    for ref, loaded in models:
        hw = _working_size(loaded, size)
        row = ModelRow(
            model=ref,
            architecture=loaded.config.architecture,
            task=loaded.config.task,
            format=_format(loaded),
            size=f"{hw[0]}x{hw[1]}",
            file_mb=file_mb(ref),
        )
        step(f"{ref}: counting")
        structure = _structure(loaded)
        row.params = sum(p.numel() for p in structure.parameters())
        if detect:
            _contest_madds(loaded, row)
        else:
            row.macs_per_pixel = count_macs(structure, *MAC_SIZE).per_pixel
        step(f"{ref}: timing at {row.size}")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _time(loaded, row, hw, runs, memory)
            row.load_average = os.getloadavg()
            if data is not None:
                step(f"{ref}: scoring on {data}")
                if detect:
                    n = _detection_quality(loaded, row, Path(data), max_images)
                    report.n_images = max(report.n_images, n)
                else:
                    _restoration_quality(loaded, row, pairs, preset_name)
        report.rows.append(row)
    report.size = ", ".join(dict.fromkeys(r.size for r in report.rows))
    _compare(report.rows)
    return report
