"""RESCAN's building blocks: squeeze-and-excitation and the recurrent units.

Their own module so that both the network (`rescan`) and its exact tiled inference
(`rescan_tiled`) import them, and neither imports the other's private names.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from torch import nn

SE_HIDDEN = 6  # the official code passes its "reduction" (6) as the hidden width
NEG_SLOPE = 0.2


State = torch.Tensor | tuple[torch.Tensor, torch.Tensor] | None


class SEBlock(nn.Module):
    """Squeeze-and-excitation: per-channel gates from the global mean of the whole map."""

    def __init__(self, channels: int, hidden: int = SE_HIDDEN) -> None:
        super().__init__()
        self.fc = nn.Sequential(
            nn.Linear(channels, hidden),
            nn.ReLU(inplace=True),
            nn.Linear(hidden, channels),
            nn.Sigmoid(),
        )

    def gate(self, mean: torch.Tensor) -> torch.Tensor:
        """[N,C] channel means -> [N,C] scales (shared with the tiled path)."""
        return self.fc(mean)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.gate(x.mean(dim=(2, 3)))[:, :, None, None]


def se_or_identity(channels: int, use_se: bool) -> nn.Module:
    return SEBlock(channels) if use_se else nn.Identity()


class RecurrentUnit(nn.Module):
    """Common part of the recurrent units: dilated x-convs, 3x3 h-convs, SE, LeakyReLU."""

    kind = ""
    x_gates: tuple[str, ...] = ()
    h_gates: tuple[str, ...] = ()
    state_halo: int | None = None  # how far the h-path reaches per stage (None: no state)
    x_extra = 0  # extra reach of the x-path once there is a state (GRU: via r into conv_hn)

    def __init__(
        self, in_ch: int, out_ch: int, kernel: int = 3, dilation: int = 1, *, use_se: bool = True
    ) -> None:
        super().__init__()
        self.in_ch, self.out_ch, self.kernel, self.dilation = in_ch, out_ch, kernel, dilation
        pad_x = dilation * (kernel - 1) // 2
        pad_h = (kernel - 1) // 2
        for g in self.x_gates:
            conv = nn.Conv2d(in_ch, out_ch, kernel, padding=pad_x, dilation=dilation)
            self.add_module(f"conv_x{g}", conv)
        for g in self.h_gates:
            self.add_module(f"conv_h{g}", nn.Conv2d(out_ch, out_ch, kernel, padding=pad_h))
        self.se = se_or_identity(out_ch, use_se)
        self.act = nn.LeakyReLU(NEG_SLOPE)

    def x_convs(self) -> list[nn.Conv2d]:
        return [getattr(self, f"conv_x{g}") for g in self.x_gates]

    def h_convs(self) -> list[nn.Conv2d]:
        return [getattr(self, f"conv_h{g}") for g in self.h_gates]

    def _out(self, h: torch.Tensor) -> torch.Tensor:
        # The post-SE, post-LeakyReLU map is both the unit's output and its state.
        return self.act(self.se(h))


class ConvUnit(RecurrentUnit):
    """A plain dilated conv: no state."""

    kind = "Conv"
    x_gates = ("",)

    def forward(self, x: torch.Tensor, state: State = None) -> tuple[torch.Tensor, State]:
        return self._out(self.conv_x(x)), None


class RNNUnit(RecurrentUnit):
    """h = tanh(conv_x(x) + conv_h(h_prev))."""

    kind = "RNN"
    x_gates = ("",)
    h_gates = ("",)
    state_halo = 1

    def forward(self, x: torch.Tensor, state: State = None) -> tuple[torch.Tensor, State]:
        if state is None:
            h = torch.tanh(self.conv_x(x))
        else:
            assert isinstance(state, torch.Tensor)
            h = torch.tanh(self.conv_x(x) + self.conv_h(state))
        h = self._out(h)
        return h, h


_UNFUSED = [False]  # set by `unfused_gates` while a pruner traces the module calls


@contextlib.contextmanager
def unfused_gates() -> Iterator[None]:
    """While active, `fused_gates` calls each gate conv as a module (for a dependency tracer
    such as Torch-Pruning's, which follows module calls, not concatenated weights)."""
    _UNFUSED[0] = True
    try:
        yield
    finally:
        _UNFUSED[0] = False


def fused_gates(convs: tuple[nn.Conv2d, ...], x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Several same-shaped gate convs of one input as ONE conv, split back per gate.

    The weights are concatenated into a local on every call (the parameters, their names
    and the official structure stay as they are); one wide conv is about 20% faster to
    train on CPU than three narrow ones and equal to float rounding.
    """
    if _UNFUSED[0]:
        return tuple(c(x) for c in convs)
    c0 = convs[0]
    w = torch.cat([c.weight for c in convs])
    b = torch.cat([c.bias for c in convs])
    y = F.conv2d(x, w, b, padding=c0.padding, dilation=c0.dilation)
    # Split with the real widths, not chunk(): the ONNX export then has one Split with
    # constant sizes, where chunk() became Shape -> Gather -> Div -> Slice, and in an int8
    # graph that Shape made ONNX Runtime dequantize the whole fused map only to read its
    # size (RESCAN int8 at 1024x1024: 8.11x the official code against 6.35x, docs/
    # architecture.md section 5.4).
    return tuple(torch.split(y, [c.out_channels for c in convs], dim=1))


class GRUUnit(RecurrentUnit):
    """Convolutional GRU; the first stage (no state) is h = sigmoid(xz) * tanh(xn)."""

    kind = "GRU"
    x_gates = ("z", "r", "n")
    h_gates = ("z", "r", "n")
    state_halo = 2  # conv_hn(r * h) where r itself comes from the 3x3 conv_hr(h)
    x_extra = 1  # ... and from conv_xr(x): x reaches dilation + 1 through r

    def forward(self, x: torch.Tensor, state: State = None) -> tuple[torch.Tensor, State]:
        if state is None:
            xz, xn = fused_gates((self.conv_xz, self.conv_xn), x)
            h = torch.sigmoid(xz) * torch.tanh(xn)
        else:
            assert isinstance(state, torch.Tensor)
            xz, xr, xn = fused_gates((self.conv_xz, self.conv_xr, self.conv_xn), x)
            hz, hr = fused_gates((self.conv_hz, self.conv_hr), state)
            z = torch.sigmoid(xz + hz)
            r = torch.sigmoid(xr + hr)
            n = torch.tanh(xn + self.conv_hn(r * state))
            h = (1 - z) * state + z * n
        h = self._out(h)
        return h, h


class LSTMUnit(RecurrentUnit):
    """Convolutional LSTM with the official h = o * c (not o * tanh(c)); state is (h, c)."""

    kind = "LSTM"
    x_gates = ("f", "i", "o", "j")
    h_gates = ("f", "i", "o", "j")
    state_halo = 1  # c_prev is used pointwise and reaches no further than h_prev

    def forward(self, x: torch.Tensor, state: State = None) -> tuple[torch.Tensor, State]:
        if state is None:
            xi, xo, xj = fused_gates((self.conv_xi, self.conv_xo, self.conv_xj), x)
            i, o, j = torch.sigmoid(xi), torch.sigmoid(xo), torch.tanh(xj)
            c = i * j
        else:
            assert isinstance(state, tuple)
            h_prev, c_prev = state
            gx = fused_gates((self.conv_xf, self.conv_xi, self.conv_xo, self.conv_xj), x)
            gh = fused_gates((self.conv_hf, self.conv_hi, self.conv_ho, self.conv_hj), h_prev)
            f, i, o = (torch.sigmoid(a + b) for a, b in zip(gx[:3], gh[:3], strict=True))
            j = torch.tanh(gx[3] + gh[3])
            c = f * c_prev + i * j
        # Faithful to the official code: h = o * c, without the usual tanh on c.
        h = self._out(o * c)
        return h, (h, c)


UNIT_CLASSES: dict[str, type[RecurrentUnit]] = {
    "GRU": GRUUnit,
    "LSTM": LSTMUnit,
    "RNN": RNNUnit,
    "Conv": ConvUnit,
}
