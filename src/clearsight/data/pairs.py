"""Finding input/target image pairs in a folder, matched by file name: the one pair scanner.

`eval`, `compare`, training and `check-data` all pair files here, under one rule set:

- Folders come from the known layouts (`rain/clean`, `moire/clean`, `input/target`, tried in
  that order) or from explicit input/target folder names under the data folder.
- Image files (`clearsight.io.IMAGE_EXTENSIONS`, any case) are matched by stem, so
  `rain/001.png` pairs with `clean/001.png` or `clean/001.jpg`; an optional name map turns an
  input stem into its target stem (several inputs may share one target).
- Hidden files (name starting with '.') are skipped, as `clearsight.io.list_images` skips them:
  they are macOS '._*' resource forks and the temporary files of in-progress atomic writes,
  never data, and a '._001.png' fork would otherwise pair or collide with real images.
- Two images with one stem in one folder ('001.png' and '001.jpg') are a problem that names
  both files, never a silent choice of one: which one a model was scored on must not depend on
  the order a file system lists them.
- Unmatched names are a problem that lists them, never a silent drop.

`scan_pairs` records every problem (for `check-data`, which prints them all); `find_pairs`
raises on the first kind it meets (for `eval`, which needs a clean set).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from clearsight.errors import ClearsightError, PairingError
from clearsight.io import IMAGE_EXTENSIONS

LAYOUTS: tuple[tuple[str, str], ...] = (("rain", "clean"), ("moire", "clean"), ("input", "target"))

NameMap = Callable[[str], str] | str
"""Input stem -> target stem: a callable, or a format with `{stem}` such as 'no{stem}'."""


@dataclass(frozen=True)
class ImagePair:
    name: str
    input: Path
    target: Path


@dataclass
class PairScan:
    """What pairing two folders found: the pairs and every problem, each naming its files."""

    input_dir: Path
    target_dir: Path
    pairs: list[ImagePair] = field(default_factory=list)
    n_inputs: int = 0
    n_targets: int = 0
    unmatched_inputs: list[tuple[Path, str]] = field(default_factory=list)
    """Inputs without a target, each with the target stem that was looked for."""
    unmatched_targets: list[Path] = field(default_factory=list)
    duplicates: list[tuple[Path, Path]] = field(default_factory=list)
    """Two files of one folder with the same stem (first, second in name order)."""


def images_by_stem(folder: Path) -> tuple[dict[str, Path], list[tuple[Path, Path]]]:
    """Image files of `folder` by stem (hidden files skipped), and the stems used twice."""
    found: dict[str, Path] = {}
    dups: list[tuple[Path, Path]] = []
    for p in sorted(folder.iterdir()):
        if p.name.startswith(".") or p.suffix.lower() not in IMAGE_EXTENSIONS or not p.is_file():
            continue
        if p.stem in found:
            dups.append((found[p.stem], p))
        else:
            found[p.stem] = p
    return found, dups


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


def pair_folders(
    root: Path, input_dir: str | None = None, target_dir: str | None = None
) -> tuple[Path, Path]:
    """The (input, target) folders: the named ones under `root`, or a known layout's."""
    if not (input_dir or target_dir):
        return detect_layout(root)
    if not (input_dir and target_dir):
        raise PairingError("give both the input and the target folder names, or neither")
    if not root.is_dir():
        raise PairingError(f"data folder not found: {root}")
    inp, tgt = root / input_dir, root / target_dir
    for d in (inp, tgt):
        if not d.is_dir():
            raise PairingError(f"folder not found: {d}")
    return inp, tgt


def name_mapper(name_map: NameMap | None) -> Callable[[str], str]:
    """Input stem -> target stem. A string is a format with `{stem}`, e.g. 'no{stem}'."""
    if name_map is None:
        return lambda stem: stem
    if isinstance(name_map, str):
        fmt = name_map
        try:
            fmt.format(stem="x")
        except (KeyError, IndexError, ValueError) as exc:
            raise ClearsightError(
                f"name map {fmt!r} is not a valid format: use {{stem}} for the input's name, "
                f"e.g. 'no{{stem}}' maps rain-001 to norain-001 ({exc})"
            ) from None
        if "{stem}" not in fmt:
            raise ClearsightError(f"name map {fmt!r} must contain {{stem}}, e.g. 'no{{stem}}'")
        return lambda stem: fmt.format(stem=stem)
    if callable(name_map):
        return name_map
    raise ClearsightError(f"name_map must be a callable or a format string, got {name_map!r}")


def _strip_image_suffix(name: str) -> str:
    """'norain-001.png' -> 'norain-001'; a mapping may give the target's full file name."""
    stem, dot, ext = name.rpartition(".")
    return stem if dot and f".{ext.lower()}" in IMAGE_EXTENSIONS else name


def scan_pairs(input_dir: Path, target_dir: Path, name_map: NameMap | None = None) -> PairScan:
    """Pair the images of two folders by stem (the rules are in the module docstring).

    Raises only when there is nothing to pair (both folders without images); every other
    problem is recorded in the returned `PairScan`.
    """
    to_target = name_mapper(name_map)
    inputs, dup_in = images_by_stem(input_dir)
    targets, dup_tgt = images_by_stem(target_dir)
    if not inputs and not targets:
        root = input_dir.parent
        raise PairingError(f"{root}: no images in {input_dir.name}/ and {target_dir.name}/")
    scan = PairScan(
        input_dir=input_dir,
        target_dir=target_dir,
        n_inputs=len(inputs),
        n_targets=len(targets),
        duplicates=dup_in + dup_tgt,
    )
    used: set[str] = set()
    for stem, path in sorted(inputs.items()):
        want = _strip_image_suffix(str(to_target(stem)))
        if want in targets:
            used.add(want)
            scan.pairs.append(ImagePair(name=stem, input=path, target=targets[want]))
        else:
            scan.unmatched_inputs.append((path, want))
    scan.unmatched_targets = [p for s, p in sorted(targets.items()) if s not in used]
    return scan


def find_pairs(
    data_dir: str | Path, input_dir: str | None = None, target_dir: str | None = None
) -> list[ImagePair]:
    """All pairs in `data_dir`, sorted by name; duplicate or unmatched names are an error."""
    root = Path(data_dir)
    inp, tgt = pair_folders(root, input_dir, target_dir)
    scan = scan_pairs(inp, tgt)
    if scan.duplicates:
        (a, b), n_more = scan.duplicates[0], len(scan.duplicates) - 1
        more = f" (and {n_more} more duplicate name{'s' if n_more > 1 else ''})" if n_more else ""
        raise PairingError(f"two images share the name {a.stem!r}: {a} and {b}{more}")
    only_a = [p.stem for p, _ in scan.unmatched_inputs]
    only_b = [p.stem for p in scan.unmatched_targets]
    if only_a or only_b:
        parts = []
        if only_a:
            parts.append(f"{len(only_a)} in {inp.name}/ without a target: {_list_names(only_a)}")
        if only_b:
            parts.append(f"{len(only_b)} in {tgt.name}/ without an input: {_list_names(only_b)}")
        raise PairingError(f"{root}: unmatched images: " + "; ".join(parts))
    return scan.pairs
