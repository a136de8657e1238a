"""An untrusted config cannot make loading allocate memory the weights do not justify."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import clearsight.artifact as art
import clearsight.models.registry as registry
from clearsight.artifact import CONFIG_FILE, load_artifact, make_config, save_artifact
from clearsight.errors import ArtifactError
from clearsight.models.registry import build_model, get_spec


def _tiny_rescan(path: Path) -> Path:
    model = build_model("rescan", channels=4, stages=2)  # the default depth: 7 units
    save_artifact(model, path, make_config(model, "rescan", {"channels": 4, "stages": 2}))
    return path


def _set_args(path: Path, **args: object) -> None:
    cfg = json.loads((path / CONFIG_FILE).read_text())
    cfg["arch_args"].update(args)
    (path / CONFIG_FILE).write_text(json.dumps(cfg))


_LOAD_AND_MEASURE = """
import sys
from clearsight.artifact import load_artifact
from clearsight.errors import ArtifactError
from clearsight.profile import peak_rss_mb
try:
    load_artifact(sys.argv[1])
    print("loaded")
except ArtifactError as exc:
    print(exc)
print(int(peak_rss_mb()))  # this process only, not the test process it started from
"""


def test_huge_channels_fail_fast_without_allocating(tmp_path: Path) -> None:
    path = _tiny_rescan(tmp_path / "m")
    _set_args(path, channels=1200)  # about 2 GB of float32 weights if it were built
    done = subprocess.run(
        [sys.executable, "-c", _LOAD_AND_MEASURE, str(path)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-500:]
    message, peak_mib = done.stdout.strip().splitlines()
    assert str(path / CONFIG_FILE) in message and "channels" in message and "1200" in message
    assert int(peak_mib) < 1024, f"peak RSS {peak_mib} MiB: the module was built"


def test_args_in_bounds_but_weights_too_small_fail_before_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _tiny_rescan(tmp_path / "m")
    _set_args(path, channels=200)  # inside the declared bounds, but the weights have 4
    real_builds: list[str] = []
    original = registry.build_model

    def spy(name: str, **kwargs: object) -> object:
        import torch

        if torch.empty(0).device.type != "meta":
            real_builds.append(name)
        return original(name, **kwargs)

    monkeypatch.setattr(art, "build_model", spy)
    with pytest.raises(ArtifactError) as err:
        load_artifact(path)
    message = str(err.value)
    assert "model.safetensors" in message and "decoder.0.weight" in message
    assert "[200, 200, 3, 3]" in message and "[4, 4, 3, 3]" in message
    assert real_builds == []


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        ({"depth": 10_000}, "depth"),
        ({"stages": 10_000}, "stages"),
        ({"channels": 0}, "channels"),
        ({"channels": "24"}, "channels"),
        ({"channels": True}, "channels"),
    ],
)
def test_out_of_bounds_args_name_the_file_and_bound(
    tmp_path: Path, args: dict[str, object], needle: str
) -> None:
    path = _tiny_rescan(tmp_path / "m")
    _set_args(path, **args)
    with pytest.raises(ArtifactError, match=needle) as err:
        load_artifact(path)
    assert str(path / CONFIG_FILE) in str(err.value)


def test_every_memory_scaling_argument_is_bounded() -> None:
    for name in ("rescan", "rescan-lstm", "rescan-rnn", "rescan-conv"):
        assert set(get_spec(name).arg_bounds) == {"channels", "stages", "depth"}
    for name in ("mbcnn", "mbcnn-light"):
        assert set(get_spec(name).arg_bounds) == {"n_filters"}
    for name in ("rescan", "mbcnn"):
        spec = get_spec(name)
        for arg, (low, high) in spec.arg_bounds.items():
            assert low <= spec.default_args()[arg] <= high, (name, arg)


def test_single_file_artifacts_are_checked_too(tmp_path: Path) -> None:
    model = build_model("mbcnn", n_filters=4)
    path = tmp_path / "m.safetensors"
    save_artifact(model, path, make_config(model, "mbcnn", {"n_filters": 4}))
    assert load_artifact(path).config.arch_args == {"n_filters": 4}
    cfg = art.read_config(path)
    cfg.arch_args = {"n_filters": 100_000}
    save_artifact(model, path, cfg)  # weights for 4 filters, config claims 100000
    with pytest.raises(ArtifactError, match=r"m\.safetensors.*n_filters"):
        load_artifact(path)
