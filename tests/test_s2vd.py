"""S2VD, its converter and windowed video inference (`engine/video_window.py`).

Tiny windows and a toy width (channels 4, 1-2 blocks) except where the real network is the
point (the parameter count, the bundled artifact, parity with the official code, which is
read from $CLEARSIGHT_S2VD_SOURCE or /work/data/s2vd and skipped where absent).
"""

from __future__ import annotations

import importlib
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest
import torch

from clearsight.artifact import LoadedModel, make_config
from clearsight.convert.s2vd import ConversionError, convert_s2vd, save_s2vd_artifact
from clearsight.engine.video_window import (
    FrameSequenceError,
    PerFrame,
    Span,
    Windowed,
    WindowSpec,
    restore_frames,
    video_model,
    window_spans,
)
from clearsight.errors import OptionError
from clearsight.models.registry import build_model, count_parameters, get_spec
from clearsight.models.s2vd import S2VD, S2VDInputError
from clearsight.zoo import bundled_models, resolve_model

OFFICIAL = Path(os.environ.get("CLEARSIGHT_S2VD_SOURCE", "/work/data/s2vd"))
OFFICIAL_WEIGHTS = OFFICIAL / "model_states" / "derainer_rho05.pt"


def _toy(blocks: int = 1, seed: int = 0) -> S2VD:
    torch.manual_seed(seed)
    model = S2VD(channels=4, blocks=blocks).eval()
    with torch.no_grad():  # non-trivial BN statistics, so a misplaced norm shows
        for m in model.modules():
            if isinstance(m, torch.nn.BatchNorm3d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.1, 0.1)
    return model


def _loaded(model: S2VD) -> LoadedModel:
    args = {"channels": model.in_conv1.out_channels, "blocks": len(model.blocks)}
    return LoadedModel(model, make_config(model, "s2vd", args), "toy-s2vd")


def _window(t: int, h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, t, h, w, generator=torch.Generator().manual_seed(seed))


# --------------------------------------------------------------------------- architecture


def test_default_build_has_the_official_parameter_count():
    model = build_model("s2vd")
    assert count_parameters(model) == 525_260 == get_spec("s2vd").reference_params
    assert get_spec("s2vd").preprocess.extra["window_frames"] == 24


def test_window_keeps_its_shape_and_4d_images_are_one_frame_clips():
    model = _toy()
    x = _window(3, 8, 12)
    with torch.no_grad():
        y = model(x)
        assert y.shape == x.shape
        # a 4-D batch is independent frames, each a one-frame clip
        frames = x[0].transpose(0, 1)  # [T,3,H,W]
        single = model(frames)
        alone = torch.cat([model(x[:, :, i : i + 1]) for i in range(3)], 2)[0].transpose(0, 1)
    assert torch.allclose(single, alone, atol=1e-6)
    assert not torch.allclose(single, y[0].transpose(0, 1), atol=1e-4)  # time is mixed


@pytest.mark.parametrize("shape", [(1, 3, 4, 9, 12), (1, 4, 2, 8, 8), (3, 8, 8)])
def test_bad_windows_are_one_line_errors(shape):
    with pytest.raises(S2VDInputError) as exc:
        _toy()(torch.zeros(shape))
    assert "\n" not in str(exc.value)


def test_tiled_equals_untiled_and_really_tiles():
    # the full depth (8 blocks: the real reach, 42 px) at a toy width
    torch.manual_seed(1)
    model = S2VD(channels=2, blocks=8).eval()
    x = _window(3, 128, 192, seed=1)
    calls = []
    with torch.no_grad():
        full = model(x)
        tiled = model.restore_tiled(x, tile=64, progress=lambda d, n: calls.append(n))
        image = model.restore_tiled(x[:, :, 0], tile=64)
    assert calls and calls[-1] == 6  # 2 x 3 tiles of 64 px
    assert (tiled - full).abs().max().item() < 1e-5
    assert (image - model(x[:, :, 0])).abs().max().item() < 1e-5


