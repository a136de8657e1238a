"""The Astar 2019 detection contest's scorer, reproduced (quirks included, each switchable).

The contest's `score.py`, step by step, as reproduced here:

1. Read `annotations/instances_val2017.json` and `val2017/` (checked by `data.coco.load_coco`,
   as `eval` checks a set; the contest read it unchecked); images without annotations are
   skipped (`skip_unannotated`); images go through the model in batches of 32, and a final
   batch of exactly one image is dropped (`drop_last_single`).
2. Preprocessing: PIL, grayscale to RGB, resize to 300x300 ignoring the aspect ratio with
   Lanczos ("ANTIALIAS"), HWC to CHW, RGB to BGR, subtract 127.5, multiply by 0.007843.
3. The model returns boxes [N, M, 4] (normalized x0, y0, x1, y1) and scores [N, 81, M]
   (class-major, row 0 the background); it runs no NMS itself.
4. NMS per class (background skipped): score > 0.01, IoU threshold 0.45, no top-k limits,
   and IoU computed with `normalized=False` on [0, 1] boxes, which adds 1 to every width and
   height (`nms_plus_one`): two 0.2-wide boxes that merely touch have IoU 0.71, so touching
   and slightly overlapping boxes of one class suppress each other.
5. Boxes clipped to [0, 1], scaled by the original width and height; labels 1..80 map to
   COCO's sorted category ids; mAP = COCOeval bbox stats[0].
6. MAdds (`clearsight.measure.madds`), then the score: MAdds below 160 count as 160,
   above 1300 the score is 0, else 100 * mAP - (5.1249 * ln(MAdds) - 14.499).

`astar_score(model, data_dir)` returns an `AstarResult`; `AstarResult.to_dict()` is the
JSON the `astar-score` command prints or writes (its `runtime` says what ran the model).
The model is a clearsight detector (run behind `ContestAdapter`, MAdds by forward hooks), an
ONNX file exported with `clearsight export MODEL --layout astar` (the adapter traced; run by
ONNX Runtime, MAdds counted on its graph by `madds.count_madds_onnx`), or a `ContestModel`:
e.g. a contest-layout Paddle inference folder (`export.paddle.load_contest_paddle`, run by
Paddle Inference, MAdds as counted on the adapter at export).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from clearsight.data.coco import load_coco
from clearsight.detection.coco_classes import COCO_IDS
from clearsight.errors import ClearsightError, ImageReadError
from clearsight.measure.madds import MAddsCount, count_madds, count_madds_onnx
from clearsight.metrics.coco_eval import with_scorer_defaults

CONTEST_SIZE = (300, 300)
CONTEST_MEAN = 127.5
CONTEST_SCALE = 0.007843
MADDS_FLOOR = 160.0
MADDS_CEILING = 1300.0


@dataclass(frozen=True)
class AstarQuirks:
    """The contest's behaviours; every default reproduces the official scorer."""

    drop_last_single: bool = True  # a final batch of exactly one image is not scored
    nms_plus_one: bool = True  # IoU adds 1 to widths/heights of [0, 1] boxes
    skip_unannotated: bool = True  # images without annotations are not scored
    halve_quantized: bool = True  # a graph with any quantized op has its MAdds halved
    # COCOeval over every image of the annotation file (the default when no imgIds are set),
    # so a dropped image's objects count as missed. False: only the images scored.
    eval_all_images: bool = True
    batch_size: int = 32
    score_threshold: float = 0.01
    iou_threshold: float = 0.45


