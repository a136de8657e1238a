"""Overlapping tiles with blended seams, for models without an exact tiled path of their own.

Below both the models (MBCNN's and RESCAN's tiled paths) and the engine, which all use it;
it imports nothing of the package.

Each tile is the core of a regular grid plus `halo` pixels of real image context on every
side that is not the image border. Its output is kept over the core widened by `blend`
pixels and blended with its neighbours by a linear ramp. When `halo - blend` covers the
model's receptive radius every kept pixel saw exactly the context it sees untiled, so the
result equals the untiled forward to float precision; `blend` only hides seams for models
whose receptive field is global.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Progress = Callable[[int, int], None]


def grid_spans(length: int, tile: int) -> list[tuple[int, int]]:
    """Core intervals of a regular grid covering [0, length), sizes equalised."""
    n = max(1, -(-length // tile))
    step = -(-length // n)  # equalised core sizes, none smaller than needed
    return [(s, min(s + step, length)) for s in range(0, length, step)]


def _ramp(n: int, lo_blend: int, hi_blend: int, device: torch.device) -> torch.Tensor:
    """1-D weights: linear ramps of the given widths at the ends, 1 in between."""
    w = torch.ones(n, device=device)
    if lo_blend > 0:
        w[:lo_blend] = (torch.arange(lo_blend, device=device) + 0.5) / lo_blend
    if hi_blend > 0:
        w[n - hi_blend :] = torch.minimum(
            w[n - hi_blend :], (torch.arange(hi_blend, 0, -1, device=device) - 0.5) / hi_blend
        )
    return w


def tiled_apply(
    fn: Callable[[torch.Tensor], torch.Tensor],
    x: torch.Tensor,
    *,
    tile: int,
    halo: int,
    blend: int = 0,
    progress: Progress | None = None,
) -> torch.Tensor:
    """Apply an image-to-image `fn` (same size out) to `x` [B,C,H,W] tile by tile."""
    if tile < 1:
        raise ValueError(f"tile must be >= 1, got {tile}")
    blend = max(0, min(blend, halo))
    _, _, h, w = x.shape
    rows, cols = grid_spans(h, tile), grid_spans(w, tile)
    total, done = len(rows) * len(cols), 0
    out: torch.Tensor | None = None
    weight = torch.zeros(1, 1, h, w, device=x.device, dtype=x.dtype)
    for r0, r1 in rows:
        for c0, c1 in cols:
            # input window: core plus halo, clipped to the image
            ir0, ir1 = max(0, r0 - halo), min(h, r1 + halo)
            ic0, ic1 = max(0, c0 - halo), min(w, c1 + halo)
            y = fn(x[:, :, ir0:ir1, ic0:ic1])
            # kept window: core plus blend, clipped to the image
            kr0, kr1 = max(0, r0 - blend), min(h, r1 + blend)
            kc0, kc1 = max(0, c0 - blend), min(w, c1 + blend)
            piece = y[:, :, kr0 - ir0 : kr1 - ir0, kc0 - ic0 : kc1 - ic0]
            if out is None:
                out = torch.zeros(x.shape[0], y.shape[1], h, w, device=x.device, dtype=y.dtype)
            wr = _ramp(kr1 - kr0, r0 - kr0, kr1 - r1, x.device)
            wc = _ramp(kc1 - kc0, c0 - kc0, kc1 - c1, x.device)
            wt = (wr[:, None] * wc[None, :]).to(y.dtype)[None, None]
            out[:, :, kr0:kr1, kc0:kc1] += piece * wt
            weight[:, :, kr0:kr1, kc0:kc1] += wt
            done += 1
            if progress is not None:
                progress(done, total)
    assert out is not None
    return out / weight
