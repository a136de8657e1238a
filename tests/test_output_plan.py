"""One output plan for every folder run (`clearsight.output_plan`, docs/reliability.md):
nothing a run did not write is touched, no two outputs collide, and videos, frame folders
and images share skip-existing, the leftover sweep, failures.csv and the error wording."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from tests.video_utils import decoded_frames, small_image, small_video

runner = CliRunner()


_video = small_video
_image = small_image


def _restore(*args: str | Path) -> object:
    return runner.invoke(app, ["restore", "-m", "identity", *map(str, args)])


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def _deny_writes(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """`folder` read-only for new files, as `chmod a-w` makes it (which root ignores, so
    the refusal is simulated where files are created)."""
    real = os.open
    home = folder.resolve()

    def guarded(path: object, flags: int, mode: int = 0o777, *, dir_fd: object = None) -> int:
        if flags & os.O_CREAT and Path(str(path)).resolve().parent == home:
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path, flags, mode, dir_fd=dir_fd)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", guarded)


# --------------------------------------------------------------------------- data loss


def test_frames_out_onto_the_input_frames_folder_is_refused_and_keeps_the_frames(
    tmp_path: Path,
) -> None:
    frames = tmp_path / "frames"
    for i in range(4):
        _image(frames / f"{i + 1:05d}.png")
    before = _snapshot(frames)
    res = _restore(frames, "--fps", "10", "--frames-out", frames, "-o", tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert "--frames-out" in res.output and str(frames) in res.output
    assert _snapshot(frames) == before  # nothing deleted, nothing renamed
    assert not (tmp_path / "out").exists()  # refused before any work


def test_frames_out_never_replaces_numbered_frames_it_did_not_write(tmp_path: Path) -> None:
    clip = _video(tmp_path / "clip.mp4")
    theirs = tmp_path / "theirs"
    for i in range(3):
        _image(theirs / f"{i + 1:06d}.png")  # the writer's own names, but not its output
    before = _snapshot(theirs)
    res = _restore(clip, "--frames-out", theirs, "-o", tmp_path / "out")
    assert res.exit_code == 3, res.output
    assert "not written by clearsight" in res.output
    assert _snapshot(theirs) == before
    # a folder clearsight wrote is replaced on a rerun, as any output is
    mine = tmp_path / "mine"
    assert _restore(clip, "--frames-out", mine, "-o", tmp_path / "out").exit_code == 0
    again = _restore(clip, "--frames-out", mine, "-o", tmp_path / "out")
    assert again.exit_code == 0, again.output
    assert sorted(p.name for p in mine.glob("[!.]*")) == [f"{i:06d}.png" for i in range(1, 5)]


def test_videos_with_one_stem_are_refused_naming_both_before_any_work(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _video(folder / "a.mp4", n=6)
    _video(folder / "a.mkv", n=3)
    for command in (["restore", "-m", "identity"], ["detect"]):
        out = tmp_path / f"out_{command[0]}"
        res = runner.invoke(app, [*command, str(folder), "-o", str(out)])
        assert res.exit_code == 1, res.output
        assert "two inputs would be written to" in res.output
        assert str(folder / "a.mp4") in res.output and str(folder / "a.mkv") in res.output
        assert not out.exists()


def test_a_frames_folder_and_a_video_of_one_name_are_refused(tmp_path: Path) -> None:
    clip = tmp_path / "clip"
    for i in range(3):
        _image(clip / f"{i + 1:04d}.png")
    video = _video(tmp_path / "elsewhere" / "clip.mp4")
    res = _restore(clip, video, "--fps", "10", "-o", tmp_path / "out")
    assert res.exit_code == 1, res.output
    assert "two inputs would be written to" in res.output
    assert not (tmp_path / "out").exists()


def test_clashes_across_kinds_and_frames_folders_are_found_by_the_plan(tmp_path: Path) -> None:
    from clearsight.output_plan import OutputClashError, plan_run

    out = tmp_path / "out"
    a, b = _video(tmp_path / "x" / "a.mp4"), _video(tmp_path / "y" / "a.mp4")
    with pytest.raises(OutputClashError, match="two inputs would be written to"):
        plan_run([a, b], out)  # two folders, one name
    mp4, mkv = _video(tmp_path / "z" / "c.mp4"), _video(tmp_path / "z" / "c.mkv")
    plan = plan_run([mp4, mkv], out, keep_container=True)  # OUT/c.mp4 and OUT/c.mkv
    assert sorted(v.target.name for v in plan.videos) == ["c.mkv", "c.mp4"]
    with pytest.raises(OutputClashError, match="frames"):  # but one frames folder c/
        plan_run([mp4, mkv], out, keep_container=True, frames_out=tmp_path / "frames")
    with pytest.raises(OutputClashError, match="frames"):  # frames folder replacing OUT
        plan_run([mp4], out, frames_out=out)
    odd = tmp_path / "odd"
    _image(odd / "a.mp4" / "1.png")  # an image folder named like the video's output
    with pytest.raises(OutputClashError, match=r"\(a file\) and .*\(a folder"):
        plan_run([odd, a], out)
    # images keep their extension: a.png and a.jpg do not clash, nor does a.mp4
    pics = tmp_path / "pics"
    _image(pics / "a.png"), _image(pics / "a.jpg")
    plan = plan_run([pics, a], out)
    assert sorted(p.name for p in plan.outputs()) == ["a.jpg", "a.mp4", "a.png"]


def test_output_folder_inside_an_input_folder_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _video(folder / "a.mp4")
    _video(folder / "b.mkv")
    before = _snapshot(folder)
    res = _restore(folder, "--keep-container", "-o", folder)
    assert res.exit_code == 1, res.output
    assert "inside the input folder" in res.output
    assert _snapshot(folder) == before


def test_ray_videos_go_through_the_same_plan(tmp_path: Path) -> None:
    from clearsight.api.video_ray import restore_videos_ray
    from clearsight.output_plan import OutputClashError

    folder = tmp_path / "in"
    _video(folder / "a.mp4")
    _video(folder / "a.mkv")
    with pytest.raises(OutputClashError, match="two inputs would be written to"):
        restore_videos_ray("identity", [folder], tmp_path / "out")
    with pytest.raises(OutputClashError, match="inside the input folder"):
        restore_videos_ray("identity", [folder], folder / "out", keep_container=True)


def test_skip_existing_keeps_an_existing_video_output(tmp_path: Path) -> None:
    clip = _video(tmp_path / "v.mp4")
    out = tmp_path / "out"
    out.mkdir()
    (out / "v.mp4").write_bytes(b"an earlier output")
    res = _restore(clip, "-o", out, "--skip-existing")
    assert res.exit_code == 0, res.output
    assert (out / "v.mp4").read_bytes() == b"an earlier output"
    assert "0 done, 1 skipped, 0 failed" in res.output
    res = _restore(clip, "-o", out)  # --overwrite, the default, replaces it
    assert res.exit_code == 0 and len(decoded_frames(out / "v.mp4")) == 4


def test_detect_refuses_skip_existing_for_videos_as_for_images(tmp_path: Path) -> None:
    clip = _video(tmp_path / "v.mp4")
    res = runner.invoke(app, ["detect", str(clip), "-o", str(tmp_path / "out"), "--skip-existing"])
    assert res.exit_code == 1, res.output
    assert "--skip-existing" in res.output
    assert not (tmp_path / "out").exists()


# --------------------------------------------------------------------------- one plan


def test_a_video_run_removes_a_stale_failures_csv(tmp_path: Path) -> None:
    clip = _video(tmp_path / "v.mp4")
    out = tmp_path / "out"
    out.mkdir()
    (out / "failures.csv").write_text("file,output,reason\nold.mp4,out/old.mp4,broken\n")
    res = _restore(clip, "-o", out)
    assert res.exit_code == 0, res.output
    assert not (out / "failures.csv").exists()


def test_a_video_run_sweeps_what_a_killed_run_left(tmp_path: Path) -> None:
    clip = _video(tmp_path / "v.mp4")
    out = tmp_path / "out"
    out.mkdir()
    left = out / ".v.clearsight-999999999-0a1b2c3d.tmp.mp4"  # a pid no process has
    left.write_bytes(b"half a video")
    os.utime(left, (0, 0))
    res = _restore(clip, "-o", out)
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in out.iterdir()) == ["v.mp4"]


def test_output_that_is_a_file_is_one_error_before_any_work_for_videos(tmp_path: Path) -> None:
    clip = _video(tmp_path / "v.mp4")
    taken = tmp_path / "taken"
    taken.write_text("not a folder")
    for inputs in ([clip], [clip, _image(tmp_path / "img.png")]):
        res = _restore(*inputs, "-o", taken)
        assert res.exit_code == 1, res.output
        assert f"output folder {taken} is a file" in res.output
        assert "FileExistsError" not in res.output and "failures.csv" not in res.output
        assert taken.read_text() == "not a folder"


def test_read_only_output_names_the_video_and_still_prints_the_summary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = _video(tmp_path / "a.mp4")
    out = tmp_path / "out"
    out.mkdir()
    _deny_writes(monkeypatch, out)
    res = _restore(clip, "-o", out)
    assert res.exit_code == 1, res.output  # failures.csv cannot be written either
    assert f"'{out / 'a.mp4'}'" in res.output
    assert ".clearsight-" not in res.output  # never the temporary name
    assert "0 done, 0 skipped, 1 failed" in res.output


def test_image_write_errors_name_the_output_not_the_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    img = _image(tmp_path / "img1.png")
    out = tmp_path / "out"
    (out / "img1.png").mkdir(parents=True)  # a folder where the output goes
    res = _restore(img, "-o", out)
    assert res.exit_code == 3, res.output
    assert f"'{out / 'img1.png'}'" in res.output and ".clearsight-" not in res.output
    assert "0 done, 0 skipped, 1 failed" in res.output
    ro = tmp_path / "ro"
    ro.mkdir()
    _deny_writes(monkeypatch, ro)
    res = _restore(img, "-o", ro)
    assert f"'{ro / 'img1.png'}'" in res.output and ".clearsight-" not in res.output
    assert "0 done, 0 skipped, 1 failed" in res.output
