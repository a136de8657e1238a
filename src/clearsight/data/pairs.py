"""Finding input/target image pairs in a folder, matched by file name.

`eval` (and, later, training) accept the layouts the field uses: `rain/clean`,
`moire/clean` and `input/target`. Names are matched by file stem so `rain/001.png`
pairs with `clean/001.png` (or `clean/001.jpg`); anything unmatched is an error that
lists the names, never a silent drop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from clearsight.errors import PairingError
from clearsight.io import IMAGE_EXTENSIONS

LAYOUTS: tuple[tuple[str, str], ...] = (("rain", "clean"), ("moire", "clean"), ("input", "target"))


@dataclass(frozen=True)
class ImagePair:
    name: str
    input: Path
    target: Path


def _images_by_stem(folder: Path) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS:
            if p.stem in found:
                raise PairingError(f"two images share the name {p.stem!r}: {found[p.stem]} and {p}")
            found[p.stem] = p
    return found


def _list_names(names: list[str], limit: int = 10) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def detect_layout(data_dir: Path) -> tuple[Path, Path]:
    """The (input folder, target folder) of `data_dir`, trying the known layouts in order."""
    if not data_dir.is_dir():
        raise PairingError(f"data folder not found: {data_dir}")
    for inp, tgt in LAYOUTS:
        if (data_dir / inp).is_dir() and (data_dir / tgt).is_dir():
            return data_dir / inp, data_dir / tgt
    layouts = ", ".join(f"{a}/+{b}/" for a, b in LAYOUTS)
    raise PairingError(f"{data_dir}: no paired folders found (expected one of {layouts})")


def find_pairs(
    data_dir: str | Path, input_dir: str | None = None, target_dir: str | None = None
) -> list[ImagePair]:
    """All pairs in `data_dir`, sorted by name; unmatched names are an error."""
    root = Path(data_dir)
    if input_dir or target_dir:
        if not (input_dir and target_dir):
            raise PairingError("give both the input and the target folder names, or neither")
        inp, tgt = root / input_dir, root / target_dir
        for d in (inp, tgt):
            if not d.is_dir():
                raise PairingError(f"folder not found: {d}")
    else:
        inp, tgt = detect_layout(root)
    a, b = _images_by_stem(inp), _images_by_stem(tgt)
    only_a, only_b = sorted(set(a) - set(b)), sorted(set(b) - set(a))
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} in {inp.name}/ without a target: {_list_names(only_a)}")
        if only_b:
            parts.append(f"{len(only_b)} in {tgt.name}/ without an input: {_list_names(only_b)}")
        raise PairingError(f"{root}: unmatched images: " + "; ".join(parts))
    if not a:
        raise PairingError(f"{root}: no images in {inp.name}/ and {tgt.name}/")
    return [ImagePair(name=k, input=a[k], target=b[k]) for k in sorted(a)]
