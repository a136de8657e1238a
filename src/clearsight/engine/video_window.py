"""Restoring a frame sequence window by window, with memory bounded by the window.

A video model restores a window of frames at once ([1,3,T,H,W] in [0, 1]); S2VD's official
test (github.com/zsyOAOA/S2VD, `test_NTURain_synthetic.py`) cuts a clip into windows of 24
frames and feeds each with 2 frames of context on either side, except at the clip's start
(no frames before it) and end (none after it), keeping only the window's own frames:

    frames  0..23 from input  0..25      frames 24..47 from input 22..49   ...
    last window: frames 24k..n-1 from input 24k-2..n-1

`restore_frames` does exactly that on an iterator, so the clip's length need not be known
and at most `frames + 2 * context` input frames are held. (Where the official loop cannot
run, a clip of at most 24 frames or one that ends 1 frame past a window, the same rule still
applies: each window takes what context exists.) Frames are padded to the model's multiple
(S2VD: even) and cropped back, and optionally cut into spatial tiles (4K) by the model's own
exact tiled path. Outputs are clamped to [0, 1], as the official test does.

`video_model` picks the runner by the model's family (`Family.VIDEO`: `Windowed`). Any image
model runs through the same interface: `PerFrame` wraps a callable on one frame
([1,3,H,W] -> [1,3,H,W], such as `Restorer.restore`) as a window of one frame without
context, so a benchmark or the CLI treats video and image models alike.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import torch

from clearsight.artifact import LoadedModel
from clearsight.errors import ClearsightError, OptionError
from clearsight.families import Family
from clearsight.io import image_to_tensor, tensor_to_image
from clearsight.models.contract import RestorationModel, as_restoration_model
from clearsight.preprocess import pad_to_multiple

Frame = np.ndarray | torch.Tensor
"""An HxWx3 RGB array (uint8, uint16 or float in [0, 1]) or a [3,H,W] float tensor in [0, 1]."""


class FrameSequenceError(ClearsightError):
    """A frame of the sequence is not an RGB frame of the clip's size (names which one)."""


