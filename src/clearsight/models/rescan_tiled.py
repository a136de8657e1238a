"""Exact tiled RESCAN inference in bounded memory (layer-synchronous execution).

Overlapping tiles cannot reproduce RESCAN: every SE block pools over the whole image. So the
network runs one layer at a time over the whole image, tile by tile: each tile of a unit
gathers its inputs with the halo its convolutions need, computes the PRE-SE activation of
its core, adds it to the per-channel sums of the SE mean and stores it in a full-resolution
buffer. Once every tile is done the SE scale comes from the exact global mean, and the
consumers apply it to the slices they read; nothing makes an extra full-resolution pass.
A buffer is freed as soon as nothing reads it (the state of unit k from stage s-1 dies once
unit k of stage s is done).

Three exact rewrites make this fast without changing the result beyond float rounding:

* SE scales are sigmoids (>= 0) and LeakyReLU is positively homogeneous, so
  `leaky(a * h) == a * leaky(h)`: buffers hold `leaky(h)` (written as each tile finishes)
  and the scale `a` is folded into the in-channels of the convolutions that read them.
* Gate convolutions that share an input are fused into one convolution (weights concatenated
  once per call from the module's parameters, never assigned back).
* tanh(u) = 2 * sigmoid(2u) - 1, with the 2 folded into the weights (an exact scaling):
  this CPU's sigmoid is about three times faster than its tanh.

Buffers are channels-last with a zero border as wide as the largest halo, so the zero
padding of the untiled convolutions is reproduced without any per-tile padding. Images of a
batch run one after another, because the SE scales (folded into weights) are per image.
The tiles of a layer run on worker threads, one intra-op thread each (see `_Tiles`).
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from clearsight.models.rescan_units import NEG_SLOPE, RecurrentUnit, SEBlock
from clearsight.tiling import Progress, grid_spans

CL = torch.channels_last
# Tiles run on this many worker threads on CPU (None: torch's intra-op thread count);
# 1 runs them one after another on torch's own intra-op threads.
TILE_WORKERS: int | None = None
Where = tuple[int, int, int, int]  # a tile's core: y0, y1, x0, x1


class RescanNet(Protocol):
    """What the tiled path reads of a `RESCAN` (a structural type, so this module does not
    import the network that calls it)."""

    unit: str
    mode: str
    channels: int
    stages: int
    units: nn.ModuleList
    decoder: nn.Sequential


class _Conv:
    """A convolution without padding (windows carry their halo), optionally adding `other`."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor, dilation: int) -> None:
        self.weight = weight.contiguous(memory_format=CL)
        self.bias = bias.contiguous()
        self.dilation = dilation

    def __call__(self, x: torch.Tensor, other: torch.Tensor | None = None) -> torch.Tensor:
        y = F.conv2d(x, self.weight, self.bias, dilation=self.dilation)
        return y if other is None else y.add_(other)


