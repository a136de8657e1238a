"""Training the video family (S2VD) through the shared trainer: clip windows, steps,
checkpoints, exact resume, the NaN guard, fine-tuning the bundled weights from a YAML config.

Tiny S2VD (channels 4, 1 block) on tiny clips made here (smooth frames plus falling
streaks), a few steps each.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import yaml
from PIL import Image
from typer.testing import CliRunner

from clearsight.artifact import load_artifact
from clearsight.cli import app
from clearsight.data.video_pairs import VideoWindowDataset, find_clips
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.train_config import TrainConfigError, config_from_dict
from clearsight.engine.trainer import train
from clearsight.engine.video_train import VideoRestorationTask
from clearsight.errors import ClearsightError, PairingError
from clearsight.families import Family
from clearsight.zoo import bundled_models
from tests.train_utils import train_log


def _save(path: Path, img: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path)


def make_clip(root: Path, n: int = 6, size: int = 16, seed: int = 0) -> Path:
    """`root/rain` and `root/clean`: `n` numbered frames of a drifting smooth scene and the
    same frames with bright streaks falling 2 px a frame (the layout `synth rain --video`
    writes)."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    f = rng.uniform(3, 8, 3)
    streaks = rng.random((size, size)) < 0.1
    for t in range(n):
        clean = np.stack([np.sin((x + t) / f[0]), np.cos(y / f[1]), np.sin((x + y) / f[2])], 2)
        clean = clean * 60 + 110 + rng.normal(0, 2, (size, size, 3))
        rain = clean + np.roll(streaks, 2 * t, axis=0)[..., None] * 90.0
        _save(root / "clean" / f"{t + 1:06d}.png", clean)
        _save(root / "rain" / f"{t + 1:06d}.png", rain)
    return root


@pytest.fixture(scope="module")
def clips(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("clips")
    for i in range(2):
        make_clip(root / f"clip{i}", seed=i)
    return root


def tiny_raw(root: Path, **sections: dict[str, Any]) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "model": {"arch": "s2vd", "args": {"channels": 4, "blocks": 1}},
        "data": {"train": str(root), "val": str(root / "clip0"), "patch_size": 8,
                 "frames": 3, "batch_size": 2},
        "loss": {"name": "charbonnier"},
        "optim": {"lr": 2e-3},
        "schedule": {"milestones": [6]},
        "train": {"steps": 8, "log_every": 2, "val_every": 4, "ckpt_every": 4,
                  "tensorboard": False, "compile": "off"},
    }  # fmt: skip
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return raw


# --------------------------------------------------------------------------- the data
def test_clips_pair_by_name_in_frame_order(tmp_path: Path) -> None:
    clip = make_clip(tmp_path / "c", n=3)
    (clip / "rain" / "000001.png").rename(clip / "rain" / "frame_1.png")
    (clip / "clean" / "000001.png").rename(clip / "clean" / "frame_1.png")
    (found,) = find_clips(clip)  # a clip folder is a data folder of one clip
    assert [p.name for p in found.inputs] == ["frame_1.png", "000002.png", "000003.png"]
    assert [p.parent.name for p in found.targets] == ["clean"] * 3 and found.size == (16, 16)
    (clip / "clean" / "000003.png").unlink()
    with pytest.raises(PairingError, match="000003"):
        find_clips(clip)


def test_a_window_is_consecutive_frames_with_one_draw_for_both_sides(tmp_path: Path) -> None:
    """Frame t's red channel is 10 t, green rises left to right, blue top to bottom; the
    input is the target's complement. Every window holds consecutive frames, cut and
    mirrored alike on both sides, never flipped upside down."""
    size = 12
    y, x = np.mgrid[0:size, 0:size].astype(np.float32)
    for t in range(5):
        clean = np.stack([np.full_like(x, 10.0 * t), x * 20, y * 20], 2)
        _save(tmp_path / "c" / "clean" / f"{t}.png", clean)
        _save(tmp_path / "c" / "input" / f"{t}.png", 255 - clean)
    ds = VideoWindowDataset(tmp_path, frames=3, patch_size=8, augment=True, seed=1)
    assert len(ds) == 3  # window starts 0, 1, 2 of the one clip
    mirrored = set()
    for epoch in range(4):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            inp, tgt = ds[i]
            assert inp.shape == tgt.shape == (3, 3, 8, 8)
            assert torch.allclose(inp + tgt, torch.ones_like(inp), atol=1e-6)
            red = (tgt[0, :, 0, 0] * 255 / 10).round().tolist()
            assert red == [i, i + 1, i + 2]
            assert (tgt[2, :, 1:, :] > tgt[2, :, :-1, :]).all()  # rows still run downward
            mirrored.add(bool((tgt[1, :, :, 1:] < tgt[1, :, :, :-1]).all()))
    assert mirrored == {True, False}
    again = VideoWindowDataset(tmp_path, frames=3, patch_size=8, augment=True, seed=1)
    again.set_epoch(3)
    assert all(torch.equal(again[i][0], ds[i][0]) for i in range(len(ds)))


def test_a_clip_shorter_than_a_window_is_named(tmp_path: Path) -> None:
    make_clip(tmp_path / "short", n=2)
    with pytest.raises(ClearsightError, match=r"short: the clip has 2 frames but a window is 3"):
        VideoWindowDataset(tmp_path, frames=3, patch_size=8)


