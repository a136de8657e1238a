"""RESCAN's adaptive stages: `stages="auto"` (stop once a stage changes the image by less than a
threshold), fixed `stages=N`, the stages used per image, through the model, the `Restorer`
and the CLI (`--stages`, `--stage-threshold`).

Tiny randomly initialised models (8 channels) on tiny images.
"""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from clearsight import cli
from clearsight.cli import app
from clearsight.engine.inference import (
    InferenceOptions,
    Restorer,
    StageOptionError,
    check_stage_threshold,
    parse_stages,
)
from clearsight.errors import ClearsightError
from clearsight.models.rescan import DEFAULT_STAGE_THRESHOLD, RESCAN
from tests.helpers import TinyConvNet, loaded, random_image
from tests.test_rescan import _lively

runner = CliRunner()
HUGE = 1e9


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny tensors run faster on one thread (and a shared CPU stalls multi-threaded ones)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _model(unit: str = "GRU", mode: str = "full", stages: int = 4) -> RESCAN:
    return _lively(RESCAN(unit=unit, mode=mode, channels=8, stages=stages))


def _image(*shape: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(*shape, generator=torch.Generator().manual_seed(seed))


def _changes(model: RESCAN, x: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every stage's rain layer, and [stages-1, B]: the mean |restored_s - restored_(s-1)|."""
    with torch.no_grad():
        outs = model(x)
    changes = [
        ((x - b) - (x - a)).abs().mean(dim=(1, 2, 3))
        for a, b in zip(outs[:-1], outs[1:], strict=True)
    ]
    return outs, torch.stack(changes)


def _expected_used(changes: torch.Tensor, threshold: float, stages: int) -> list[int]:
    """First stage s >= 2 (before the last) whose change is below the threshold, else all."""
    used = []
    for i in range(changes.shape[1]):
        n = stages
        for s in range(2, stages):  # stage s's change is changes[s - 2]
            if changes[s - 2, i].item() < threshold:
                n = s
                break
        used.append(n)
    return used


# -- the model ------------------------------------------------------------------------------


def test_auto_with_a_huge_threshold_stops_after_two_stages() -> None:
    model = _model()
    x = _image(2, 3, 20, 24)
    outs, _ = _changes(model, x)
    y = model.restore(x, "auto", threshold=HUGE)
    assert model.last_stages_used == [2, 2]
    torch.testing.assert_close(y, x - outs[1], atol=1e-6, rtol=0)


@pytest.mark.parametrize(("unit", "mode"), [("GRU", "full"), ("LSTM", "add"), ("RNN", "full")])
def test_auto_with_threshold_zero_is_exactly_the_default(unit: str, mode: str) -> None:
    model = _model(unit, mode)
    x = _image(2, 3, 18, 22)
    ref = model.restore(x)
    assert model.last_stages_used == [4, 4]
    assert torch.equal(model.restore(x, "auto", threshold=0.0), ref)
    assert model.last_stages_used == [4, 4]
    assert torch.equal(model.restore(x, "all"), ref)
    assert torch.equal(model.restore(x, 4), ref)


def test_fixed_stages_equal_that_stage_of_the_full_run() -> None:
    model = _model()
    x = _image(2, 3, 20, 24)
    outs, _ = _changes(model, x)
    for n in (1, 2, 3, 4):
        y = model.restore(x, n)
        assert model.last_stages_used == [n, n]
        torch.testing.assert_close(y, x - outs[n - 1], atol=1e-6, rtol=0)
        yt = model.restore_tiled(x, tile=8, stages=n)
        assert model.last_stages_used == [n, n]
        torch.testing.assert_close(yt, y, atol=1e-5, rtol=0)


def test_auto_stops_each_image_of_a_batch_on_its_own() -> None:
    model = _model("RNN")
    # a noisy image and a smooth one change by different amounts from stage to stage
    smooth = torch.linspace(0, 1, 24).expand(1, 3, 20, 24).clone()
    x = torch.cat([_image(1, 3, 20, 24), smooth])
    outs, changes = _changes(model, x)
    lo, hi = sorted(changes[0].tolist())
    assert hi - lo > 1e-5, "the two images should change differently (far beyond rounding)"
    threshold = (lo + hi) / 2  # exactly one image is below it after stage 2
    expected = _expected_used(changes, threshold, model.stages)
    assert sorted(expected)[0] == 2 and sorted(expected)[1] > 2
    y = model.restore(x, "auto", threshold=threshold)
    assert model.last_stages_used == expected
    for i, n in enumerate(expected):
        torch.testing.assert_close(y[i], x[i] - outs[n - 1][i], atol=1e-6, rtol=0)
        alone = model.restore(x[i : i + 1], "auto", threshold=threshold)  # not batch-dependent
        assert model.last_stages_used == [n]
        torch.testing.assert_close(alone[0], y[i], atol=1e-6, rtol=0)
    # the exact tiled path stops the same way, measuring the change over the whole image
    calls: list[tuple[int, int]] = []
    yt = model.restore_tiled(
        x, tile=8, stages="auto", threshold=threshold, progress=lambda d, t: calls.append((d, t))
    )
    assert model.last_stages_used == expected
    torch.testing.assert_close(yt, y, atol=1e-5, rtol=0)
    assert calls[-1][0] == calls[-1][1]  # skipped stages count as done
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)


def test_a_one_stage_model_runs_its_one_stage_under_auto() -> None:
    model = _model(stages=1)
    x = _image(1, 3, 12, 12)
    assert torch.equal(model.restore(x, "auto", threshold=HUGE), model.restore(x))
    assert model.last_stages_used == [1]


def test_model_rejects_bad_stages_and_thresholds() -> None:
    model = _model(stages=3)
    x = _image(1, 3, 8, 8)
    for bad in (0, 4, -1, "banana", "", True, 2.0):
        with pytest.raises(ValueError, match="stages"):
            model.restore(x, bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="stages"):
            model.restore_tiled(x, tile=8, stages=bad)  # type: ignore[arg-type]
    for bad_t in (-1e-3, float("nan"), "0.1"):
        with pytest.raises(ValueError, match="threshold"):
            model.restore(x, "auto", threshold=bad_t)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="threshold"):
            model.restore_tiled(x, stages="auto", threshold=bad_t)  # type: ignore[arg-type]


