"""A fresh hostile probe of the output and option guarantees (docs/reliability.md, "What a
run writes", "Option bounds"): each case failed before its fix. Nothing the run did not
write is touched, every option is checked once before any work whatever the input kind,
and every error is one line naming what the user gave."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.io import write_image
from tests.video_utils import decoded_frames, frame_image, make_video, small_image, small_video

runner = CliRunner()


def _video(path: Path, n: int = 3) -> Path:
    return small_video(path, n)


_image = small_image


def _run(*args: str | Path) -> object:
    return runner.invoke(app, list(map(str, args)))


def _one_error(res: object, *needles: str) -> str:
    """Exit 1, one `error:` line holding each needle, no internal error, no traceback."""
    out = res.output  # type: ignore[attr-defined]
    assert res.exit_code == 1, out  # type: ignore[attr-defined]
    assert "internal error" not in out and "Traceback" not in out, out
    lines = [ln for ln in out.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1, out
    for needle in needles:
        assert needle in lines[0], out
    return lines[0]


# --- eval: an output never overwrites an input -------------------------------------------


def test_eval_report_onto_a_clean_image_of_the_set_is_refused_and_the_image_kept(
    tmp_path: Path,
) -> None:
    data = tmp_path / "pairs"
    _image(data / "rain" / "a.png")
    clean = _image(data / "clean" / "a.png")
    before = clean.read_bytes()
    res = _run("eval", "-m", "identity", "-d", data, "--report", clean)
    _one_error(res, "--report", str(clean))
    assert clean.read_bytes() == before


def test_eval_video_report_onto_the_clean_video_is_refused_and_the_video_kept(
    tmp_path: Path,
) -> None:
    src = _video(tmp_path / "in.mp4")
    clean = _video(tmp_path / "clean.mp4")
    before = clean.read_bytes()
    res = _run("eval", "--video", "-m", "identity", "-d", src, "--clean", clean,
               "-o", tmp_path / "scores", "--report", clean)  # fmt: skip
    _one_error(res, "--report", "clean.mp4")
    assert clean.read_bytes() == before
    assert not (tmp_path / "scores").exists()


def test_eval_video_report_players_never_overwrite_an_input(tmp_path: Path) -> None:
    """The report's clips are written beside it as <page>-input.mp4 and -restored.mp4."""
    src = _video(tmp_path / "page-input.mp4")
    clean = _video(tmp_path / "clean.mp4")
    before = src.read_bytes()
    res = _run("eval", "--video", "-m", "identity", "-d", src, "--clean", clean,
               "--report", tmp_path / "page.html")  # fmt: skip
    _one_error(res, "page-input.mp4")
    assert src.read_bytes() == before


def test_eval_outputs_inside_the_set_can_be_rerun(tmp_path: Path) -> None:
    """A report beside the set and scores in a folder inside it are the run's own files: a
    rerun replaces them (summary.json is not taken for the set's annotations)."""
    data = tmp_path / "pairs"
    _image(data / "rain" / "a.png")
    _image(data / "clean" / "a.png")
    for _ in range(2):
        res = _run("eval", "-m", "identity", "-d", data, "--report", data / "report.html",
                   "-o", data / "clean")  # fmt: skip
        assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert (data / "report.html").read_text(encoding="utf-8").startswith("<!")
    assert (data / "clean" / "summary.json").is_file()


# --- every inference option is checked once, before any work, for videos too --------------


@pytest.mark.parametrize(
    ("option", "flag"),
    [
        (("--tile", "7"), "--tile"),
        (("--device", "cuda:7"), "--device"),
        (("--tta", "bogus"), "--tta"),
        (("--scales", "9"), "--scales"),
        (("--backend", "nope"), "--backend"),
        (("--stages", "0"), "--stages"),
    ],
)
def test_restore_checks_inference_options_before_any_video_work(
    tmp_path: Path, option: tuple[str, str], flag: str
) -> None:
    clip = _video(tmp_path / "in" / "a.mp4")
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", clip, "-o", out, *option)
    _one_error(res, flag)
    assert not out.exists()


