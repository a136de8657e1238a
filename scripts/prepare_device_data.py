"""Pack what `scripts/train_on_device.sh` needs into `device_data/`, sized to travel.

A device call sends the whole working tree plus the carried paths, 64 MiB at most
(docs/training-on-device.md). The tracked tree already takes most of that (two bundled
models are 16 MB each), so the byte budget is 64 MiB minus every file that travels anyway
(tracked and untracked-not-ignored files, measured here) minus a 1 MiB margin; this script
fails with the numbers if the data cannot fit.

What goes in, and why (all seeded: the same sources and arguments give the same bytes):
- `moire_train/{moire,clean}/NNNN.jpg`: one aligned square crop per training pair, at full
  scale (never resized: the moiré's frequency is what the model learns). The crop is
  re-encoded with the pair's own JPEG quantisation tables and chroma subsampling, placed on
  the 16-pixel block grid, so its pixels stay within JPEG round-off of the original
  decoding. All pairs go in; the crop side is the largest multiple of 16 (at most 256, the
  training patch) at which they fit the moiré share (70% of what is left after validation
  data). The full 700x700 pairs (about 450 KB each) would need 190 MB.
- `moire_val/{moire,clean}/NNNN.jpg`: the centred 256x256 crop of each held-out validation
  pair, the same way: the device compares the new weights with the shipped ones on these.
  The full pairs (8 MB) do not fit; the card's full-image figure is measured after the
  copy-back, on the CPU.
- `rain_bg/*.jpg`: the clean backgrounds for rain synthesis on the device (16 cores make
  thousands of pairs in under a minute, so pairs never travel), each one seeded crop of at
  most 320x320 at full scale, JPEG quality 92, 4:4:4; the crop side shrinks until all fit
  the rain share (30%).
- `rain_val_bg/*.jpg`: 16 backgrounds held out of `rain_bg` (seeded choice); the device
  synthesises validation rain over them with another seed. Rain100L is the test set: it
  never travels and is measured once, after the copy-back, to decide whether to ship.
- `wheels/`: pure-Python wheels of runtime dependencies missing from the device's image
  (pytorch-msssim), installed there with `pip --no-index`.
- `manifest.json`: the budget arithmetic, the counts, crop sides and bytes of each part.

Usage (repository root; the sources are folders of images, see the doc):
    python scripts/prepare_device_data.py --moire-train DIR --moire-val DIR \
        --rain-bg DIR [--rain-bg DIR2 ...]
"""

from __future__ import annotations

import argparse
import io
import json
import random
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from PIL import Image, JpegImagePlugin

TRAVEL_LIMIT = 64 * 2**20
"""What one device call may send: working tree plus carried paths (docs/training-on-device.md)."""
MARGIN = 2**20
OUT_NAME = "device_data"
MOIRE_SHARE = 0.7
MAX_MOIRE_CROP, MIN_CROP, MAX_RAIN_CROP = 256, 64, 320
VAL_CROP = 256
RAIN_QUALITY = 92
RAIN_VAL_COUNT = 16
WHEELS = ("pytorch-msssim==1.0.0",)
IMAGE_EXT = {".jpg", ".jpeg", ".png", ".bmp", ".webp"}


class BudgetError(SystemExit):
    """The data cannot fit the travel budget; the message gives the arithmetic."""


def travelling_bytes(repo: Path, skip: str = OUT_NAME) -> int:
    """Bytes of every file a device call sends anyway: tracked and untracked-not-ignored."""
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        check=True,
        capture_output=True,
    ).stdout
    total = 0
    for name in {n for n in out.decode().split("\0") if n}:
        p = repo / name
        if not name.startswith(f"{skip}/") and p.is_file() and not p.is_symlink():
            total += p.stat().st_size
    return total


def _images(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXT)


def _jpeg_bytes(img: Image.Image, like: Image.Image | None, quality: int = RAIN_QUALITY) -> bytes:
    """JPEG bytes of `img`: with the tables and subsampling of `like` (a JPEG), or `quality`."""
    buf = io.BytesIO()
    if like is not None and getattr(like, "quantization", None):
        sampling = JpegImagePlugin.get_sampling(like)
        img.save(buf, "JPEG", qtables=like.quantization, subsampling=max(sampling, 0))
    else:
        img.save(buf, "JPEG", quality=quality, subsampling=0)
    return buf.getvalue()