def _params(
    convs: list[torch.nn.Conv2d], doubled: tuple[int, ...] = ()
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weights and biases of `convs` concatenated along the outputs; `doubled` ones times 2."""
    ws, bs = [], []
    for i, c in enumerate(convs):
        k = 2.0 if i in doubled else 1.0
        ws.append(c.weight.detach() * k)
        bs.append(c.bias.detach() * k)
    return torch.cat(ws, 0), torch.cat(bs, 0)


def _scaled(w: torch.Tensor, scale: torch.Tensor | None) -> torch.Tensor:
    """Fold a per-in-channel SE scale into conv weights."""
    return w if scale is None else w * scale[None, :, None, None].to(w.dtype)


def _tanh_from_sigmoid_(t: torch.Tensor) -> torch.Tensor:
    """In place: t = sigmoid(2u) -> tanh(u) = 2 t - 1."""
    return t.mul_(2.0).sub_(1.0)


class _UnitPlan:
    """One recurrent unit's fused convolutions for one stage (SE scales of its inputs folded)."""

    def __init__(
        self,
        unit: RecurrentUnit,
        first: bool,
        x_scale: torch.Tensor | None,
        h_scale: torch.Tensor | None,
    ) -> None:
        self.kind, self.d, self.c = unit.kind, unit.dilation, unit.x_convs()[0].out_channels
        self.first = first or unit.kind == "Conv"
        self.h_scale = h_scale
        xs = {g: getattr(unit, f"conv_x{g}") for g in unit.x_gates}
        hs = {g: getattr(unit, f"conv_h{g}") for g in unit.h_gates}
        d = self.d

        def conv(
            convs: list[torch.nn.Conv2d],
            scale: torch.Tensor | None,
            dil: int,
            doubled: tuple[int, ...] = (),
        ) -> _Conv:
            w, b = _params(convs, doubled)
            return _Conv(_scaled(w, scale), b, dil)

        kind = self.kind
        if self.first:
            if kind in ("Conv", "RNN"):
                self.x = conv([xs[""]], x_scale, d, (0,) if kind == "RNN" else ())
            elif kind == "GRU":
                self.x = conv([xs["z"], xs["n"]], x_scale, d, (1,))
            else:
                self.x = conv([xs["i"], xs["o"], xs["j"]], x_scale, d, (2,))
            self.x_halo, self.h_halo = d, 0
            return
        if kind == "RNN":
            self.x = conv([xs[""]], x_scale, d, (0,))
            self.h = conv([hs[""]], h_scale, 1, (0,))
            self.x_halo, self.h_halo = d, 1
        elif kind == "GRU":
            # r is needed on a one-pixel ring around the core (conv_hn reads r * h).
            self.x = conv([xs["z"], xs["r"], xs["n"]], x_scale, d, (2,))
            self.h = conv([hs["z"], hs["r"]], h_scale, 1)
            self.hn = conv([hs["n"]], h_scale, 1, (0,))
            self.x_halo, self.h_halo = d + 1, 2
        else:  # LSTM
            self.x = conv([xs[g] for g in "fioj"], x_scale, d, (3,))
            self.h = conv([hs[g] for g in "fioj"], h_scale, 1, (3,))
            self.x_halo, self.h_halo = d, 1

    def __call__(
        self, x: torch.Tensor, h: torch.Tensor | None, cell: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """PRE-SE activation of the core (and the LSTM cell).

        `x`: the unit's input with halo x_halo; `h`: its stored state leaky(h_pre) with halo
        h_halo (its SE scale is folded into the h-convs); `cell`: the LSTM cell on the core.
        """
        c, kind = self.c, self.kind
        if self.first:
            g = self.x(x)
            if kind == "Conv":
                return g, None
            g.sigmoid_()
            if kind == "RNN":
                return _tanh_from_sigmoid_(g), None
            if kind == "GRU":
                return g[:, :c] * _tanh_from_sigmoid_(g[:, c:]), None
            cell = g[:, :c] * _tanh_from_sigmoid_(g[:, 2 * c :])  # i * j
            # Faithful to the official code: h = o * c (no tanh on c).
            return g[:, c : 2 * c] * cell, cell
        assert h is not None
        if kind == "RNN":
            return _tanh_from_sigmoid_(self.h(h, self.x(x)).sigmoid_()), None
        if kind == "LSTM":
            assert cell is not None
            g = self.h(h, self.x(x)).sigmoid_()
            j = _tanh_from_sigmoid_(g[:, 3 * c :])
            new_cell = torch.addcmul(g[:, :c] * cell, g[:, c : 2 * c], j)
            return g[:, 2 * c : 3 * c] * new_cell, new_cell
        gx = self.x(x)  # z, r, 2n over core + 1 ring
        zr = self.h(h, gx[:, : 2 * c]).sigmoid_()
        rq = zr[:, c:] * h[:, :, 1:-1, 1:-1]  # zero outside the image, like conv_hn's padding
        n = self.hn(rq, gx[:, 2 * c :, 1:-1, 1:-1]).sigmoid_()
        hc = h[:, :, 2:-2, 2:-2]
        hc = hc * self.h_scale[None, :, None, None] if self.h_scale is not None else hc
        diff = _tanh_from_sigmoid_(n).sub_(hc)
        return torch.addcmul(hc, zr[:, :c, 1:-1, 1:-1], diff), None  # (1-z) h + z n


def _se_scale(se: torch.nn.Module, sums: torch.Tensor, count: int) -> torch.Tensor | None:
    """The SE gate [C] from per-channel sums over the whole image (None without SE)."""
    if not isinstance(se, SEBlock):
        return None
    return se.gate((sums / count).to(se.fc[0].weight.dtype)[None])[0]


class _Tiles:
    """Runs one layer's tiles: on a few worker threads (one intra-op thread each) on CPU.

    Tiles of a layer are independent (each writes its own core; the SE sums are reduced in
    tile order afterwards, so the result is deterministic). Worker threads with one thread
    each beat one tile at a time on OpenMP threads: there is no fork/join barrier per op,
    which on a shared, busy CPU costs a scheduler slice whenever a thread is descheduled
    (512x512 with other jobs on this 2-core CPU: 6.6 s instead of 44-53 s).
    """

    def __init__(self, tiles: list[Where], device: torch.device) -> None:
        self.tiles = tiles
        self.threads = torch.get_num_threads()
        workers = TILE_WORKERS if TILE_WORKERS is not None else self.threads
        workers = min(workers, len(tiles)) if device.type == "cpu" else 1
        if workers > 1 and "OpenMP" not in torch.__config__.parallel_info():
            workers = 1  # one intra-op thread per worker relies on OpenMP's per-thread setting
        self.pool = (
            ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,))
            if workers > 1
            else None
        )

    def map(self, fn: Callable[[Where], torch.Tensor], step: Callable[[], None]) -> torch.Tensor:
        """Apply `fn` to every tile (calling `step` after each, in order); sum its results."""

        def run(where: Where) -> torch.Tensor:
            with torch.inference_mode():
                return fn(where)

        parts = []
        results = self.pool.map(run, self.tiles) if self.pool is not None else map(fn, self.tiles)
        for part in results:
            parts.append(part)
            step()
        return torch.stack(parts).to(torch.float64).sum(0)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            torch.set_num_threads(self.threads)  # the workers lowered the global default