# -- the Restorer ---------------------------------------------------------------------------


def _restorer(model: torch.nn.Module, **kw: object) -> Restorer:
    return Restorer(loaded(model), InferenceOptions(**kw))  # type: ignore[arg-type]


def test_restorer_applies_stages_and_reports_them() -> None:
    model = _model()
    rgb = _image(2, 3, 20, 24)
    outs, _ = _changes(model, rgb)  # the spec is the identity: model input = rgb
    default = _restorer(model).restore(rgb)
    plain = _restorer(model, stages="all")
    assert torch.equal(plain.restore(rgb), default)
    assert plain.last_stages_used == [4, 4]
    zero = _restorer(model, stages="auto", stage_threshold=0.0)
    assert torch.equal(zero.restore(rgb), default)
    assert zero.last_stages_used == [4, 4]
    auto = _restorer(model, stages="auto", stage_threshold=HUGE)
    torch.testing.assert_close(auto.restore(rgb), (rgb - outs[1]).clamp(0, 1), atol=1e-6, rtol=0)
    assert auto.last_stages_used == [2, 2]
    three = _restorer(model, stages=3)
    torch.testing.assert_close(three.restore(rgb), (rgb - outs[2]).clamp(0, 1), atol=1e-6, rtol=0)
    assert three.last_stages_used == [3, 3]
    # the model's own exact tiled path takes the options too
    tiled = _restorer(model, stages="auto", stage_threshold=HUGE, tile=8)
    torch.testing.assert_close(tiled.restore(rgb), auto.restore(rgb), atol=1e-5, rtol=0)
    assert tiled.last_stages_used == [2, 2]
    # ensemble views each report theirs; the Restorer gives the mean per image
    flip = _restorer(model, stages=2, ensemble="flip")
    flip.restore(rgb)
    assert flip.last_stages_used == [2, 2]
    assert _restorer(TinyConvNet()).last_stages_used is None


def test_restorer_gives_clear_errors_for_bad_stage_options() -> None:
    model = _model()
    with pytest.raises(ClearsightError, match=r"stages: 5 is more than the 4 stage"):
        _restorer(model, stages=5)
    for bad in (0, -2, "banana", "", True):
        with pytest.raises(StageOptionError, match="stages") as info:
            _restorer(model, stages=bad)
        assert info.value.option == "stages"
    for bad_t in (-0.5, float("nan")):
        with pytest.raises(StageOptionError, match="stage_threshold") as info:
            _restorer(model, stages="auto", stage_threshold=bad_t)
        assert info.value.option == "stage_threshold"
    # a model without stages: only "all" (the default) is accepted
    _restorer(TinyConvNet(), stages="all")
    for stages in ("auto", 2):
        with pytest.raises(ClearsightError, match="has no stages"):
            _restorer(TinyConvNet(), stages=stages)


def test_parse_stages_and_threshold() -> None:
    assert parse_stages("all") == "all"
    assert parse_stages(" AUTO ") == "auto"
    assert parse_stages("3") == 3 and parse_stages(2) == 2
    for bad in ("0", "-1", "two", "2.5", "", 0, False):
        with pytest.raises(StageOptionError):
            parse_stages(bad)  # type: ignore[arg-type]
    assert check_stage_threshold(0) == 0.0 and check_stage_threshold(float("inf")) > 0
    for bad_t in (-1.0, float("nan"), None):
        with pytest.raises(StageOptionError):
            check_stage_threshold(bad_t)  # type: ignore[arg-type]
    assert cli.DEFAULT_STAGE_THRESHOLD == DEFAULT_STAGE_THRESHOLD
    assert InferenceOptions().stages == "all"
    assert InferenceOptions().stage_threshold == DEFAULT_STAGE_THRESHOLD