@dataclass
class AstarResult:
    """The contest figures for one model, with the quirks in force."""

    map: float
    madds: float
    penalty: float
    score: float
    images: int
    quirks: dict[str, Any]
    quantized: bool
    model: str = ""
    adapter: str = ""
    detections: int = 0
    runtime: str = ""  # what ran the contest batches: pytorch, onnxruntime, paddle-inference
    madds_layers: list[tuple[str, str, int]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("madds_layers")
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def madds_penalty(madds: float) -> float:
    """5.1249 * ln(MAdds) - 14.499, with MAdds below 160 counted as 160."""
    return 5.1249 * math.log(max(madds, MADDS_FLOOR)) - 14.499


def contest_score(map_: float, madds: float) -> float:
    """100 * mAP minus the MAdds penalty; 0 above 1300 MAdds."""
    if madds > MADDS_CEILING:
        return 0.0
    return 100.0 * map_ - madds_penalty(madds)


# --- NMS ---------------------------------------------------------------------------------


def contest_iou(a: np.ndarray, b: np.ndarray, plus_one: bool = True) -> np.ndarray:
    """IoU matrix of x0,y0,x1,y1 boxes as the contest's NMS computes it: with `plus_one`
    (its normalized=False) every width and height gains 1; disjoint boxes give 0, touching
    ones do not."""
    norm = 1.0 if plus_one else 0.0
    a, b = a[:, None, :], b[None, :, :]
    disjoint = (
        (b[..., 0] > a[..., 2])
        | (b[..., 2] < a[..., 0])
        | (b[..., 1] > a[..., 3])
        | (b[..., 3] < a[..., 1])
    )
    iw = np.minimum(a[..., 2], b[..., 2]) - np.maximum(a[..., 0], b[..., 0]) + norm
    ih = np.minimum(a[..., 3], b[..., 3]) - np.maximum(a[..., 1], b[..., 1]) + norm
    inter = iw * ih

    def area(x: np.ndarray) -> np.ndarray:
        w, h = x[..., 2] - x[..., 0], x[..., 3] - x[..., 1]
        return np.where((w < 0) | (h < 0), 0.0, (w + norm) * (h + norm))

    with np.errstate(divide="ignore", invalid="ignore"):
        iou = inter / (area(a) + area(b) - inter)
    return np.where(disjoint, 0.0, iou)


def contest_nms(
    boxes: np.ndarray,
    scores: np.ndarray,
    score_threshold: float = 0.01,
    iou_threshold: float = 0.45,
    plus_one: bool = True,
) -> list[tuple[int, float, np.ndarray]]:
    """Per-class greedy NMS of one image: boxes [M, 4], scores [C, M] (row 0 background,
    skipped). Returns (label, score, box) with labels 1..C-1, no top-k limit."""
    out: list[tuple[int, float, np.ndarray]] = []
    for label in range(1, scores.shape[0]):
        s = scores[label]
        cand = np.nonzero(s > score_threshold)[0]
        if cand.size == 0:
            continue
        cand = cand[np.argsort(-s[cand], kind="stable")]
        iou = contest_iou(boxes[cand], boxes[cand], plus_one)
        order = np.arange(cand.size)
        while order.size:
            i = order[0]
            out.append((label, float(s[cand[i]]), boxes[cand[i]]))
            rest = order[1:]
            order = rest[iou[i, rest] <= iou_threshold]
    return out


# --- preprocessing and data ----------------------------------------------------------------


def contest_preprocess(path: str | os.PathLike[str]) -> tuple[np.ndarray, tuple[int, int]]:
    """One image as the contest feeds it: [3, 300, 300] float32 BGR, (x - 127.5) * 0.007843;
    and its original (width, height)."""
    from PIL import Image

    try:
        with Image.open(path) as im:
            return contest_preprocess_pil(im), im.size
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise ImageReadError(f"{path}: cannot read image ({exc})") from None


def contest_preprocess_pil(im: Any) -> np.ndarray:
    """A PIL image as the contest feeds it (see `contest_preprocess`)."""
    from PIL import Image

    if im.mode != "RGB":
        im = im.convert("RGB")
    im = im.resize(CONTEST_SIZE[::-1], Image.LANCZOS)
    x = np.asarray(im, dtype=np.float32).transpose(2, 0, 1)[::-1]
    return ((x - CONTEST_MEAN) * CONTEST_SCALE).astype(np.float32)


def contest_images(coco: Any, quirks: AstarQuirks) -> list[dict[str, Any]]:
    """The image records scored, in id order, after the skip and drop quirks."""
    imgs = [coco.imgs[i] for i in sorted(coco.imgs)]
    if quirks.skip_unannotated:
        imgs = [im for im in imgs if coco.getAnnIds(imgIds=im["id"])]
    if quirks.drop_last_single and len(imgs) % quirks.batch_size == 1:
        imgs = imgs[:-1]
    return imgs


# --- the adapter from a clearsight detector to the contest protocol --------------------------


class _ContestInput(nn.Module):
    """The contest tensor -> a model's input: model channel k = a_k * contest channel
    order[k] + b_k, then a bilinear resize to `size` when it is not the contest's."""

    def __init__(
        self, order: list[int], a: torch.Tensor, b: torch.Tensor, size: tuple[int, int]
    ) -> None:
        super().__init__()
        self.order = list(order)
        self.register_buffer("a", a.float().view(1, 3, 1, 1))
        self.register_buffer("b", b.float().view(1, 3, 1, 1))
        self.size = tuple(size)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x[:, self.order] * self.a + self.b
        if tuple(x.shape[-2:]) != self.size:
            x = F.interpolate(x, size=self.size, mode="bilinear", align_corners=False)
        return x


class ContestAdapter(nn.Module):
    """A clearsight detector behind the contest's interface.

    Input: the contest's [N, 3, 300, 300] BGR tensor in (x - 127.5) * 0.007843. Output:
    boxes [N, M, 4] normalized (x0, y0, x1, y1) and scores [N, 81, M] whose row r (1..80) is
    the model's score for COCO id `COCO_IDS[r - 1]` (zeros where the model lacks that id)
    and row 0 its background score (zeros if it has none). The model must provide
    `decode(raw) -> (boxes [N, A, 4] xyxy in input pixels, scores [N, A, K])`, where K is
    len(class_ids), or that plus one with the background first.
    """

    def __init__(self, model: nn.Module, config: Any) -> None:
        super().__init__()
        if not hasattr(model, "decode"):
            raise ClearsightError(
                f"model {config.name or config.architecture}: the Astar adapter needs "
                "decode(raw) -> (boxes, scores); this detector has none"
            )
        if not config.class_ids:
            raise ClearsightError(
                f"model {config.name or config.architecture}: config.json has no class_ids"
            )
        self.input_size = tuple(model.input_size)
        self.class_ids = list(config.class_ids)
        self.note = ""
        self.contest_input: nn.Module = nn.Identity()
        self.model = self._fold_input(copy.deepcopy(model).eval(), config.preprocess)

    def _fold_input(self, model: nn.Module, spec: Any) -> nn.Module:
        """Make the contest tensor the model's own input.

        The model expects, per RGB channel k, ((x/255)(hi - lo) + lo - mean_k) / std_k; the
        contest gives (x_bgr - 127.5) * 0.007843. Both are affine in the pixel: where the
        model stretches to 300x300 and starts with a 3-channel convolution, that conv's input
        channels are reordered and its weights and bias rescaled (no extra op). Otherwise
        (YOLOX: a letterbox at 416 and a space-to-depth stem) a per-channel affine and a
        bilinear resize to the model's square input run first; the contest counts neither
        (elementwise and resize ops are free), and the contest's square 300x300 image
        letterboxed into a square input is that plain resize.
        """
        lo, hi = spec.value_range
        mean = torch.tensor(spec.mean, dtype=torch.float64)
        std = torch.tensor(spec.std, dtype=torch.float64)
        # m_k = a_k * c_j + b_k, c_j the contest channel holding model channel k.
        a = (hi - lo) / (255.0 * CONTEST_SCALE) / std
        b = (CONTEST_MEAN / 255.0 * (hi - lo) + lo - mean) / std
        order = [2, 1, 0] if spec.color_order == "RGB" else [0, 1, 2]
        first = next((m for m in model.modules() if isinstance(m, nn.Conv2d)), None)
        foldable = (
            spec.resize in ("fixed", "none")
            and tuple(spec.size or self.input_size) == CONTEST_SIZE
            and first is not None
            and first.in_channels == 3
            and first.groups == 1
        )
        if not foldable:
            h, w = self.input_size
            if h != w or spec.resize not in ("fixed", "letterbox", "none"):
                raise ClearsightError(
                    f"the Astar adapter needs a square model input or a first 3-channel "
                    f"convolution at {CONTEST_SIZE[0]}x{CONTEST_SIZE[1]}; this model takes "
                    f"{h}x{w} with resize {spec.resize!r}"
                )
            self.note = (
                f"contest preprocessing converted to the model's input by a per-channel affine "
                f"(channels {spec.color_order}->BGR reordered, scale {a.tolist()}, offset "
                f"{b.tolist()}) and a bilinear resize from {CONTEST_SIZE[0]}x{CONTEST_SIZE[1]} "
                f"to {h}x{w} (the model's {spec.resize} input); both free in the MAdds count"
            )
            self.contest_input = _ContestInput(order, a, b, (h, w))
            return model
        assert first is not None
        with torch.no_grad():
            w = first.weight.double()
            bias_shift = (w.sum(dim=(2, 3)) * b).sum(dim=1)
            new_w = torch.empty_like(w)
            for k, j in enumerate(order):
                new_w[:, j] = w[:, k] * a[k]
            first.weight.copy_(new_w.to(first.weight.dtype))
            if first.bias is None:
                first.bias = nn.Parameter(torch.zeros(first.out_channels))
            first.bias.add_(bias_shift.to(first.bias.dtype))
        self.note = (
            "contest preprocessing folded into the first convolution "
            f"(channels {spec.color_order}->BGR reordered, scale {a.tolist()}, offset "
            f"{b.tolist()}); its zero padding now pads the contest's 0, an offset of "
            f"{float(b.abs().max()):.4f} at the image border"
        )
        return model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        boxes, scores = self.model.decode(self.model(self.contest_input(x)))
        h, w = self.input_size
        boxes = boxes / torch.tensor([w, h, w, h], dtype=boxes.dtype, device=boxes.device)
        k = len(self.class_ids)
        has_bg = scores.shape[-1] == k + 1
        if not has_bg and scores.shape[-1] != k:
            raise ClearsightError(
                f"decode gave {scores.shape[-1]} scores per box for {k} class_ids"
            )
        cols = {cid: i + int(has_bg) for i, cid in enumerate(self.class_ids)}
        zeros = torch.zeros_like(scores[..., 0])
        rows = [scores[..., 0] if has_bg else zeros]
        rows += [scores[..., cols[cid]] if cid in cols else zeros for cid in COCO_IDS]
        return boxes, torch.stack(rows, dim=1)


# --- the scorer ----------------------------------------------------------------------------

Runner = Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


@dataclass
class ContestModel:
    """A contest-interface model run by something other than PyTorch or ONNX Runtime:
    `run` (contest batch -> boxes, scores), its config, its MAdds as counted where it was
    made (the contest's halving is applied by the scorer's quirk), the report's note and
    the runtime's name."""

    run: Runner
    config: Any
    count: MAddsCount
    source: str
    note: str
    runtime: str


def _load_model(model_ref: Any) -> tuple[Any, Any, str]:
    from clearsight.artifact import LoadedModel

    if isinstance(model_ref, ContestModel):
        return model_ref, model_ref.config, model_ref.source
    if isinstance(model_ref, LoadedModel):
        return model_ref.model, model_ref.config, model_ref.source
    from clearsight.zoo import resolve_model

    loaded = resolve_model(str(model_ref))
    return loaded.model, loaded.config, loaded.source


def _contest_runner(
    model: Any, config: Any, device: str, halve_quantized: bool
) -> tuple[Runner, MAddsCount, str, str]:
    """What runs the contest batches, its MAdds, the report's note and the runtime: a
    clearsight detector behind `ContestAdapter`, an ONNX file exported with `--layout
    astar` (ONNX Runtime, MAdds counted on its graph), or a `ContestModel`."""
    from clearsight.runtime.ort_detect import OrtDetector

    if config.task != "detect":
        raise ClearsightError(
            f"model {config.name or config.architecture} is a {config.task!r} model, not a "
            "detector (task 'detect')"
        )
    if isinstance(model, ContestModel):
        count = replace(model.count, halve_quantized=halve_quantized)
        return model.run, count, model.note, model.runtime
    if isinstance(model, OrtDetector):
        if model.layout != "astar" or model.model_data is None:
            raise ClearsightError(
                f"{model.source}: astar-score runs ONNX files exported with --layout astar "
                f"(this one has layout {model.layout!r}); or score the artifact itself"
            )
        count = count_madds_onnx(model.model_data, halve_quantized=halve_quantized)
        note = (
            "ONNX Runtime runs the exported contest-layout graph (its own folded "
            "preprocessing); MAdds counted on the ONNX graph"
        )
        return model.run_contest, count, note, "onnxruntime"
    adapter = ContestAdapter(model, config).to(device).eval()
    count = count_madds(adapter, CONTEST_SIZE, halve_quantized=halve_quantized)
    return adapter, count, adapter.note, "pytorch"


def astar_score(
    model_ref_or_loaded: Any,
    data_dir: str | os.PathLike[str],
    *,
    limit: int | None = None,
    device: str = "cpu",
    runner: Any = None,
    **quirks: Any,
) -> AstarResult:
    """Score a clearsight detector (a name, path, `LoadedModel` or `ContestModel`) as the
    contest did on `data_dir` (holding `annotations/instances_val2017.json` and `val2017/`).

    Keyword arguments override `AstarQuirks` fields (e.g. `drop_last_single=False`);
    `limit` scores only the first N images (a quick check, not a contest figure).
    `runner` (contest batch -> boxes, scores) replaces the PyTorch adapter for the outputs,
    e.g. the exported Paddle model (`export.paddle.PaddleContestRunner`); MAdds are still
    counted on the adapter, the same graph.
    """
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    try:
        q = AstarQuirks(**quirks)
    except TypeError as exc:
        raise ClearsightError(f"astar_score: unknown quirk ({exc})") from None
    data = Path(data_dir)
    ann = data / "annotations" / "instances_val2017.json"
    img_dir = data / "val2017"
    if not ann.is_file() or not img_dir.is_dir():
        raise ClearsightError(f"{data}: needs annotations/instances_val2017.json and val2017/")
    # the reader and checks `eval` uses, before the model is loaded: one line naming the file
    # and entry for bad JSON, boxes, dangling ids or image paths outside val2017/
    dataset = load_coco(ann, img_dir)
    paths = {entry.id: entry.path for entry in dataset.images}
    model, config, source = _load_model(model_ref_or_loaded)
    run, count, note, runtime = _contest_runner(model, config, device, q.halve_quantized)
    if runner is not None:
        runtime = getattr(runner, "runtime", type(runner).__name__)
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = with_scorer_defaults(dataset.raw)
        coco.createIndex()
    images = contest_images(coco, q)
    if limit is not None:
        images = images[:limit]
    results: list[dict[str, Any]] = []
    for start in range(0, len(images), q.batch_size):
        batch = images[start : start + q.batch_size]
        loaded = [contest_preprocess(paths[im["id"]]) for im in batch]
        arrays, sizes = [a for a, _ in loaded], [sz for _, sz in loaded]
        x = torch.from_numpy(np.stack(arrays)).to(device)
        with torch.no_grad():
            boxes, scores = (runner or run)(x)
        boxes_np = boxes.float().cpu().numpy()
        scores_np = scores.float().cpu().numpy()
        for im, (w, h), b, s in zip(batch, sizes, boxes_np, scores_np, strict=True):
            for label, score, box in contest_nms(
                b, s, q.score_threshold, q.iou_threshold, q.nms_plus_one
            ):
                x0, y0, x1, y1 = np.clip(box, 0.0, 1.0) * [w, h, w, h]
                results.append(
                    {
                        "image_id": im["id"],
                        "category_id": COCO_IDS[label - 1],
                        "bbox": [float(x0), float(y0), float(x1 - x0), float(y1 - y0)],
                        "score": score,
                    }
                )
    map_ = 0.0
    if results:
        with contextlib.redirect_stdout(io.StringIO()):
            dt = coco.loadRes(results)
            ev = COCOeval(coco, dt, "bbox")
            if not q.eval_all_images or limit is not None:
                ev.params.imgIds = [im["id"] for im in images]
            ev.evaluate()
            ev.accumulate()
            ev.summarize()
        map_ = float(ev.stats[0])
    madds = count.madds
    return AstarResult(
        map=map_,
        madds=madds,
        penalty=madds_penalty(madds),
        score=contest_score(map_, madds),
        images=len(images),
        quirks=asdict(q),
        quantized=count.quantized,
        model=config.name or source,
        adapter=note,
        detections=len(results),
        runtime=runtime,
        madds_layers=count.layers,
    )


def main(argv: list[str] | None = None) -> int:
    """`python -m clearsight.detection.astar MODEL --data DIR [--json FILE]` (until the
    `clearsight astar-score` command is wired): parse, call, print."""
    import argparse

    p = argparse.ArgumentParser(prog="python -m clearsight.detection.astar")
    p.add_argument("model", help="artifact path, bundled model or architecture name")
    p.add_argument("--data", required=True, help="folder with annotations/ and val2017/")
    p.add_argument("--json", default=None, help="also write the result JSON here")
    p.add_argument("--limit", type=int, default=None, help="only the first N images")
    a = p.parse_args(argv)
    result = astar_score(a.model, a.data, limit=a.limit)
    text = result.to_json()
    print(text)
    if a.json:
        Path(a.json).write_text(text + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
