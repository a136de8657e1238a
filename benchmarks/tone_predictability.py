"""Can the held-out tone shift be predicted from the input? A ridge fit on training pairs.

    python benchmarks/tone_predictability.py --train TRAIN --val VAL
                                             [--model default-demoire] [--lam 1] [--json FILE]

Demoiréing targets differ from their inputs by a global level shift that varies from pair to
pair (docs/architecture.md §5.1). This measures how much of it the input alone tells: a ridge
regression from 15 global statistics of the input (per channel: mean, standard deviation,
1st, 50th and 99th percentiles) to the per-channel mean shift (target minus input), fitted on
the TRAIN pairs and applied to the VAL pairs. The table gives RGB PSNR (uint8, peak 255) on
VAL of the input and, with `--model`, of the model's output, each as it is, moved to the
training pairs' mean shift, moved to the predicted shift (the output: its mean set to the
input's plus the prediction), and moved to the target's own mean (an oracle: it reads the
target). If "predicted" does not beat "as is" for the output, the model already uses what
the input says about tone, and a better tone needs information the input does not carry.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

from clearsight.data.pairs import find_pairs
from clearsight.io import read_image
from clearsight.metrics import psnr

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import print_table  # noqa: E402 - beside this script

PERCENTILES = (1, 50, 99)


def features(img: np.ndarray) -> np.ndarray:
    """15 global statistics of an RGB image, in [0, 1] units."""
    px = img.reshape(-1, 3).astype(np.float64)
    stats = [px.mean(0), px.std(0), *np.percentile(px, PERCENTILES, axis=0)]
    return np.concatenate(stats) / 255.0


def mean_shift(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per-channel mean of b minus a's (0-255)."""
    return b.reshape(-1, 3).mean(0) - a.reshape(-1, 3).astype(np.float64).mean(0)


class Ridge:
    """Ridge regression on standardised features with an unpenalised intercept (closed form:
    15 features and a few hundred pairs need no solver library)."""

    def __init__(self, x: np.ndarray, y: np.ndarray, lam: float) -> None:
        self.mu, self.sd = x.mean(0), x.std(0) + 1e-9
        z = (x - self.mu) / self.sd
        self.b0 = y.mean(0)
        self.w = np.linalg.solve(z.T @ z + lam * np.eye(z.shape[1]), z.T @ (y - self.b0))

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return ((x - self.mu) / self.sd) @ self.w + self.b0


def shifted(img: np.ndarray, by: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(img.astype(np.float64) + by), 0, 255)


def load_pairs(folder: Path) -> list[tuple[str, np.ndarray, np.ndarray]]:
    if not folder.is_dir():
        sys.exit(f"{folder}: no such folder (a paired set, e.g. moire/ and clean/)")
    pairs = find_pairs(folder)
    if not pairs:
        sys.exit(f"{folder}: no input/target pairs found")
    return [(p.name, read_image(p.input), read_image(p.target)) for p in pairs]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--train", type=Path, required=True, help="pairs the ridge is fitted on")
    ap.add_argument("--val", type=Path, required=True, help="held-out pairs it is scored on")
    ap.add_argument("--model", default=None, help="also score this model's outputs")
    ap.add_argument("--lam", type=float, default=1.0, help="ridge penalty")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args()
    train, val = load_pairs(args.train), load_pairs(args.val)
    x = np.stack([features(a) for _, a, _ in train])
    y = np.stack([mean_shift(a, b) for _, a, b in train])
    ridge, const = Ridge(x, y, args.lam), y.mean(0)
    pred = ridge(np.stack([features(a) for _, a, _ in val]))
    true = np.stack([mean_shift(a, b) for _, a, b in val])
    images = {"input": [a for _, a, _ in val]}
    if args.model:
        from clearsight.engine.inference import InferenceOptions, Restorer
        from clearsight.zoo import resolve_model

        restorer = Restorer(resolve_model(args.model), InferenceOptions())
        images["output"] = [restorer.restore_image(a) for _, a, _ in val]
    rows: dict[str, list[float]] = {}
    for label, imgs in images.items():
        cols: list[list[float]] = [[], [], [], []]
        for img, (_, a, b), p, t in zip(imgs, val, pred, true, strict=True):
            own = mean_shift(a, img)  # where the image's level already is, against the input
            for col, by in zip(cols, (0.0, const - own, p - own, t - own), strict=True):
                col.append(psnr(shifted(img, by), b))
        rows[label] = [float(np.mean(c)) for c in cols]
    err = {
        k: float(np.sqrt(((v - true) ** 2).mean()))
        for k, v in (("train mean", const), ("predicted", pred))
    }
    print_table(
        f"PSNR dB on {len(val)} pairs of {args.val}; ridge fitted on {len(train)} of {args.train}",
        ["", "as is", "train mean shift", "predicted shift", "oracle shift"],
        [[k, *(f"{x:.2f}" for x in v)] for k, v in rows.items()],
    )
    rms = ", ".join(f"{k} {v:.1f}" for k, v in err.items())
    print(f"shift error against the target's (rms, 0-255): {rms}")
    print(f"mean shift: val targets {true.mean():+.2f}, predicted {pred.mean():+.2f}, ", end="")
    print(f"train targets {const.mean():+.2f}")
    if args.json:
        args.json.write_text(json.dumps({"psnr": rows, "shift_rms": err}, indent=2))


if __name__ == "__main__":
    main()
