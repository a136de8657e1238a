"""Moiré videos: `synth moire --video` films a clip with a smoothly moving camera (its moiré
drifts coherently, seeded, paired with clean frames), and `temporal` smooths MBCNN's tone
vectors over frames."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.data.synth_moire import MoireConfig, synthesize_moire
from clearsight.data.synth_moire_video import CameraMotion, moire_clip
from clearsight.engine.video_window import PerFrame
from clearsight.errors import ClearsightError, OptionError
from clearsight.io import read_image, tensor_to_image, write_image
from clearsight.models.mbcnn import MBCNN
from clearsight.models.rescan import RESCAN
from clearsight.video.restore import restore_video
from clearsight.video.synth_moire import synth_moire_video
from clearsight.video.temporal import StatsSmoother, with_smoothed_stats
from tests.video_utils import decoded_frames, make_video

runner = CliRunner()
TONED = MoireConfig(match_tone=True)  # the pair then differs by the moiré (and noise) alone


def _photo(h: int = 48, w: int = 64, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    tex = rng.integers(60, 200, (h // 4, w // 4, 3)).astype(np.uint8)
    return cv2.resize(tex, (w, h), interpolation=cv2.INTER_CUBIC)


def _layers(frames: list[np.ndarray], seed: int) -> list[np.ndarray]:
    return [m.astype(np.float32) - c for m, c in moire_clip(frames, seed, TONED)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_moire_of_a_still_screen_drifts_coherently(seed: int) -> None:
    photo = _photo()
    layer = _layers([photo] * 31, seed)  # a still screen: only the camera moves

    def d(a: np.ndarray, b: np.ndarray) -> float:
        return float(np.abs(a - b).mean())

    assert np.abs(layer[0]).mean() > 5  # there is moiré to follow
    step = np.mean([d(layer[t], layer[t + 1]) for t in range(15)])
    far = np.mean([d(layer[t], layer[t + 15]) for t in range(15)])
    fresh = [synthesize_moire(photo, np.random.default_rng(s), TONED) for s in (seed, seed + 99)]
    redrawn = d(*(m.astype(np.float32) - c for m, c in fresh))
    # consecutive frames are far more alike than frames 15 apart or two independent draws
    assert step < 0.4 * far and step < 0.4 * redrawn, (step, far, redrawn)
    # ... and it does move: a camera that stands still gives the same moiré up to the noise
    still = _layers([photo] * 16, seed)
    still_cam = CameraMotion(margin=0, angle_deg=0, jitter=0, shift=0)
    frozen = [m.astype(np.float32) - c for m, c in moire_clip([photo] * 16, seed, TONED, still_cam)]
    assert np.mean([d(frozen[0], f) for f in frozen[8:]]) < 0.5 * np.mean(
        [d(still[0], f) for f in still[8:]]
    )


def test_clips_are_seeded_sized_and_leave_the_frames_alone() -> None:
    frames = [_photo(seed=i) for i in range(4)]
    before = [f.copy() for f in frames]
    a = list(moire_clip(frames, 3))
    b = list(moire_clip(frames, 3))
    c = list(moire_clip(frames, 4))
    assert len(a) == 4 and all(m.shape == t.shape == (48, 64, 3) for m, t in a)
    assert all(m.dtype == np.uint8 for m, _ in a)
    assert all(np.array_equal(x[0], y[0]) for x, y in zip(a, b, strict=True))
    assert not any(np.array_equal(x[0], y[0]) for x, y in zip(a, c, strict=True))
    assert all(np.array_equal(t, f) for (_, t), f in zip(a, frames, strict=True))  # clean target
    assert all(np.array_equal(f, g) for f, g in zip(frames, before, strict=True))
    with pytest.raises(ClearsightError, match=r"frame 1: 32x16 differs .* 16x16"):
        list(moire_clip([np.zeros((16, 16, 3), np.uint8), np.zeros((16, 32, 3), np.uint8)], 0))
    with pytest.raises(OptionError, match="motion angle_deg"):
        CameraMotion(angle_deg=-1)


def test_synth_moire_video_writes_pairs_that_eval_video_reads(tmp_path: Path) -> None:
    src = tmp_path / "frames"
    originals = [_photo(32, 40, seed=i) for i in range(5)]
    for i, img in enumerate(originals):
        write_image(src / f"f_{i + 1}.png", img)
    out = tmp_path / "pairs"
    res = runner.invoke(
        app, ["synth", "moire", "--video", "--clean", str(src), "--fps", "10", "-o", str(out),
              "--seed", "2", "--max-frames", "4"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    names = [f"{i:06d}.png" for i in range(1, 5)]
    assert sorted(p.name for p in (out / "moire").glob("[!.]*")) == names
    assert sorted(p.name for p in (out / "clean").glob("[!.]*")) == names
    expected = list(moire_clip(originals[:4], 2))
    for name, (m, t) in zip(names, expected, strict=True):
        assert np.array_equal(read_image(out / "moire" / name), m)
        assert np.array_equal(read_image(out / "clean" / name), t)
    scored = runner.invoke(app, ["eval", "--video", "--model", "identity", "--data", str(out)])
    assert scored.exit_code == 0 and "4 frames" in scored.output, scored.output
    bad = runner.invoke(
        app, ["synth", "moire", "--video", "--clean", str(src), "--fps", "10", "-o",
              str(tmp_path / "x"), "--per-image", "2"],
    )  # fmt: skip
    assert bad.exit_code != 0 and "--per-image" in bad.output
    with pytest.raises(OptionError, match="max_frames"):
        synth_moire_video(src, tmp_path / "y", fps=10, max_frames=0)
    assert not (tmp_path / "x").exists() and not (tmp_path / "y").exists()


def _tiny_mbcnn() -> MBCNN:
    torch.manual_seed(0)
    return MBCNN(n_filters=4, tone_head=True).eval()


def _flickering_clip(n: int = 5) -> list[torch.Tensor]:
    """One texture whose brightness jumps up and down from frame to frame."""
    g = torch.Generator().manual_seed(0)
    base = torch.rand(1, 3, 16, 16, generator=g) * 0.5
    return [(base + (0.3 if t % 2 else 0.0)).clamp(0, 1) for t in range(n)]


def test_tone_smoothing_steadies_the_tone_vectors_over_a_clip() -> None:
    net = _tiny_mbcnn()
    clip = _flickering_clip()
    smooth = StatsSmoother(net, net.restore, weight=0.3)
    for x in clip:
        smooth(x)
    own, used = torch.stack(smooth.own), torch.stack(smooth.history)
    assert own.shape == used.shape == (5, 1, 5, 16)  # frames, batch, sites, 4n
    assert torch.equal(own[0], used[0])  # the average starts at the first frame's own
    jump = (own[1:] - own[:-1]).abs().mean()
    assert jump > 0  # the frames' own vectors do flicker
    assert (used[1:] - used[:-1]).abs().mean() < 0.5 * jump
    assert used[1:].var(dim=0).mean() < 0.5 * own[1:].var(dim=0).mean()
    plain = StatsSmoother(net, net.restore, weight=1.0)  # no smoothing: the model as it is
    assert torch.equal(plain(clip[1]), net.restore(clip[1]))


def test_with_smoothed_stats_wraps_mbcnn_only() -> None:
    net = _tiny_mbcnn()
    wrapped = with_smoothed_stats(PerFrame(net.restore, net=net))
    assert isinstance(wrapped, PerFrame) and isinstance(wrapped.restore, StatsSmoother)
    clip = torch.stack([x[0] for x in _flickering_clip(3)], dim=1).unsqueeze(0)
    assert wrapped(clip).shape == clip.shape
    rescan = RESCAN().eval()
    plain = PerFrame(rescan.restore, net=rescan)
    assert with_smoothed_stats(plain) is plain  # RESCAN's gates were not measured: left alone
    bare = PerFrame(net.restore)  # no torch model known (an ONNX Runtime graph)
    assert with_smoothed_stats(bare) is bare


def test_restore_video_smooths_the_tone_only_when_asked(tmp_path: Path) -> None:
    net = _tiny_mbcnn()
    with torch.no_grad():  # a tone head that reacts to its vectors (it starts as the identity)
        net.tone.mlp[-1].weight.normal_(0.0, 0.5)
        net.tone.mlp[-1].bias.fill_(0.5)
    src = tmp_path / "frames"
    for i, x in enumerate(_flickering_clip(3)):
        write_image(src / f"{i + 1}.png", tensor_to_image(x))
    outs = {}
    for smooth in (False, True):
        out = tmp_path / f"out_{smooth}"
        restore_video(PerFrame(net.restore, net=net), src, frames_out=out, fps=5,
                      smooth_tone=smooth)  # fmt: skip
        outs[smooth] = [read_image(p) for p in sorted(out.glob("[!.]*"))]
    assert np.array_equal(outs[False][0], outs[True][0])  # the average starts at frame 1
    assert not np.array_equal(outs[False][2], outs[True][2])


def test_demoire_videos_are_temporal_by_default(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    make_video(clip, w=48, h=32, n=4, audio=None)
    frames = {}
    for flags in ([], ["--temporal"], ["--no-temporal"]):
        out = tmp_path / ("out" + "".join(flags))
        res = runner.invoke(app, ["demoire", str(clip), "-o", str(out), *flags])
        assert res.exit_code == 0, res.output
        frames[tuple(flags)] = decoded_frames(out / "clip.mp4")
    on, off = frames[("--temporal",)], frames[("--no-temporal",)]
    assert all(np.array_equal(a, b) for a, b in zip(frames[()], on, strict=True))
    assert not all(np.array_equal(a, b) for a, b in zip(on, off, strict=True))
