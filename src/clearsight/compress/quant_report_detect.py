"""The before/after table of a detector's quantization: fp32 vs int8, both ONNX Runtime.

A detector has no reference output image, so parity is told three ways, on a few
calibration images prepared as the file is fed (`quantize.prepare_detection_image`):

* the largest difference of each graph output (boxes, scores, raw head outputs);
* detection agreement: the share of fp32's detections above `AGREE_SCORE` that int8 also
  finds (same label, IoU >= `AGREE_IOU`), after the NMS the file is scored with (the
  architecture's `postprocess` for `decoded`, the contest's for `astar`);
* with `data` (a COCO-format folder), accuracy: COCO AP through the `eval` path
  (`decoded`) or the contest mAP through `astar-score` (`astar`), whose MAdds the report
  keeps too (the contest halves a quantized graph's).

Latency is one input at the model's fixed size, fp32 then int8 run by run in one process
(median of `runs`), so their ratio holds even when the machine's load changes.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clearsight.artifact import LoadedModel

AGREE_SCORE = 0.3
"""`detect`'s default score threshold: the detections a user sees."""
AGREE_IOU = 0.5
DEFAULT_PARITY_IMAGES = 8

Found = list[tuple[int, float, np.ndarray]]


@dataclass
class DetectQuantRow:
    name: str
    file_mb: float
    accuracy: float | None
    """COCO AP (decoded) or contest mAP (astar) on `data`; None without it."""
    madds: float | None = None
    """Contest MAdds in millions (astar, halved when quantized); None otherwise."""
    score: float | None = None
    """Contest score 100 x mAP - penalty(MAdds) (astar); None otherwise."""
    latency_ms: float = 0.0
    runs_ms: list[float] = field(default_factory=list)


@dataclass
class DetectQuantReport:
    model: str
    layout: str
    images: str
    n_images: int
    input_size: tuple[int, int]
    threads: int
    load_average: tuple[float, float, float]
    output_max_abs_diff: dict[str, float] = field(default_factory=dict)
    output_range: dict[str, float] = field(default_factory=dict)
    detections_fp32: int = 0
    detections_matched: int = 0
    detections_int8: int = 0
    data: str | None = None
    metric: str | None = None
    rows: list[DetectQuantRow] = field(default_factory=list)

    @property
    def agreement(self) -> float | None:
        """Share of fp32's detections int8 finds too (None when fp32 found none)."""
        return self.detections_matched / self.detections_fp32 if self.detections_fp32 else None

    @property
    def speedup(self) -> float:
        return self.rows[0].latency_ms / self.rows[1].latency_ms

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["agreement"] = self.agreement
        out["speedup"] = self.speedup
        if self.rows[0].accuracy is not None and self.rows[1].accuracy is not None:
            out["accuracy_loss"] = self.rows[0].accuracy - self.rows[1].accuracy
        return out

    def table(self) -> tuple[list[str], list[list[str]]]:
        """Header and rows as text cells (the CLI draws them)."""
        h, w = self.input_size
        metric = self.metric or "AP"
        head = ["precision", "file MB", metric, f"d{metric}"]
        if self.layout == "astar":
            head += ["MAdds (M)", "score"]
        head += ["detections agree", f"{h}x{w} ms", "speedup"]
        base = self.rows[0]
        body = []
        for k, r in enumerate(self.rows):
            d = None if r.accuracy is None or base.accuracy is None else r.accuracy - base.accuracy
            agree = "-"
            if k and self.agreement is not None:
                agree = f"{self.detections_matched}/{self.detections_fp32}"
            row = [
                r.name,
                f"{r.file_mb:.2f}",
                "-" if r.accuracy is None else f"{r.accuracy:.4f}",
                "-" if d is None else f"{d:+.4f}",
            ]
            if self.layout == "astar":
                row += [_fmt(r.madds, ".1f"), _fmt(r.score, ".2f")]
            row += [agree, f"{r.latency_ms:.1f}", f"{base.latency_ms / r.latency_ms:.2f}x"]
            body.append(row)
        return head, body


def _fmt(v: float | None, spec: str) -> str:
    return "-" if v is None else format(v, spec)


def _found(layout: str, model: Any, outs: dict[str, torch.Tensor]) -> Found:
    """(label, score, box) of one image's detections above `AGREE_SCORE` after the NMS the
    file is scored with."""
    if layout == "astar":
        from clearsight.detection.astar import contest_nms

        return contest_nms(outs["boxes"][0].numpy(), outs["scores"][0].numpy(), AGREE_SCORE)
    raw_t = tuple(outs[n] for n in model.raw_outputs)
    raw = raw_t[0] if len(raw_t) == 1 else raw_t
    det = model.postprocess(raw, score_threshold=AGREE_SCORE)[0]
    return [
        (int(lab), float(s), b.numpy())
        for b, s, lab in zip(det["boxes"], det["scores"], det["labels"], strict=True)
    ]