# -- the CLI --------------------------------------------------------------------------------


def _flat(text: str) -> str:
    return " ".join(text.split())  # rich wraps long lines


def _restore(tmp_path, *args: str, model: str = "rescan-conv"):
    img = tmp_path / "a.png"
    if not img.exists():
        Image.fromarray(random_image(16, 20)).save(img)
    return runner.invoke(
        app, ["restore", "--model", model, str(img), "-o", str(tmp_path / "o"), *args]
    )


def test_cli_restore_reports_the_stages_used(tmp_path) -> None:
    res = _restore(tmp_path, "--stages", "auto", "--stage-threshold", "1e9")
    assert res.exit_code == 0, res.output
    assert "2 stages" in _flat(res.output)
    res = _restore(tmp_path, "--stages", "3")
    assert res.exit_code == 0, res.output
    assert "3 stages" in _flat(res.output)
    res = _restore(tmp_path)  # all: as before, no stage note
    assert res.exit_code == 0, res.output
    assert "stage" not in res.output


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--stages", "0"], "--stages"),
        (["--stages", "banana"], "--stages"),
        (["--stages", "5"], "--stages: 5 is more than the 4 stage"),
        (["--stages", "auto", "--stage-threshold=-1"], "--stage-threshold"),
        (["--stage-threshold=nan"], "--stage-threshold"),
    ],
)
def test_cli_bad_stage_options_are_one_line_errors(tmp_path, args, needle) -> None:
    res = _restore(tmp_path, *args)
    assert res.exit_code == 1, res.output
    assert "Traceback" not in res.output
    assert needle in _flat(res.output)
    assert "error:" in res.output


def test_cli_stages_on_a_model_without_stages(tmp_path) -> None:
    res = _restore(tmp_path, "--stages", "auto", model="identity")
    assert res.exit_code == 1 and "--stages" in res.output and "has no stages" in _flat(res.output)


def test_cli_stages_need_the_torch_backend(tmp_path) -> None:
    res = _restore(tmp_path, "--stages", "2", "--backend", "onnxruntime")
    assert res.exit_code == 1 and "--backend torch" in _flat(res.output)


def test_cli_eval_prints_the_mean_stages_used(tmp_path) -> None:
    for folder in ("rain", "clean"):
        (tmp_path / "d" / folder).mkdir(parents=True)
    for i in range(2):
        Image.fromarray(random_image(12, 16, seed=i)).save(tmp_path / "d" / "rain" / f"{i}.png")
        Image.fromarray(random_image(12, 16, seed=9)).save(tmp_path / "d" / "clean" / f"{i}.png")
    base = ["eval", "--model", "rescan-conv", "--data", str(tmp_path / "d"), "--preset", "rgb"]
    out = tmp_path / "e"
    res = runner.invoke(
        app, [*base, "--stages", "auto", "--stage-threshold", "1e9", "--out", str(out)]
    )
    assert res.exit_code == 0, res.output
    flat = _flat(res.output)
    assert "stages (auto, 1e+09) used" in flat and "2.00" in flat
    # and the files record them: a stages column per image, their statistics in the summary
    rows = (out / "per_image.csv").read_text().splitlines()
    assert rows[0].endswith(",stages") and all(r.endswith(",2") for r in rows[1:])
    assert json.loads((out / "summary.json").read_text())["stages"]["mean"] == 2.0
    res = runner.invoke(app, [*base, "--out", str(tmp_path / "all")])
    assert "stages" not in (tmp_path / "all" / "per_image.csv").read_text()
    res = runner.invoke(app, [*base, "--stages", "banana"])
    assert res.exit_code == 1 and "--stages" in res.output


def test_cli_derain_takes_the_options(tmp_path) -> None:
    res = runner.invoke(app, ["derain", "--help"])
    assert res.exit_code == 0 and "--stages" in res.output and "--stage-threshold" in res.output
    img = tmp_path / "x.png"
    Image.fromarray(random_image(16, 16)).save(img)
    res = runner.invoke(app, ["derain", str(img), "-o", str(tmp_path / "o"), "--stages", "2"])
    assert res.exit_code == 0, res.output
    assert "2 stages" in _flat(res.output)
    res = runner.invoke(app, ["derain", str(img), "-o", str(tmp_path / "o9"), "--stages", "9"])
    assert res.exit_code == 1 and "--stages" in res.output
