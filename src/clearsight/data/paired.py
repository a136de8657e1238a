"""Paired training data: folders of input/target images, and RESCAN's side-by-side files.

Both datasets validate everything when they are opened (names matched, sizes equal, files
readable) so that a bad folder fails in the first second with the files named, not hours
into training; `validate_pairs` / `validate_side_by_side` return the same checks as a
`DataReport` for `clearsight check-data`, which prints all of it.

Samples are `(input, target)` float32 [3,h,w] RGB tensors in [0, 1], cropped and oriented
by one draw per sample (`clearsight.data.augment`) that is a pure function of (seed, epoch,
index), so any number of DataLoader workers and a resumed run see the same patches.

Memory cache (`cache="memory"`): every distinct file is decoded once, when the dataset is
opened, and kept as its decoded integer pixels (uint8, or uint16 for 16-bit sources), not
float. Cost: sum of H x W x 3 bytes (x2 for 16-bit) over the distinct files, e.g. about
93 MB for Rain100L's 100 pairs of 481x321 (float32 would be 4x that); see `cache_nbytes`.
Decoding up front in the main process is what makes it worker-safe: forked workers share
the pages copy-on-write and never decode again; under spawn/forkserver torch hands the one
buffer to each worker through shared memory (/dev/shm needs room for it). Without the cache
each sample decodes its two files, which costs a few ms per 0.15-megapixel PNG.
"""

from __future__ import annotations

import operator
import os
import shlex
import warnings
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

from clearsight.data.augment import check_patch_fits, make_generator, paired_augment, to_tensor
from clearsight.data.data_audit import DEFAULT_PSNR_FLOOR, ContentReport, audit_pairs
from clearsight.data.pairs import LAYOUTS, ImagePair, NameMap, pair_folders, scan_pairs
from clearsight.errors import ClearsightError, ImageReadError, PairingError
from clearsight.io import image_size, list_images, read_image

__all__ = [
    "DataReport",
    "InputFolderDataset",
    "PairedFolderDataset",
    "SideBySideDataset",
    "SizeMismatch",
    "validate_pairs",
    "validate_side_by_side",
]

CacheMode = Literal["memory", "none"]
Order = Literal["clean-rain", "rain-clean"]
Size = tuple[int, int]  # (width, height)

ORDER_MARGIN = 1.25
"""A side-by-side file is flagged when its "clean" half has this many times the texture of its
"rainy" half. On Rain100L the clean image has 0.43-0.98x the rainy one's, so correct files
stay well clear of it."""
ORDER_SAMPLE = 16
"""Files checked for swapped halves when they are not all decoded anyway (no cache)."""
_ERROR_LINES = 5


# --------------------------------------------------------------------------- the report


@dataclass(frozen=True)
class SizeMismatch:
    """An input and its target that differ in size; both files are named."""

    input: Path
    target: Path
    input_size: Size
    target_size: Size

    def describe(self) -> str:
        (wi, hi), (wt, ht) = self.input_size, self.target_size
        return f"{self.input} is {wi}x{hi} but {self.target} is {wt}x{ht}"


