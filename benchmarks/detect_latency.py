"""Detector latency per image: PyTorch against ONNX Runtime, side by side.

    python benchmarks/detect_latency.py [--models default-detect ssd-mobilenet-v1-coco]
                                        [--runs 20] [--threads N] [--json FILE]

For each bundled detector, at its working size (YOLOX-Nano 416x416, SSD 300x300, the
contest size; YOLOX's contest input is resized to 416, so its contest cost is this too):

- `graph`: the exported computation, batch 1: forward + decode (boxes and scores before NMS)
  in PyTorch, against the `decoded`-layout ONNX file in ONNX Runtime (CPU provider, the same
  thread count);
- `detect`: one 480x640 picture end to end through `Detector.detect` (letterbox or stretch,
  network, NMS, boxes back to image pixels), the model loaded from the artifact against the
  same model loaded from the exported file.

Rounds alternate the two backends (torch, ORT, torch, ORT, ...) so a change in the machine's
load hits both alike; each figure is the median of `--runs` rounds after one warm-up. The
load average is printed before and after: on a shared machine the ratio is the figure to
quote, not the milliseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

import torch

from clearsight.engine.detector import Detector
from clearsight.export.onnx import export_onnx
from clearsight.export.onnx_detect import synthetic_scene
from clearsight.zoo import resolve_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import interleaved, print_table  # noqa: E402 - beside this script


def measure(name: str, runs: int, folder: Path) -> list[dict[str, object]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch_loaded = resolve_model(name)
        path, _ = export_onnx(torch_loaded, folder / f"{name}.onnx")
        ort_loaded = resolve_model(str(path))
    model, ort = torch_loaded.model.eval(), ort_loaded.model
    h, w = model.input_size
    x = torch.rand(1, 3, h, w)

    @torch.inference_mode()
    def torch_graph() -> object:
        return model.decode(model(x))

    def ort_graph() -> object:
        return ort.run_all(x)

    picture = synthetic_scene(480, 640, seed=0)
    torch_det, ort_det = Detector(torch_loaded), Detector(ort_loaded)
    graph = interleaved([torch_graph, ort_graph], runs)
    detect = interleaved([lambda: torch_det.detect(picture), lambda: ort_det.detect(picture)], runs)
    rows = []
    for what, (t, o) in (("graph", graph), ("detect 480x640", detect)):
        rows.append(
            {"model": name, "input": f"{h}x{w}", "path": what, "torch_ms": t * 1e3,
             "ort_ms": o * 1e3, "ratio": t / o}
        )  # fmt: skip
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", nargs="+", default=["default-detect", "ssd-mobilenet-v1-coco"])
    p.add_argument("--runs", type=int, default=20)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--json", default=None, help="also write the rows here")
    a = p.parse_args(argv)
    if a.threads:
        torch.set_num_threads(a.threads)
    load0 = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in a.models:
            rows.extend(measure(name, a.runs, Path(tmp)))
    load1 = os.getloadavg()
    print_table(
        f"detector latency per image, batch 1, median of {a.runs} interleaved rounds, "
        f"{torch.get_num_threads()} thread(s)",
        ["model", "input", "path", "PyTorch ms", "ONNX Runtime ms", "PyTorch / ORT"],
        [
            [
                str(r["model"]),
                str(r["input"]),
                str(r["path"]),
                f"{r['torch_ms']:.1f}",
                f"{r['ort_ms']:.1f}",
                f"{r['ratio']:.2f}",
            ]
            for r in rows
        ],  # fmt: skip
    )
    print(
        "load average before: " + " ".join(f"{v:.2f}" for v in load0)
        + "; after: " + " ".join(f"{v:.2f}" for v in load1)
    )  # fmt: skip
    if a.json:
        Path(a.json).write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
