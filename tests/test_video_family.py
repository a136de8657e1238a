"""The video family (docs/architecture.md §1.1): its row in the family table, S2VD's task,
the runner chosen by family, and S2VD artifacts saved before the family existed."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch

from clearsight.api import list_models, load_model, model_family
from clearsight.artifact import LoadedModel, load_artifact, make_config, save_artifact
from clearsight.engine.video_window import PerFrame, Windowed, video_model
from clearsight.families import FAMILIES, REFERENCES, Family, family_of, row_for
from clearsight.models.registry import get_spec
from clearsight.models.s2vd import S2VD
from clearsight.zoo import bundled_models


def _toy_s2vd() -> LoadedModel:
    torch.manual_seed(0)
    model = S2VD(channels=4, blocks=1).eval()
    return LoadedModel(model, make_config(model, "s2vd", {"channels": 4, "blocks": 1}), "toy")


def test_the_video_row_names_code_that_loads() -> None:
    row = FAMILIES[Family.VIDEO]
    for part in REFERENCES:
        assert callable(row.load(part)), part
    assert row.load("runner") is Windowed
    assert row.load("training_task").__name__ == "VideoRestorationTask"
    assert row.load("evaluator").__module__ == "clearsight.video.evaluate"
    assert row.default_metric == "psnr" and row.export_layouts == ()
    assert row.serve_endpoint == "/v1/jobs"
    assert row.load("ray_task").__module__ == "clearsight.scale.video_ray"


def test_s2vd_is_the_video_family_and_image_models_are_not() -> None:
    assert get_spec("s2vd").task == "video-derain"
    assert family_of("video-derain") is Family.VIDEO
    assert row_for(get_spec("s2vd").task).family is Family.VIDEO
    for arch in ("rescan", "mbcnn-light", "identity"):
        assert family_of(get_spec(arch).task) is Family.RESTORATION, arch
    assert model_family("video-derain") is Family.VIDEO  # the bundled model, from its config
    assert model_family("default-derain") is Family.RESTORATION


def test_video_model_picks_the_runner_by_family() -> None:
    toy = _toy_s2vd()
    assert toy.family is Family.VIDEO
    assert isinstance(video_model(toy), Windowed)
    image = load_model("identity")
    assert image.family is Family.RESTORATION
    assert isinstance(video_model(image), PerFrame)


def test_the_family_decides_not_a_preprocessing_key() -> None:
    """An image model whose spec happens to carry `window_frames` still runs frame by frame
    (the runner was once chosen by that key)."""
    image = load_model("identity")
    image.config.preprocess.extra["window_frames"] = 24
    assert isinstance(video_model(image), PerFrame)


def test_bundled_video_derain_is_listed_and_loads_as_video(tmp_path: Path) -> None:
    rows = {r["name"]: r for r in list_models()}
    assert rows["video-derain"]["task"] == "video-derain"
    assert rows["s2vd"]["task"] == "video-derain"
    # released weights converted here are not called trained by us
    assert rows["video-derain"]["description"] == "converted s2vd"
    assert rows["default-derain"]["description"] == "trained rescan"
    loaded = load_model("video-derain")
    assert loaded.family is Family.VIDEO and isinstance(video_model(loaded), Windowed)


def test_an_s2vd_artifact_saved_as_derain_still_loads_as_video(tmp_path: Path) -> None:
    """Artifacts and ONNX files made before the family stored S2VD's task as derain."""
    old = tmp_path / "old"
    shutil.copytree(bundled_models()["video-derain"], old)
    cfg_path = old / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["task"] = "derain"
    cfg_path.write_text(json.dumps(cfg))
    loaded = load_artifact(old)
    assert loaded.config.task == "video-derain" and loaded.family is Family.VIDEO
    # the rename is S2VD's only: an image model's derain stays derain
    rescan = load_model("default-derain")
    save_artifact(rescan.model, tmp_path / "r", rescan.config)
    assert load_artifact(tmp_path / "r").family is Family.RESTORATION


def test_a_served_video_derainer_is_offered_for_derain_only() -> None:
    """The page lists a model under what it removes: S2VD derains (its task is not one of
    the page's, which once listed it under demoire too)."""
    from clearsight.serve.registry import ServedModel

    assert ServedModel("video-derain", _toy_s2vd()).tasks() == ["derain"]
    assert ServedModel("identity", load_model("identity")).tasks() == ["derain", "demoire"]
