"""The command line: models, restore, eval, derain, and one-line errors."""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.io import read_image
from tests.helpers import random_image

runner = CliRunner()


def _pairs(root: Path, names=("a", "b", "c"), size=(40, 56), layout=("rain", "clean")) -> Path:
    for i, n in enumerate(names):
        clean = random_image(*size, seed=i)
        noise = np.random.default_rng(100 + i).integers(-20, 21, size=clean.shape)
        rain = np.clip(clean.astype(int) + noise, 0, 255).astype(np.uint8)
        for folder, img in zip(layout, (rain, clean), strict=True):
            (root / folder).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(root / folder / f"{n}.png")
    return root


def _psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float(10 * np.log10(255.0**2 / mse))


def test_models_lists_architectures_with_parameter_counts():
    res = runner.invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows["rescan"]["params"] == 149_823
    assert rows["rescan-lstm"]["params"] == 197_367
    assert rows["rescan-rnn"]["params"] == 54_735
    assert rows["identity"]["params"] == 0
    table = runner.invoke(app, ["models"])
    assert table.exit_code == 0 and "149,823" in table.output


@pytest.mark.parametrize("layout", [("rain", "clean"), ("moire", "clean"), ("input", "target")])
def test_eval_identity_writes_csv_and_summary(tmp_path, layout):
    data = _pairs(tmp_path / "data", layout=layout)
    out = tmp_path / "out"
    res = runner.invoke(
        app,
        ["eval", "--model", "identity", "--data", str(data), "--preset", "rgb", "--out", str(out)],
    )
    assert res.exit_code == 0, res.output
    rows = list(csv.DictReader((out / "per_image.csv").open()))
    assert [r["name"] for r in rows] == ["a", "b", "c"]
    assert set(rows[0]) == {"name", "psnr", "ssim", "latency_ms"}
    expected = [
        _psnr(
            np.asarray(Image.open(data / layout[0] / f"{n}.png")),
            np.asarray(Image.open(data / layout[1] / f"{n}.png")),
        )
        for n in "abc"
    ]
    for r, e in zip(rows, expected, strict=True):
        assert abs(float(r["psnr"]) - e) < 1e-5
    summary = json.loads((out / "summary.json").read_text())
    assert summary["preset"] == "rgb" and summary["n"] == 3
    assert abs(summary["psnr"]["mean"] - np.mean(expected)) < 1e-6
    assert abs(summary["psnr"]["median"] - np.median(expected)) < 1e-6
    assert abs(summary["psnr"]["min"] - min(expected)) < 1e-6
    assert 0 < summary["ssim"]["mean"] < 1
    assert summary["worst"][0] == "abc"[int(np.argmin(expected))]