def _crop_box(w: int, h: int, side: int, rng: random.Random | None) -> tuple[int, int, int, int]:
    """A side x side box on the 16-pixel grid: random with `rng`, else centred."""
    side_w, side_h = min(side, w), min(side, h)
    if rng is None:
        x, y = (w - side_w) // 2, (h - side_h) // 2
    else:
        x, y = rng.randint(0, w - side_w), rng.randint(0, h - side_h)
    x, y = x - x % 16, y - y % 16
    return x, y, x + side_w, y + side_h


def _pair_names(root: Path, inp: str) -> list[str]:
    names = [p.name for p in _images(root / inp)]
    missing = [n for n in names if not (root / "clean" / n).is_file()]
    if not names or missing:
        raise SystemExit(f"{root}: expected {inp}/ and clean/ with the same file names")
    return names


def encode_pairs(
    root: Path, names: list[str], side: int, seed: int | None
) -> dict[str, tuple[bytes, bytes]]:
    """Aligned crops of the moire/clean pairs `names` (random box per pair with a seed)."""
    out = {}
    for i, name in enumerate(names):
        src_m, src_c = Image.open(root / "moire" / name), Image.open(root / "clean" / name)
        if src_m.size != src_c.size:
            raise SystemExit(f"{root}: {name} differs in size between moire/ and clean/")
        rng = None if seed is None else random.Random(seed * 100_003 + i)
        box = _crop_box(*src_m.size, side, rng)
        out[name] = tuple(_jpeg_bytes(src.convert("RGB").crop(box), src) for src in (src_m, src_c))  # type: ignore[assignment]
    return out


def encode_backgrounds(files: list[Path], side: int, seed: int) -> dict[str, bytes]:
    out = {}
    for i, f in enumerate(files):
        img = Image.open(f).convert("RGB")
        box = _crop_box(*img.size, side, random.Random(seed * 100_003 + i))
        out[f.stem + ".jpg"] = _jpeg_bytes(img.crop(box), None)
    return out


