"""evaluate_video: restore a clip, score it per frame against clean frames, write the scores."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Iterable, Iterator
from pathlib import Path

import numpy as np
import pytest

from clearsight.engine.inference import Restorer
from clearsight.errors import OptionError, PairingError
from clearsight.io import read_image, write_image
from clearsight.metrics.presets import get_preset
from clearsight.metrics.warping import flicker, warping_error
from clearsight.video import VideoReader
from clearsight.video.evaluate import evaluate_video
from tests.video_utils import make_video


def _clean(t: int) -> np.ndarray:
    """A textured background and a bright square moving 2 px per frame (48x40)."""
    yy, xx = np.mgrid[0:40, 0:48]
    bg = 110 + 50 * np.sin(xx / 4.0) * np.cos(yy / 6.0)
    img = np.repeat(bg[..., None], 3, axis=2)
    img[12:24, 6 + 2 * t : 18 + 2 * t] = 230
    return np.clip(np.rint(img), 0, 255).astype(np.uint8)


def _rainy(t: int) -> np.ndarray:
    rng = np.random.default_rng(t)
    noisy = _clean(t).astype(float) + rng.normal(0, 12, size=(40, 48, 1))
    return np.clip(np.rint(noisy), 0, 255).astype(np.uint8)


def _clip_folder(root: Path, n: int = 5, inputs: str = "rain") -> tuple[list, list]:
    (root / inputs).mkdir(parents=True)
    (root / "clean").mkdir()
    rain, clean = [_rainy(t) for t in range(n)], [_clean(t) for t in range(n)]
    for t in range(n):
        write_image(root / inputs / f"{t + 1:05d}.png", rain[t])
        write_image(root / "clean" / f"{t + 1:05d}.png", clean[t])
    return rain, clean


def test_identity_scores_the_input_itself_and_writes_csv_summary_and_images(
    tmp_path: Path,
) -> None:
    rain, clean = _clip_folder(tmp_path / "clip")
    result = evaluate_video(
        Restorer.from_pretrained("identity"), tmp_path / "clip", tmp_path / "out", save_images=True
    )
    preset = get_preset("y-matlab")
    direct = [preset.compute(r, c) for r, c in zip(rain, clean, strict=True)]
    assert [r["psnr"] for r in result.rows] == pytest.approx([d["psnr"] for d in direct])
    assert [r["ssim"] for r in result.rows] == pytest.approx([d["ssim"] for d in direct])
    wants = warping_error(rain, clean).per_frame
    assert [r["warping_error"] for r in result.rows[1:]] == pytest.approx(wants)

    with open(tmp_path / "out" / "per_frame.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["name"] for r in rows] == [f"{t + 1:05d}" for t in range(5)]
    assert float(rows[2]["psnr"]) == pytest.approx(direct[2]["psnr"])
    assert rows[0]["warping_error"] == "" and float(rows[1]["warping_error"]) > 0

    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["frames"] == 5 and summary["preset"] == "y-matlab"
    assert summary["psnr"]["mean"] == pytest.approx(np.mean([d["psnr"] for d in direct]))
    assert summary["warping_error"]["mean"] == pytest.approx(np.mean(wants))
    saved = sorted((tmp_path / "out" / "restored").glob("*.png"))  # and the hidden mark
    assert [p.name for p in saved] == [f"{t + 1:05d}.png" for t in range(5)]
    assert np.array_equal(read_image(saved[3]), rain[3])  # identity: the input frame


def test_a_clip_model_plugs_in_and_better_outputs_score_higher(tmp_path: Path) -> None:
    _clip_folder(tmp_path / "clip", inputs="moire")
    seen: list[int] = []

    def blur_clip(frames: Iterator[np.ndarray]) -> Iterable[np.ndarray]:
        """A 'window' model: the mean of each frame with the one before it."""
        prev = None
        for f in frames:
            seen.append(1)
            cur = f.astype(float)
            yield np.rint(cur if prev is None else (cur + prev) / 2).astype(np.uint8)
            prev = cur

    plain = evaluate_video(lambda f: f, tmp_path / "clip")
    smooth = evaluate_video(blur_clip, tmp_path / "clip", clip=True)
    assert len(seen) == 5 and smooth.summary["frames"] == 5
    # averaging two noisy frames lowers the flicker between outputs
    assert smooth.summary["warping_error"]["mean"] < plain.summary["warping_error"]["mean"]


def test_two_videos_and_flicker_without_clean_frames(tmp_path: Path) -> None:
    rain, clean = [_rainy(t) for t in range(6)], [_clean(t) for t in range(6)]
    make_video(tmp_path / "rain.mkv", w=48, h=40, n=6, audio=None, images=rain, codec="ffv1",
               pix_fmt="bgr0", pts=[40 * i for i in range(6)])  # fmt: skip
    make_video(tmp_path / "clean.mkv", w=48, h=40, n=6, audio=None, images=clean, codec="ffv1",
               pix_fmt="bgr0", pts=[40 * i for i in range(6)])  # fmt: skip
    with VideoReader(tmp_path / "rain.mkv") as r:  # ffv1 is lossless
        assert all(np.array_equal(f.image, rain[f.index]) for f in r.frames())
    out = tmp_path / "out"
    result = evaluate_video(lambda f: f, (tmp_path / "rain.mkv", tmp_path / "clean.mkv"), out)
    preset = get_preset("y-matlab")
    assert [r["psnr"] for r in result.rows] == pytest.approx(
        [preset.compute(a, b)["psnr"] for a, b in zip(rain, clean, strict=True)]
    )
    assert [r["name"] for r in result.rows] == [f"{i:06d}" for i in range(1, 7)]

    alone = evaluate_video(lambda f: f, (tmp_path / "rain.mkv", None), tmp_path / "flick")
    assert alone.summary["frames"] == 6
    assert set(alone.summary) == {"flicker", "frames", "temporal"}
    assert alone.summary["flicker"]["mean"] == pytest.approx(flicker(rain, rain).mean)
    with open(tmp_path / "flick" / "per_frame.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["name", "flicker"] and len(rows) == 6


def test_unmatched_names_are_one_line_errors_naming_the_frame(tmp_path: Path) -> None:
    _clip_folder(tmp_path / "clip", n=3)
    (tmp_path / "clip" / "clean" / "00002.png").unlink()
    with pytest.raises(PairingError, match=r"rain/00002\.png: no clean frame named 00002") as e:
        evaluate_video(lambda f: f, tmp_path / "clip", tmp_path / "out")
    assert "\n" not in str(e.value) and not (tmp_path / "out").exists()
    write_image(tmp_path / "clip" / "clean" / "00002.png", _clean(1))
    write_image(tmp_path / "clip" / "clean" / "00009.png", _clean(1))
    with pytest.raises(PairingError, match=r"clean/00009\.png: no input frame named 00009"):
        evaluate_video(lambda f: f, tmp_path / "clip")
    (tmp_path / "clip" / "clean" / "00009.png").unlink()
    (tmp_path / "clip" / "input").mkdir()
    with pytest.raises(PairingError, match=r"several input folders \(rain, input\)"):
        evaluate_video(lambda f: f, tmp_path / "clip")


def test_a_single_frame_has_no_warping_error(tmp_path: Path) -> None:
    _clip_folder(tmp_path / "clip", n=1)
    result = evaluate_video(lambda f: f, tmp_path / "clip", tmp_path / "out")
    summary = json.loads((tmp_path / "out" / "summary.json").read_text())
    assert summary["warping_error"]["mean"] is None and summary["frames"] == 1
    assert math.isfinite(result.summary["psnr"]["mean"])


def test_a_frame_of_another_size_and_a_bad_model_are_one_line_errors(tmp_path: Path) -> None:
    _clip_folder(tmp_path / "clip", n=3)
    write_image(tmp_path / "clip" / "clean" / "00002.png", _clean(1)[:32])
    with pytest.raises(PairingError, match=r"clip: frame 00002: output and target differ"):
        evaluate_video(lambda f: f, tmp_path / "clip", tmp_path / "out", save_images=True)
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    with pytest.raises(OptionError, match=r"^model: expected a Restorer or a frame function"):
        evaluate_video(42, tmp_path / "clip")


def test_temporal_scores_the_blended_frames_as_restore_video_makes_them(tmp_path: Path) -> None:
    """`temporal=True` blends the restored frames (the same `TemporalBlend` the restore
    commands run) before scoring and saving them: the noise that changes from frame to frame
    is damped, so the warping error drops, and the saved frames are the blended ones."""
    from clearsight.video.temporal import TemporalBlend

    rain, clean = _clip_folder(tmp_path / "clip", n=6)
    identity = Restorer.from_pretrained("identity")
    plain = evaluate_video(identity, tmp_path / "clip", tmp_path / "a")
    blended = evaluate_video(identity, tmp_path / "clip", tmp_path / "b", temporal=True,
                             save_images=True)  # fmt: skip
    assert blended.summary["temporal"] is True and plain.summary["temporal"] is False
    we = [r.summary["warping_error"]["mean"] for r in (plain, blended)]
    assert we[1] < 0.8 * we[0]
    blend = TemporalBlend()
    want = [blend(f) for f in rain]
    got = [read_image(p) for p in sorted((tmp_path / "b" / "restored").glob("*.png"))]
    assert len(got) == 6 and all(np.array_equal(g, w) for g, w in zip(got, want, strict=True))