class _Layout:
    """Full-resolution buffers: channels-last, with a zero border as wide as the largest halo.

    A buffer that is dead (`release`) is handed out again by the next `buffer` call of its
    width instead of being freed: a fresh 1024x1024 map is a fresh mmap whose every page
    faults on first write, about 0.7 million faults per restore (a tenth of the time on a
    2-core CPU, benchmarks/restore_speed.py). Only cores are ever written, so a reused
    buffer's border is still zero, and every layer writes every tile's core before any
    consumer reads it.
    """

    def __init__(self, image: torch.Tensor, border: int) -> None:
        self.dtype, self.device = image.dtype, image.device
        self.height, self.width = image.shape[-2:]
        self.b = border
        self._free: dict[int, list[torch.Tensor]] = {}

    def buffer(self, ch: int) -> torch.Tensor:
        free = self._free.get(ch)
        if free:
            return free.pop()
        b = self.b
        shape = (1, ch, self.height + 2 * b, self.width + 2 * b)
        t = torch.empty(shape, dtype=self.dtype, device=self.device, memory_format=CL)
        t[:, :, :b].zero_()
        t[:, :, -b:].zero_()
        t[:, :, :, :b].zero_()
        t[:, :, :, -b:].zero_()
        return t

    def release(self, *bufs: torch.Tensor | None) -> None:
        """Mark buffers as dead: nothing reads them again (None is skipped)."""
        for t in bufs:
            if t is not None:
                self._free.setdefault(t.shape[1], []).append(t)

    def core(self, t: torch.Tensor, where: Where, halo: int = 0) -> torch.Tensor:
        """The tile's core widened by `halo` (zeros where that leaves the image)."""
        y0, y1, x0, x1 = where
        b = self.b
        return t[:, :, b + y0 - halo : b + y1 + halo, b + x0 - halo : b + x1 + halo]

    def store(self, dst: torch.Tensor, out: torch.Tensor, where: Where) -> torch.Tensor:
        """Store leaky(out) (its SE scale comes later); return the tile's per-channel sums."""
        part = out.sum(dim=(2, 3))[0]
        self.core(dst, where).copy_(F.leaky_relu(out, NEG_SLOPE, inplace=True))
        return part