# --------------------------------------------------------------------------- windows


def _official_spans(n: int, truncate: int = 24) -> list[Span]:
    """The official test's index arithmetic (test_NTURain_synthetic.py), restated."""
    starts = list(range(0, n, truncate))
    ends = list(range(truncate, n, truncate)) + [n]
    ext_starts = [0] + [s - 2 for s in starts[1:]]
    ext_ends = [e + 2 for e in ends[:-1]] + [n]
    return [Span(*s) for s in zip(ext_starts, ext_ends, starts, ends, strict=True)]


@pytest.mark.parametrize("n", [168, 50, 75, 26])
def test_window_spans_are_the_official_ones(n):
    assert window_spans(n, WindowSpec()) == _official_spans(n)


def test_window_spans_where_the_official_loop_cannot_run():
    # one window (the official loop would drop its last 2 frames), and a clip one frame past
    # a window, whose last full window gets one frame of right context (official: an error)
    assert window_spans(10, WindowSpec()) == [Span(0, 10, 0, 10)]
    assert window_spans(25, WindowSpec()) == [Span(0, 25, 0, 24), Span(22, 25, 24, 25)]
    assert window_spans(73, WindowSpec())[-2:] == [Span(46, 73, 48, 72), Span(70, 73, 72, 73)]


@pytest.mark.parametrize(("frames", "context"), [(0, 2), (4, -1), (2.5, 1)])
def test_bad_window_spec_is_an_option_error(frames, context):
    with pytest.raises(OptionError):
        WindowSpec(frames, context)


class _Recorder:
    """An identity video model that records the windows it is fed (by frame value)."""

    def __init__(self, spec: WindowSpec) -> None:
        self.spec = spec
        self.windows: list[list[int]] = []

    def __call__(self, window: torch.Tensor) -> torch.Tensor:
        self.windows.append([round(v * 255) for v in window[0, 0, :, 0, 0].tolist()])
        return window


def _numbered(n: int, h: int = 4, w: int = 6) -> list[np.ndarray]:
    return [np.full((h, w, 3), i, np.uint8) for i in range(n)]


def test_restore_frames_feeds_the_official_windows_in_order_and_holds_only_a_window():
    spec = WindowSpec(frames=5, context=2)
    model = _Recorder(spec)
    consumed = []

    def source():
        for i, f in enumerate(_numbered(13)):
            consumed.append(i)
            yield f

    out = []
    for y in restore_frames(source(), model):
        if not out:
            assert len(consumed) <= spec.frames + spec.context  # first window, no more
        out.append(int(y[0, 0, 0]))
    assert out == list(range(13))
    assert model.windows == [
        [s for s in range(sp.ext_start, sp.ext_end)] for sp in window_spans(13, spec)
    ]
    assert model.windows[1] == list(range(3, 12))


def test_restore_frames_keeps_tensors_as_tensors_and_checks_every_frame():
    model = _Recorder(WindowSpec(3, 1))
    frames = [torch.full((3, 4, 4), 0.5) for _ in range(4)]
    out = list(restore_frames(frames, model))
    assert len(out) == 4 and all(isinstance(y, torch.Tensor) and y.shape == (3, 4, 4) for y in out)
    assert list(restore_frames([], model)) == []
    bad = _numbered(3) + [np.zeros((4, 8, 3), np.uint8)]
    with pytest.raises(FrameSequenceError, match="frame 3: size 4x8 differs"):
        list(restore_frames(bad, model))
    with pytest.raises(FrameSequenceError, match="frame 0"):
        list(restore_frames([np.zeros((4, 4), np.uint8)], model))


