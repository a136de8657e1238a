"""Warping error (Lai et al. 2018), flicker and per-frame clip scores."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clearsight.metrics import ShapeMismatchError, get_preset
from clearsight.metrics.warping import (
    FlowEstimator,
    flicker,
    pair_warping_error,
    score_frames,
    valid_mask,
    warp,
    warping_error,
)


def texture(h: int = 64, w: int = 96, seed: int = 0) -> np.ndarray:
    """A smooth random texture DIS can track (uint8 RGB)."""
    import cv2

    rng = np.random.default_rng(seed)
    noise = rng.uniform(0, 255, size=(h // 4, w // 4, 3)).astype(np.float32)
    big = cv2.resize(noise, (w, h), interpolation=cv2.INTER_CUBIC)
    return np.clip(cv2.GaussianBlur(big, (0, 0), 1.5), 0, 255).astype(np.uint8)


def panning(n: int, step: int = 2) -> list[np.ndarray]:
    """n frames of a wide texture seen through a window moving `step` px right per frame."""
    wide = texture(64, 96 + step * n)
    return [np.ascontiguousarray(wide[:, step * i : step * i + 96]) for i in range(n)]


def test_warp_follows_the_flow() -> None:
    img = texture()
    flow = np.zeros((64, 96, 2), np.float32)
    flow[..., 0] = 3.0  # sample 3 px to the right
    out = warp(img, flow)
    assert np.array_equal(out[:, :-3], img[:, 3:])
    assert np.array_equal(out[:, -1], img[:, -1])  # outside: the edge pixel


def test_valid_mask_rejects_inconsistent_flow_and_motion_boundaries() -> None:
    flow = np.zeros((32, 32, 2), np.float32)
    flow[..., 0] = 2.0
    back = -flow.copy()
    assert valid_mask(flow, back).all()  # a consistent pan: every pixel trusted
    bad_back = back.copy()
    bad_back[8:16, 8:16] = 5.0  # the way back does not return
    mask = valid_mask(flow, bad_back)
    assert not mask[8:16, 6:14].any() and mask[20:, 20:].all()
    step = flow.copy()
    step[:, 16:, 0] = 8.0  # two motions meet at column 16
    mask = valid_mask(step, -step)
    assert not mask[:, 15].any() and mask[:, 5].all()


def test_flow_recovers_a_pan() -> None:
    a, b = panning(2, step=3)
    flow = FlowEstimator()(b, a)  # b(x) ~ a(x + flow)
    assert np.median(flow[8:-8, 8:-8, 0]) == pytest.approx(3.0, abs=0.3)
    assert np.median(np.abs(flow[8:-8, 8:-8, 1])) < 0.3


def test_warping_error_is_zero_for_a_still_clip_and_small_for_a_clean_pan() -> None:
    still = [texture()] * 4
    assert warping_error(still, still).per_frame == [0.0, 0.0, 0.0]
    frames = panning(5)
    result = warping_error(frames, frames)
    assert len(result.per_frame) == 4 and result.mean < 2e-4


def test_warping_error_measures_flicker_as_twice_the_noise_variance() -> None:
    frames = panning(6)
    rng = np.random.default_rng(1)
    sigma = 6.0 / 255.0  # per-frame noise in [0,1] units
    noisy = [
        np.clip(f / 255.0 + rng.normal(0, sigma, f.shape), 0, 1).astype(np.float32) for f in frames
    ]
    err = warping_error(noisy, frames).mean
    assert err == pytest.approx(2 * sigma**2, rel=0.3)  # two independent noises differ
    assert flicker(noisy, frames).mean == pytest.approx(err)
    # blurring the noise away lowers the error, as a steadier output should
    import cv2

    smooth = [cv2.GaussianBlur(f, (0, 0), 2.0) for f in noisy]
    assert warping_error(smooth, frames).mean < 0.5 * err


def test_pair_error_counts_only_valid_pixels() -> None:
    a = np.zeros((16, 16, 3), np.float32)
    b = a.copy()
    b[:4] = 1.0  # a change confined to rows that the mask rejects
    flow = np.zeros((16, 16, 2), np.float32)
    back = flow.copy()
    back[:4] = 10.0
    assert pair_warping_error(a, b, flow, back) == 0.0
    assert pair_warping_error(a, b, flow, flow) == pytest.approx(0.25)  # 4 of 16 rows


def test_score_frames_rows_and_summary() -> None:
    clean = panning(4)
    rng = np.random.default_rng(2)
    out = [
        np.clip(f.astype(int) + rng.integers(-3, 4, f.shape), 0, 255).astype(np.uint8)
        for f in clean
    ]
    score = score_frames(out, clean)
    assert score.preset == "y-matlab" and len(score.rows) == 4
    assert "warping_error" not in score.rows[0] and "warping_error" in score.rows[1]
    expect = get_preset("y-matlab").compute(out[2], clean[2])
    assert score.rows[2]["psnr"] == pytest.approx(expect["psnr"])
    assert score.rows[2]["ssim"] == pytest.approx(expect["ssim"])
    assert score.summary["psnr.mean"] == pytest.approx(np.mean([r["psnr"] for r in score.rows]))
    assert score.summary["warping_error.mean"] == pytest.approx(warping_error(out, clean).mean)
    with pytest.raises(ShapeMismatchError, match="differ in length"):
        score_frames(out, clean[:3])


def test_score_video_reads_frame_folders(tmp_path: Path) -> None:
    from clearsight.video.frames import FrameFolderWriter
    from clearsight.video.score import flicker_video, score_video

    clean = panning(3)
    for name, frames in (("clean", clean), ("out", [255 - f for f in clean])):
        with FrameFolderWriter(tmp_path / name) as w:
            for f in frames:
                w.write(f)
    score = score_video(tmp_path / "out", tmp_path / "clean")
    assert len(score.rows) == 3 and score.summary["psnr.mean"] < 15
    assert flicker_video(tmp_path / "clean", tmp_path / "clean").mean < 5e-4