@dataclass(frozen=True)
class WindowSpec:
    """How a clip is cut: `frames` restored per window, `context` extra frames each side."""

    frames: int = 24
    context: int = 2

    def __post_init__(self) -> None:
        for name, value, low in (("frames", self.frames, 1), ("context", self.context, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise OptionError(f"window {name}", f"must be an integer >= {low}, got {value!r}")


@dataclass(frozen=True)
class Span:
    """One window: input frames [ext_start, ext_end) restore output frames [start, end)."""

    ext_start: int
    ext_end: int
    start: int
    end: int


def window_spans(n_frames: int, spec: WindowSpec) -> list[Span]:
    """The windows of a clip of `n_frames` frames (what `restore_frames` runs, in order)."""
    spans, start = [], 0
    while start < n_frames:
        end = min(start + spec.frames, n_frames)
        spans.append(
            Span(max(0, start - spec.context), min(end + spec.context, n_frames), start, end)
        )
        start = end
    return spans


class VideoModel(Protocol):
    """What `restore_frames` runs: a window [1,3,T,H,W] in [0, 1] -> the same shape."""

    spec: WindowSpec

    def __call__(self, window: torch.Tensor) -> torch.Tensor: ...


class Windowed:
    """A video restoration model (S2VD) on whole windows: padded to its multiple, tiled in
    space when the frames exceed `max_untiled_pixels` (or always at `tile`; 0: never),
    cropped back. `spec` replaces the config's window (the official one for S2VD). An
    exported model (ONNX Runtime) runs each window whole, untiled."""

    def __init__(
        self,
        loaded: LoadedModel,
        *,
        device: str | torch.device = "cpu",
        tile: int | None = None,
        spec: WindowSpec | None = None,
    ) -> None:
        extra = loaded.config.preprocess.extra
        self.spec = spec or WindowSpec(int(extra["window_frames"]), int(extra["context_frames"]))
        self.net = as_restoration_model(loaded.model.eval().to(device))
        self.on_onnxruntime = loaded.on_onnxruntime
        self.device = torch.device(device)
        self.pad = max(int(self.net.pad_multiple), int(loaded.config.preprocess.pad_multiple))
        if tile is not None and (isinstance(tile, bool) or not isinstance(tile, int) or tile < 0):
            raise OptionError("tile", f"must be an integer >= 0 (0: never tile), got {tile!r}")
        self.tile = tile

    def _tile_for(self, h: int, w: int) -> int | None:
        if self.tile == 0:
            return None
        if self.tile is not None:
            return self.tile if max(h, w) > self.tile else None
        limits = self.net.tiling
        if limits.max_untiled_pixels is not None and h * w > limits.max_untiled_pixels:
            return limits.default_tile
        return None

    @torch.no_grad()
    def __call__(self, window: torch.Tensor) -> torch.Tensor:
        _, _, t, h, w = window.shape
        # pad as a batch of frames (reflect padding takes 4-D input)
        frames = pad_to_multiple(window[0].transpose(0, 1).to(self.device), self.pad)
        x = frames.transpose(0, 1).unsqueeze(0)
        if self.on_onnxruntime:  # the exported graph: one window, its frames as the batch
            y = self.net(x[0].transpose(0, 1))
            return y.transpose(0, 1).unsqueeze(0)[..., :h, :w].clamp_(0.0, 1.0)
        tile = self._tile_for(h, w)
        own = self.net.tiled_path()
        y = own(x, tile=tile) if tile is not None and own is not None else self.net(x)
        return y[..., :h, :w].clamp_(0.0, 1.0).to(window.device)


class PerFrame:
    """An image model as a video model: each frame alone (a window of 1, no context)."""

    spec = WindowSpec(frames=1, context=0)

    def __init__(
        self, restore: Callable[[torch.Tensor], torch.Tensor], net: RestorationModel | None = None
    ) -> None:
        self.restore = restore
        self.net = net
        """The torch model `restore` runs, when there is one (`video/temporal.py` smooths
        its global statistics over frames)."""

    @torch.no_grad()
    def __call__(self, window: torch.Tensor) -> torch.Tensor:
        outs = [self.restore(window[:, :, i]).clamp(0.0, 1.0) for i in range(window.shape[2])]
        return torch.stack(outs, dim=2)


def video_model(
    loaded: LoadedModel, *, device: str | torch.device = "cpu", tile: int | None = None
) -> VideoModel:
    """The family's runner (docs/architecture.md §1.1): `Windowed` for a video model (S2VD),
    else the image model frame by frame through the engine's `Restorer` (its own padding
    and tiling)."""
    if loaded.family is Family.VIDEO:
        return Windowed(loaded, device=device, tile=tile)
    from clearsight.engine.inference import InferenceOptions, Restorer

    restorer = Restorer(loaded, InferenceOptions(device=str(device), tile=tile))
    return PerFrame(restorer.restore, net=None if loaded.on_onnxruntime else restorer.net)


def _as_chw(frame: Frame, index: int) -> torch.Tensor:
    if isinstance(frame, torch.Tensor):
        if frame.ndim != 3 or frame.shape[0] != 3 or not frame.is_floating_point():
            raise FrameSequenceError(
                f"frame {index}: expected a [3,H,W] float tensor, got {tuple(frame.shape)} "
                f"{frame.dtype}"
            )
        return frame
    if not isinstance(frame, np.ndarray) or frame.ndim != 3 or frame.shape[2] != 3:
        shape = getattr(frame, "shape", type(frame).__name__)
        raise FrameSequenceError(f"frame {index}: expected an HxWx3 RGB array, got {shape}")
    if frame.dtype == np.uint8:  # held as uint8 (a quarter of float32) until its window runs
        return torch.from_numpy(np.ascontiguousarray(frame.transpose(2, 0, 1)))
    try:
        return image_to_tensor(frame)[0]
    except (TypeError, ValueError) as exc:
        raise FrameSequenceError(f"frame {index}: {exc}") from None


def _float01(frame: torch.Tensor) -> torch.Tensor:
    return frame.float().div_(255.0) if frame.dtype == torch.uint8 else frame


def restore_frames(
    frames: Iterable[Frame], model: VideoModel, lead: int = 0, count: int | None = None
) -> Iterator[Frame]:
    """The restored frames of `frames`, in order, window by window (`model.spec`).

    Arrays in give HxWx3 uint8 arrays out; tensors in give [3,H,W] float tensors in [0, 1].
    At most `spec.frames + 2 * spec.context` input frames are held at a time (uint8 frames
    as uint8); a window is converted to float32 only while it runs.

    A segment of a longer clip (`--engine ray` cuts one at window starts): the first `lead`
    frames are only the context before it (its windows start after them, where the whole
    clip's windows start), and `count` frames (None: all) are restored, so the windows, and
    the outputs, are the ones the whole clip gives.
    """
    spec = model.spec
    it = iter(frames)
    held: list[torch.Tensor] = []  # input frames [first, first + len(held))
    first, start, size, as_array = 0, lead, None, True
    stop = None if count is None else lead + count
    exhausted = False
    while stop is None or start < stop:
        want = start + spec.frames + spec.context  # the window's frames and its right context
        while not exhausted and first + len(held) < want:
            try:
                frame = next(it)
            except StopIteration:
                exhausted = True
                break
            index = first + len(held)
            if index == 0:
                as_array = not isinstance(frame, torch.Tensor)
            chw = _as_chw(frame, index)
            if size is None:
                size = tuple(chw.shape)
            elif tuple(chw.shape) != size:
                raise FrameSequenceError(
                    f"frame {index}: size {chw.shape[1]}x{chw.shape[2]} differs from the clip's "
                    f"{size[1]}x{size[2]}"
                )
            held.append(chw)
        n_seen = first + len(held)
        if n_seen <= start:
            return
        end = min(start + spec.frames, n_seen)
        ext_start, ext_end = max(0, start - spec.context), min(want, n_seen)
        window = torch.stack(
            [_float01(f) for f in held[ext_start - first : ext_end - first]], dim=1
        ).unsqueeze(0)
        out = model(window)
        if tuple(out.shape) != tuple(window.shape):
            raise ClearsightError(
                f"video model returned {tuple(out.shape)} for a window {tuple(window.shape)}"
            )
        for k in range(start - ext_start, end - ext_start):
            y = out[0, :, k]
            yield tensor_to_image(y) if as_array else y
        start = end
        keep = max(0, start - spec.context)
        del held[: keep - first]
        first = keep
