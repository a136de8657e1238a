"""Int8 vs fp32 through ONNX Runtime, side by side: latency ratio and PSNR lost.

    python benchmarks/quant_speed.py [--models default-derain,default-demoire]
                                     [--sizes 512,1024] [--runs 3] [--images 10]
                                     [--calibration-images 8] [--json FILE]

For each model: the fp32 ONNX export and its int8 version from `compress quantize`
(static, QDQ, per-channel, minmax, output path in fp32) run one after the other in this
process through the same `Restorer` as `restore`; latency is the median of `--runs` after a
warm-up, at each square size (the target: >= 1.7x at 1024x1024). PSNR is scored
under the model's own preset on benchmark pairs it was not calibrated on:

* default-derain (RESCAN): calibrated on synthetic rain (`clearsight synth rain`, light
  preset, seed 0) over the first BSDS backgrounds of `derain/bsds_clean`; scored on the
  first `--images` Rain100L pairs (`y-matlab`);
* default-demoire (mbcnn-light): calibrated on `moire/uhdm_700/moire_only` (inputs without
  targets, not in the pairs); scored on uhdm_700 pairs 0080-0099, the held-out pairs
  (`netdisk` preset's PSNR, RGB).

The target is at most 0.3 dB lost. Timings on a shared machine vary; the ratio, measured
in one run, is the figure to quote.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

from clearsight.compress.quant_report import quant_report
from clearsight.compress.quantize import QuantizeOptions, quantize_model
from clearsight.data.pairs import find_pairs
from clearsight.data.synth_rain import rain_pair
from clearsight.io import list_images, read_image, write_image
from clearsight.runtime.ort_backend import load_onnx
from clearsight.zoo import resolve_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script

DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data"


def calibration_dir(model: str, n: int, tmp: Path) -> Path:
    if model == "default-derain":
        out = tmp / "rain"
        out.mkdir()
        for p in list_images(DATA / "derain" / "bsds_clean")[:n]:
            write_image(out / f"{p.stem}.png", rain_pair(read_image(p), 0, p.stem, 0, "light"))
        return out
    return DATA / "moire" / "uhdm_700" / "moire_only"


def eval_pairs(model: str, n: int) -> list:
    if model == "default-derain":
        return find_pairs(DATA / "derain" / "Rain100L")[:n]
    held_out = [p for p in find_pairs(DATA / "moire" / "uhdm_700") if "0080" <= p.name <= "0099"]
    return held_out[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="default-derain,default-demoire")
    ap.add_argument("--sizes", default="512,1024")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--images", type=int, default=10)
    ap.add_argument("--calibration-images", type=int, default=8)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not DATA.is_dir():
        sys.exit(f"benchmark data not found at {DATA}")
    sizes = [int(s) for s in args.sizes.split(",")]
    head: list[str] = []
    rows: list[list[str]] = []
    reports = {}
    for model in args.models.split(","):
        with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded = resolve_model(model)
            calib = calibration_dir(model, args.calibration_images, Path(tmp))
            opts = QuantizeOptions(max_images=args.calibration_images)
            result = quantize_model(loaded, calib, opts)
            rep = quant_report(
                load_onnx(result.fp32_data, source=f"{model} fp32"),
                load_onnx(result.data, source=f"{model} int8"),
                eval_pairs(model, args.images),
                fp32_mb=len(result.fp32_data) / 2**20,
                int8_mb=len(result.data) / 2**20,
                sizes=sizes,
                runs=args.runs,
            )
        h, body = rep.table()
        head = ["model", *h]
        rows += [[model, *r] for r in body]
        reports[model] = rep.to_dict()
        print(f"{model}: {rep.n_images} pairs, preset {rep.preset}", flush=True)
        print_table(model, head, [[model, *r] for r in body])  # as each finishes
    load = " ".join(f"{v:.2f}" for v in os.getloadavg())
    print_table(f"fp32 vs int8, ONNX Runtime (load average {load})", head, rows)
    if args.json:
        args.json.write_text(json.dumps(reports, indent=2))


if __name__ == "__main__":
    main()
