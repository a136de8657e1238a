"""How much of a restorer's error is global tone? PSNR before and after an oracle tone fit.

    python benchmarks/tone_gap.py [--model default-demoire]
                                  [--data ../shared/data/moire/uhdm_700]
                                  [--first 0080] [--last 0099] [--tile N] [--json FILE]

For each pair whose name lies in [--first, --last] (default: uhdm_700's held-out pairs), the
model restores the input; the table gives PSNR (RGB, uint8, peak 255) of the input and of the
output, each also after `clearsight.metrics.tone.tone_fitted` (the per-channel gain and offset
that best match the target), and the mean level shift (target minus input, output minus
input). "output" minus "output, tone fitted" is what wrong global tone costs; "output, tone
fitted" minus "input, tone fitted" is what the model gains on the moiré itself.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from clearsight.data.pairs import find_pairs
from clearsight.engine.evaluate import ImageResult, evaluate
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.metrics import get_preset, psnr
from clearsight.metrics.tone import mean_level_shift, tone_fitted
from clearsight.zoo import resolve_model

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared/data/moire/uhdm_700"
COLUMNS = [
    "input",
    "input, tone fitted",
    "output",
    "output, tone fitted",
    "shift target",
    "shift output",
]


def measure(inp: np.ndarray, out: np.ndarray, tgt: np.ndarray) -> list[float]:
    """The table's columns for one pair of uint8 images and the model's output."""
    fit = [np.rint(tone_fitted(img, tgt)) for img in (inp, out)]
    return [
        psnr(inp, tgt),
        psnr(fit[0], tgt),
        psnr(out, tgt),
        psnr(fit[1], tgt),
        mean_level_shift(inp, tgt),
        mean_level_shift(inp, out),
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="default-demoire")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--first", default="0080", help="first pair name (inclusive)")
    ap.add_argument("--last", default="0099", help="last pair name (inclusive)")
    ap.add_argument("--tile", type=int, default=None, help="tile size (default: the model's)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not args.data.is_dir():
        sys.exit(f"--data {args.data}: no such folder (a paired set, e.g. moire/ and clean/)")
    pairs = [p for p in find_pairs(args.data) if args.first <= p.name <= args.last]
    if not pairs:
        sys.exit(f"--first {args.first} --last {args.last}: no pair of {args.data} in that range")
    restorer = Restorer(resolve_model(args.model), InferenceOptions(tile=args.tile))
    rows: dict[str, list[float]] = {}

    def on_images(r: ImageResult, inp: np.ndarray, out: np.ndarray, tgt: np.ndarray) -> None:
        rows[r.name] = measure(inp, out, tgt)
        print(f"[{len(rows)}/{len(pairs)}] {r.name}", file=sys.stderr)

    evaluate(restorer, pairs, get_preset("rgb"), on_images=on_images)
    mean = np.mean(list(rows.values()), axis=0).tolist()
    print_table(
        f"{args.model} on {len(pairs)} pairs of {args.data} ({args.first}-{args.last}): "
        "PSNR dB (RGB) and mean level shift (0-255)",
        ["pair", *COLUMNS],
        [[k, *(f"{v:.2f}" for v in r)] for k, r in [*rows.items(), ("mean", mean)]],
    )
    if args.json:
        payload = {"model": args.model, "columns": COLUMNS, "per_image": rows, "mean": mean}
        args.json.write_text(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