@pytest.mark.parametrize(
    ("option", "flag"),
    [
        (("--device", "cuda:3"), "--device"),
        (("--device", "bogus"), "--device"),
        (("--backend", "nope"), "--backend"),
        (("--precision", "int4"), "--precision"),
    ],
)
def test_detect_checks_device_backend_and_precision_before_any_work(
    tmp_path: Path, option: tuple[str, str], flag: str
) -> None:
    img = _image(tmp_path / "in" / "a.png")
    clip = _video(tmp_path / "in2" / "b.mp4")
    for given in (img, clip):
        out = tmp_path / f"out-{given.stem}"
        res = _run("detect", given, "-o", out, *option)
        _one_error(res, flag)
        assert not out.exists()


def test_keep_container_codec_is_checked_once_before_any_work(tmp_path: Path) -> None:
    """libx264 into a .webm (kept by --keep-container) was one failed input per video."""
    import av

    webm = tmp_path / "in" / "c.webm"
    webm.parent.mkdir(parents=True)
    make_video(webm, w=32, h=24, n=2, audio=None, codec="libvpx-vp9")
    assert av.open(str(webm)).streams.video[0].codec_context.name in ("vp9", "libvpx-vp9")
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", webm, "-o", out, "--keep-container")
    line = _one_error(res, "--codec", "webm")
    advice = line.split("e.g.")[1]  # only encoders a .webm holds
    assert "libvpx-vp9" in advice and "libx264" not in advice, line
    assert not out.exists()


# --- one input given twice is planned once, for images as for videos ----------------------


