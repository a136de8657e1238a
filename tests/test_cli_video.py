"""Videos through the image commands: derain, demoire, restore, detect and eval --video."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.io import write_image
from clearsight.metrics.presets import get_preset
from tests.video_utils import decoded_frames, decoded_times, make_video

runner = CliRunner()


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    """A folder with a photo, a 10-frame clip with audio, and a broken 'video'."""
    folder = tmp_path / "in"
    folder.mkdir()
    make_video(folder / "clip.mp4", w=48, h=32, n=10)
    write_image(folder / "photo.png", np.full((24, 32, 3), 128, np.uint8))
    (folder / "broken.mp4").write_bytes(b"not a video at all")
    return folder


def test_derain_runs_images_and_videos_of_one_folder_and_lists_a_bad_video(
    mixed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    res = runner.invoke(app, ["derain", str(mixed), "-o", str(out)])
    assert res.exit_code == 3, res.output  # the broken video failed; the rest was done
    assert (out / "photo.png").is_file()
    video = out / "clip.mp4"
    assert decoded_times(video) == decoded_times(mixed / "clip.mp4")
    assert decoded_frames(video)[0].shape == (32, 48, 3)
    assert "with video-derain" in res.output
    rows = list(csv.DictReader((out / "failures.csv").open()))
    assert [Path(r["file"]).name for r in rows] == ["broken.mp4"]
    assert not (out / "broken.mp4").exists()


def test_restore_a_video_with_an_image_model_frame_by_frame(mixed: Path, tmp_path: Path):
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(mixed / "clip.mp4"), "-o", str(out),
              "--keep-container", "--crf", "0"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    got = decoded_frames(out / "clip.mp4")
    want = decoded_frames(mixed / "clip.mp4")
    assert len(got) == len(want) == 10
    # identity at crf 0 (lossless) up to the yuv420p round trip
    diffs = [
        float(np.abs(g.astype(int) - w.astype(int)).mean()) for g, w in zip(got, want, strict=True)
    ]
    assert max(diffs) < 3


def test_detect_a_video_writes_the_drawn_clip_and_one_json_line_per_frame(
    mixed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "det"
    res = runner.invoke(app, ["detect", str(mixed / "clip.mp4"), "-o", str(out)])
    assert res.exit_code == 0, res.output
    lines = [json.loads(ln) for ln in (out / "clip.jsonl").read_text().splitlines()]
    assert [ln["frame"] for ln in lines] == list(range(10))
    assert decoded_times(out / "clip.mp4") == decoded_times(mixed / "clip.mp4")


def test_eval_video_scores_a_clip_frame_by_frame(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pairs = tmp_path / "pairs"
    clean = [(rng.random((24, 32, 3)) * 255).astype(np.uint8) for _ in range(4)]
    rain = [np.clip(c.astype(int) + 30, 0, 255).astype(np.uint8) for c in clean]
    for i, (c, r) in enumerate(zip(clean, rain, strict=True)):
        write_image(pairs / "clean" / f"{i:03d}.png", c)
        write_image(pairs / "rain" / f"{i:03d}.png", r)
    out = tmp_path / "ev"
    res = runner.invoke(
        app, ["eval", "--video", "--model", "identity", "--data", str(pairs), "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((out / "per_frame.csv").open()))
    assert len(rows) == 4
    preset = get_preset("y-matlab")
    want = np.mean([preset.compute(r, c)["psnr"] for r, c in zip(rain, clean, strict=True)])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["psnr"]["mean"] == pytest.approx(want, abs=1e-6)


def test_synth_rain_video_writes_numbered_pairs_for_eval_video(tmp_path: Path) -> None:
    clip = tmp_path / "clean.mp4"
    make_video(clip, w=48, h=32, n=6, audio=None)
    out = tmp_path / "pairs"
    res = runner.invoke(
        app, ["synth", "rain", "--video", "--clean", str(clip), "-o", str(out), "--preset",
              "light", "--max-frames", "4"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in (out / "rain").glob("[!.]*")) == [
        f"{i:06d}.png" for i in range(1, 5)
    ]
    assert sorted(p.name for p in (out / "clean").glob("[!.]*")) == [
        f"{i:06d}.png" for i in range(1, 5)
    ]
    scored = runner.invoke(app, ["eval", "--video", "--model", "identity", "--data", str(out)])
    assert scored.exit_code == 0 and "4 frames" in scored.output, scored.output


def test_a_folder_of_videos_only_is_restored(tmp_path: Path) -> None:
    folder = tmp_path / "clips"
    (folder / "sub").mkdir(parents=True)
    make_video(folder / "sub" / "a.mp4", w=32, h=32, n=4, audio=None)
    out = tmp_path / "out"
    res = runner.invoke(app, ["restore", "--model", "identity", str(folder), "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert decoded_times(out / "sub" / "a.mp4") == decoded_times(folder / "sub" / "a.mp4")


def test_detect_on_a_mixed_folder_lists_a_bad_video_beside_the_images(
    mixed: Path, tmp_path: Path
) -> None:
    out = tmp_path / "det"
    res = runner.invoke(app, ["detect", str(mixed), "-o", str(out)])
    assert res.exit_code == 3, res.output  # the images went fine; the broken video did not
    assert (out / "detections.json").is_file() and (out / "clip.jsonl").is_file()
    rows = list(csv.DictReader((out / "failures.csv").open()))
    assert [Path(r["file"]).name for r in rows] == ["broken.mp4"]
