"""`--frames-out` and `--fps` on derain/demoire/restore: numbered frames out, and in."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.io import read_image, write_image
from tests.video_utils import decoded_frames, decoded_times, frame_image, make_video

runner = CliRunner()


def _numbered(folder: Path, n: int) -> list[np.ndarray]:
    frames = [frame_image(i, 32, 24) for i in range(n)]
    for i, img in enumerate(frames):
        write_image(folder / f"frame_{i + 1}.png", img)  # frame_10 after frame_9
    return frames


def _pngs(folder: Path) -> list[str]:
    """The visible names in `folder` (a frames folder also holds its hidden mark)."""
    return sorted(p.name for p in folder.iterdir() if not p.name.startswith("."))


def test_frames_out_writes_each_restored_frame_as_a_numbered_png(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    make_video(clip, w=32, h=24, n=6, audio=None)
    res = runner.invoke(
        app, ["restore", "-m", "identity", str(clip), "-o", str(tmp_path / "out"),
              "--frames-out", str(tmp_path / "frames")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _pngs(tmp_path / "frames") == [f"{i:06d}.png" for i in range(1, 7)]
    # identity: each PNG is the decoded input frame, exactly (no encoder in between)
    for i, want in enumerate(decoded_frames(clip)):
        np.testing.assert_array_equal(read_image(tmp_path / "frames" / f"{i + 1:06d}.png"), want)
    assert len(decoded_frames(tmp_path / "out" / "clip.mp4")) == 6


def test_frames_out_with_several_videos_gives_each_its_own_folder(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    make_video(folder / "a.mp4", w=32, h=24, n=3, audio=None)
    make_video(folder / "b.v2.mp4", w=32, h=24, n=4, audio=None)
    res = runner.invoke(
        app, ["derain", "-m", "identity", str(folder), "-o", str(tmp_path / "out"),
              "--frames-out", str(tmp_path / "frames")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _pngs(tmp_path / "frames") == ["a", "b.v2"]
    assert len(_pngs(tmp_path / "frames" / "a")) == 3
    assert len(_pngs(tmp_path / "frames" / "b.v2")) == 4
    assert _pngs(tmp_path / "out") == ["a.mp4", "b.v2.mp4"]  # the dot in the name is kept


def test_fps_reads_a_folder_of_numbered_frames_as_one_video(tmp_path: Path) -> None:
    folder = tmp_path / "shot.1"
    frames = _numbered(folder, 11)
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "-m", "identity", str(folder), "-o", str(out), "--fps", "12.5",
              "--crf", "0", "--frames-out", str(tmp_path / "frames")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _pngs(out) == ["shot.1.mp4"]  # one video, not 11 images
    video = out / "shot.1.mp4"
    assert decoded_times(video) == pytest.approx([i / 12.5 for i in range(11)], abs=1e-3)
    got = decoded_frames(video)
    # in frame-number order (frame_10 after frame_9): each decoded frame is nearest its own
    # source frame (the yuv420p round trip blurs the colour of the thin bar)
    dist = [[np.abs(g.astype(int) - w.astype(int)).mean() for w in frames] for g in got]
    assert [int(np.argmin(d)) for d in dist] == list(range(11))
    np.testing.assert_array_equal(read_image(tmp_path / "frames" / "000010.png"), frames[9])


def test_without_fps_a_folder_of_frames_is_still_images(tmp_path: Path) -> None:
    _numbered(tmp_path / "shot", 3)
    res = runner.invoke(app, ["restore", "-m", "identity", str(tmp_path / "shot"),
                              "-o", str(tmp_path / "out")])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _pngs(tmp_path / "out") == ["frame_1.png", "frame_2.png", "frame_3.png"]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--fps", "0"], ["--fps", "0.001 to 1000"]),
        (["--fps", "-5"], ["--fps", "0.001 to 1000"]),
        (["--frames-out", "{file}"], ["--frames-out", "is a file"]),
        (["--frames-out", "{tmp}/frames"], ["--frames-out", "no video"]),
    ],
)
def test_bad_fps_and_frames_out_are_one_line_naming_the_option(
    tmp_path: Path, args: list[str], words: list[str]
) -> None:
    _numbered(tmp_path / "shot", 2)
    (tmp_path / "afile").write_text("x")
    args = [a.format(file=tmp_path / "afile", tmp=tmp_path) for a in args]
    res = runner.invoke(
        app, ["demoire", str(tmp_path / "shot"), "-o", str(tmp_path / "out"), *args]
    )
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and all(w in lines[0] for w in words), res.output
    assert not (tmp_path / "out").exists() and not (tmp_path / "frames").exists()


def test_frame_folders_and_frames_out_are_refused_on_ray_before_it_starts(tmp_path: Path) -> None:
    """Ray takes video files: --fps folders and --frames-out run locally, and say so."""
    _numbered(tmp_path / "shot", 2)
    res = runner.invoke(
        app, ["restore", "-m", "identity", str(tmp_path / "shot"), "--fps", "25",
              "--engine", "ray", "-o", str(tmp_path / "out")],
    )  # fmt: skip
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--fps" in lines[0] and "--engine local" in lines[0], res.output