@dataclass
class DataReport:
    """What `check-data` found in a paired data source; `ok` when training can use all of it."""

    root: str
    layout: str
    pairs: list[ImagePair] = field(default_factory=list)
    n_inputs: int = 0
    n_targets: int = 0
    unmatched_inputs: list[tuple[Path, str]] = field(default_factory=list)
    """Inputs without a target, each with the target name that was looked for."""
    unmatched_targets: list[Path] = field(default_factory=list)
    duplicates: list[tuple[Path, Path]] = field(default_factory=list)
    size_mismatches: list[SizeMismatch] = field(default_factory=list)
    unreadable: list[tuple[Path, str]] = field(default_factory=list)
    odd_widths: list[tuple[Path, Size]] = field(default_factory=list)
    suspect_order: list[Path] = field(default_factory=list)
    order_checked: int = 0
    decoded: bool = False
    pair_sizes: list[Size] = field(default_factory=list)
    command: str = ""
    """The `clearsight check-data` command line that prints this report."""
    target_folder: str = ""
    content: ContentReport | None = None
    """Pixel-level findings (misaligned, duplicate targets, extreme, colour order), if run."""

    @property
    def _in_targets(self) -> str:
        return f" in {self.target_folder}" if self.target_folder else ""

    @property
    def n_pairs(self) -> int:
        return len(self.pairs)

    @property
    def ok(self) -> bool:
        return not self.problems()

    def size_range(self) -> str:
        """Pair sizes as 'W1-W2 x H1-H2' (or 'WxH' when all alike); '-' when none were read."""
        if not self.pair_sizes:
            return "-"
        ws = [w for w, _ in self.pair_sizes]
        hs = [h for _, h in self.pair_sizes]

        def span(lo: int, hi: int) -> str:
            return str(lo) if lo == hi else f"{lo}-{hi}"

        distinct = len(set(self.pair_sizes))
        text = f"{span(min(ws), max(ws))} x {span(min(hs), max(hs))}"
        return text if distinct == 1 else f"{text} ({distinct} distinct sizes)"

    def problems(self) -> list[str]:
        """One line per problem, each naming its file(s)."""
        out = [
            f"unmatched input: {p} (no target named {want!r}{self._in_targets})"
            for p, want in self.unmatched_inputs
        ]
        out += [f"unmatched target: {p} (no input maps to it)" for p in self.unmatched_targets]
        out += [
            f"duplicate name: {a} and {b} share the stem {a.stem!r}" for a, b in self.duplicates
        ]
        out += [f"size mismatch: {m.describe()}" for m in self.size_mismatches]
        out += [f"unreadable: {_with_file(p, why)}" for p, why in self.unreadable]
        out += [
            f"odd width: {p} is {w}x{h}; side-by-side images need an even width"
            for p, (w, h) in self.odd_widths
        ]
        return out

    def content_lines(self) -> list[str]:
        """Pixel-level suspicions (misaligned, identical, extreme or colour-swapped pairs)."""
        return self.content.problems() if self.content is not None else []

    def warning_lines(self) -> list[str]:
        """Suspicions that do not stop training (swapped side-by-side halves, content)."""
        out = self.content_lines()
        if self.content is not None:
            out += self.content.warnings()
        return out + self._order_warnings()

    def _order_warnings(self) -> list[str]:
        if not self.suspect_order:
            return []
        names = ", ".join(str(p) for p in self.suspect_order[:_ERROR_LINES])
        more = len(self.suspect_order) - _ERROR_LINES
        names += f" and {more} more" if more > 0 else ""
        return [
            f"{len(self.suspect_order)} of {self.order_checked} checked side-by-side files look "
            f"swapped (the 'clean' half is much more textured than the 'rainy' half, layout "
            f"{self.layout}): {names}; if the rainy half comes first, use the other order"
        ]

    def summary(self) -> list[tuple[str, str]]:
        """(label, value) rows: what was found, before the problem lists."""
        return [
            ("data", self.root),
            ("layout", self.layout),
            ("pairs", str(self.n_pairs)),
            ("input images", str(self.n_inputs)),
            ("target images", str(self.n_targets)),
            ("pair size (WxH)", self.size_range()),
            ("checked", "decoded every file" if self.decoded else "file headers only"),
            ("problems", str(len(self.problems()))),
        ] + ([("content", self.content.summary())] if self.content is not None else [])

    def lines(self) -> list[str]:
        """The whole report as text lines."""
        rows = [f"{label}: {value}" for label, value in self.summary()]
        return rows + self.problems() + [f"warning: {w}" for w in self.warning_lines()]

    def raise_if_problems(self) -> None:
        """Raise `ImageReadError` (only unreadable files) or `PairingError`, first lines shown."""
        problems = self.problems()
        if not problems:
            return
        head = [f"{self.root}: {len(problems)} problem(s) in the paired data:"]
        head += [f"  {line}" for line in problems[:_ERROR_LINES]]
        if len(problems) > _ERROR_LINES:
            head.append(f"  ... and {len(problems) - _ERROR_LINES} more")
        if self.command:
            head.append(f"  (run `{self.command}` for the full report)")
        else:
            head.append("  (validate_side_by_side(...).lines() gives the full report)")
        only_unreadable = len(self.unreadable) == len(problems)
        raise (ImageReadError if only_unreadable else PairingError)("\n".join(head))


def _with_file(path: Path, message: str) -> str:
    """`message` led by the file name exactly once (ImageReadError messages already are)."""
    return message if message.startswith(str(path)) else f"{path}: {message}"


# --------------------------------------------------------------------------- scanning


def _threads() -> int:
    return max(1, min(8, os.cpu_count() or 1))


