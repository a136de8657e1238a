"""The detection-aware restoration loss (`engine/task_loss.py`) and a few training steps."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from clearsight.engine.task_loss import build_task_loss
from clearsight.engine.train_config import config_from_dict
from clearsight.engine.trainer import train
from clearsight.errors import ClearsightError
from clearsight.losses import build_loss
from clearsight.preprocess import PreprocessSpec
from tests.train_utils import make_pairs, tiny_raw, train_log


def _loss(weight: float = 1.0):  # type: ignore[no-untyped-def]
    return build_task_loss(build_loss("l1"), "default-detect", PreprocessSpec(), weight=weight,
                           residual=False)  # fmt: skip


def test_the_feature_term_is_zero_on_the_clean_image_and_grows_with_rain() -> None:
    torch.manual_seed(0)
    clean = torch.rand(1, 3, 64, 64)
    rainy = (clean + (torch.rand(1, 1, 64, 64) < 0.05) * 0.8).clamp(0, 1)
    loss = _loss()
    assert float(loss(clean, rainy, clean)) == pytest.approx(0.0, abs=1e-6)
    assert loss.last_terms["feature"] == pytest.approx(0.0, abs=1e-6)
    assert float(loss(rainy, rainy, clean)) > float(build_loss("l1")(rainy, rainy, clean))
    assert loss.last_terms["feature"] > 0.01


def test_gradients_reach_the_restored_image_and_never_the_detector() -> None:
    loss = _loss().train()
    assert not loss.detector.training  # frozen batch-norm statistics
    restored = torch.rand(1, 3, 64, 64, requires_grad=True)
    loss(restored, restored.detach(), torch.rand(1, 3, 64, 64)).backward()
    assert restored.grad is not None and restored.grad.abs().sum() > 0
    assert all(p.grad is None and not p.requires_grad for p in loss.detector.parameters())


def test_a_restorer_as_the_detector_is_refused() -> None:
    with pytest.raises(ClearsightError, match="not a detector"):
        build_task_loss(build_loss("l1"), "identity", PreprocessSpec(), weight=1.0,
                        residual=False)  # fmt: skip


def test_a_few_steps_train_a_derainer_through_the_frozen_detector(tmp_path: Path) -> None:
    data = make_pairs(tmp_path / "pairs", n=4, size=40)
    raw = tiny_raw(
        data,
        loss={"name": "rescan", "detector": "default-detect", "detector_weight": 0.05},
        train={"steps": 3, "log_every": 1, "val_every": 3, "ckpt_every": 3},
    )
    raw["data"].update(patch_size=32, batch_size=2)
    cfg = config_from_dict(raw)
    result = train(cfg, tmp_path / "run", progress=False)
    assert result.steps == 3 and (tmp_path / "run" / "best").is_dir()
    losses = [r["loss"] for r in train_log(tmp_path / "run", "loss")]
    assert len(losses) == 3 and all(math.isfinite(v) for v in losses)