def matched(ref: Found, got: Found, iou: float = AGREE_IOU) -> int:
    """How many of `ref`'s detections (highest score first) `got` has: same label, IoU at
    least `iou`, each of `got`'s used once."""
    from torchvision.ops import box_iou

    if not ref or not got:
        return 0
    ious = box_iou(
        torch.from_numpy(np.stack([b for _, _, b in ref])).float(),
        torch.from_numpy(np.stack([b for _, _, b in got])).float(),
    )
    free = [True] * len(got)
    hits = 0
    for i in sorted(range(len(ref)), key=lambda k: -ref[k][1]):
        best, best_j = iou, -1
        for j, (lab, _, _) in enumerate(got):
            if free[j] and lab == ref[i][0] and float(ious[i, j]) >= best:
                best, best_j = float(ious[i, j]), j
        if best_j >= 0:
            free[best_j] = False
            hits += 1
    return hits


def _accuracy(
    loaded: LoadedModel, layout: str, data: str
) -> tuple[float, float | None, float | None]:
    """(AP or contest mAP, contest MAdds, contest score) of `loaded` on the COCO set `data`."""
    if layout == "astar":
        from clearsight.detection.astar import astar_score

        res = astar_score(loaded, data)
        return res.map, res.madds, res.score
    from clearsight.engine.detect_evaluate import evaluate_coco_set
    from clearsight.engine.detector import Detector

    return float(evaluate_coco_set(Detector(loaded), data).coco.ap), None, None


def detect_quant_report(
    fp32: LoadedModel,
    int8: LoadedModel,
    images: str | os.PathLike[str],
    *,
    fp32_mb: float,
    int8_mb: float,
    runs: int = 5,
    max_images: int | None = None,
    data: str | os.PathLike[str] | None = None,
) -> DetectQuantReport:
    """Compare the ONNX Runtime detectors `fp32` and `int8` (see the module docstring)."""
    from clearsight.compress.quantize import calibration_images, prepare_detection_image

    model32, model8 = fp32.model, int8.model
    layout = str(model32.layout)  # type: ignore[union-attr]
    paths = calibration_images(images, max_images or DEFAULT_PARITY_IMAGES)
    report = DetectQuantReport(
        model=fp32.source,
        layout=layout,
        images=str(images),
        n_images=len(paths),
        input_size=tuple(model32.input_size),  # type: ignore[union-attr, arg-type]
        threads=torch.get_num_threads(),
        load_average=os.getloadavg(),
        data=None if data is None else str(data),
        metric=None if data is None else ("mAP" if layout == "astar" else "AP"),
    )
    first: torch.Tensor | None = None
    for path in paths:
        x = torch.from_numpy(prepare_detection_image(Path(path), fp32, layout))
        first = x if first is None else first
        o32, o8 = model32.run_all(x), model8.run_all(x)  # type: ignore[union-attr, operator]
        for name, ref in o32.items():
            diff = float((o8[name] - ref).abs().max())
            report.output_max_abs_diff[name] = max(report.output_max_abs_diff.get(name, 0.0), diff)
            span = float(ref.abs().max())
            report.output_range[name] = max(report.output_range.get(name, 0.0), span)
        ref_found, got_found = _found(layout, model32, o32), _found(layout, model8, o8)
        report.detections_fp32 += len(ref_found)
        report.detections_int8 += len(got_found)
        report.detections_matched += matched(ref_found, got_found)
    timings: list[list[float]] = [[], []]
    if first is not None:
        for m in (model32, model8):
            m.run_all(first)  # type: ignore[union-attr, operator]  # warm-up
        for _ in range(max(1, runs)):
            for k, m in enumerate((model32, model8)):
                t0 = time.perf_counter()
                m.run_all(first)  # type: ignore[union-attr, operator]
                timings[k].append((time.perf_counter() - t0) * 1000.0)
    for k, (name, mb, lm) in enumerate((("fp32", fp32_mb, fp32), ("int8", int8_mb, int8))):
        acc = madds = score = None
        if data is not None:
            acc, madds, score = _accuracy(lm, layout, str(data))
        report.rows.append(
            DetectQuantRow(
                name=name,
                file_mb=mb,
                accuracy=acc,
                madds=madds,
                score=score,
                latency_ms=statistics.median(timings[k]) if timings[k] else 0.0,
                runs_ms=timings[k],
            )
        )
    return report