def _unit_tile(
    lay: _Layout,
    plan: _UnitPlan,
    prev: torch.Tensor,
    state: torch.Tensor | None,
    cell_prev: torch.Tensor | None,
    out_buf: torch.Tensor,
    cell_buf: torch.Tensor | None,
    where: Where,
) -> torch.Tensor:
    xw = lay.core(prev, where, plan.x_halo)
    hw = None if state is None or plan.first else lay.core(state, where, plan.h_halo)
    cw = None if cell_prev is None else lay.core(cell_prev, where)
    out, cell = plan(xw, hw, cw)
    if cell_buf is not None and cell is not None:
        lay.core(cell_buf, where).copy_(cell)
    return lay.store(out_buf, out, where)


def _decoder_tile(
    lay: _Layout, conv: _Conv, prev: torch.Tensor, dbuf: torch.Tensor, where: Where
) -> torch.Tensor:
    return lay.store(dbuf, conv(lay.core(prev, where, 1)), where)


def _rain_tile(
    lay: _Layout,
    conv: _Conv,
    dbuf: torch.Tensor,
    add_prev: torch.Tensor | None,
    rain: torch.Tensor,
    stage_in: torch.Tensor,
    image: torch.Tensor,
    where: Where,
) -> torch.Tensor:
    r = conv(lay.core(dbuf, where), None if add_prev is None else lay.core(add_prev, where))
    lay.core(rain, where).copy_(r)
    # The next stage's input (and the final output): original - rain.
    y0, y1, x0, x1 = where
    torch.sub(image[:, :, y0:y1, x0:x1], r, out=lay.core(stage_in, where))
    return r.new_zeros(1)


@torch.inference_mode()
def _restore_one(
    model: RescanNet,
    image: torch.Tensor,
    runner: _Tiles,
    stages: int,
    step: Callable[[], None],
    threshold: float | None = None,
) -> tuple[torch.Tensor, int]:
    """Restore one [1,3,H,W] image; returns [1,3,H,W] (channels-last) and the stages used.

    With a `threshold` ("auto"), stops after stage s >= 2 once the stage changed the image
    by less than it: the mean |rain_s - rain_(s-1)| over the whole image, as untiled.
    """
    units = list(model.units)
    max_halo = max(u.dilation for u in units) + (1 if model.unit == "GRU" else 0)
    lay = _Layout(image, border=max(max_halo, 2))
    count = lay.height * lay.width
    full: Where = (0, lay.height, 0, lay.width)
    stage_in = lay.buffer(3)
    lay.core(stage_in, full).copy_(image)
    rain: torch.Tensor | None = None
    dec_conv, dec_se, _, dec_out = model.decoder
    w3, b3 = _params([dec_conv])
    w1, b1 = _params([dec_out])
    states: list[torch.Tensor | None] = [None] * len(units)  # leaky(h) of the previous stage
    scales: list[torch.Tensor | None] = [None] * len(units)  # their SE scales
    cells: list[torch.Tensor | None] = [None] * len(units)  # LSTM cells of the previous stage
    for s in range(stages):
        last = s == stages - 1
        prev, prev_scale = stage_in, None
        for k, unit in enumerate(units):
            plan = _UnitPlan(unit, s == 0, prev_scale, scales[k])
            width = unit.x_convs()[0].out_channels  # the real width, also when pruned
            out_buf = lay.buffer(width)
            cell_buf = lay.buffer(width) if model.unit == "LSTM" and not last else None
            fn = partial(_unit_tile, lay, plan, prev, states[k], cells[k], out_buf, cell_buf)
            scale = _se_scale(unit.se, runner.map(fn, step), count)
            # Unit k's old state is dead now; in the last stage nothing reads it again, nor
            # the previous unit's output (the input of this one).
            del fn
            lay.release(states[k], cells[k])
            if last and prev is not stage_in:
                lay.release(prev)
            states[k], cells[k] = (None, None) if last else (out_buf, cell_buf)
            scales[k] = scale
            prev, prev_scale = out_buf, scale
        # Decoder: 3x3 conv -> SE -> LeakyReLU -> 1x1 conv gives this stage's rain layer.
        dbuf = lay.buffer(model.decoder[0].out_channels)
        fn = partial(_decoder_tile, lay, _Conv(_scaled(w3, prev_scale), b3, 1), prev, dbuf)
        dec1 = _Conv(_scaled(w1, _se_scale(dec_se, runner.map(fn, step), count)), b1, 1)
        if last:
            lay.release(prev)
        new_rain = lay.buffer(3)
        add_prev = rain if model.mode == "add" else None
        fn = partial(_rain_tile, lay, dec1, dbuf, add_prev, new_rain, stage_in, image)
        runner.map(fn, step)
        lay.release(dbuf)
        del fn, dbuf, prev, add_prev
        if threshold is not None and rain is not None and not last:
            diff = lay.core(new_rain, full) - lay.core(rain, full)
            if diff.abs().mean().item() < threshold:
                return lay.core(stage_in, full), s + 1
        lay.release(rain)
        rain = new_rain
    return lay.core(stage_in, full), stages


