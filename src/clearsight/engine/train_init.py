"""`model.init`: start a training run from an artifact's weights (fine-tuning)."""

from __future__ import annotations

from torch import nn

from clearsight.artifact import ModelConfig
from clearsight.engine.train_config import TrainConfig, TrainConfigError
from clearsight.models.contract import RestorationModel
from clearsight.models.registry import get_spec
from clearsight.models.widths import WidthsError, apply_widths
from clearsight.zoo import resolve_model

__all__ = ["init_from"]


def init_from(model: nn.Module, cfg: TrainConfig) -> ModelConfig:
    """Fill `model` from the artifact `model.init` (fine-tuning); refuse a different model.
    Returns the artifact's config (a detector keeps its label map and preprocessing).

    A pruned artifact (its config records narrowed `widths`) first narrows `model` to its
    widths, so `clearsight train` fine-tunes it (recovery after pruning; docs/compress.md).
    """
    init = str(cfg.model.init)
    loaded = resolve_model(init)
    mismatch = TrainConfigError(
        f"model.init: {init} is a {loaded.config.architecture!r} with arguments "
        f"{loaded.config.arch_args}; it does not fit model.arch {cfg.model.arch!r} with "
        f"arguments {cfg.model.args}"
    )
    if loaded.config.architecture != cfg.model.arch:
        raise mismatch
    # Arguments that change no weight shape (YOLOX-Nano's input_size) would otherwise load
    # and train at the artifact's preprocessing while the model decodes at its own size.
    # An argument that switches on an optional branch the artifact lacks may differ.
    defaults = get_spec(cfg.model.arch).default_args()
    restorer = isinstance(model, RestorationModel)
    switches = set(model.init_optional_args()) if restorer else set()
    theirs = list(loaded.model.state_dict())
    if switches and set(model.init_optional_keys()) <= set(theirs):
        switches = set()  # the artifact has the branch: its switch must match too
    mine_args = {k: v for k, v in {**defaults, **cfg.model.args}.items() if k not in switches}
    their_args = {
        k: v for k, v in {**defaults, **loaded.config.arch_args}.items() if k not in switches
    }
    if mine_args != their_args:
        raise mismatch
    if loaded.config.widths:
        try:
            apply_widths(model, loaded.config.widths, loaded.config.layer_shapes)
        except WidthsError as exc:
            raise TrainConfigError(f"model.init: {init}: {exc}") from None
    # an optional identity-initialised branch (MBCNN's tone head) may be absent from the
    # artifact; compare the arguments without the switches that add such branches
    optional = set(model.init_optional_keys()) if restorer else set()
    if [k for k in model.state_dict() if k not in optional or k in theirs] != theirs:
        raise mismatch
    try:
        model.load_state_dict(loaded.model.state_dict(), strict=not optional)
    except RuntimeError as exc:
        raise TrainConfigError(f"model.init: {init} does not fit the model: {exc}") from None
    return loaded.config
