"""Quantization-aware training: fake-quant through the trainer, and its NaN guard."""

from __future__ import annotations

import json
import math

import pytest
import torch

from clearsight.artifact import load_artifact
from clearsight.engine import qat
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.inference import Restorer
from clearsight.engine.train_config import TrainConfigError
from clearsight.engine.train_stream import BatchStream
from clearsight.engine.trainer import LOG_FILE, train
from clearsight.models.registry import build_model
from tests.train_utils import make_pairs, tiny_config

QAT = {"enabled": True, "freeze_step": 5}


def _tiny_qat() -> torch.nn.Module:
    torch.manual_seed(0)
    return qat.prepare_qat_model(build_model("rescan", channels=4, stages=2, depth=3))


def test_a_nan_batch_poisons_the_observers_and_restore_undoes_it():
    model = _tiny_qat()
    model(torch.rand(2, 3, 16, 16))
    before = qat.snapshot(model)
    assert before and not qat.nonfinite(model, quant_only=True)
    model(torch.full((2, 3, 16, 16), math.nan))
    assert qat.nonfinite(model, quant_only=True)  # what the seed's QAT carried forward
    qat.restore(model, before)
    assert not qat.nonfinite(model, quant_only=True)
    qat.freeze_observers(model)
    assert qat.observers_frozen(model)


def _poison(monkeypatch, calls: set[int]) -> None:
    """Batches number `calls` (1-based, over the whole run) come back as NaN inputs."""
    real = BatchStream.next
    seen = {"n": 0}

    def next_batch(self):
        inp, tgt = real(self)
        seen["n"] += 1
        return (torch.full_like(inp, math.nan), tgt) if seen["n"] in calls else (inp, tgt)

    monkeypatch.setattr(BatchStream, "next", next_batch)


def _all_finite(state: dict) -> bool:
    return all(
        bool(torch.isfinite(v).all())
        for v in state.values()
        if isinstance(v, torch.Tensor) and v.dtype.is_floating_point
    )


def test_qat_nan_never_reaches_a_checkpoint_and_resume_works(tmp_path, monkeypatch):
    data = make_pairs(tmp_path / "d")
    run = tmp_path / "run"
    cfg = tiny_config(data, train={"qat": QAT, "ckpt_every": 2, "val_every": 4, "nan_patience": 2})
    _poison(monkeypatch, {3, 6, 7})  # one skipped step, then two in a row: a rollback
    res = train(cfg, run, progress=False)
    assert res.steps == 8 and res.rollbacks == 1 and res.nan_skipped >= 3
    assert [e["step"] for e in res.nan_events][:3] == [3, 6, 7]
    assert all(e["nan"] == "loss" for e in res.nan_events), res.nan_events
    assert [e["qat"] for e in res.nan_events][:3] == ["observing", "frozen", "frozen"]
    logged = [json.loads(ln) for ln in (run / LOG_FILE).read_text().splitlines()]
    assert any(r.get("nan") == "loss" and r["step"] == 3 for r in logged)
    assert any(r.get("qat") == "observers frozen" for r in logged)
    assert logged[0]["amp"] == "off" and logged[0]["amp_reason"] == "train.qat: eager fp32"
    ckpt = _with_state(load_checkpoint(run / "checkpoint.pt")["model"])
    assert qat.nonfinite(ckpt) == [] and qat.observers_frozen(ckpt)
    art = load_artifact(run / "last")  # plain fp32 weights: no torch.ao needed to load
    assert _all_finite(art.model.state_dict())
    assert art.config.provenance["qat"]["freeze_step"] == 5
    assert [e["step"] for e in art.config.provenance["nan_events"]][:3] == [3, 6, 7]
    monkeypatch.undo()
    more = tiny_config(data, train={"qat": QAT, "steps": 10, "ckpt_every": 2, "val_every": 4})
    resumed = train(more, run, resume=True, progress=False)
    assert resumed.steps == 10 and resumed.last_loss is not None
    assert qat.nonfinite(_with_state(load_checkpoint(run / "checkpoint.pt")["model"])) == []
    # the QAT graph itself, trained scales and all, beside last/: --precision int8 finds it
    int8 = Restorer.from_pretrained(str(run / "last"), precision="int8")
    assert int8.model.export_info["quantization"]["method"] == "qat"
    assert int8.model.export_info["quantization"]["parity_max_abs_diff"] <= 0.02
    x = torch.rand(1, 3, 24, 24, generator=torch.Generator().manual_seed(0))
    rain32 = x - Restorer(load_artifact(run / "last")).restore(x)
    rain8 = x - int8.restore(x)
    assert float((rain8 - rain32).norm() / rain32.norm()) < 0.2


def _with_state(state: dict) -> torch.nn.Module:
    model = _tiny_qat()
    model.load_state_dict(state)
    return model


def test_qat_config_is_checked(tmp_path):
    data = make_pairs(tmp_path / "d", n=2)
    with pytest.raises(TrainConfigError, match="train.qat.backend"):
        tiny_config(data, train={"qat": {"enabled": True, "backend": "arm"}})
    with pytest.raises(TrainConfigError, match="train.amp"):
        tiny_config(data, train={"qat": {"enabled": True}, "amp": "bf16"})


def test_a_nan_weight_is_never_checkpointed(tmp_path, monkeypatch):
    """A finite loss can still leave a NaN weight behind (an inf gradient): the checkpoint
    that would carry it is refused and the run rolls back instead."""
    data = make_pairs(tmp_path / "d", n=4)
    real, calls = torch.optim.Adam.step, {"n": 0}

    def step(self, *a, **kw):
        out = real(self, *a, **kw)
        calls["n"] += 1
        if calls["n"] == 2:  # the step just before the first checkpoint
            with torch.no_grad():
                self.param_groups[0]["params"][0].fill_(math.nan)
        return out

    monkeypatch.setattr(torch.optim.Adam, "step", step)
    cfg = tiny_config(data, train={"ckpt_every": 2, "val_every": 4, "steps": 4})
    res = train(cfg, tmp_path / "run", progress=False)
    assert res.nan_events[0] == {"step": 2, "nan": "weights", "action": res.nan_events[0]["action"]}
    assert "checkpoint not written" in res.nan_events[0]["action"] and res.rollbacks == 1
    assert qat.nonfinite(load_artifact(tmp_path / "run" / "last").model) == []
