"""Paired frame folders for training video models: clips cut into random windows of frames.

A data folder is one clip or a folder of clips. A clip is a folder holding its input frames
(`rain/`, `moire/` or `input/`) and its clean frames (`clean/`), matched by name and taken in
frame-number order: the layout `clearsight eval --video` reads and `clearsight synth rain
--video` writes (docs/video.md). Frames pair under the pair rules (`data/pairs.py`,
docs/architecture.md §2: hidden files skipped, a stem used twice or on one side only is an
error naming the files), and every frame of a clip must have the clip's size. All of it is
checked when the set is opened, so a bad folder fails in the first second.

A training sample is `(input, target)`, two [3,T,p,p] float32 tensors in [0, 1]: `frames`
consecutive frames of one clip, the same `patch_size` square cut from each, and at random
the whole window mirrored left to right. One draw per sample (`data/augment.py`) applies to
every frame of both sides, and it is a pure function of (seed, epoch, index), so DataLoader
workers and a resumed run see the same windows. Neither rotations nor vertical flips are
drawn (the image sets draw all 8 views): rain falls down, and a model that sees it fall up
or sideways learns streaks that never occur. Every start of a window is one sample (times
`repeat`). A validation set (`frames` None) has one sample per clip: the whole clip,
uncropped; `clip_frames(i)` streams it a frame at a time instead.

Memory cache (`cache="memory"`): every frame is decoded once, when the set is opened, and
kept as its integer pixels, as the image sets do (`data/paired.py`); a clip of 100 frames of
832x480 holds about 120 MB per side.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from clearsight.data.augment import (
    apply_draw,
    check_patch_fits,
    draw_params,
    make_generator,
    to_tensor,
)
from clearsight.data.pairs import find_pairs
from clearsight.errors import ClearsightError, PairingError
from clearsight.io import image_size, read_image

__all__ = [
    "CLEAN_FOLDER",
    "INPUT_FOLDERS",
    "Clip",
    "VideoWindowDataset",
    "find_clips",
    "frame_key",
    "read_clip",
]

INPUT_FOLDERS = ("rain", "moire", "input")
"""The input frames' folder of a clip (one of them), as `clearsight eval --video` reads it."""
CLEAN_FOLDER = "clean"

_NUMBER = re.compile(r"(\d+)")


def frame_key(path: Path) -> tuple[int, str]:
    """A frame's place in its clip: the last number in its name (frame_2 before frame_10),
    then the name."""
    numbers = _NUMBER.findall(path.stem)
    return (int(numbers[-1]) if numbers else -1, path.name)


@dataclass(frozen=True)
class Clip:
    """One clip: its folder, its input and clean frames (paired, in frame order), and its
    frame size (width, height)."""

    root: Path
    inputs: tuple[Path, ...]
    targets: tuple[Path, ...]
    size: tuple[int, int]

    def __len__(self) -> int:
        return len(self.inputs)


def _input_folder(root: Path) -> Path | None:
    found = [root / n for n in INPUT_FOLDERS if (root / n).is_dir()]
    if len(found) > 1:
        raise PairingError(f"{root}: several input folders ({', '.join(p.name for p in found)})")
    return found[0] if found else None


def read_clip(root: Path) -> Clip:
    """The clip in folder `root`, its frames paired and sized (one-line errors naming files)."""
    inp = _input_folder(root)
    if inp is None:
        raise PairingError(
            f"{root}: no input frames folder ({', '.join(n + '/' for n in INPUT_FOLDERS)})"
        )
    if not (root / CLEAN_FOLDER).is_dir():
        raise PairingError(f"{root}: no {CLEAN_FOLDER}/ folder beside {inp.name}/")
    pairs = sorted(find_pairs(root, inp.name, CLEAN_FOLDER), key=lambda p: frame_key(p.input))
    size = image_size(pairs[0].input)
    for p in pairs:
        for f in (p.input, p.target):
            if image_size(f) != size:
                w, h = image_size(f)
                raise PairingError(
                    f"{f}: frame is {w}x{h} (WxH) but the clip's first frame "
                    f"{pairs[0].input.name} is {size[0]}x{size[1]}"
                )
    return Clip(
        root, tuple(p.input for p in pairs), tuple(p.target for p in pairs), (size[0], size[1])
    )