def test_windowed_pads_odd_frames_to_even_and_crops_back():
    model = _toy()
    video = Windowed(_loaded(model), tile=0)
    video_spec = video.spec
    assert (video_spec.frames, video_spec.context) == (24, 2)
    x = _window(3, 9, 13, seed=2)
    y = video(x)
    assert y.shape == x.shape and float(y.min()) >= 0.0 and float(y.max()) <= 1.0
    padded = torch.nn.functional.pad(x[0].transpose(0, 1), (0, 1, 0, 1), mode="reflect")
    with torch.no_grad():
        ref = model(padded.transpose(0, 1).unsqueeze(0))[..., :9, :13].clamp(0, 1)
    assert torch.allclose(y, ref, atol=1e-6)
    # tiled through the same interface gives the same frames
    tiled = Windowed(_loaded(model), tile=8)(x)
    assert (tiled - y).abs().max().item() < 1e-5


def test_windowed_clip_matches_running_each_official_window():
    model = _toy()
    video = Windowed(_loaded(model), tile=0, spec=WindowSpec(4, 2))
    clip = _window(11, 8, 8, seed=3)
    frames = [clip[0, :, i] for i in range(11)]
    got = torch.stack(list(restore_frames(frames, video)), 1)
    with torch.no_grad():
        for sp in window_spans(11, WindowSpec(4, 2)):
            ref = model(clip[:, :, sp.ext_start : sp.ext_end]).clamp(0, 1)[0]
            keep = ref[:, sp.start - sp.ext_start : sp.end - sp.ext_start]
            assert torch.allclose(got[:, sp.start : sp.end], keep, atol=1e-6)


def test_per_frame_adapter_runs_an_image_model_frame_by_frame():
    seen = []

    def restore(x: torch.Tensor) -> torch.Tensor:
        seen.append(tuple(x.shape))
        return 1.0 - x

    frames = _numbered(3)
    out = list(restore_frames(frames, PerFrame(restore)))
    assert seen == [(1, 3, 4, 6)] * 3
    assert [int(y[0, 0, 0]) for y in out] == [255, 254, 253]


def test_video_model_picks_windows_from_the_config():
    assert isinstance(video_model(_loaded(_toy())), Windowed)
    image = resolve_model("identity")
    assert isinstance(video_model(image), PerFrame)


# --------------------------------------------------------------------------- converter


_OURS_TO_OFFICIAL = [
    ("in_conv1.", "head.0.conv."),
    ("in_conv2.", "head.2.conv."),
    ("refine1.", "tail.0.conv."),
    ("refine2.", "tail.2.conv."),
    ("refine3.", "tail.4.conv."),
]


def _official_names(model: S2VD) -> dict[str, torch.Tensor]:
    """Our state dict under the official names (the converter's inverse, written out)."""
    n = len(model.blocks)
    out = {}
    for k, v in model.state_dict().items():
        for ours, theirs in [
            *_OURS_TO_OFFICIAL,
            ("out_norm.", f"body.{n}."),
            ("out_conv.", f"body.{n + 2}.conv."),
        ]:
            if k.startswith(ours):
                out[theirs + k[len(ours) :]] = v.clone()
                break
        else:
            _, i, layer, rest = k.split(".", 3)
            official = {"norm1": "0", "conv1": "2.conv", "norm2": "3", "conv2": "5.conv"}
            out[f"body.{i}.res.{official[layer]}.{rest}"] = v.clone()
    return out


def test_converter_maps_official_names_and_reads_widths(tmp_path):
    model = _toy(blocks=2, seed=4)
    path = tmp_path / "derainer.pt"
    torch.save(_official_names(model), path)
    back, args = convert_s2vd(path)
    assert args == {"channels": 4, "blocks": 2}
    for k, v in model.state_dict().items():
        assert torch.equal(back.state_dict()[k], v), k
    out = save_s2vd_artifact(path, tmp_path / "art")
    loaded = resolve_model(str(out))
    assert loaded.config.provenance["converted_from"]["commit"] == "e6c09e06"
    assert loaded.config.preprocess.extra["context_frames"] == 2


class _Payload:
    """A pickled object that is no tensor: the weights-only reader must refuse it."""


