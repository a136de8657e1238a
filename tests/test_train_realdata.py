"""The shipped smoke config trains on Rain100L and its artifact loads and evaluates."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearsight.artifact import load_artifact
from clearsight.data.pairs import find_pairs
from clearsight.engine.evaluate import evaluate
from clearsight.engine.inference import Restorer
from clearsight.engine.train_config import load_config
from clearsight.engine.trainer import train
from clearsight.metrics.presets import get_preset

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.realdata
def test_smoke_config_trains_and_evaluates(
    shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rain100l = shared_data / "derain" / "Rain100L"
    if not rain100l.is_dir():
        pytest.skip(f"{rain100l} not found")
    monkeypatch.chdir(REPO)  # the config's paths are relative to the repository root
    cfg = load_config(REPO / "configs" / "rescan-smoke.yaml")
    cfg.data.train = cfg.data.val = str(rain100l)
    res = train(cfg, tmp_path / "run", progress=False)
    assert res.steps == 30 and res.last_loss is not None and res.first_loss is not None
    assert res.val_metrics["psnr"] > 20
    loaded = load_artifact(tmp_path / "run" / "best")
    assert loaded.config.provenance["steps"] == 30
    assert loaded.config.metric_preset == "y-matlab"
    pairs = find_pairs(rain100l)[: cfg.val.max_images]
    ev = evaluate(Restorer(loaded), pairs, get_preset(loaded.config.metric_preset))
    assert ev.summary()["psnr"]["mean"] == pytest.approx(res.val_metrics["psnr"], abs=1e-6)