def _inspect(
    files: Sequence[Path], decode: bool
) -> tuple[dict[Path, Size], dict[Path, str], dict[Path, np.ndarray]]:
    """Size of every readable file, the reason for every unreadable one, decoded pixels if asked.

    Headers only is fast and catches most broken files; decoding also catches truncated
    data. Threads overlap the decoders, which release the GIL.
    """

    def one(p: Path) -> tuple[Path, Size | None, np.ndarray | None, str | None]:
        try:
            if decode:
                arr = read_image(p)
                return p, (arr.shape[1], arr.shape[0]), arr, None
            return p, image_size(p), None, None
        except ImageReadError as exc:
            return p, None, None, str(exc)

    sizes: dict[Path, Size] = {}
    bad: dict[Path, str] = {}
    arrays: dict[Path, np.ndarray] = {}
    with ThreadPoolExecutor(_threads()) as pool:
        for p, size, arr, why in pool.map(one, files):
            if why is not None:
                bad[p] = why
                continue
            assert size is not None
            sizes[p] = size
            if arr is not None:
                arrays[p] = arr
    return sizes, bad, arrays


def _scan_folders(
    root: str | os.PathLike[str],
    input_dir: str | None,
    target_dir: str | None,
    name_map: NameMap | None,
    decode: bool,
) -> tuple[DataReport, dict[Path, Size], dict[Path, np.ndarray]]:
    root_p = Path(root)
    inp_dir, tgt_dir = pair_folders(root_p, input_dir, target_dir)
    scan = scan_pairs(inp_dir, tgt_dir, name_map)
    layout = f"{inp_dir.name}/ -> {tgt_dir.name}/"
    if name_map is not None:
        layout += f" (names mapped by {name_map if isinstance(name_map, str) else 'a function'})"
    command = ["clearsight", "check-data", str(root_p)]
    if input_dir and target_dir:
        command += ["--input-dir", input_dir, "--target-dir", target_dir]
    if isinstance(name_map, str):
        command += ["--name-map", name_map]
    report = DataReport(
        root=str(root_p),
        layout=layout,
        pairs=scan.pairs,
        n_inputs=scan.n_inputs,
        n_targets=scan.n_targets,
        unmatched_inputs=scan.unmatched_inputs,
        unmatched_targets=scan.unmatched_targets,
        duplicates=scan.duplicates,
        command=shlex.join(command),
        target_folder=str(tgt_dir),
    )
    # A target may serve several inputs (e.g. many rain renderings of one clean image):
    # each file is inspected and cached once.
    files = list(dict.fromkeys(f for pr in report.pairs for f in (pr.input, pr.target)))
    sizes, bad, arrays = _inspect(files, decode)
    report.decoded = decode
    report.unreadable = sorted(bad.items())
    for pr in report.pairs:
        if pr.input in bad or pr.target in bad:
            continue
        si, st = sizes[pr.input], sizes[pr.target]
        if si != st:
            report.size_mismatches.append(SizeMismatch(pr.input, pr.target, si, st))
        else:
            report.pair_sizes.append(si)
    return report, sizes, arrays


def validate_pairs(
    root: str | os.PathLike[str],
    *,
    input_dir: str | None = None,
    target_dir: str | None = None,
    name_map: NameMap | None = None,
    decode: bool = True,
    content: bool = True,
    psnr_floor: float = DEFAULT_PSNR_FLOOR,
) -> DataReport:
    """Check a paired folder without raising for what it finds: the report lists it all.

    Layout errors that leave nothing to check (no such folder, no known layout) still raise
    `PairingError`. `decode` False reads only the headers (fast, misses truncated data).
    With `decode` and `content`, the decoded pairs are also checked pixel by pixel
    (`clearsight.data.data_audit`): misalignment, duplicate targets, extreme pairs (identical, or
    PSNR below `psnr_floor`) and colour order; findings are in `report.content`.
    """
    report, _, arrays = _scan_folders(root, input_dir, target_dir, name_map, decode)
    if decode and content:
        bad = {m.input for m in report.size_mismatches}
        pairs = [p for p in report.pairs if p.input not in bad]
        report.content = audit_pairs(pairs, arrays, psnr_floor=psnr_floor)
    return report


def _texture(img: np.ndarray) -> float:
    """Mean absolute Laplacian of the grey image: rain streaks raise it, removing rain lowers it."""
    grey = cv2.cvtColor(np.ascontiguousarray(img), cv2.COLOR_RGB2GRAY).astype(np.float32)
    return float(np.abs(cv2.Laplacian(grey, cv2.CV_32F)).mean())


