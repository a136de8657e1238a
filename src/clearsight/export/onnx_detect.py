"""ONNX export of detectors (`clearsight export DETECTOR [--layout decoded|astar]`).

Two layouts, both opset 17 with a dynamic batch axis and a fixed H x W (the network's
anchors or grids are built for its input size):

* `decoded` (default): input `input` [N, 3, H, W] in the artifact's preprocessing; outputs
  `boxes` [N, A, 4] (x1, y1, x2, y2 in network-input pixels) and `scores` [N, A, C] (the
  model's `decode`: YOLOX objectness x class, SSD sigmoid with background column 0), before
  NMS, then the raw head outputs (`raw` for YOLOX; `raw0` box encodings and `raw1` class
  logits for SSD). NMS stays outside the graph: its rules differ per model (class-wise for
  YOLOX, class-agnostic for SSD as TFLite runs it) and clearsight's `postprocess` applies
  them, so any runtime gets the same boxes from `boxes`/`scores` with its own NMS.
* `astar`: the Astar 2019 contest interface (`detection/astar.py`): input the contest
  tensor [N, 3, 300, 300] (BGR, (x - 127.5) x 0.007843), outputs `boxes` [N, M, 4]
  normalized x0, y0, x1, y1 and `scores` [N, 81, M] class-major, row 0 background. It is
  `ContestAdapter` traced, so the contest preprocessing is folded in exactly as
  `clearsight astar-score` scores the PyTorch model, and `astar-score` scores this file.

The metadata are the restoration export's keys (`onnx_meta.py`) plus `clearsight_classes`
(class ids and names per output column). Every export runs ONNX Runtime against PyTorch on a
batch of two synthetic scenes (smooth backgrounds, textured shapes, so the activations look
like a photo's rather than noise) and fails, writing nothing, when an output differs by more
than 1e-4 of its range or the final detections (NMS on both runtimes' outputs) differ.
"""

from __future__ import annotations

import io
import json
import warnings
from dataclasses import replace
from typing import Any

import numpy as np
import torch
from torch import nn

from clearsight.artifact import LoadedModel
from clearsight.detection.astar import (
    CONTEST_MEAN,
    CONTEST_SCALE,
    CONTEST_SIZE,
    ContestAdapter,
    contest_nms,
    contest_preprocess_pil,
)
from clearsight.detection.coco_classes import COCO_IDS, COCO_NAMES
from clearsight.detection.preprocess import prepare
from clearsight.export.common import OPSET, TOLERANCE, ExportError, ParityResult, add_metadata
from clearsight.models.contract import DetectionModel
from clearsight.onnx_meta import (
    CLASSES_KEY,
    EXPORT_FORMAT_VERSION,
    metadata_props,
    read_onnx_metadata,
)
from clearsight.preprocess import PreprocessSpec
from clearsight.runtime.ort_backend import make_session
from clearsight.runtime.ort_detect import LAYOUTS, OrtDetector

SCENE_SIZES: tuple[tuple[int, int], ...] = ((480, 640), (427, 321))
PARITY_SCORE_THRESHOLD = 0.01
BOX_TOLERANCE = 0.05
"""Largest box corner difference between runtimes for one detection: input pixels
(decoded layout), or that over 300 (astar layout, normalized boxes)."""

CONTEST_SPEC = PreprocessSpec(
    color_order="BGR",
    value_range=(0.0, 255.0),
    mean=(CONTEST_MEAN,) * 3,
    std=(1.0 / CONTEST_SCALE,) * 3,
    resize="fixed",
    size=CONTEST_SIZE,
    extra={"interpolation": "lanczos", "antialias": True},
)
"""What the contest feeds an `astar`-layout file (PIL Lanczos stretch; `detection/astar.py`)."""


def check_layout(layout: str) -> str:
    name = layout.lower()
    if name not in LAYOUTS:
        raise ExportError(f"--layout: unknown detection layout {layout!r}; known: {LAYOUTS}")
    return name


