"""Model artifacts: safetensors + JSON config, round trips, never unpickling, clear errors."""

from __future__ import annotations

import json
import os

import pytest
import torch
from safetensors.torch import save_file

from clearsight.artifact import (
    CONFIG_FILE,
    FORMAT_VERSION,
    WEIGHTS_FILE,
    load_artifact,
    make_config,
    read_config,
    save_artifact,
)
from clearsight.errors import ArtifactError, UnknownNameError
from clearsight.models.registry import build_model, count_parameters, list_specs
from clearsight.zoo import UntrainedModelWarning, resolve_model


def _model():
    torch.manual_seed(1)
    return build_model("rescan", channels=8)


@pytest.mark.parametrize("single_file", [False, True])
def test_round_trip_restores_identical_weights_and_config(tmp_path, single_file):
    model = _model()
    cfg = make_config(model, "rescan", {"channels": 8}, name="tiny", provenance={"steps": 3})
    path = tmp_path / ("m.safetensors" if single_file else "m")
    save_artifact(model, path, cfg)
    loaded = load_artifact(path)
    assert loaded.config.architecture == "rescan"
    assert loaded.config.arch_args == {"channels": 8}
    assert loaded.config.task == "derain"
    assert loaded.config.metric_preset == "y-matlab"
    assert loaded.config.provenance["steps"] == 3
    assert loaded.config.param_count == count_parameters(model)
    assert loaded.config.preprocess.color_order == "RGB"
    for (k, a), (k2, b) in zip(
        model.state_dict().items(), loaded.model.state_dict().items(), strict=True
    ):
        assert k == k2 and torch.equal(a, b)
    x = torch.rand(1, 3, 24, 24)
    with torch.no_grad():
        assert torch.equal(model.eval()(x)[-1], loaded.model(x)[-1])


def test_config_is_versioned_json_with_layer_shapes(tmp_path):
    model = _model()
    save_artifact(model, tmp_path / "m", make_config(model, "rescan", {"channels": 8}))
    data = json.loads((tmp_path / "m" / CONFIG_FILE).read_text())
    assert data["format"] == "clearsight.model" and data["format_version"] == FORMAT_VERSION
    assert data["layer_shapes"]["decoder.0.weight"] == [8, 8, 3, 3]
    assert set(data) >= {
        "architecture",
        "arch_args",
        "task",
        "preprocess",
        "metric_preset",
        "provenance",
    }


def test_loading_never_unpickles(tmp_path, monkeypatch):
    model = _model()
    save_artifact(model, tmp_path / "m", make_config(model, "rescan", {"channels": 8}))

    def boom(*a, **k):
        raise AssertionError("pickle used")

    monkeypatch.setattr(torch, "load", boom)
    import pickle

    monkeypatch.setattr(pickle, "load", boom)
    monkeypatch.setattr(pickle, "loads", boom)
    load_artifact(tmp_path / "m")


def test_overwriting_an_artifact_is_atomic(tmp_path, monkeypatch):
    model = _model()
    path = tmp_path / "m"
    save_artifact(model, path, make_config(model, "rescan", {"channels": 8}, name="first"))
    import clearsight.artifact as art

    def failing_save(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(art, "save_file", failing_save)
    with pytest.raises(OSError):
        save_artifact(model, path, make_config(model, "rescan", {"channels": 8}, name="second"))
    assert read_config(path).name == "first"
    assert sorted(os.listdir(tmp_path)) == ["m"]  # no temp folders left


def test_errors_name_the_file(tmp_path):
    with pytest.raises(ArtifactError, match="not found"):
        load_artifact(tmp_path / "missing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(ArtifactError, match="no config.json"):
        load_artifact(tmp_path / "empty")
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / CONFIG_FILE).write_text("{not json")
    with pytest.raises(ArtifactError, match="invalid JSON"):
        load_artifact(bad)
    junk = tmp_path / "junk.safetensors"
    junk.write_bytes(b"\x00" * 64)
    with pytest.raises(ArtifactError, match="junk.safetensors"):
        load_artifact(junk)
    plain = tmp_path / "plain.safetensors"
    save_file({"w": torch.zeros(2)}, str(plain))
    with pytest.raises(ArtifactError, match="no clearsight config"):
        load_artifact(plain)


def test_future_version_and_wrong_shapes_are_refused(tmp_path):
    model = _model()
    path = tmp_path / "m"
    save_artifact(model, path, make_config(model, "rescan", {"channels": 8}))
    cfg = json.loads((path / CONFIG_FILE).read_text())
    cfg["format_version"] = FORMAT_VERSION + 1
    (path / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="not supported"):
        load_artifact(path)
    cfg["format_version"] = FORMAT_VERSION
    cfg["arch_args"] = {"channels": 16}  # weights were saved for 8 channels
    (path / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError, match="shape mismatch"):
        load_artifact(path)
    (path / WEIGHTS_FILE).unlink()
    with pytest.raises(ArtifactError, match="missing"):
        load_artifact(path)


def test_registry_lists_architectures_and_rejects_unknown_names():
    names = {s.name for s in list_specs()}
    assert {"rescan", "rescan-lstm", "rescan-rnn", "rescan-conv", "identity"} <= names
    with pytest.raises(UnknownNameError, match="known: .*rescan"):
        build_model("resnet")


def test_resolve_model_by_name_path_and_unknown(tmp_path):
    with pytest.warns(UntrainedModelWarning):
        a = resolve_model("rescan")
    with pytest.warns(UntrainedModelWarning):
        b = resolve_model("rescan")
    # seeded initialisation: the same name gives the same weights
    assert all(
        torch.equal(p, q) for p, q in zip(a.model.parameters(), b.model.parameters(), strict=True)
    )
    save_artifact(a.model, tmp_path / "art", a.config)
    assert resolve_model(str(tmp_path / "art")).config.architecture == "rescan"
    with pytest.raises(UnknownNameError, match="known: .*identity"):
        resolve_model("no-such-model")
    with pytest.raises(UnknownNameError, match="not found"):
        resolve_model(str(tmp_path / "nope.safetensors"))


def test_class_map_round_trips_and_is_absent_for_restoration(tmp_path):
    model = _model()
    cfg = make_config(model, "rescan", {"channels": 8})
    save_artifact(model, tmp_path / "plain", cfg)
    assert "class_ids" not in json.loads((tmp_path / "plain" / CONFIG_FILE).read_text())
    cfg.class_ids, cfg.class_names = [1, 2, 90], ["person", "bicycle", "toothbrush"]
    save_artifact(model, tmp_path / "m", cfg)
    loaded = load_artifact(tmp_path / "m")
    assert loaded.config.class_ids == [1, 2, 90]
    assert loaded.config.class_names == ["person", "bicycle", "toothbrush"]
    data = json.loads((tmp_path / "m" / CONFIG_FILE).read_text())
    data["class_ids"] = ["1"]
    (tmp_path / "m" / CONFIG_FILE).write_text(json.dumps(data))
    with pytest.raises(ArtifactError, match="class_ids must be a list of integers"):
        load_artifact(tmp_path / "m")
