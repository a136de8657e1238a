"""Second hardening round, what the CLI prints and how folder runs end (docs/reliability.md,
"What is printed"): file names and error texts print as themselves (no Rich markup), every
folder run prints a failure on one line naming the file once, bad --max-pixels stops before
any work, an unwritable failures.csv is named and the summary kept, symlink loops and
non-finite outputs are failures, `models` fits 80 columns, backend auto speaks on request."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import clearsight
from clearsight.artifact import make_config, save_artifact
from clearsight.atomic import temp_path_for
from clearsight.cli import app
from clearsight.io import write_image
from clearsight.models.registry import build_model
from tests.helpers import random_image, tiny_ssd

runner = CliRunner()
SRC = str(Path(clearsight.__file__).parents[1])
EXIT_SOME_FAILED = 3
BRACKETED = ("[draft] zero.png", "[red]ok.png", ":smile: x.png")
BAD = "[bold]bad.png"


def _png(path: Path, seed: int = 0, h: int = 8, w: int = 8) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    write_image(path, random_image(h, w, seed=seed))
    return path


def _bracket_folder(root: Path) -> Path:
    for i, name in enumerate(BRACKETED):
        _png(root / name, seed=i)
    (root / BAD).write_bytes(b"not an image")
    return root


def _lines(text: str, start: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(start)]


@pytest.fixture(scope="module")
def detector_path(tmp_path_factory) -> str:
    """A 128x128 SSD saved as an artifact: detect's plumbing at a fraction of YOLOX's cost."""
    tiny = tiny_ssd()
    path = tmp_path_factory.mktemp("det") / "tiny-ssd"
    return str(save_artifact(tiny.model, path, tiny.config))


# -- 1: names and messages print as themselves ---------------------------------------------


def test_restore_prints_bracketed_names_as_they_are(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _bracket_folder(Path("brk"))
    res = runner.invoke(app, ["restore", "--model", "identity", "brk", "-o", "out"])
    assert res.exit_code == EXIT_SOME_FAILED, res.output
    for name in BRACKETED:
        assert len(_lines(res.output, f"brk/{name} -> out/{name}  (")) == 1, res.output
        assert (Path("out") / name).is_file()
    (failed,) = _lines(res.output, "failed: ")
    assert failed.startswith(f"failed: brk/{BAD}: ")
    assert "\x1b[" not in res.output  # no colour from a name like [red]


def test_detect_prints_bracketed_names_as_they_are(tmp_path, monkeypatch, detector_path):
    monkeypatch.chdir(tmp_path)
    _bracket_folder(Path("brk"))
    res = runner.invoke(app, ["detect", "brk", "-o", "out", "--model", detector_path])
    assert res.exit_code == EXIT_SOME_FAILED, res.output
    for name in BRACKETED:
        assert len(_lines(res.output, f"brk/{name}: ")) == 1, res.output
    (failed,) = _lines(res.output, "failed: ")
    assert failed.startswith(f"failed: brk/{BAD}: ") and failed.count(BAD) == 1


def test_missing_bracketed_input_is_named_exactly(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    res = runner.invoke(app, ["restore", "--model", "identity", "brk/[missing].png"])
    assert res.exit_code == 1
    assert res.output.strip().endswith("input not found: brk/[missing].png"), res.output


def test_error_messages_keep_their_brackets(tmp_path):
    from tests.test_cli_detect import _tiny_coco

    data = tmp_path / "coco"
    _tiny_coco(data)
    ann = data / "annotations" / "instances_val2017.json"
    coco = json.loads(ann.read_text())
    coco["annotations"][0]["bbox"] = "abc"
    ann.write_text(json.dumps(coco))
    res = runner.invoke(app, ["eval", "--model", "default-detect", "--data", str(data)])
    assert res.exit_code == 1, res.output
    assert "bbox must be [x, y, width, height], finite, got 'abc'" in res.output, res.output


def test_progress_bar_shows_a_bracketed_name_as_it_is():
    from rich.console import Console

    from clearsight.progress import progress_bar

    console = Console(file=open(os.devnull, "w"), width=100, record=True)  # noqa: SIM115
    bar = progress_bar(console)
    bar.add_task("  [red]ok.png", total=3)
    console.print(bar.make_tasks_table(bar.tasks))
    assert "[red]ok.png" in console.export_text()


# -- 2: one printer for every folder run's failures -----------------------------------------


def test_every_folder_run_prints_a_failure_on_one_line_naming_the_file_once(
    tmp_path, monkeypatch, capsys, detector_path
):
    """restore, detect (local) and the Ray engines' printer: the same line, unwrapped."""
    from clearsight.cli.restore import run_on_ray
    from clearsight.engine.detector import Detector
    from clearsight.scale.detect_ray import DetectTask
    from clearsight.scale.inputs import WorkItem
    from clearsight.scale.ray_engine import RestoreTask, ScaleSummary

    monkeypatch.chdir(tmp_path)
    _png(Path("mix2/bomb.png"), h=12, w=12)
    monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", "100")  # 144 pixels: over the limit
    restored = runner.invoke(app, ["restore", "--model", "identity", "mix2", "-o", "r"])
    detected = runner.invoke(app, ["detect", "mix2", "-o", "d", "--model", detector_path])
    lines = []
    for res in (restored, detected):
        assert res.exit_code == EXIT_SOME_FAILED, res.output
        (line,) = [x for x in res.output.splitlines() if "bomb" in x]
        lines.append(line)
    assert lines[0] == lines[1], lines
    assert lines[0].startswith("failed: mix2/bomb.png: ") and lines[0].count("bomb.png") == 1
    assert "CLEARSIGHT_MAX_PIXELS" in lines[0]  # the whole reason on the one line
    assert len(lines[0]) > 80  # long enough that a wrapping printer would have wrapped it

    item = WorkItem("mix2/bomb.png", "x/bomb.png")
    detector = Detector.from_pretrained(detector_path)
    results = [
        RestoreTask("identity")._one(_identity_restorer(), item),
        DetectTask(detector_path, "x", {"mix2/bomb.png": 0}).run_batch(detector, [item])[0],
    ]
    for result in results:
        capsys.readouterr()

        def start(on_start, on_result, result=result):
            on_start(1, 0)
            on_result(result)
            return ScaleSummary([], [], [result], 1.0)

        run_on_ray("restoring", start)
        (ray_line,) = [x for x in capsys.readouterr().err.splitlines() if "bomb" in x]
        assert ray_line == lines[0]