def test_converter_refuses_pickled_objects_and_misfits(tmp_path):
    bad = tmp_path / "bad.pt"
    torch.save({"head.0.conv.weight": torch.zeros(1), "x": _Payload()}, bad)
    with pytest.raises(ConversionError, match="weights-only") as exc:
        convert_s2vd(bad)
    assert "\n" not in str(exc.value)
    state = _official_names(_toy())
    del state["tail.2.conv.weight"]
    short = tmp_path / "short.pt"
    torch.save(state, short)
    with pytest.raises(ConversionError, match="missing"):
        convert_s2vd(short)
    state = _official_names(_toy())
    state["body.0.res.9.weight"] = torch.zeros(4)
    odd = tmp_path / "odd.pt"
    torch.save(state, odd)
    with pytest.raises(ConversionError, match="no place"):
        convert_s2vd(odd)


# --------------------------------------------------------------------------- bundled, export


def test_video_derain_is_bundled_with_its_card():
    assert "video-derain" in bundled_models()
    loaded = resolve_model("video-derain")
    assert isinstance(loaded.model, S2VD) and count_parameters(loaded.model) == 525_260
    card = (bundled_models()["video-derain"] / "MODEL_CARD.md").read_text(encoding="utf-8")
    assert "MIT" in card and "e6c09e06" in card and "python -m clearsight.convert.s2vd" in card


def test_onnx_export_runs_a_window_in_onnx_runtime():
    from clearsight.export.onnx import export_onnx_bytes
    from clearsight.runtime.ort_backend import load_onnx, make_session

    lm = _loaded(_toy(seed=5))
    data, result = export_onnx_bytes(lm, parity_sizes=((6, 10),))
    assert result.ok
    window = _window(8, 16, 16, seed=6)
    frames = window[0].transpose(0, 1).contiguous()  # the graph's batch axis is time
    session = make_session(data)
    (got,) = session.run(None, {"input": frames.numpy()})
    with torch.no_grad():
        ref = lm.model(window)[0].transpose(0, 1)
    assert np.abs(got - ref.numpy()).max() < 1e-4
    assert not np.allclose(got[0], session.run(None, {"input": frames[:1].numpy()})[0][0])
    # the exported model runs clips through the same windows as PyTorch
    ort = load_onnx(data, source="toy.onnx")
    clip = [frames[i] for i in range(8)]
    spec = WindowSpec(3, 1)
    ours = list(restore_frames(clip, Windowed(lm, spec=spec)))
    theirs = list(restore_frames(clip, Windowed(ort, spec=spec)))
    assert max((a - b).abs().max().item() for a, b in zip(ours, theirs, strict=True)) < 1e-4


# --------------------------------------------------------------------------- official code


def _official_net():
    """The official `DerainNet` class, imported from its files under a private package name
    (the code is never copied into the repository)."""
    folder = OFFICIAL / "networks"
    if not (folder / "derain_net.py").is_file():
        pytest.skip(f"official S2VD code not found at {OFFICIAL}")
    pkg = "_s2vd_official_networks"
    if pkg not in sys.modules:
        package = types.ModuleType(pkg)
        package.__path__ = [str(folder)]  # submodules load from the official folder
        sys.modules[pkg] = package
    return importlib.import_module(f"{pkg}.derain_net").DerainNet


def test_port_matches_the_official_network_on_the_released_weights():
    derain_net = _official_net()
    if not OFFICIAL_WEIGHTS.is_file():
        pytest.skip(f"official weights not found at {OFFICIAL_WEIGHTS}")
    official = derain_net(n_features=32, n_resblocks=8).eval()
    state = torch.load(OFFICIAL_WEIGHTS, weights_only=True, map_location="cpu")
    official.load_state_dict(state)
    ours = resolve_model("video-derain").model
    x = _window(6, 32, 48, seed=7)
    with torch.no_grad():
        diff = (official(x) - ours(x)).abs().max().item()
    assert diff < 1e-5
    converted, _ = convert_s2vd(OFFICIAL_WEIGHTS)
    for k, v in ours.state_dict().items():
        assert torch.equal(converted.state_dict()[k], v), k
