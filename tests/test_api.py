"""The public API: `import clearsight` is fast and lazy, and the CLI's work is callable."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import clearsight
from clearsight.errors import ClearsightError, OptionError
from clearsight.zoo import UntrainedModelWarning
from tests.helpers import random_image


def test_import_is_lazy_and_does_not_import_torch() -> None:
    code = (
        "import sys, clearsight; "
        "print('torch' in sys.modules, 'clearsight.engine.inference' in sys.modules, "
        "'typer' in sys.modules)"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["False", "False", "False"]


def test_every_public_name_resolves_and_is_listed() -> None:
    assert clearsight.__all__ == ["__version__", *clearsight._EXPORTS]
    for name in clearsight.__all__:
        assert getattr(clearsight, name) is not None
        assert name in dir(clearsight)
    assert clearsight.Restorer.__module__ == "clearsight.engine.inference"
    with pytest.raises(AttributeError, match="no_such_name"):
        _ = clearsight.no_such_name  # type: ignore[attr-defined]


def test_load_model_takes_every_kind_of_reference(tmp_path: Path) -> None:
    with pytest.warns(UntrainedModelWarning, match="rescan-conv"):
        arch = clearsight.load_model("rescan-conv")
    assert arch.source == "architecture:rescan-conv"
    bundled = clearsight.load_model("default-derain")
    assert bundled.config.name == "default-derain" or "default-derain" in bundled.source
    folder = clearsight.save_artifact(arch.model, tmp_path / "art", arch.config)
    single = clearsight.save_artifact(arch.model, tmp_path / "one.safetensors", arch.config)
    for path in (folder, single):
        again = clearsight.load_model(path)
        for a, b in zip(
            arch.model.state_dict().values(), again.model.state_dict().values(), strict=True
        ):
            assert (a == b).all()
    onnx_path, parity = clearsight.export_onnx("identity", tmp_path / "id.onnx")
    assert parity.max_abs_diff < 1e-4
    assert type(clearsight.load_model(onnx_path).model).__name__ == "OrtModel"
    with pytest.raises(ClearsightError, match="unknown model 'nope'"):
        clearsight.load_model("nope")


def test_from_pretrained_restores_a_numpy_image() -> None:
    r = clearsight.Restorer.from_pretrained("default-derain", tile=16, stages="2")
    assert r.options.tile == 16 and r.options.stages == 2  # text parsed once, in the options
    img = random_image(24, 40)
    out = r.restore_image(img)
    assert out.shape == img.shape and out.dtype == np.uint8
    assert not (out == img).all()
    assert r.last_stages_used == [2]
    same = clearsight.Restorer.from_pretrained("identity").restore_image(img)
    assert (same == img).all()  # the conversions round-trip exactly
    deep = clearsight.Restorer.from_pretrained("identity").restore_image(img.astype(np.uint16))
    assert deep.dtype == np.uint16


@pytest.mark.parametrize(
    ("options", "option", "detail"),
    [
        ({"tile": -1}, "tile", "must be >= 0, got -1"),
        ({"blend": -3}, "blend", "must be >= 0"),
        ({"ensemble": "x4"}, "ensemble", "unknown ensemble 'x4'"),
        ({"scales": (0.0,)}, "scales", "outside"),
        ({"stages": "two"}, "stages", "expected all, auto"),
        ({"stage_threshold": -1.0}, "stage_threshold", "must be a number >= 0"),
        ({"backend": "tensorrt"}, "backend", "unknown backend 'tensorrt'"),
        ({"backend": "onnxruntime", "stages": 2}, "stages", "needs --backend torch"),
    ],
)
def test_bad_options_name_the_option(options: dict, option: str, detail: str) -> None:
    with pytest.raises(OptionError) as info:
        clearsight.InferenceOptions(**options)
    assert info.value.option == option and detail in info.value.detail
    assert str(info.value).startswith(f"{option}: ")
    with pytest.raises(OptionError):  # before any model is loaded
        clearsight.Restorer.from_pretrained("no-such-model", **options)


def test_the_cli_prints_option_errors_with_its_flag_names(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from clearsight.cli import app

    img = tmp_path / "a.png"
    clearsight.write_image(img, random_image(8, 8))
    for args, line in (
        (["--tile", "-1"], "--tile: must be >= 0, got -1"),
        (["--tta", "x4"], "--tta: unknown ensemble 'x4'"),
        (["--backend", "trt"], "--backend: unknown backend 'trt'"),
    ):
        res = CliRunner().invoke(app, ["restore", str(img), "-m", "identity", *args])
        assert res.exit_code == 1 and line in " ".join(res.output.split()), res.output


def test_restore_files_is_callable_from_python(tmp_path: Path) -> None:
    src = tmp_path / "in"
    (src / "sub").mkdir(parents=True)
    clearsight.write_image(src / "a.png", random_image(12, 16, seed=1))
    clearsight.write_image(src / "sub" / "b.png", random_image(10, 10, seed=2))
    with pytest.warns(UntrainedModelWarning):
        r = clearsight.Restorer.from_pretrained("rescan-conv", stages="auto")
    seen: list[object] = []
    done = clearsight.restore_files(
        r,
        [src],
        tmp_path / "out",
        on_start=lambda n: seen.append(n),
        on_file=lambda f: seen.append(f.output.name),
    )
    assert seen == [2, "a.png", "b.png"]
    assert [f.output for f in done] == [tmp_path / "out" / "a.png", tmp_path / "out/sub/b.png"]
    assert all(f.output.is_file() and f.latency_ms > 0 and f.stages for f in done)
    with pytest.raises(ClearsightError, match="would overwrite its input"):
        clearsight.restore_files(r, [src / "a.png"], src)


def test_evaluate_and_list_models(tmp_path: Path) -> None:
    for folder in ("rain", "clean"):
        (tmp_path / folder).mkdir()
    for i in range(2):
        clearsight.write_image(tmp_path / "rain" / f"{i}.png", random_image(12, 12, seed=i))
        clearsight.write_image(tmp_path / "clean" / f"{i}.png", random_image(12, 12, seed=i))
    counts: list[int] = []
    result = clearsight.evaluate("identity", tmp_path, preset="rgb", on_start=counts.append)
    assert counts == [2] and result.summary()["n"] == 2 and result.preset.name == "rgb"
    assert result.summary()["psnr"]["n_infinite"] == 2  # identity on identical pairs
    ident = clearsight.Restorer.from_pretrained("identity")
    cmp = clearsight.compare(ident, ident, tmp_path, preset="rgb", names=("x", "y"))
    assert (cmp.model_a, cmp.model_b, len(cmp.deltas)) == ("x", "y", 2)
    names = {row["name"]: row["kind"] for row in clearsight.list_models()}
    assert names["default-derain"] == "bundled" and names["rescan"] == "architecture"