def _identity_restorer():
    from clearsight.engine.inference import InferenceOptions, Restorer, load_for_options

    opts = InferenceOptions()
    return Restorer(load_for_options("identity", opts), opts)


# -- 3: --max-pixels and CLEARSIGHT_MAX_PIXELS are checked up front ----------------------


@pytest.mark.parametrize(
    ("flags", "env", "named"),
    [
        (["--max-pixels", "0"], None, "--max-pixels"),
        (["--max-pixels", "-1"], None, "--max-pixels"),
        ([], "abc", "CLEARSIGHT_MAX_PIXELS"),
    ],
)
@pytest.mark.parametrize("command", ["restore", "restore-ray", "eval"])
def test_bad_pixel_limit_stops_before_any_work(tmp_path, monkeypatch, flags, env, named, command):
    monkeypatch.chdir(tmp_path)
    _png(Path("in/rain/a.png"))
    _png(Path("in/clean/a.png"))
    if env is not None:
        monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", env)
    if command == "eval":
        args = ["eval", "--model", "identity", "--data", "in", "--out", "out"]
    else:
        args = ["restore", "--model", "identity", "in", "-o", "out"]
        args += ["--engine", "ray"] if command == "restore-ray" else []
    res = runner.invoke(app, args + flags)
    assert res.exit_code == 1, res.output
    assert not Path("out").exists()
    (line,) = res.output.strip().splitlines()
    assert line.startswith(f"error: {named}") and "positive whole number" in line, line


