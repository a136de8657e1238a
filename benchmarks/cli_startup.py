"""How long a `clearsight` command takes before it does any work, against the floor under it.

    python benchmarks/cli_startup.py [--runs 5]

Every command imports torch; nothing else should cost much. Side by side in one run, each a
fresh interpreter (median of `--runs` after a warm-up):

* `import torch`: the floor;
* `import torch, torchvision.ops`: what every command paid while the detection models imported
  torchvision at the top (torchvision.ops imports torch._dynamo);
* `clearsight restore -m identity` on a 64x64 PNG: a whole restoration command, start to end;
* `clearsight detect` on the same PNG: detection needs torchvision, so it pays for it.

The CPU may be shared: the load average is printed.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _tables import median_time, print_table  # noqa: E402 - beside this script


def _run(argv: list[str]) -> None:
    subprocess.run(argv, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()

    from clearsight.io import write_image

    py = sys.executable
    with tempfile.TemporaryDirectory() as tmp:
        img = Path(tmp) / "tiny.png"
        rng = np.random.default_rng(0)
        write_image(img, rng.integers(0, 256, (64, 64, 3), dtype=np.uint8))
        cli = [py, "-m", "clearsight"]
        cases = {
            "python -c 'import torch' (floor)": [py, "-c", "import torch"],
            "python -c 'import torch, torchvision.ops'": [
                py,
                "-c",
                "import torch, torchvision.ops",
            ],
            "clearsight restore -m identity": [
                *cli,
                "restore",
                "-m",
                "identity",
                str(img),
                "-o",
                str(Path(tmp) / "r"),
            ],
            "clearsight detect": [*cli, "detect", str(img), "-o", str(Path(tmp) / "d")],
        }
        times = {
            name: median_time(lambda a=argv: _run(a), args.runs)[0] for name, argv in cases.items()
        }
    floor = next(iter(times.values()))
    rows = [[name, f"{t:.2f}", f"{t / floor:.2f}"] for name, t in times.items()]
    load = os.getloadavg()[0]
    print_table(
        f"command start-up, median of {args.runs} (load average {load:.1f})",
        ["command", "seconds", "x floor"],
        rows,
    )


if __name__ == "__main__":
    main()
