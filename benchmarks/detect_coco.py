"""COCO box AP of a detector on a COCO-format set, beside the ONNX Runtime reference.

    python benchmarks/detect_coco.py [--model default-detect]
        [--data ../shared/data/detection/coco_mini_val]
        [--reference ../shared/data/detection/pretrained/yolox_nano_coco.onnx]
        [--backend faster-coco-eval|pycocotools] [--latency-runs 20] [--json FILE]

Both rows go through the same code: `clearsight.detection.preprocess` (the artifact's
letterbox), the architecture's decoding and NMS, and `clearsight.metrics.coco_eval`; only the
forward pass differs (our PyTorch port vs ONNX Runtime on the original export), so the two
rows differ by what the port changes and nothing else. Latency is the median PyTorch forward
pass at the model's input size, batch 1, on this machine's CPU threads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn

from clearsight.artifact import LoadedModel
from clearsight.data.coco import load_coco
from clearsight.engine.detect_evaluate import evaluate_detector
from clearsight.engine.detector import Detector
from clearsight.metrics.coco_eval import SUMMARY_KEYS

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import median_time, print_table  # noqa: E402 - beside this script

SHARED = Path(__file__).resolve().parents[1].parent / "shared/data/detection"


class OrtForward(nn.Module):
    """An ONNX file's raw output as a forward pass (one image at a time, CPU)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        import onnxruntime as ort

        self.session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
        self.input_name = self.session.get_inputs()[0].name

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        outs = [self.session.run(None, {self.input_name: xi[None].numpy()})[0] for xi in x]
        return torch.from_numpy(np.concatenate(outs))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="default-detect")
    ap.add_argument("--data", type=Path, default=SHARED / "coco_mini_val")
    ap.add_argument(
        "--reference", type=Path, default=SHARED / "pretrained/yolox_nano_coco.onnx",
        help="ONNX export run by ONNX Runtime with the same pre/post-processing ('' to skip)",
    )  # fmt: skip
    ap.add_argument("--backend", default="faster-coco-eval")
    ap.add_argument("--latency-runs", type=int, default=20)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()

    data = load_coco(args.data / "annotations/instances_val2017.json", args.data / "val2017")
    ours = Detector.from_pretrained(args.model)
    rows, report = [], {}
    runs = [("clearsight (PyTorch)", ours)]
    if str(args.reference):
        ref = LoadedModel(OrtForward(args.reference), ours.loaded.config, str(args.reference))
        runs.append(("ONNX Runtime reference", Detector(ref)))
    for label, det in runs:
        res, _ = evaluate_detector(det, data, backend=args.backend)
        rows.append([label] + [f"{100 * getattr(res, k):.1f}" for k in SUMMARY_KEYS])
        report[label] = res.to_dict()
    h, w = ours.model.input_size
    x = torch.zeros(1, 3, h, w)
    with torch.inference_mode():
        sec, _ = median_time(lambda: ours.model(x), args.latency_runs)
    report["latency_ms"] = {"median": 1000 * sec, "threads": torch.get_num_threads(),
                            "input": [h, w]}  # fmt: skip
    print_table(
        f"COCO box AP on {args.data.name} ({len(data)} images, {args.backend})",
        ["run", "AP", "AP50", "AP75", "APs", "APm", "APl"],
        rows,
    )
    print(f"PyTorch forward at {h}x{w}: {1000 * sec:.1f} ms median of {args.latency_runs} "
          f"({torch.get_num_threads()} threads)")  # fmt: skip
    if args.json:
        args.json.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