def test_bad_pixel_limit_in_the_environment_stops_detect_before_any_work(
    tmp_path, monkeypatch, detector_path
):
    monkeypatch.chdir(tmp_path)
    _png(Path("in/a.png"))
    monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", "abc")
    res = runner.invoke(app, ["detect", "in", "-o", "out", "--model", detector_path])
    assert res.exit_code == 1, res.output
    assert not Path("out").exists()
    (line,) = res.output.strip().splitlines()
    assert line.startswith("error: CLEARSIGHT_MAX_PIXELS must be a positive whole number"), line


# -- 13: an unwritable failures.csv is named, and the summary kept -----------------------


def test_unwritable_failures_csv_is_named_and_the_summary_kept(tmp_path, monkeypatch):
    """A read-only OUT as root cannot be made: the write of failures.csv fails as it would."""
    from clearsight.runtime import failures as rf

    def refuse(path, text):
        raise PermissionError(13, "Permission denied", str(temp_path_for(path)))

    monkeypatch.setattr(rf, "atomic_write_text", refuse)
    monkeypatch.chdir(tmp_path)
    _png(Path("in/a.png"))
    Path("in/b.png").write_bytes(b"junk")
    res = runner.invoke(app, ["restore", "--model", "identity", "in", "-o", "out"])
    assert res.exit_code == 1, res.output
    assert "1 done, 0 skipped, 1 failed" in res.output
    assert ".tmp" not in res.output and "clearsight-" not in res.output
    assert res.output.strip().splitlines()[-1] == (
        "error: cannot write out/failures.csv (permission denied); "
        "each failed input was reported as it failed"
    )


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_folder_names_failures_csv(tmp_path):
    _png(tmp_path / "in/a.png")
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o555)
    try:
        res = runner.invoke(app, ["restore", "--model", "identity", str(tmp_path / "in")] + [
            "-o", str(out)
        ])  # fmt: skip
    finally:
        out.chmod(0o755)
    assert res.exit_code == 1, res.output
    assert "0 done, 0 skipped, 1 failed" in res.output
    assert f"{out / 'failures.csv'}: permission denied" in res.output and ".tmp" not in res.output


def test_an_os_error_on_a_temporary_file_names_its_target():
    from clearsight.cli._app import exception_line

    for target in ("out/failures.csv", "out/detections.json", "out/a.png"):
        exc = PermissionError(13, "Permission denied", str(temp_path_for(target)))
        assert exception_line(exc) == f"{target}: permission denied"


# -- symlink loops and non-finite outputs are failures ------------------------------------