def fit_side(
    encode: Callable[[int], dict], size_of: Callable[[dict], int], top: int, share: int
) -> tuple[int, dict]:
    """The largest crop side (multiple of 16, at most `top`) whose encoding fits `share`."""
    side = top
    while side >= MIN_CROP:
        enc = encode(side)
        used = size_of(enc)
        if used <= share:
            return side, enc
        # bytes grow about with the area: jump close to the side that fits, then walk down
        side = min(side - 16, int(side * (share / used) ** 0.5) // 16 * 16)
    raise BudgetError(f"even {MIN_CROP}x{MIN_CROP} crops do not fit {share} bytes")


def _write(folder: Path, files: dict[str, bytes]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (folder / name).write_bytes(data)


def fetch_wheels(dest: Path, cache: Path | None) -> int:
    """The missing pure-Python wheels, from `cache` if it holds them, else from PyPI."""
    dest.mkdir(parents=True, exist_ok=True)
    for spec in WHEELS:
        stem = spec.split("==")[0].replace("-", "_")
        found = sorted(cache.glob(f"{stem}-*.whl")) if cache else []
        if found:
            shutil.copy2(found[-1], dest / found[-1].name)
            continue
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:"]
        subprocess.run([*cmd, "-q", "-d", str(dest), spec], check=True)
    return sum(p.stat().st_size for p in dest.glob("*.whl"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--moire-train", type=Path, required=True, help="moire/ + clean/ pairs")
    ap.add_argument("--moire-val", type=Path, required=True, help="held-out moire/ + clean/")
    ap.add_argument("--rain-bg", type=Path, action="append", required=True, help="clean photos")
    ap.add_argument("--out", type=Path, default=None, help=f"default: REPO/{OUT_NAME}")
    ap.add_argument("--repo", type=Path, default=Path(__file__).resolve().parents[1])
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit", type=int, default=0, help="first N pairs/photos only (tests)")
    ap.add_argument("--budget-mib", type=float, default=0, help="cap the budget (tests)")
    ap.add_argument("--wheel-cache", type=Path, default=None, help="folder with the wheels")
    ap.add_argument("--no-wheels", action="store_true", help="no wheels (CPU dry runs, tests)")
    args = ap.parse_args(argv)

    out = args.out or args.repo / OUT_NAME
    tree = travelling_bytes(args.repo)
    budget = TRAVEL_LIMIT - tree - MARGIN
    if args.budget_mib:
        budget = min(budget, int(args.budget_mib * 2**20))
    if budget < 4 * 2**20 and not args.budget_mib:
        raise BudgetError(
            f"the working tree already sends {tree} bytes of the {TRAVEL_LIMIT} a device call "
            f"may carry; {budget} bytes left (after a {MARGIN}-byte margin) is too little data"
        )
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    cut = (lambda xs: xs[: args.limit]) if args.limit else (lambda xs: xs)

    wheels = 0 if args.no_wheels else fetch_wheels(out / "wheels", args.wheel_cache)
    val_names = cut(_pair_names(args.moire_val, "moire"))
    val = encode_pairs(args.moire_val, val_names, VAL_CROP, None)
    _write(out / "moire_val" / "moire", {n: m for n, (m, _) in val.items()})
    _write(out / "moire_val" / "clean", {n: c for n, (_, c) in val.items()})
    val_bytes = sum(len(m) + len(c) for m, c in val.values())

    photos = [f for d in args.rain_bg for f in _images(d)]
    if len({f.stem for f in photos}) != len(photos):
        raise SystemExit("--rain-bg: two photos share a name; give folders with unique names")
    random.Random(args.seed).shuffle(photos)
    photos = cut(photos)
    n_val = min(RAIN_VAL_COUNT, max(1, len(photos) // 8))
    rain_val = encode_backgrounds(photos[:n_val], VAL_CROP, args.seed + 1)
    _write(out / "rain_val_bg", rain_val)
    rain_val_bytes = sum(map(len, rain_val.values()))

    left = budget - wheels - val_bytes - rain_val_bytes
    if left <= 0:
        raise BudgetError(
            f"the validation data and wheels alone ({budget - left} bytes) do not fit the "
            f"{budget}-byte budget (64 MiB - {tree} bytes of tree - {MARGIN} margin)"
        )
    moire_share = int(left * MOIRE_SHARE)
    names = cut(_pair_names(args.moire_train, "moire"))
    m_side, moire = fit_side(
        lambda s: encode_pairs(args.moire_train, names, s, args.seed),
        lambda enc: sum(len(m) + len(c) for m, c in enc.values()),
        MAX_MOIRE_CROP,
        moire_share,
    )
    _write(out / "moire_train" / "moire", {n: m for n, (m, _) in moire.items()})
    _write(out / "moire_train" / "clean", {n: c for n, (_, c) in moire.items()})
    moire_bytes = sum(len(m) + len(c) for m, c in moire.values())

    rain_share = left - moire_bytes
    r_side, rain = fit_side(
        lambda s: encode_backgrounds(photos[n_val:], s, args.seed),
        lambda enc: sum(map(len, enc.values())),
        MAX_RAIN_CROP,
        rain_share,
    )
    _write(out / "rain_bg", rain)
    rain_bytes = sum(map(len, rain.values()))

    used = wheels + val_bytes + rain_val_bytes + moire_bytes + rain_bytes
    manifest = {
        "seed": args.seed,
        "budget": {
            "travel_limit": TRAVEL_LIMIT,
            "tree_bytes": tree,
            "margin": MARGIN,
            "budget_bytes": budget,
            "used_bytes": used,
        },
        "moire_train": {"pairs": len(moire), "crop": m_side, "bytes": moire_bytes},
        "moire_val": {"pairs": len(val), "crop": VAL_CROP, "bytes": val_bytes},
        "rain_bg": {"photos": len(rain), "crop": r_side, "bytes": rain_bytes},
        "rain_val_bg": {"photos": len(rain_val), "crop": VAL_CROP, "bytes": rain_val_bytes},
        "wheels_bytes": wheels,
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    mib = 2**20
    capped = " (capped by --budget-mib)" if args.budget_mib else ""
    print(
        f"{out}: {used / mib:.2f} MiB of a {budget / mib:.2f} MiB budget{capped} "
        f"(64 MiB - {tree / mib:.2f} MiB tree - {MARGIN / mib:.0f} MiB margin): "
        f"{len(moire)} moire pairs at {m_side}px, {len(val)} val crops, "
        f"{len(rain)} rain backgrounds at {r_side}px, {len(rain_val)} held out"
    )
    if m_side < MAX_MOIRE_CROP and not (args.budget_mib or args.limit):
        print(
            f"warning: the moire crops are {m_side}px, under the {MAX_MOIRE_CROP}-pixel training "
            f"patch, because the tree sends {tree / mib:.2f} MiB; make room with a slim branch "
            "(docs/training-on-device.md, 'A slim tree') and prepare again",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