def restore_tiled(
    model: RescanNet,
    x: torch.Tensor,
    *,
    tile: int = 128,
    stages: int | None = None,
    progress: Progress | None = None,
) -> torch.Tensor:
    """`model.restore(x, stages)` computed layer by layer over tiles, exact to float rounding.

    Memory: about (units + 2) full-resolution feature maps (twice as many for LSTM cells)
    plus a tile's temporaries per worker thread, whatever the image size. While it runs, the
    worker threads lower torch's global intra-op thread count to 1; it is restored after.
    """
    return restore_tiled_stages(model, x, tile=tile, stages=stages, progress=progress)[0]


def restore_tiled_stages(
    model: RescanNet,
    x: torch.Tensor,
    *,
    tile: int = 128,
    stages: int | None = None,
    threshold: float | None = None,
    progress: Progress | None = None,
) -> tuple[torch.Tensor, list[int]]:
    """`restore_tiled`, with adaptive stopping when `threshold` is given, and the stages each
    image used. With a threshold, `stages` (default: all) is the most any image runs and
    every image stops on its own (see `RESCAN.restore`); progress then counts the stages an
    image skipped as done, so it still ends at its total.
    """
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"expected a [N,3,H,W] tensor, got shape {tuple(x.shape)}")
    if int(tile) < 1:
        raise ValueError(f"tile must be >= 1, got {tile}")
    stages = model.stages if stages is None else stages
    if not 1 <= stages <= model.stages:
        raise ValueError(f"stages must be in 1..{model.stages}, got {stages}")
    h, w = x.shape[-2:]
    rows, cols = grid_spans(h, int(tile)), grid_spans(w, int(tile))
    tiles = [(y0, y1, x0, x1) for y0, y1 in rows for x0, x1 in cols]
    total = x.shape[0] * stages * (len(model.units) + 2) * len(tiles)
    done = 0

    def step() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)

    per_stage = (len(model.units) + 2) * len(tiles)
    runner = _Tiles(tiles, x.device)
    outs, used = [], []
    try:
        for i in range(x.shape[0]):
            y, n = _restore_one(model, x[i : i + 1], runner, stages, step, threshold)
            outs.append(y)
            used.append(n)
            if n < stages:  # the skipped stages count as done
                done += (stages - n) * per_stage
                if progress is not None:
                    progress(done, total)
    finally:
        runner.close()
    # Plain tensors (not inference tensors), contiguous like the input.
    return torch.cat(outs, 0).contiguous(), used