def find_clips(root: str | Path) -> list[Clip]:
    """The clips of a data folder: the folder itself when it is a clip, else each of its
    subfolders (in name order) that holds an input frames folder."""
    base = Path(root)
    if not base.is_dir():
        raise PairingError(f"data folder not found: {base}")
    if _input_folder(base) is not None:
        return [read_clip(base)]
    subs = sorted(
        d for d in base.iterdir() if d.is_dir() and not d.name.startswith(".") and _input_folder(d)
    )
    if not subs:
        folders = ", ".join(n + "/" for n in INPUT_FOLDERS)
        raise PairingError(
            f"{base}: no clips (a clip is a folder holding {folders} and {CLEAN_FOLDER}/)"
        )
    return [read_clip(d) for d in subs]


class VideoWindowDataset(Dataset):
    """Windows of `frames` frames from the clips at `root` (module docstring); with
    `frames` None, whole clips (validation)."""

    def __init__(
        self,
        root: str | Path,
        *,
        frames: int | None,
        patch_size: int | None = None,
        augment: bool = True,
        seed: int = 0,
        repeat: int = 1,
        cache: str = "memory",
    ) -> None:
        self.root = Path(root)
        self.clips = find_clips(self.root)
        self.frames, self.patch_size, self.augment = frames, patch_size, augment
        self.seed, self.epoch = seed, 0
        for clip in self.clips:
            w, h = clip.size
            check_patch_fits(str(clip.root), h, w, patch_size)
            if frames is not None and len(clip) < frames:
                raise ClearsightError(
                    f"{clip.root}: the clip has {len(clip)} frames but a window is {frames}; "
                    "use shorter windows or remove the clip"
                )
        if frames is None:
            self.index = [(i, 0) for i in range(len(self.clips))]
        else:
            starts = [(i, s) for i, c in enumerate(self.clips) for s in range(len(c) - frames + 1)]
            self.index = starts * max(1, int(repeat))
        self._store: dict[Path, np.ndarray] | None = None
        if cache == "memory":
            self._store = {f: read_image(f) for c in self.clips for f in (*c.inputs, *c.targets)}

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next draws belong to (the batch stream sets it)."""
        self.epoch = int(epoch)

    def files(self) -> list[Path]:
        """Every frame file the set reads (both sides)."""
        return sorted({f for c in self.clips for f in (*c.inputs, *c.targets)})

    def _image(self, path: Path) -> np.ndarray:
        return self._store[path] if self._store is not None else read_image(path)

    def clip_frames(self, i: int) -> tuple[Iterator[np.ndarray], Iterator[np.ndarray]]:
        """Clip `i`'s input and clean frames, each an iterator of HxWx3 arrays in order."""
        clip = self.clips[i]
        return (self._image(f) for f in clip.inputs), (self._image(f) for f in clip.targets)

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        ci, start = self.index[index]
        clip = self.clips[ci]
        stop = len(clip) if self.frames is None else start + self.frames
        w, h = clip.size
        g = make_generator(self.seed, self.epoch, index)
        draw = draw_params(
            g, h, w, self.patch_size, random_crop=self.augment, flips=False, rotations=False,
            name=str(clip.root),
        )  # fmt: skip
        if self.augment:  # the one view drawn: left-right (rain falls down; docstring)
            mirror = bool(torch.rand((), generator=g, dtype=torch.float64) < 0.5)
            draw = dataclasses.replace(draw, hflip=mirror)

        def window(files: tuple[Path, ...]) -> torch.Tensor:
            views = [to_tensor(apply_draw(self._image(f), draw)) for f in files[start:stop]]
            return torch.stack(views, dim=1)

        return window(clip.inputs), window(clip.targets)