def test_an_image_given_twice_is_restored_once_as_a_video_is(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    img = _image(folder / "a.png")
    clip = _video(folder / "v.mp4")
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", folder, img, clip, "-o", out)
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert sorted(p.name for p in out.iterdir()) == ["a.png", "v.mp4"]


def test_a_link_and_its_target_each_get_their_output(tmp_path: Path) -> None:
    """Two names for one video write two outputs, as two names for one image do."""
    clip = _video(tmp_path / "v" / "a.mp4")
    link = tmp_path / "l" / "link.mp4"
    link.parent.mkdir()
    link.symlink_to(clip)
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", link, clip, "-o", out)
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert sorted(p.name for p in out.iterdir()) == ["a.mp4", "link.mp4"]


# --- a folder's broken video links are failed inputs, as broken image links are -------------


def test_video_links_that_loop_or_dangle_are_listed_as_failed(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    _video(folder / "good.mp4")
    (folder / "loop.mp4").symlink_to("loop.mp4")
    (folder / "dang.mkv").symlink_to("nowhere.mkv")
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", folder, "-o", out)
    text = res.output  # type: ignore[attr-defined]
    assert res.exit_code == 3, text  # type: ignore[attr-defined]
    assert "symbolic link loop" in text and "nowhere.mkv, which does not exist" in text, text
    csv = (out / "failures.csv").read_text(encoding="utf-8")
    assert "loop.mp4" in csv and "dang.mkv" in csv
    assert len(decoded_frames(out / "good.mp4")) == 3


# --- errors writing a frames folder name the folder ---------------------------------------


def test_a_full_disk_under_frames_out_names_the_frames_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    clip = _video(tmp_path / "a.mp4")
    frames = tmp_path / "frames"

    real = Path.write_bytes

    def full(self: Path, data: bytes) -> int:  # the disk fills at the first frame
        if self.name == "000001.png":
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(self, data)

    monkeypatch.setattr(Path, "write_bytes", full)
    res = _run("restore", "-m", "identity", clip, "-o", tmp_path / "out", "--frames-out", frames)
    text = res.output  # type: ignore[attr-defined]
    assert res.exit_code == 3, text  # type: ignore[attr-defined]
    failed = [ln for ln in text.splitlines() if ln.startswith("failed:")]
    assert len(failed) == 1 and str(frames) in failed[0] and "No space left" in failed[0], text
    assert ".clearsight-" not in text
    assert not frames.exists()


# --- an encoder that takes no yuv420p gets a pixel format it takes --------------------------


def test_codec_png_writes_a_video(tmp_path: Path) -> None:
    clip = _video(tmp_path / "a.mp4")
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", clip, "-o", out, "--codec", "png")
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert len(decoded_frames(out / "a.mp4")) == 3


def test_a_pipe_given_with_a_video_name_is_a_failed_input_as_for_an_image(tmp_path: Path) -> None:
    """It was read as an image ('not an image file', exit 1); now as a video that is not a
    regular file, never opened (a pipe would block)."""
    pipe = tmp_path / "q.mp4"
    os.mkfifo(pipe)
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", pipe, "-o", out)
    text = res.output  # type: ignore[attr-defined]
    assert res.exit_code == 3, text  # type: ignore[attr-defined]
    assert f"failed: {pipe}: not a regular file" in text, text
    assert "q.mp4" in (out / "failures.csv").read_text(encoding="utf-8")


def test_a_frames_folder_named_like_a_video_is_read_with_fps(tmp_path: Path) -> None:
    """A folder is never taken for a pipe: `clip.mp4/` of numbered frames with --fps is
    one video, OUT/clip.mp4.mp4 (the suffix is added, not swapped)."""
    folder = tmp_path / "clip.mp4"
    for i in range(1, 4):
        _image(folder / f"{i:05d}.png")
    out = tmp_path / "out"
    res = _run("restore", "-m", "identity", folder, "--fps", "5", "-o", out)
    assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert len(decoded_frames(out / "clip.mp4.mp4")) == 3


def test_a_bad_pixel_limit_in_the_environment_stops_detect_on_videos_before_any_work(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It failed each video (exit 3, failures.csv) where images stop at once."""
    clip = _video(tmp_path / "in" / "a.mp4")
    out = tmp_path / "out"
    monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", "abc")
    res = _run("detect", clip, "-o", out)
    _one_error(res, "CLEARSIGHT_MAX_PIXELS")
    assert not out.exists()


@pytest.mark.parametrize(
    ("command", "name"),
    [("restore", "failures.csv"), ("detect", "detections.json"), ("detect", "failures.csv")],
)
def test_an_input_folder_named_like_a_file_the_run_writes_is_refused_before_any_work(
    tmp_path: Path, command: str, name: str
) -> None:
    """A subfolder `detections.json/` made detect run every image and then stop at
    `OUT/detections.json is a folder`; the plan now knows the run's own files."""
    folder = tmp_path / "in"
    _image(folder / name / "a.png")
    out = tmp_path / "out"
    model = ("-m", "identity") if command == "restore" else ()
    res = _run(command, *model, folder, "-o", out)
    _one_error(res, str(out / name), "rename the input")
    assert not out.exists()


@pytest.mark.parametrize("kind", ["rain", "moire"])
def test_synth_video_never_replaces_its_input_frames_folder(tmp_path: Path, kind: str) -> None:
    """A clean/ folder written by an earlier synth run, read back with -o its parent, was
    replaced by the frames read from it: with --max-frames 1, three of four were lost."""
    out = tmp_path / "set"
    clean = out / "clean"
    clean.mkdir(parents=True)
    (clean / ".clearsight-frames").write_text("numbered frames written by clearsight\n")
    for i in range(1, 5):
        write_image(clean / f"{i:06d}.png", frame_image(i, 16, 16))
    before = {p.name: p.read_bytes() for p in clean.iterdir()}
    res = _run("synth", kind, "--video", "--clean", clean, "--fps", "5", "-o", out,
               "--max-frames", "1")  # fmt: skip
    _one_error(res, str(clean), "replaced whole")
    assert {p.name: p.read_bytes() for p in clean.iterdir()} == before


def _clip_folder(root: Path) -> Path:
    """rain/ and clean/, three numbered frames each."""
    for side in ("rain", "clean"):
        (root / side).mkdir(parents=True)
        for i in range(1, 4):
            write_image(root / side / f"{i:05d}.png", frame_image(i, 16, 16))
    return root


def test_eval_video_save_images_never_replaces_the_data_folder(tmp_path: Path) -> None:
    """A clip folder named `restored`, scored with -o its parent and --save-images, was
    replaced whole by the restored frames: rain/ and clean/ were deleted."""
    data = _clip_folder(tmp_path / "restored")
    res = _run("eval", "--video", "-m", "identity", "-d", data, "-o", tmp_path, "--save-images")
    _one_error(res, "replaced whole")
    assert len(list((data / "rain").iterdir())) == 3 and len(list((data / "clean").iterdir())) == 3


def test_eval_video_save_images_keeps_a_restored_folder_it_did_not_write(tmp_path: Path) -> None:
    data = _clip_folder(tmp_path / "clip")
    out = tmp_path / "scores"
    (out / "restored").mkdir(parents=True)
    (out / "restored" / "notes.txt").write_text("mine")
    res = _run("eval", "--video", "-m", "identity", "-d", data, "-o", out, "--save-images")
    _one_error(res, "notes.txt", "not written by clearsight")
    assert (out / "restored" / "notes.txt").read_text() == "mine"
    (out / "restored" / "notes.txt").unlink()
    for _ in range(2):  # its own folder is replaced by a rerun
        res = _run("eval", "--video", "-m", "identity", "-d", data, "-o", out, "--save-images")
        assert res.exit_code == 0, res.output  # type: ignore[attr-defined]
    assert len(list((out / "restored").glob("*.png"))) == 3


# --- a folder replaced whole on save is never a folder of the user's -----------------------


@pytest.mark.parametrize(
    "args",
    [
        ("compress", "input-size", "default-detect", "--size", "160"),
        ("export", "default-detect", "--format", "paddle", "--layout", "astar"),
    ],
)
def test_a_save_never_replaces_a_folder_of_the_users_files(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`compress input-size -o DIR` replaced a DIR holding the user's files with the
    artifact (the folder is replaced whole)."""
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "thesis.txt").write_text("precious")
    res = _run(*args, "-o", folder)
    _one_error(res, str(folder), "thesis.txt")
    assert sorted(p.name for p in folder.iterdir()) == ["thesis.txt"]


def test_save_artifact_replaces_an_artifact_but_not_another_folder(tmp_path: Path) -> None:
    from clearsight.artifact import save_artifact
    from clearsight.out_paths import OutputPathError
    from clearsight.zoo import resolve_model

    model = resolve_model("identity")
    art = tmp_path / "art"
    for _ in range(2):  # an artifact folder is replaced by the next save
        save_artifact(model.model, art, model.config)
    assert (art / "config.json").is_file()
    other = tmp_path / "other"
    other.mkdir()
    (other / "a.png").write_bytes(b"x")
    with pytest.raises(OutputPathError, match="a.png"):
        save_artifact(model.model, other, model.config)
    assert [p.name for p in other.iterdir()] == ["a.png"]


@pytest.mark.parametrize(
    "args",
    [
        ("export", "{m}", "--format", "onnx"),
        ("compress", "quantize", "{m}"),
        ("compress", "input-size", "{m}", "--size", "64"),
        ("compress", "prune", "{m}", "--ratio", "0.5"),
    ],
)
def test_an_output_onto_the_model_it_is_made_from_is_refused(
    tmp_path: Path, args: tuple[str, ...]
) -> None:
    """`export MODEL -o MODEL` replaced the model with its ONNX export, exit 0."""
    from clearsight.artifact import save_artifact
    from clearsight.zoo import resolve_model

    model = tmp_path / "m.safetensors"
    loaded = resolve_model("default-detect" if "input-size" in args else "default-derain")
    save_artifact(loaded.model, model, loaded.config)
    before = model.read_bytes()
    res = _run(*(a.format(m=model) for a in args), "-o", model)
    _one_error(res, "is the input")
    assert model.read_bytes() == before