def synthetic_scene(h: int, w: int, seed: int) -> np.ndarray:
    """An HxWx3 uint8 picture with a photo's statistics (smooth lighting, textured objects
    with sharp edges): parity on it exercises the activations real images do."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float32)
    base = rng.uniform(60, 200, 3)
    img = base + 40 * np.sin(yy[..., None] / h * rng.uniform(1, 4, 3) + xx[..., None] / w * 2)
    for _ in range(7):
        cy, cx = rng.uniform(0, h), rng.uniform(0, w)
        ry, rx = rng.uniform(0.08, 0.35) * h, rng.uniform(0.08, 0.35) * w
        colour = rng.uniform(0, 255, 3)
        texture = 25 * np.sin(xx / rng.uniform(2, 9)) * np.cos(yy / rng.uniform(2, 9))
        if rng.random() < 0.5:
            mask = ((yy - cy) / ry) ** 2 + ((xx - cx) / rx) ** 2 <= 1
        else:
            mask = (np.abs(yy - cy) <= ry) & (np.abs(xx - cx) <= rx)
        img[mask] = colour + texture[mask, None]
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


class DecodedGraph(nn.Module):
    """`decode(forward(x))` followed by the raw head outputs."""

    def __init__(self, model: DetectionModel) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        raw = self.model(x)
        boxes, scores = self.model.decode(raw)
        return (boxes, scores, *(raw if isinstance(raw, tuple) else (raw,)))


def _example(loaded: LoadedModel, layout: str) -> torch.Tensor:
    """The parity batch: two synthetic scenes of different shapes, preprocessed."""
    from PIL import Image

    scenes = [synthetic_scene(h, w, seed=i) for i, (h, w) in enumerate(SCENE_SIZES)]
    if layout == "astar":
        arrays = [contest_preprocess_pil(Image.fromarray(s)) for s in scenes]
        return torch.from_numpy(np.stack(arrays))
    return torch.stack([prepare(s, loaded.config.preprocess)[0] for s in scenes])


def _graph(loaded: LoadedModel, layout: str) -> tuple[nn.Module, list[str], list[str]]:
    """The module to trace, its output names and which of them are the raw head outputs."""
    model = loaded.model
    if not isinstance(model, DetectionModel):
        raise ExportError(f"{loaded.source}: not a detection model")
    if layout == "astar":
        return ContestAdapter(model, loaded.config).eval(), ["boxes", "scores"], []
    with torch.no_grad():
        raw = model(torch.zeros(1, 3, *model.input_size))
    n_raw = len(raw) if isinstance(raw, tuple) else 1
    raw_names = ["raw"] if n_raw == 1 else [f"raw{i}" for i in range(n_raw)]
    return DecodedGraph(model).eval(), ["boxes", "scores", *raw_names], raw_names


def _trace(graph: nn.Module, example: torch.Tensor, names: list[str], source: str) -> bytes:
    axes = {"input": {0: "N"}, **{n: {0: "N"} for n in names}}
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                graph,
                (example[:1],),
                buf,
                input_names=["input"],
                output_names=names,
                opset_version=OPSET,
                dynamic_axes=axes,
                dynamo=False,
                do_constant_folding=True,
            )
        ref = graph(example[:1])
    except Exception as exc:
        raise ExportError(f"{source}: ONNX export failed ({type(exc).__name__}: {exc})") from exc
    return _static_dims(
        buf.getvalue(), {n: list(r.shape[1:]) for n, r in zip(names, ref, strict=True)}
    )


def _static_dims(data: bytes, dims: dict[str, list[int]]) -> bytes:
    """Give every output its fixed sizes after the batch axis (tracing leaves reshaped ones
    symbolic), so consumers read [N, A, 4] from the file."""
    import onnx

    proto = onnx.load_from_string(data)
    for out in proto.graph.output:
        for d, size in zip(out.type.tensor_type.shape.dim[1:], dims[out.name], strict=True):
            d.Clear()
            d.dim_value = int(size)
    return proto.SerializeToString()


def _final_detections(
    layout: str, model: DetectionModel, outs: dict[str, torch.Tensor], raw_names: list[str]
) -> list[list[tuple[int, float, np.ndarray]]]:
    """(label, score, box) per image, after the NMS clearsight (or the contest) applies."""
    if layout == "astar":
        boxes, scores = outs["boxes"].numpy(), outs["scores"].numpy()
        return [
            contest_nms(b, s, PARITY_SCORE_THRESHOLD) for b, s in zip(boxes, scores, strict=True)
        ]
    raw_t = tuple(outs[n] for n in raw_names)
    raw = raw_t[0] if len(raw_t) == 1 else raw_t
    per_image = model.postprocess(raw, score_threshold=PARITY_SCORE_THRESHOLD)
    return [
        [
            (int(lab), float(s), b.numpy())
            for b, s, lab in zip(d["boxes"], d["scores"], d["labels"], strict=True)
        ]
        for d in per_image
    ]


def _compare_detections(
    ref: list[list[tuple[int, float, np.ndarray]]],
    got: list[list[tuple[int, float, np.ndarray]]],
    box_tol: float,
) -> tuple[int, str | None]:
    """(detections compared, the first disagreement or None). Detections scoring within
    1e-3 of the threshold may appear on one side only (a rounding away from the cut)."""
    margin = PARITY_SCORE_THRESHOLD + 1e-3
    total = 0
    for i, (r_img, g_img) in enumerate(zip(ref, got, strict=True)):
        r_img = [d for d in r_img if d[1] > margin]
        g_img = [d for d in g_img if d[1] > margin]
        if len(r_img) != len(g_img):
            return total, f"image {i}: {len(r_img)} detections in PyTorch, {len(g_img)} in ORT"
        unmatched = list(g_img)
        for lab, score, box in r_img:
            hit = next(
                (
                    k
                    for k, (g_lab, g_score, g_box) in enumerate(unmatched)
                    if g_lab == lab
                    and abs(g_score - score) <= 1e-3
                    and float(np.abs(g_box - box).max()) <= box_tol
                ),
                None,
            )
            if hit is None:
                return total, f"image {i}: PyTorch's label {lab} at {box.tolist()} has no match"
            unmatched.pop(hit)
        total += len(r_img)
    return total, None


def export_detection_bytes(
    loaded: LoadedModel, layout: str = "decoded", *, tolerance: float = TOLERANCE
) -> tuple[bytes, ParityResult]:
    """Export the detector `loaded` in `layout` and check parity (see the module docstring);
    raises `ExportError` when ONNX Runtime disagrees."""
    layout = check_layout(layout)
    if loaded.on_onnxruntime:
        raise ExportError(f"{loaded.source} is already an ONNX model")
    loaded.model.eval().to("cpu")
    graph, names, raw_names = _graph(loaded, layout)
    model: DetectionModel = loaded.model  # type: ignore[assignment]
    example = _example(loaded, layout)
    data = _trace(graph, example, names, loaded.source)
    config, classes = loaded.config, _classes(loaded, layout)
    if layout == "astar":
        config = replace(config, preprocess=CONTEST_SPEC, class_ids=None, class_names=None)
        config.provenance = {**config.provenance, "astar_adapter": graph.note}
    h, w = CONTEST_SIZE if layout == "astar" else model.input_size
    info: dict[str, Any] = {
        "format_version": EXPORT_FORMAT_VERSION,
        "opset": OPSET,
        "exporter": "torch.onnx (TorchScript, dynamo=False)",
        "torch_version": torch.__version__,
        "task": "detect",
        "layout": layout,
        "main_output": "boxes",
        "outputs": names,
        "raw_outputs": raw_names,
        "input_size": [h, w],
        "num_classes": int(model.num_classes),
        "pad_multiple": 1,
        "input_convention": (
            "the Astar 2019 contest tensor: RGB->BGR, (x - 127.5) * 0.007843, 300x300"
            if layout == "astar"
            else "preprocessed (apply clearsight_preprocess first)"
        ),
        "boxes": (
            "normalized x0, y0, x1, y1" if layout == "astar" else "x1, y1, x2, y2 in input pixels"
        ),
        "scores": (
            "[N, 81, M] class-major, row 0 background, row r = COCO id class_ids[r - 1]"
            if layout == "astar"
            else "[N, A, C] per class before NMS (columns as the architecture's decode)"
        ),
        "nms": "not in the graph (clearsight postprocess / the contest's NMS)",
    }
    props = metadata_props(config, info)
    props[CLASSES_KEY] = json.dumps(classes)
    data = add_metadata(data, props)
    session = make_session(data)
    read_onnx_metadata(session, loaded.source)  # the round trip must work
    ort = OrtDetector(
        session, info, loaded.source, loaded.config.architecture, loaded.config.arch_args
    )
    result = _parity(loaded, layout, graph, model, ort, example, raw_names)
    if result.max_abs_diff > tolerance or result.detections is None:
        raise ExportError(
            f"{loaded.source}: ONNX parity check failed: "
            + (
                f"an output differs by {result.max_abs_diff:.3g} of its range > {tolerance:g}"
                if result.max_abs_diff > tolerance
                else "final detections differ"
            )
            + f" ({result.outputs}); no file written"
        )
    return data, result


def _parity(
    loaded: LoadedModel,
    layout: str,
    graph: nn.Module,
    model: DetectionModel,
    ort: OrtDetector,
    example: torch.Tensor,
    raw_names: list[str],
) -> ParityResult:
    with torch.no_grad():
        ref_t = graph(example)
    ref = dict(zip(ort.output_names, ref_t, strict=True))
    got = ort.run_all(example)
    abs_diff: dict[str, float] = {}
    scaled = 0.0
    for name, r in ref.items():
        g = got[name]
        if tuple(g.shape) != tuple(r.shape):
            raise ExportError(
                f"{loaded.source}: parity check: output {name!r} has shape {tuple(g.shape)} "
                f"in ONNX Runtime but {tuple(r.shape)} in PyTorch"
            )
        d = float((g - r.float()).abs().max())
        abs_diff[name] = d
        scaled = max(scaled, d / max(1.0, float(r.abs().max())))
    box_tol = BOX_TOLERANCE / CONTEST_SIZE[0] if layout == "astar" else BOX_TOLERANCE
    n, problem = _compare_detections(
        _final_detections(layout, model, ref, raw_names),
        _final_detections(layout, model, got, raw_names),
        box_tol,
    )
    return ParityResult(
        sizes=[tuple(example.shape[-2:])],  # type: ignore[list-item]
        max_abs_diff=scaled,
        per_size=[scaled],
        outputs=abs_diff,
        detections=None if problem else f"{n} detections above {PARITY_SCORE_THRESHOLD} agree",
    )


def _classes(loaded: LoadedModel, layout: str) -> dict[str, Any]:
    """Which dataset class each score column (decoded) or row (astar) stands for."""
    if layout == "astar":
        return {
            "class_ids": [0, *COCO_IDS],
            "class_names": ["background", *COCO_NAMES],
            "note": "scores row r is COCO category class_ids[r]; row 0 the background",
        }
    cfg = loaded.config
    return {
        "class_ids": cfg.class_ids,
        "class_names": cfg.class_names,
        "note": "label k (after the architecture's postprocess) is class_ids[k]",
    }