# --------------------------------------------------------------------------- the config
@pytest.mark.parametrize(
    ("section", "values", "match"),
    [
        ("loss", {"name": "rescan"}, "loss.name: s2vd trains with l1, mse, charbonnier"),
        ("data", {"patch_size": 7}, "data.patch_size: s2vd takes sides that are multiples of 2"),
        ("data", {"input_dir": "x", "target_dir": "y"}, "data.input_dir: not for video models"),
    ],
)
def test_settings_that_do_not_apply_to_video_are_refused(
    clips: Path, section: str, values: dict[str, Any], match: str
) -> None:
    from clearsight.models.registry import build_model

    cfg = config_from_dict(tiny_raw(clips, **{section: values}))
    with pytest.raises(TrainConfigError, match=match):
        VideoRestorationTask(build_model("s2vd", channels=4, blocks=1), cfg, None)


# --------------------------------------------------------------------------- the loop
def test_a_few_steps_train_validate_and_save_a_video_artifact(clips: Path, tmp_path: Path) -> None:
    res = train(config_from_dict(tiny_raw(clips, train={"steps": 4})), tmp_path, progress=False)
    assert res.steps == 4 and res.first_loss is not None and math.isfinite(res.last_loss)
    assert (tmp_path / "checkpoint.pt").is_file()
    assert load_checkpoint(tmp_path / "checkpoint.pt")["step"] == 4
    assert 0 < res.val_metrics["psnr"] < 100 and "ssim" in res.val_metrics
    best = load_artifact(tmp_path / "best")
    assert best.family is Family.VIDEO and best.config.task == "video-derain"
    assert best.config.provenance["steps"] == 4
    assert best.config.provenance["val_metrics"]["psnr"] == pytest.approx(res.val_metrics["psnr"])


def test_resume_continues_from_the_saved_step_bit_exactly(clips: Path, tmp_path: Path) -> None:
    full = config_from_dict(tiny_raw(clips, train={"val_every": 100}))
    train(full, tmp_path / "a", progress=False)
    half = config_from_dict(tiny_raw(clips, train={"val_every": 100, "steps": 4}))
    train(half, tmp_path / "b", progress=False)
    res = train(full, tmp_path / "b", resume=True, progress=False)
    assert res.steps == 8
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    steps = [r["step"] for r in train_log(tmp_path / "b", "loss")]
    assert steps == [2, 4, 6, 8]  # the resumed leg logged steps 6 and 8 after the first's


def test_a_nan_batch_is_skipped_by_the_guard(
    clips: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A window holding a NaN pixel: its step is skipped, and the BatchNorm statistics its
    forward pass already took in are put back as they were, so nothing else is lost (they
    were once caught only at the next checkpoint, which rolled the run back)."""
    real, calls = VideoRestorationTask.to_device, [0]

    def to_device(self, inp, tgt, device, fmt):  # noqa: ANN001, ANN202
        calls[0] += 1
        if calls[0] == 3:
            inp = inp.clone()
            inp[0, 0, 0, 0, 0] = math.nan
        return real(self, inp, tgt, device, fmt)

    monkeypatch.setattr(VideoRestorationTask, "to_device", to_device)
    cfg = config_from_dict(tiny_raw(clips, train={"val_every": 100}))
    res = train(cfg, tmp_path, progress=False)
    assert res.nan_skipped == 1 and res.steps == 8 and math.isfinite(res.last_loss)
    assert res.nan_events == [{"step": 3, "nan": "loss", "action": "step skipped"}]
    assert res.rollbacks == 0
    weights = load_checkpoint(tmp_path / "checkpoint.pt")["model"]
    assert all(torch.isfinite(v).all() for v in weights.values() if v.is_floating_point())
    last = load_artifact(tmp_path / "last").model.state_dict()
    assert all(torch.isfinite(v).all() for v in last.values() if v.is_floating_point())


def test_clearsight_train_fine_tunes_the_bundled_video_derain(clips: Path, tmp_path: Path) -> None:
    """`clearsight train CONFIG` with arch s2vd and model.init video-derain: the bundled
    weights are the start (a zero learning rate keeps them), and the run saves a video
    artifact."""
    raw = tiny_raw(clips, train={"steps": 2, "val_every": 2, "ckpt_every": 2},
                   optim={"lr": 1e-12})  # fmt: skip
    raw["model"] = {"arch": "s2vd", "init": "video-derain"}
    config = tmp_path / "s2vd-finetune.yaml"
    config.write_text(yaml.safe_dump(raw))
    res = CliRunner().invoke(
        app, ["train", str(config), "--run-dir", str(tmp_path / "run"), "--no-progress"]
    )
    assert res.exit_code == 0, res.output
    tuned = load_artifact(tmp_path / "run" / "last")
    bundled = load_artifact(bundled_models()["video-derain"])
    assert tuned.family is Family.VIDEO
    for key, value in bundled.model.state_dict().items():
        if value.is_floating_point() and "running" not in key:  # BN statistics move in training
            assert torch.allclose(tuned.model.state_dict()[key], value, atol=1e-6), key
