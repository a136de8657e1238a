"""RESCAN: recurrent squeeze-and-excitation context aggregation net (Li et al., ECCV 2018).

Faithful to the structure of the official code (MIT licence): a stack of recurrent units
(dilated x-convolutions, 3x3 h-convolutions, SE with a hidden width of 6, LeakyReLU(0.2))
followed by a decoder, run for several stages; each stage predicts the rain layer and the
next stage sees `rainy - rain`. The module keeps the official, trainable structure; the
exact bounded-memory tiled inference lives in `rescan_tiled`.

Inference can stop early: `restore(x, stages="auto")` stops each image once a stage changes
it by less than `threshold` (mean absolute difference, see `restore`); `stages=N` runs the
first N stages. `last_stages_used` records the stages each image of the last call used.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch import nn

from clearsight.defaults import DEFAULT_STAGE_THRESHOLD
from clearsight.errors import ClearsightError
from clearsight.models.contract import RestorationModel, TiledRestore
from clearsight.models.registry import register_model
from clearsight.models.rescan_tiled import restore_tiled_stages
from clearsight.models.rescan_units import (
    NEG_SLOPE,
    UNIT_CLASSES,
    SEBlock,
    State,
    se_or_identity,
    unfused_gates,
)

UNITS = ("GRU", "LSTM", "RNN", "Conv")
MODES = ("full", "add")
# ONNX Runtime tiles of RESCAN (see `stats_layout`): statistics from at most this many pixels
# (the Restorer's untiled limit, so a tiled image always takes them from a downscale) and
# 512-pixel tiles, whose exact halo (83 px at the defaults) costs least at that size.
ORT_STATS_PIXELS = 512 * 512
ORT_TILE = 512
Stages = int | str | None  # None or "all": every trained stage; "auto"; or a count N


class RescanConfigError(ClearsightError, ValueError):
    """A bad RESCAN constructor argument: a ValueError, and a one-line error for the CLI."""


def _canonical(value: str, options: tuple[str, ...], what: str) -> str:
    for opt in options:
        if isinstance(value, str) and value.lower() == opt.lower():
            return opt
    raise RescanConfigError(f"unknown RESCAN {what} {value!r}; options: {', '.join(options)}")


def _take(state: State, keep: torch.Tensor) -> State:
    """The batch items `keep` (a bool mask) of a unit's state."""
    if state is None:
        return None
    if isinstance(state, tuple):
        return (state[0][keep], state[1][keep])
    return state[keep]


def check_stage_threshold(threshold: float) -> float:
    """A threshold for `stages="auto"`: a number >= 0 (inf allowed), else RescanConfigError."""
    if isinstance(threshold, bool) or not isinstance(threshold, int | float):
        raise RescanConfigError(f"stage threshold must be a number >= 0, got {threshold!r}")
    if not float(threshold) >= 0.0:  # also rejects NaN
        raise RescanConfigError(f"stage threshold must be >= 0, got {threshold!r}")
    return float(threshold)