def test_restore_mirrors_names_and_keeps_size(tmp_path):
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    Image.fromarray(random_image(33, 47)).save(src / "x.png")
    Image.fromarray(random_image(20, 21, seed=3)).save(src / "sub" / "y.jpg")
    single = tmp_path / "single.png"
    Image.fromarray(random_image(15, 16, seed=4)).save(single)
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["restore", "--model", "identity", str(src), str(single), "-o", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert read_image(out / "x.png").shape == (33, 47, 3)
    assert (read_image(out / "x.png") == read_image(src / "x.png")).all()
    assert read_image(out / "sub" / "y.jpg").shape == (20, 21, 3)
    assert (read_image(out / "single.png") == read_image(single)).all()


def test_restore_with_untrained_architecture_warns_and_keeps_size(tmp_path):
    img = tmp_path / "odd.png"
    Image.fromarray(random_image(31, 45)).save(img)
    res = runner.invoke(
        app, ["restore", "--model", "rescan", str(img), "-o", str(tmp_path / "o"), "--tile", "16"]
    )
    assert res.exit_code == 0, res.output
    assert "random" in res.output  # the untrained-weights warning
    assert read_image(tmp_path / "o" / "odd.png").shape == (31, 45, 3)


def _error(res) -> str:
    assert res.exit_code != 0
    assert "Traceback" not in res.output
    lines = [ln for ln in res.output.strip().splitlines() if ln.strip()]
    assert lines and lines[-1].startswith("error:") or any(ln.startswith("error:") for ln in lines)
    return res.output


def test_unknown_model_and_preset_list_the_known_ones(tmp_path):
    data = _pairs(tmp_path / "d")
    out = _error(runner.invoke(app, ["eval", "--model", "nope", "--data", str(data)]))
    assert "rescan" in out and "identity" in out
    out = _error(
        runner.invoke(app, ["eval", "--model", "identity", "--data", str(data), "--preset", "psnr"])
    )
    assert "y-matlab" in out and "rgb" in out


def test_unmatched_pairs_are_listed(tmp_path):
    data = _pairs(tmp_path / "d")
    Image.fromarray(random_image(40, 56)).save(data / "rain" / "orphan.png")
    out = _error(runner.invoke(app, ["eval", "--model", "identity", "--data", str(data)]))
    assert "orphan" in out


def test_size_mismatch_names_both_files(tmp_path):
    data = _pairs(tmp_path / "d")
    Image.fromarray(random_image(41, 56)).save(data / "clean" / "b.png")
    out = _error(runner.invoke(app, ["eval", "--model", "identity", "--data", str(data)]))
    assert str(data / "rain" / "b.png") in out.replace("\n", "") and str(
        data / "clean" / "b.png"
    ) in out.replace("\n", "")


def test_corrupt_and_missing_images_are_named(tmp_path):
    data = _pairs(tmp_path / "d")
    (data / "rain" / "c.png").write_bytes(b"definitely not a png")
    out = _error(runner.invoke(app, ["eval", "--model", "identity", "--data", str(data)]))
    assert "c.png" in out
    out = _error(
        runner.invoke(
            app,
            [
                "restore",
                "--model",
                "identity",
                str(tmp_path / "ghost.png"),
                "-o",
                str(tmp_path / "o"),
            ],
        )
    )
    assert "ghost.png" in out


def test_missing_data_folder_is_a_clear_error(tmp_path):
    out = _error(
        runner.invoke(app, ["eval", "--model", "identity", "--data", str(tmp_path / "none")])
    )
    assert "none" in out


@pytest.mark.parametrize(
    ("command", "model"), [("derain", "default-derain"), ("demoire", "default-demoire")]
)
def test_missing_bundled_model_exits_nonzero_with_a_message(tmp_path, monkeypatch, command, model):
    from clearsight import zoo

    monkeypatch.setattr(zoo, "BUNDLED_DIR", tmp_path / "no-models")
    img = tmp_path / "x.png"
    Image.fromarray(random_image(8, 8)).save(img)
    out = _error(runner.invoke(app, [command, str(img)]))
    assert model in out and "missing" in out


def test_debug_flag_shows_the_traceback(tmp_path):
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "clearsight",
            "--debug",
            "eval",
            "--model",
            "nope",
            "--data",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
    )
    assert res.returncode != 0 and "Traceback" in res.stderr and "UnknownNameError" in res.stderr
    res = subprocess.run(
        [sys.executable, "-m", "clearsight", "eval", "--model", "nope", "--data", str(tmp_path)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 1 and "Traceback" not in res.stderr
    assert res.stderr.strip().startswith("error:") and len(res.stderr.strip().splitlines()) == 1


def test_restoration_commands_never_import_torchvision(tmp_path):
    """torchvision.ops imports torch._dynamo, seconds at every start (benchmarks/cli_startup.py):
    only detection may pay for it, so a restoration command in a fresh interpreter must not,
    nor the trainer's modules (detection training imports its part on first use)."""
    Image.fromarray(random_image(24, 20)).save(tmp_path / "x.png")
    code = (
        "import sys\n"
        "from clearsight.cli import main\n"
        f"sys.argv = ['clearsight', 'restore', '-m', 'default-derain', {str(tmp_path / 'x.png')!r},"
        f" '-o', {str(tmp_path / 'out')!r}]\n"
        "try:\n    main()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
        "import clearsight.engine.trainer, clearsight.cli.train\n"
        "print(sorted(m for m in sys.modules if m.startswith(('torchvision', 'torch._dynamo'))))\n"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == "[]"
    assert read_image(tmp_path / "out" / "x.png").shape == (24, 20, 3)
