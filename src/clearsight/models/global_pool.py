"""Global average pooling sites that tiles of one image can share.

NAFNet's channel attention and ESDNet's scale fusion pool their whole input to one vector
per channel. Cut into tiles, each tile would pool only itself and the tiles would disagree
in colour and contrast. `GlobalPool` records the vector it computes (`recording`) or uses a
given one instead (`sharing`), so `shared_stats_tiled` runs the network once on the whole
image (downscaled above a pixel budget) for the vectors and then every tile with them:
tiles differ from the untiled output only where the convolutions' reach exceeds the halo.

Inference only; training and export see a plain `adaptive_avg_pool2d`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.preprocess import downscale_to_pixels
from clearsight.tiling import Progress, tiled_apply


class GlobalPool(nn.Module):
    """[N,C,H,W] -> [N,C,1,1] mean over space; `shared`, when set, is returned instead, and
    every vector returned is appended to `record` while it is a list."""

    def __init__(self) -> None:
        super().__init__()
        self.shared: torch.Tensor | None = None
        self.record: list[torch.Tensor] | None = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        v = self.shared if self.shared is not None else F.adaptive_avg_pool2d(x, 1)
        if self.record is not None:
            self.record.append(v)
        return v


def pool_sites(model: nn.Module) -> list[GlobalPool]:
    """The model's pooling sites in module order (the order its forward calls them)."""
    return [m for m in model.modules() if isinstance(m, GlobalPool)]


@contextlib.contextmanager
def recording(sites: Sequence[GlobalPool]) -> Iterator[list[list[torch.Tensor]]]:
    """While active, each site appends what it pools to its own list (yielded, site order)."""
    records: list[list[torch.Tensor]] = [[] for _ in sites]
    try:
        for site, rec in zip(sites, records, strict=True):
            site.record = rec
        yield records
    finally:
        for site in sites:
            site.record = None


@contextlib.contextmanager
def sharing(sites: Sequence[GlobalPool], vectors: Sequence[torch.Tensor]) -> Iterator[None]:
    """While active, site k returns `vectors[k]` instead of pooling its input."""
    if len(vectors) != len(sites):
        raise ValueError(f"expected {len(sites)} pooled vectors, got {len(vectors)}")
    try:
        for site, v in zip(sites, vectors, strict=True):
            site.shared = v
        yield
    finally:
        for site in sites:
            site.shared = None


Padder = Callable[[torch.Tensor], tuple[torch.Tensor, tuple[int, int]]]
"""The model's own padding: (the padded image, (top, left) of the image inside it)."""


@torch.no_grad()
def shared_stats_tiled(
    restore: Callable[[torch.Tensor], torch.Tensor],
    net: Callable[[torch.Tensor], torch.Tensor],
    pad: Padder,
    sites: Sequence[GlobalPool],
    x: torch.Tensor,
    *,
    tile: int,
    halo: int,
    blend: int,
    stats_pixels: int | None,
    multiple: int,
    progress: Progress | None = None,
) -> torch.Tensor:
    """`restore(x)` in overlapping tiles that all use the whole image's pooled vectors.

    The vectors come from one `restore` of the whole image (an antialiased downscale when
    it has more than `stats_pixels` pixels). The image is then padded as the model pads it
    (`pad`) and `net` (the network on sizes that are multiples of `multiple`) runs on tiles
    cut on that grid: every tile sees the sampling phases of the untiled run (space-to-depth,
    strided convs, resizes), so tiles differ from it only where the convolutions reach
    further than the halo. `tile`, `halo` and `blend` are rounded up to the grid.
    """
    small = downscale_to_pixels(x, stats_pixels, multiple)
    with recording(sites) as records:
        restore(small)
    if any(len(r) != 1 for r in records):
        raise RuntimeError("a pooling site ran other than once per forward")
    padded, (top, left) = pad(x)
    m = multiple

    def on_cells(cells: torch.Tensor) -> torch.Tensor:
        return F.pixel_unshuffle(net(F.pixel_shuffle(cells, m)), m)

    with sharing(sites, [r[0] for r in records]):
        cells = tiled_apply(
            on_cells,
            F.pixel_unshuffle(padded, m),
            tile=max(1, -(-tile // m)),
            halo=-(-halo // m),
            blend=-(-blend // m),
            progress=progress,
        )
    h, w = x.shape[-2:]
    return F.pixel_shuffle(cells, m)[..., top : top + h, left : left + w]
