"""Training configs: every key checked on load, errors that name the key path."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from clearsight.engine.train_config import (
    LossConfig,
    TrainConfigError,
    apply_overrides,
    config_from_dict,
    load_config,
)
from clearsight.errors import ClearsightError

REPO = Path(__file__).resolve().parents[1]


def test_defaults_and_roundtrip() -> None:
    cfg = config_from_dict({})
    assert cfg.optim.name == "adam" and cfg.loss.name == "rescan"
    assert config_from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"optim": {"lrr": 1}}, "optim.lrr: unknown key"),
        ({"train": {"steps": "10"}}, "train.steps: expected int, got str"),
        ({"train": {"steps": 1.5}}, "train.steps: expected int, got float"),
        ({"train": {"tensorboard": 1}}, "train.tensorboard: expected bool, got int"),
        ({"optim": {"betas": [0.9, "x"]}}, "optim.betas[1]: expected float, got str"),
        ({"bogus": {}}, "bogus: unknown key"),
        ({"data": 3}, "data: expected a mapping"),
        ({"optim": {"name": "sgd"}}, "optim.name: 'sgd' is not one of adam, adamw"),
        ({"loss": {"name": "l3"}}, "loss.name"),
        ({"train": {"steps": 0}}, "train.steps: must be > 0"),
        ({"train": {"ema_decay": 1.0}}, "train.ema_decay"),
        ({"schedule": {"restart_step": 4}}, "only the cosine schedule restarts"),
        ({"schedule": {"name": "cosine", "restart_step": -1}}, "restart_step: must be >= 0"),
        (
            {"schedule": {"name": "cosine", "restart_step": 10}, "train": {"steps": 10}},
            "restart_step: must be below train.steps",
        ),
        ({"schedule": {"milestones": [5, 2]}}, "schedule.milestones: must be increasing"),
    ],
)
def test_errors_name_the_key(raw: dict, message: str) -> None:
    with pytest.raises(TrainConfigError, match=message.replace("[", r"\[").replace("]", r"\]")):
        config_from_dict(raw)


def test_ints_accepted_as_floats_and_null_where_optional() -> None:
    cfg = config_from_dict({"optim": {"lr": 1}, "val": {"preset": None}})
    assert cfg.optim.lr == 1.0 and isinstance(cfg.optim.lr, float)
    assert config_from_dict({"optim": {"lr": "1e-4"}}).optim.lr == 1e-4  # YAML 1.1 quirk
    with pytest.raises(TrainConfigError, match="optim.lr: expected float, got str"):
        config_from_dict({"optim": {"lr": "fast"}})


def test_overrides_are_yaml_and_checked(tmp_path: Path) -> None:
    p = tmp_path / "c.yaml"
    p.write_text(yaml.safe_dump({"train": {"steps": 5}}))
    cfg = load_config(p, ["train.steps=7", "optim.betas=[0.5, 0.9]", "val.preset=rgb"])
    assert cfg.train.steps == 7 and cfg.optim.betas == [0.5, 0.9] and cfg.val.preset == "rgb"
    with pytest.raises(TrainConfigError, match="train.steps: expected int, got str"):
        load_config(p, ["train.steps=many"])
    with pytest.raises(TrainConfigError, match="optim.lrr: unknown key"):
        load_config(p, ["optim.lrr=1"])
    with pytest.raises(TrainConfigError, match="key.path=value"):
        load_config(p, ["train.steps"])
    with pytest.raises(TrainConfigError, match="train.steps: is not a section"):
        apply_overrides({"train": {"steps": 1}}, ["train.steps.x=1"])


def test_missing_and_bad_files(tmp_path: Path) -> None:
    with pytest.raises(ClearsightError, match="config file not found"):
        load_config(tmp_path / "none.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("model: [unclosed")
    with pytest.raises(TrainConfigError, match="not valid YAML"):
        load_config(bad)


def test_shipped_configs_load() -> None:
    official = load_config(REPO / "configs" / "rescan-official.yaml")
    assert official.optim.lr == 5e-3 and official.schedule.milestones == [15000, 17500]
    assert official.data.batch_size == 64 and official.data.patch_size == 64
    assert official.train.steps == 20000 and official.loss.name == "rescan"
    assert official.model.args["unit"] == "GRU"
    smoke = load_config(REPO / "configs" / "rescan-smoke.yaml")
    assert smoke.train.steps == 30


def test_bundled_model_recipes_load_and_match_the_shipped_models() -> None:
    """The configs the bundled models were trained with build the shipped architectures."""
    from clearsight.zoo import resolve_model

    for cfg_name, model in (
        ("default-derain", "default-derain"),
        ("default-derain-finetune", "default-derain"),
        ("default-demoire-v2", "default-demoire"),
    ):
        cfg = load_config(REPO / "configs" / f"{cfg_name}.yaml", ["data.train=SOMEWHERE"])
        shipped = resolve_model(model).config
        assert cfg.model.arch == shipped.architecture
        assert shipped.provenance["training_config"]["model"]["args"] == cfg.model.args
        recorded = shipped.provenance["training_config"]["loss"]
        assert {k: v for k, v in cfg.loss.__dict__.items() if k in recorded} == recorded
        newer = {k: v for k, v in cfg.loss.__dict__.items() if k not in recorded}
        assert newer == {k: getattr(LossConfig(), k) for k in newer}  # added since: defaults


@pytest.mark.parametrize("path", sorted((REPO / "configs").glob("*.yaml")), ids=lambda p: p.name)
def test_every_shipped_config_loads_and_names_a_registered_model(path: Path) -> None:
    """A config in configs/ that no longer parses (a renamed key, a typo) fails here, not in
    a user's first `clearsight train`; SET-ME placeholders are left for the user's --set."""
    from clearsight.models.registry import get_spec

    cfg = load_config(path)
    assert get_spec(cfg.model.arch).name == cfg.model.arch
    assert cfg.train.steps > 0 and cfg.data.batch_size > 0