def _halves(img: np.ndarray, order: Order) -> tuple[np.ndarray, np.ndarray]:
    """(rainy, clean) halves of a side-by-side image, as views."""
    half = img.shape[1] // 2
    left, right = img[:, :half], img[:, half:]
    return (right, left) if order == "clean-rain" else (left, right)


def _clean_to_rain_texture(img: np.ndarray, order: Order) -> float:
    """Texture of the "clean" half over that of the "rainy" half; below 1 when `order` is right."""
    rain, clean = _halves(img, order)
    return _texture(clean) / max(_texture(rain), 1e-6)


def _suspects(ratios: dict[Path, float]) -> list[Path]:
    """Files whose halves look swapped.

    One file is flagged when its clean half is `ORDER_MARGIN` times as textured as its rainy
    half. Light rain can stay under that margin even when swapped, so a set where most files
    (at least 3 checked) lean the wrong way at all is flagged as a whole: on correct Rain100L
    no file does.
    """
    leaning = [p for p, r in ratios.items() if r > 1.0]
    if len(ratios) >= 3 and len(leaning) * 2 > len(ratios):
        return leaning
    return [p for p, r in ratios.items() if r > ORDER_MARGIN]


def _scan_side_by_side(
    root_or_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    order: Order,
    decode: bool,
) -> tuple[DataReport, dict[Path, Size], dict[Path, np.ndarray]]:
    if order not in ("clean-rain", "rain-clean"):
        raise ClearsightError(f"order must be 'clean-rain' or 'rain-clean', got {order!r}")
    files = list_images(root_or_files)
    report = DataReport(
        root=f"{len(files)} file(s)", layout=f"side by side, {order.replace('-', '|')}"
    )
    if isinstance(root_or_files, str | os.PathLike):
        report.root = str(root_or_files)
        report.command = shlex.join(
            ["clearsight", "check-data", report.root, "--side-by-side", "--order", order]
        )
    report.n_inputs = report.n_targets = len(files)
    sizes, bad, arrays = _inspect(files, decode)
    report.decoded = decode
    report.unreadable = sorted(bad.items())
    good: list[Path] = []
    for p in files:
        if p in bad:
            continue
        w, h = sizes[p]
        if w % 2:
            report.odd_widths.append((p, (w, h)))
            continue
        good.append(p)
        report.pairs.append(ImagePair(name=p.stem, input=p, target=p))
        report.pair_sizes.append((w // 2, h))
    if decode:
        checked = good
    else:  # an evenly spaced sample, decoded only for this check
        step = max(1, len(good) // ORDER_SAMPLE)
        checked = good[::step][:ORDER_SAMPLE]
    ratios = {
        p: _clean_to_rain_texture(arrays[p] if p in arrays else read_image(p), order)
        for p in checked
    }
    report.suspect_order = _suspects(ratios)
    report.order_checked = len(checked)
    return report, sizes, arrays


def validate_side_by_side(
    root_or_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
    *,
    order: Order = "clean-rain",
    decode: bool = True,
) -> DataReport:
    """Check side-by-side files (readable, even width, halves in `order`) into a report."""
    report, _, _ = _scan_side_by_side(root_or_files, order, decode)
    return report


# --------------------------------------------------------------------------- the cache


class _ImageStore:
    """Decoded images packed into one uint8 tensor, read back as numpy views.

    One buffer rather than one array per image: forked workers share its pages copy-on-write
    without per-image objects whose reference counts would dirty them, and under spawn torch
    sends it to each worker once through shared memory instead of pickling every image.
    """

    _ALIGN = 8

    def __init__(self, arrays: dict[Path, np.ndarray]) -> None:
        self._layout: dict[str, tuple[int, tuple[int, ...], str]] = {}
        total = 0
        for p, a in arrays.items():
            self._layout[str(p)] = (total, a.shape, a.dtype.str)
            total += -(-a.nbytes // self._ALIGN) * self._ALIGN
        self._buffer = torch.empty(total, dtype=torch.uint8)
        self._view = self._buffer.numpy()
        # Copy and release one image at a time: peak memory stays near one copy of the set.
        for key in list(arrays):
            a = np.ascontiguousarray(arrays.pop(key))
            offset = self._layout[str(key)][0]
            self._view[offset : offset + a.nbytes] = a.reshape(-1).view(np.uint8)

    @property
    def nbytes(self) -> int:
        return int(self._buffer.numel())

    def get(self, path: Path) -> np.ndarray:
        offset, shape, dtype = self._layout[str(path)]
        n = int(np.prod(shape)) * np.dtype(dtype).itemsize
        return self._view[offset : offset + n].view(dtype).reshape(shape)

    def __getstate__(self) -> dict[str, object]:
        state = self.__dict__.copy()
        del state["_view"]  # a numpy view would be pickled as a copy of the whole buffer
        return state

    def __setstate__(self, state: dict[str, object]) -> None:
        self.__dict__.update(state)
        self._view = self._buffer.numpy()


# --------------------------------------------------------------------------- datasets


class _PatchDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """What both datasets share: options, epoch, cache, and the per-sample draw."""

    def __init__(
        self,
        *,
        patch_size: int | None,
        augment: bool,
        cache: CacheMode,
        seed: int,
        repeat: int,
    ) -> None:
        if cache not in ("memory", "none"):
            raise ClearsightError(f"cache must be 'memory' or 'none', got {cache!r}")
        if isinstance(repeat, bool) or not isinstance(repeat, int) or repeat < 1:
            raise ClearsightError(f"repeat must be a whole number >= 1, got {repeat!r}")
        check_patch_fits("patch_size", 1 << 30, 1 << 30, patch_size)  # validates the type
        self.patch_size = patch_size
        self.augment = augment
        self.cache: CacheMode = cache
        self.seed = int(seed)
        self.repeat = repeat
        self.pairs: list[ImagePair] = []
        self.report: DataReport
        self._store: _ImageStore | None = None
        # Shared memory, so that set_epoch reaches persistent DataLoader workers too.
        self._epoch = torch.zeros((), dtype=torch.int64).share_memory_()

    def _finish_open(
        self,
        report: DataReport,
        sizes: dict[Path, Size],
        arrays: dict[Path, np.ndarray],
        pair_size: Callable[[Size], Size],
    ) -> None:
        """Raise on problems, refuse images smaller than the patch, then fill the cache."""
        report.raise_if_problems()
        if not report.pairs:
            raise PairingError(f"{report.root}: no image pairs found")
        too_small = []
        for pr in report.pairs:
            w, h = pair_size(sizes[pr.input])
            if self.patch_size is not None and (self.patch_size > w or self.patch_size > h):
                too_small.append((pr, w, h))
        if too_small:
            pr, w, h = too_small[0]
            n_more = len(too_small) - 1
            more = f" ({n_more} more image{'s' if n_more > 1 else ''} too small)" if n_more else ""
            try:
                check_patch_fits(str(pr.input), h, w, self.patch_size)
            except ClearsightError as exc:
                raise ClearsightError(f"{exc}{more}") from None
        self.report = report
        self.pairs = list(report.pairs)
        if self.cache == "memory":
            self._store = _ImageStore(arrays)

    @property
    def epoch(self) -> int:
        return int(self._epoch.item())

    def set_epoch(self, epoch: int) -> None:
        """Select the epoch's draws; call it before iterating the DataLoader for that epoch."""
        self._epoch.fill_(int(epoch))

    @property
    def cache_nbytes(self) -> int:
        """Bytes held by the decoded-image cache (0 without it)."""
        return self._store.nbytes if self._store is not None else 0

    def __len__(self) -> int:
        return len(self.pairs) * self.repeat

    def _read(self, path: Path) -> np.ndarray:
        return self._store.get(path) if self._store is not None else read_image(path)

    def _arrays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        index = operator.index(index)
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} samples")
        k = index % len(self.pairs)
        inp, tgt = self._arrays(k)
        gen = make_generator(self.seed, self.epoch, index)
        a, b, _ = paired_augment(
            inp,
            tgt,
            patch_size=self.patch_size,
            generator=gen,
            random_crop=self.augment,
            flips=self.augment,
            rotations=self.augment,
            name=str(self.pairs[k].input),
        )
        return to_tensor(a), to_tensor(b)


class PairedFolderDataset(_PatchDataset):
    """Input/target image folders matched by name, as training patches.

    Folders come from the known layouts (`rain/clean`, `moire/clean`, `input/target`) or from
    `input_dir` / `target_dir` (names under `root`). `name_map` turns an input stem into its
    target stem: a callable, or a format such as 'no{stem}' (rain-001 -> norain-001); several
    inputs may share one target. `patch_size` None returns whole images. `augment` draws a
    random crop and one of the 8 dihedral views; without it the crop is centred and the
    view unchanged. `repeat` lists every pair that many times per epoch, each with its own
    draw. Opening checks every pair and raises `PairingError`/`ImageReadError` on problems.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        input_dir: str | None = None,
        target_dir: str | None = None,
        name_map: NameMap | None = None,
        patch_size: int | None = 64,
        augment: bool = True,
        cache: CacheMode = "memory",
        seed: int = 0,
        repeat: int = 1,
    ) -> None:
        super().__init__(
            patch_size=patch_size, augment=augment, cache=cache, seed=seed, repeat=repeat
        )
        self.root = Path(root)
        report, sizes, arrays = _scan_folders(
            root, input_dir, target_dir, name_map, decode=cache == "memory"
        )
        self._finish_open(report, sizes, arrays, lambda s: s)

    def _arrays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        pr = self.pairs[k]
        inp, tgt = self._read(pr.input), self._read(pr.target)
        if inp.shape[:2] != tgt.shape[:2]:  # only possible if files changed since opening
            (hi, wi), (ht, wt) = inp.shape[:2], tgt.shape[:2]
            raise PairingError(f"{pr.input} is {wi}x{hi} but {pr.target} is {wt}x{ht}")
        return inp, tgt


class SideBySideDataset(_PatchDataset):
    """RESCAN's format: each file holds the clean and the rainy image side by side.

    `order` says which half comes first ('clean-rain' is RESCAN's: clean left, rainy right).
    The width must be even. Opening warns (`UserWarning`, naming the files) when a "clean"
    half is much more textured than its "rainy" half, the sign of swapped halves; every file
    is checked with the memory cache, an evenly spaced sample of `ORDER_SAMPLE` without it.
    Samples are `(rainy, clean)`; other options as in `PairedFolderDataset`.
    """

    def __init__(
        self,
        root_or_files: str | os.PathLike[str] | Sequence[str | os.PathLike[str]],
        *,
        order: Order = "clean-rain",
        patch_size: int | None = 64,
        augment: bool = True,
        cache: CacheMode = "memory",
        seed: int = 0,
        repeat: int = 1,
    ) -> None:
        super().__init__(
            patch_size=patch_size, augment=augment, cache=cache, seed=seed, repeat=repeat
        )
        self.order: Order = order
        report, sizes, arrays = _scan_side_by_side(root_or_files, order, decode=cache == "memory")
        self._finish_open(report, sizes, arrays, lambda s: (s[0] // 2, s[1]))
        for message in report.warning_lines():
            warnings.warn(message, UserWarning, stacklevel=2)

    def _arrays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        path = self.pairs[k].input
        img = self._read(path)
        if img.shape[1] % 2:  # only possible if the file changed since opening
            raise PairingError(f"{path}: width {img.shape[1]} is odd; cannot split it in two")
        return _halves(img, self.order)


class InputFolderDataset(_PatchDataset):
    """Inputs only: a folder of photos with no targets, for distillation without labels.

    The images are `input_dir` under `root` when given, else the input folder of a known
    pair layout (`rain/`, `moire/`, `input/`) when `root` has one, else `root` itself.
    Samples are `(input, input)`: the trainer's batches keep their shape, and the second
    is never a target (the distillation loss compares the student with its teacher).
    Options, checks and draws as in `PairedFolderDataset`.
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        input_dir: str | None = None,
        patch_size: int | None = 64,
        augment: bool = True,
        cache: CacheMode = "memory",
        seed: int = 0,
        repeat: int = 1,
    ) -> None:
        super().__init__(
            patch_size=patch_size, augment=augment, cache=cache, seed=seed, repeat=repeat
        )
        self.root = Path(root)
        folder = self.root / input_dir if input_dir else self.root
        if input_dir is None:
            folder = next(
                (self.root / a for a, b in LAYOUTS if (self.root / a).is_dir()), self.root
            )
        if not folder.is_dir():
            raise PairingError(f"{folder}: not a folder")
        files = list_images(folder)
        sizes, bad, arrays = _inspect(files, decode=cache == "memory")
        report = DataReport(
            root=str(self.root),
            layout=f"{folder.name}/ (inputs only)",
            pairs=[ImagePair(f.stem, f, f) for f in files if f not in bad],
            n_inputs=len(files),
            unreadable=sorted(bad.items()),
        )
        self._finish_open(report, sizes, arrays, lambda s: s)

    def _arrays(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        img = self._read(self.pairs[k].input)
        return img, img
