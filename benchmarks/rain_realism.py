"""Does synthetic rain look like real rain? Rain-layer statistics, Rain100L next to our presets.

    python benchmarks/rain_realism.py [--data ../shared/data/derain/Rain100L] [--every 5]
                                      [--seed 0] [--json FILE]

For every `--every`-th clean image of the paired set, the real rainy image and our `light`
and `heavy` rain over the same clean image (seed `--seed`, copy 0) are measured with
`clearsight.data.synth_rain.rain_layer_stats`; the table gives the means. PSNR alone is what
the presets were first calibrated on; the other columns (coverage, brightening percentiles,
streak width and length, greyness) say whether the rain has the right structure.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from clearsight.data.pairs import find_pairs
from clearsight.data.synth_rain import rain_layer_stats, rain_pair
from clearsight.io import read_image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script

DEFAULT_DATA = Path(__file__).resolve().parents[1].parent / "shared/data/derain/Rain100L"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--every", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    if not args.data.is_dir():
        sys.exit(f"--data {args.data}: no such folder (a paired set with rain/ and clean/)")
    pairs = find_pairs(args.data)[:: max(args.every, 1)]
    rows: dict[str, list[dict[str, float]]] = {"real": [], "light": [], "heavy": []}
    for pair in pairs:
        clean = read_image(pair.target)
        rows["real"].append(rain_layer_stats(read_image(pair.input), clean))
        for preset in ("light", "heavy"):
            rainy = rain_pair(clean, args.seed, pair.target.name, 0, preset)
            rows[preset].append(rain_layer_stats(rainy, clean))
    keys = list(rows["real"][0])
    means = {k: {c: float(np.mean([r[c] for r in v])) for c in keys} for k, v in rows.items()}
    label = {"real": f"{args.data.name} (real)", "light": "light", "heavy": "heavy"}
    print_table(
        f"Rain-layer statistics, mean over {len(pairs)} pairs of {args.data}",
        ["rain", *keys],
        [[label[k], *(f"{means[k][c]:.3f}" for c in keys)] for k in rows],
    )
    if args.json:
        args.json.write_text(json.dumps({"pairs": len(pairs), "means": means}, indent=2))


if __name__ == "__main__":
    main()
