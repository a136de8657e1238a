"""Joint augmentation for paired restoration data: one draw, applied to input and target alike.

A published baseline flipped the input and its label independently, which teaches a network
to undo flips instead of rain (docs/architecture.md §6). Here the crop window, flip and
rotation are drawn once (`draw_params`) and the same `PairDraw` is applied to both images
(`apply_draw`), so the two can only move together.

Randomness comes from an explicit `torch.Generator` seeded by `make_generator(seed, epoch,
index)`: the draw for one sample is a pure function of those three numbers. It does not depend
on DataLoader workers, the order in which samples are fetched, or the global RNG state, so a
resumed run redraws exactly the same patches.

Images are HxWxC numpy arrays (uint8 or uint16); transforms are views, and only the final
patch is copied when it becomes a tensor (`to_tensor`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch

from clearsight.errors import ClearsightError, PairingError

__all__ = [
    "PairDraw",
    "apply_draw",
    "check_patch_fits",
    "draw_params",
    "draw_seed",
    "make_generator",
    "paired_augment",
    "to_tensor",
]


@dataclass(frozen=True)
class PairDraw:
    """One augmentation draw: a square crop window, then a dihedral view.

    The view is `rot90` counter-clockwise quarter turns followed by a horizontal flip when
    `hflip`; the 4 x 2 combinations are the 8 dihedral views, each reached exactly once.
    `size` None keeps the whole image.
    """

    top: int
    left: int
    size: int | None
    rot90: int
    hflip: bool


def draw_seed(seed: int, epoch: int, index: int) -> int:
    """A 63-bit seed that depends only on (seed, epoch, index), identical in every process.

    Hashing (rather than e.g. `seed + index`) keeps neighbouring samples and epochs
    uncorrelated, and Python's `hash` is not used because it is salted per process.
    """
    key = f"clearsight-augment:{int(seed)}:{int(epoch)}:{int(index)}".encode()
    digest = hashlib.blake2b(key, digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def make_generator(seed: int, epoch: int, index: int) -> torch.Generator:
    """A fresh CPU generator for one sample's draw (see `draw_seed`)."""
    return torch.Generator().manual_seed(draw_seed(seed, epoch, index))


def check_patch_fits(name: str, height: int, width: int, patch_size: int | None) -> None:
    """Refuse a patch larger than the image, naming the file and both sizes."""
    if patch_size is None:
        return
    if isinstance(patch_size, bool) or not isinstance(patch_size, int) or patch_size <= 0:
        raise ClearsightError(f"patch_size must be a positive whole number, got {patch_size!r}")
    if patch_size > height or patch_size > width:
        raise ClearsightError(
            f"{name}: the image is {width}x{height} (WxH) but the patch is "
            f"{patch_size}x{patch_size}; use a smaller patch size or remove the image"
        )


def draw_params(
    generator: torch.Generator,
    height: int,
    width: int,
    patch_size: int | None,
    *,
    random_crop: bool = True,
    flips: bool = True,
    rotations: bool = True,
    name: str = "image",
) -> PairDraw:
    """Draw one crop window and view for an image of `height` x `width`.

    `random_crop` False takes the centre window (deterministic validation patches).
    `flips` alone gives the 4 views without transposition (identity, horizontal, vertical and
    both flips), `rotations` alone the 4 quarter turns, both all 8 dihedral views. Four
    numbers are always drawn, so the crop position does not depend on which options are on.
    """
    check_patch_fits(name, height, width, patch_size)
    u = torch.rand(4, generator=generator, dtype=torch.float64).tolist()
    if patch_size is None:
        top = left = 0
    elif random_crop:
        top = min(int(u[0] * (height - patch_size + 1)), height - patch_size)
        left = min(int(u[1] * (width - patch_size + 1)), width - patch_size)
    else:
        top, left = (height - patch_size) // 2, (width - patch_size) // 2
    if rotations:
        k = min(int(u[2] * 4), 3)
    elif flips:
        k = 2 * min(int(u[2] * 2), 1)  # a half turn is the vertical + horizontal flip
    else:
        k = 0
    hflip = bool(u[3] < 0.5) if flips else False
    return PairDraw(top=top, left=left, size=patch_size, rot90=k, hflip=hflip)


def apply_draw(img: np.ndarray, draw: PairDraw) -> np.ndarray:
    """The crop and view of `draw` applied to an HxW(xC) array; a view, nothing is copied."""
    out = img
    if draw.size is not None:
        out = out[draw.top : draw.top + draw.size, draw.left : draw.left + draw.size]
    if draw.rot90:
        out = np.rot90(out, draw.rot90, axes=(0, 1))
    if draw.hflip:
        out = out[:, ::-1]
    return out


def paired_augment(
    inp: np.ndarray,
    target: np.ndarray,
    *,
    patch_size: int | None,
    generator: torch.Generator,
    random_crop: bool = True,
    flips: bool = True,
    rotations: bool = True,
    name: str = "image",
) -> tuple[np.ndarray, np.ndarray, PairDraw]:
    """Crop and orient `inp` and `target` with ONE draw; returns both views and the draw.

    The two arrays must have the same height and width (`name` is used in errors).
    """
    if inp.shape[:2] != target.shape[:2]:
        (h1, w1), (h2, w2) = inp.shape[:2], target.shape[:2]
        raise PairingError(f"{name}: input is {w1}x{h1} but target is {w2}x{h2}")
    h, w = inp.shape[:2]
    draw = draw_params(
        generator,
        h,
        w,
        patch_size,
        random_crop=random_crop,
        flips=flips,
        rotations=rotations,
        name=name,
    )
    return apply_draw(inp, draw), apply_draw(target, draw), draw


def to_tensor(img: np.ndarray) -> torch.Tensor:
    """HxWx3 uint8/uint16 array (any strides) -> contiguous float32 [3,H,W] tensor in [0, 1]."""
    if img.dtype == np.uint8:
        scale = 255.0
    elif img.dtype == np.uint16:
        scale = 65535.0
    else:
        raise TypeError(f"expected a uint8 or uint16 image, got {img.dtype}")
    # astype copies into a fresh C-ordered array: positive strides whatever the view, and
    # the tensor never aliases the cache.
    chw = img.transpose(2, 0, 1).astype(np.float32, order="C")
    return torch.from_numpy(chw).div_(scale)