def test_a_symlink_loop_and_a_dangling_link_are_listed_in_failures_csv(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _png(Path("in/a.png"))
    os.symlink("x.png", "in/x.png")  # a loop
    os.symlink("gone.png", "in/y.png")  # points nowhere
    res = runner.invoke(app, ["restore", "--model", "identity", "in", "-o", "out"])
    assert res.exit_code == EXIT_SOME_FAILED, res.output
    with open("out/failures.csv") as fh:
        rows = {r["file"]: r["reason"] for r in csv.DictReader(fh)}
    assert set(rows) == {"in/x.png", "in/y.png"}, rows
    assert "loop" in rows["in/x.png"] and "gone.png" in rows["in/y.png"]
    assert len(_lines(res.output, "failed: in/x.png: ")) == 1, res.output
    assert "1 done, 0 skipped, 2 failed" in res.output


def _nan_artifact(path: Path) -> Path:
    kw = {"channels": 4, "stages": 1}
    model = build_model("rescan", **kw).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.fill_(float("nan"))
    return save_artifact(model, path, make_config(model, "rescan", kw, name="nan"))


def test_a_model_that_outputs_nan_fails_the_file(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    model = _nan_artifact(tmp_path / "nan-model")
    _png(Path("in/a.png"), h=16, w=16)
    res = runner.invoke(
        app, ["restore", "--model", str(model), "in", "-o", "out", "--backend", "torch"]
    )
    assert res.exit_code == EXIT_SOME_FAILED, res.output
    (line,) = _lines(res.output, "failed: ")
    assert line.startswith("failed: in/a.png: model produced NaN/inf"), line
    assert not Path("out/a.png").exists()


# -- what a newcomer sees: models, backend auto, --help -----------------------------------


def _check_80_columns(text: str) -> None:
    lines = text.splitlines()
    assert 13 <= len(lines) <= 50, text  # two lines a model
    assert max(len(line) for line in lines) <= 80, text
    assert "rescan-conv" in text and "149,823" in text


def test_models_reads_well_at_80_columns(monkeypatch):
    res = runner.invoke(app, ["models"], env={"COLUMNS": "80"})
    assert res.exit_code == 0, res.output
    _check_80_columns(res.output)
    # each description whole, on its own line under its row
    assert "RESCAN with stateless conv units (no recurrence across stages)" in res.output
    piped = subprocess.run(
        [sys.executable, "-m", "clearsight", "models"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": SRC, "COLUMNS": ""},
        check=True,
    )
    _check_80_columns(piped.stdout)
    # the console measures its width once; a wide terminal is set on it directly
    from clearsight.cli._app import console

    monkeypatch.setattr(console, "width", 200)
    wide = runner.invoke(app, ["models", "--wide"])
    assert wide.exit_code == 0 and len(wide.output.splitlines()) <= 25, wide.output


def test_backend_auto_speaks_only_with_verbose_in_one_honest_line(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _png(Path("a.png"), h=16, w=16)
    args = ["restore", "--model", "rescan", "a.png", "-o", "out"]
    quiet = runner.invoke(app, args)
    assert quiet.exit_code == 0, quiet.output
    assert "backend auto" not in quiet.output
    loud = runner.invoke(app, [*args, "--verbose"])
    (line,) = _lines(loud.output, "backend auto: ")
    assert "measured on AMD EPYC" in line and len(line) <= 120, line


def test_help_describes_the_whole_toolkit():
    res = runner.invoke(app, ["--help"])
    lines = res.output.splitlines()
    start = next(i for i, line in enumerate(lines) if "Usage:" in line) + 1
    end = next(i for i, line in enumerate(lines) if line.startswith("╭"))
    description = " ".join(lines[start:end]).lower()  # the text above the option boxes
    for word in ("restore", "derain", "demoire", "detect", "compress", "export", "serve"):
        assert word in description, (word, description)


# -- property: any file name prints as itself ---------------------------------------------

TOKENS = [*"ab[]()-_ :é日*!$'\"\\", "[red]", "[bold]", ":smile:", "[link=x]"]
NAME = (
    st.lists(st.sampled_from(TOKENS), min_size=1, max_size=6)
    .map("".join)
    .filter(lambda s: s.strip() == s)
)


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(stem=NAME)
def test_any_file_name_prints_as_itself(tmp_path_factory, detector_path, stem):
    root = tmp_path_factory.mktemp("names")
    cwd = os.getcwd()
    os.chdir(root)
    try:
        name = f"-{stem}.png"
        _png(Path("in") / "rain" / name, h=16, w=16)  # ssim needs 11x11
        _png(Path("in") / "clean" / name, seed=1, h=16, w=16)
        res = runner.invoke(app, ["restore", "--model", "identity", "in/rain", "-o", "out"])
        assert res.exit_code == 0, res.output
        assert _lines(res.output, f"in/rain/{name} -> out/{name}  ("), res.output
        det = runner.invoke(app, ["detect", "in/rain", "-o", "det", "--model", detector_path])
        assert det.exit_code == 0, det.output
        assert _lines(det.output, f"in/rain/{name}: "), det.output
        ev = runner.invoke(app, ["eval", "--model", "identity", "--data", "in", "--preset", "rgb"])
        assert ev.exit_code == 0, ev.output
        assert _lines(ev.output, f"n = 1; worst: {Path(name).stem}"), ev.output
    finally:
        os.chdir(cwd)