class RESCAN(RestorationModel):
    """Multi-stage recurrent deraining net; `forward` returns every stage's rain layer."""

    output_kind = "residual"  # stage outputs are rain layers: derained = input - rain
    pad_multiple = 1
    supports_stages = True  # restore/restore_tiled take stages= and threshold= (Restorer)
    # Training on CPU: channels-last weights and batches. benchmarks/train_speed.py (batch 16
    # of 64x64, the trainer's step) on a 2-core AVX2 CPU: 1.11x and 1.29x faster than
    # contiguous (two identical rows of one heavily shared run); 1.30x (1.98 -> 1.52 s) on a
    # quiet 2-core AVX-512 machine.
    prefers_channels_last: bool = True
    # `train.compile: auto` does not compile RESCAN: on a quiet 2-core AVX-512 CPU the
    # compiled step (benchmarks/train_speed.py) measured 1.25x the contiguous eager one, the
    # same as eager channels-last (1.26x), and bf16 compiled 2.01x against 2.07x eager
    # channels-last, for minutes of compiling. (Under heavy load it measured 1.45-2.6x.)
    prefers_compile: bool = False

    def __init__(
        self,
        *,
        unit: str = "GRU",
        mode: str = "full",
        channels: int = 24,
        stages: int = 4,
        depth: int = 7,
        use_se: bool = True,
    ) -> None:
        super().__init__()
        self.unit = _canonical(unit, UNITS, "unit")
        self.mode = _canonical(mode, MODES, "mode")
        for name, value, low in (
            ("channels", channels, 1),
            ("stages", stages, 1),
            ("depth", depth, 3),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < low:
                raise RescanConfigError(f"RESCAN {name} must be an int >= {low}, got {value!r}")
        self.channels, self.stages, self.depth, self.use_se = channels, stages, depth, bool(use_se)
        cls = UNIT_CLASSES[self.unit]
        units = [cls(3, channels, 3, 1, use_se=self.use_se)]
        units += [cls(channels, channels, 3, 2**i, use_se=self.use_se) for i in range(depth - 3)]
        self.units = nn.ModuleList(units)
        self.decoder = nn.Sequential(
            nn.Conv2d(channels, channels, 3, padding=1),
            se_or_identity(channels, self.use_se),
            nn.LeakyReLU(NEG_SLOPE),
            nn.Conv2d(channels, 3, 1),
        )
        self.last_stages_used: list[int] = []
        """Stages each image of the last `restore`/`restore_tiled` call used (batch order)."""

    def config(self) -> dict[str, Any]:
        """The constructor arguments (what an artifact stores)."""
        return {
            "unit": self.unit,
            "mode": self.mode,
            "channels": self.channels,
            "stages": self.stages,
            "depth": self.depth,
            "use_se": self.use_se,
        }

    def _stages(self, stages: int | None) -> int:
        if stages is None:
            return self.stages
        if not 1 <= stages <= self.stages:
            raise RescanConfigError(f"stages must be in 1..{self.stages}, got {stages}")
        return stages

    def _stage_mode(self, stages: Stages) -> int | None:
        """None for "auto", else the number of stages to run (validated)."""
        if isinstance(stages, str):
            key = stages.strip().lower()
            if key == "auto":
                return None
            if key == "all":
                return self.stages
            raise RescanConfigError(
                f"stages must be 'all', 'auto' or an int in 1..{self.stages}, got {stages!r}"
            )
        if stages is not None and (isinstance(stages, bool) or not isinstance(stages, int)):
            raise RescanConfigError(
                f"stages must be 'all', 'auto' or an int in 1..{self.stages}, got {stages!r}"
            )
        return self._stages(stages)

    def _run(self, x: torch.Tensor, stages: int) -> list[torch.Tensor]:
        original = x
        states: list[State] = [None] * len(self.units)
        outputs: list[torch.Tensor] = []
        for s in range(stages):
            new_states: list[State] = []
            for unit, state in zip(self.units, states, strict=True):
                x, state = unit(x, state)
                new_states.append(state)
            out = self.decoder(x)
            if self.mode == "add" and s > 0:
                out = out + outputs[-1].detach()
            outputs.append(out)
            states = new_states
            x = original - out
        return outputs

    def _run_auto(self, x: torch.Tensor, threshold: float) -> tuple[torch.Tensor, list[int]]:
        """The rain layer with adaptive stopping, and the stages each image used.

        After every stage s >= 2 (except the last trained one) each image whose restored
        image changed by less than `threshold` since stage s-1 (mean absolute difference over
        its pixels and channels; equal to the mean |rain_s - rain_(s-1)|) stops there; the
        others run on as a smaller batch, so an image's result and stage count do not depend
        on the rest of its batch (beyond float rounding). With threshold 0 no image stops and
        the computation is exactly that of all stages.
        """
        original = x
        n = x.shape[0]
        active = torch.arange(n, device=x.device)  # batch indices still running
        used = [self.stages] * n
        states: list[State] = [None] * len(self.units)
        prev: torch.Tensor | None = None
        done_rain: torch.Tensor | None = None  # filled only once some image stops early
        for s in range(self.stages):
            new_states: list[State] = []
            for unit, state in zip(self.units, states, strict=True):
                x, state = unit(x, state)
                new_states.append(state)
            out = self.decoder(x)
            if self.mode == "add" and prev is not None:
                out = out + prev
            states = new_states
            if prev is not None and s < self.stages - 1:
                change = (out - prev).abs().mean(dim=(1, 2, 3))
                stop = change < threshold
                if bool(stop.any()):
                    if done_rain is None:
                        done_rain = torch.empty_like(original)
                    done_rain[active[stop]] = out[stop]
                    for i in active[stop].tolist():
                        used[i] = s + 1
                    keep = ~stop
                    if not bool(keep.any()):
                        return done_rain, used
                    cl = torch.channels_last
                    active = active[keep]
                    out = out[keep].contiguous(memory_format=cl)
                    original = original[keep].contiguous(memory_format=cl)
                    states = [_take(st, keep) for st in states]
            prev = out
            x = original - out
        assert prev is not None
        if done_rain is None:
            return prev, used
        done_rain[active] = prev
        return done_rain, used

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        """All stage outputs (predicted rain layers), first to last: training uses them all."""
        return self._run(x, self.stages)

    @torch.no_grad()
    def restore(
        self,
        x: torch.Tensor,
        stages: Stages = None,
        *,
        threshold: float = DEFAULT_STAGE_THRESHOLD,
    ) -> torch.Tensor:
        """Derained image `x - rain` after the first `stages` stages, untiled.

        `stages`: None or "all" runs every trained stage (the default, unchanged); an int N
        in 1..stages runs the first N (equal to stage N of the full run); "auto" stops each
        image after stage s >= 2 once the stage changed it by less than `threshold` (mean
        absolute difference in the model's input units: [0,1] image units for RESCAN's
        preprocessing), see `_run_auto`. `threshold` is used by "auto" only. Records the
        stages each image used in `last_stages_used`.

        Gradient-free inference; runs channels-last (oneDNN's fast layout on CPU, measured
        about 1.25x faster than NCHW here), which changes no value beyond float rounding.
        """
        n = self._stage_mode(stages)
        x = x.contiguous(memory_format=torch.channels_last)
        if n is None:
            rain, used = self._run_auto(x, check_stage_threshold(threshold))
        else:
            rain, used = self._run(x, n)[-1], [n] * x.shape[0]
        self.last_stages_used = used
        return (x - rain).contiguous()

    def restore_tiled(
        self,
        x: torch.Tensor,
        *,
        tile: int = 128,
        stages: Stages = None,
        threshold: float = DEFAULT_STAGE_THRESHOLD,
        progress: Callable[[int, int], None] | None = None,
    ) -> torch.Tensor:
        """`restore(x, stages, threshold=...)` computed tile by tile, equal to it within float
        rounding.

        Layer-synchronous: every SE block still pools over the whole image, so the result is
        the untiled one (max abs difference ~1e-6), while memory stays at a few feature maps
        (under 1 GB at 1024x1024). `tile` is the core size in pixels; `progress(done, total)`
        is called after each tile step. "auto" is supported: the stage change is measured
        over the whole image, as untiled (a change within ~1e-7 of the threshold may decide
        differently through float rounding). Records `last_stages_used`. Inference only
        (returns an ordinary tensor).
        """
        n = self._stage_mode(stages)
        y, used = restore_tiled_stages(
            self,
            x,
            tile=tile,
            stages=n,
            threshold=None if n is not None else check_stage_threshold(threshold),
            progress=progress,
        )
        self.last_stages_used = used
        return y

    @property
    def receptive_radius(self) -> int | None:
        """Exact radius (pixels) of the whole network; None with SE, whose pooling is global.

        Derived stage by stage: a unit reaches its input's radius plus its dilation (plus 1
        for a GRU with a state, whose x-path also runs through r into the 3x3 conv_hn), or
        its own previous state's radius plus the h-path (1; GRU 2); the decoder adds 1 and
        the next stage's input `original - rain` has the decoder's radius. The input path
        always dominates, so it is sum(dilations) + 1 per stage, plus (for GRU) one per unit
        at every stage after the first: 68 for LSTM/RNN/Conv and 83 for GRU at the defaults.
        Tight: the test perturbs one pixel and sees the output change exactly this far.
        """
        return None if self.use_se else self._conv_radius()

    def _conv_radius(self) -> int:
        """The receptive radius of the network's convolutions alone (SE aside)."""
        cls = UNIT_CLASSES[self.unit]
        prev: list[int] = []
        inp, out, prev_out = 0, 0, 0
        for s in range(self.stages):
            cur: list[int] = []
            r = inp
            for k, unit in enumerate(self.units):
                r += unit.dilation * (unit.kernel - 1) // 2 + (cls.x_extra if s > 0 else 0)
                if s > 0 and cls.state_halo is not None:
                    r = max(r, prev[k] + cls.state_halo)
                cur.append(r)
            out = r + 1  # decoder 3x3 conv; the 1x1 conv adds nothing
            if self.mode == "add" and s > 0:
                out = max(out, prev_out)
            prev, prev_out, inp = cur, out, out
        return out

    # -- the contract's hooks for tiling and export ---------------------------------------
    def tiled_path(self) -> TiledRestore | None:
        return self.restore_tiled

    def prune_protected(self) -> list[nn.Module] | None:
        """The decoder's last conv: its 3 outputs are the rain layer's colour channels. The
        rest is coupled through the recurrent state and SE gates, which the pruner's
        dependency graph keeps together."""
        return [self.decoder[-1]]

    def prune_tracing(self) -> contextlib.AbstractContextManager[None]:
        return unfused_gates()

    def export_graph(self) -> tuple[nn.Module, list[str]]:
        """`x - rain` after the last stage (`output`), then after each earlier stage."""
        return _RescanGraph(self), ["output"] + [f"stage{i}" for i in range(1, self.stages)]

    def stats_layout(self) -> dict[str, Any] | None:
        """With SE: the SE gates (sigmoid outputs, one per unit and decoder per stage) are
        shared; the halo is the receptive radius without SE, so ONNX Runtime tiles are exact
        given the statistics."""
        if not self.use_se:
            return None
        # One [N, sites, C] tensor holds every gate: a pruned model whose SE blocks ended
        # up with different widths has no such layout (its ONNX tiles are generic).
        widths = {m.fc[-2].out_features for m in self.modules() if isinstance(m, SEBlock)}
        if len(widths) != 1:
            return None
        return {
            "kind": "rescan-se-gates",
            "sites": self.stages * (len(self.units) + 1),
            "channels": widths.pop(),
            "halo": self._conv_radius(),
            "blend": 0,
            "exact_given_stats": True,
            "stats_pixels": ORT_STATS_PIXELS,
            "default_tile": ORT_TILE,
        }

    @contextlib.contextmanager
    def global_stats_hooks(
        self, shared: torch.Tensor | None = None
    ) -> Iterator[list[torch.Tensor]]:
        """Every SE block records its gate (or takes `shared[:, k]`, k in call order)."""
        rec: list[torch.Tensor] = []
        blocks = [m for m in self.modules() if isinstance(m, SEBlock)]
        calls = [0]

        def se_forward(se: SEBlock, x: torch.Tensor) -> torch.Tensor:
            if shared is None:
                g = se.gate(x.mean(dim=(2, 3)))
                rec.append(g)
            else:
                g = shared[:, calls[0]]
            calls[0] += 1
            return x * g[:, :, None, None]

        for se in blocks:
            se.forward = types.MethodType(se_forward, se)  # an instance attribute, removed below
        try:
            yield rec
        finally:
            for se in blocks:
                del se.forward


class _RescanGraph(nn.Module):
    """RESCAN's restore for export: `x - rain` after the last stage, then each earlier one."""

    def __init__(self, model: RESCAN) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rains = self.model._run(x, self.model.stages)
        return (x - rains[-1], *(x - r for r in rains[:-1]))


# name, unit, description, parameter count of the official code at the default arguments
_VARIANTS: tuple[tuple[str, str, str, int], ...] = (
    (
        "rescan",
        "GRU",
        "RESCAN (ECCV 2018), ConvGRU units, 24 ch, 4 stages: 149,823 params",
        149_823,
    ),
    (
        "rescan-lstm",
        "LSTM",
        "RESCAN with ConvLSTM units (official h = o*c): 197,367 params",
        197_367,
    ),
    ("rescan-rnn", "RNN", "RESCAN with plain ConvRNN (tanh) units: 54,735 params", 54_735),
    (
        "rescan-conv",
        "Conv",
        "RESCAN with stateless conv units (no recurrence across stages): 28,695 params",
        28_695,
    ),
)


def _builder(default_unit: str, description: str) -> Callable[..., RESCAN]:
    """A registry builder whose signature carries this variant's default unit."""

    def build(
        *,
        unit: str = default_unit,
        mode: str = "full",
        channels: int = 24,
        stages: int = 4,
        depth: int = 7,
        use_se: bool = True,
    ) -> RESCAN:
        return RESCAN(
            unit=unit, mode=mode, channels=channels, stages=stages, depth=depth, use_se=use_se
        )

    build.__doc__ = description
    return build


for _name, _unit, _description, _params in _VARIANTS:
    register_model(
        _name,
        task="derain",
        description=_description,
        metric_preset="y-matlab",
        reference_params=_params,
        arg_bounds={"channels": (1, 512), "stages": (1, 32), "depth": (3, 16)},
    )(_builder(_unit, _description))
