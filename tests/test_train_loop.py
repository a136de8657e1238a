"""The training loop: exact resume, NaN skip/rollback/stop, overfit check, exported artifacts."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from clearsight.artifact import load_artifact, read_config
from clearsight.data.pairs import find_pairs
from clearsight.engine import restore_train, train_budget, trainer
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.evaluate import evaluate
from clearsight.engine.inference import Restorer
from clearsight.engine.train_config import TrainConfig, config_from_dict
from clearsight.engine.train_schedule import lr_factor
from clearsight.engine.train_stream import init_dist
from clearsight.engine.trainer import TrainingDivergedError, TrainResult, train
from clearsight.errors import ClearsightError
from clearsight.losses import build_loss, rescan_loss
from clearsight.metrics.presets import get_preset
from tests.train_utils import FakeClock, make_pairs, tiny_config, train_log


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pairs(tmp_path_factory.mktemp("pairs"))


def _weights(run: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(run / "checkpoint.pt")["model"]


def test_resume_is_bit_exact(data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(data, train={"ema_decay": 0.9})
    train(cfg, tmp_path / "a", progress=False)
    half = tiny_config(data, train={"ema_decay": 0.9, "steps": 4})
    train(half, tmp_path / "b", progress=False)
    res = train(cfg, tmp_path / "b", resume=True, progress=False)
    assert res.steps == 8
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
        assert torch.equal(a["ema"][key], b["ema"][key]), key
    assert a["epoch"] == b["epoch"] and a["position"] == b["position"]
    # the log of the resumed run has each step once
    steps = [r["step"] for r in train_log(tmp_path / "b")]
    assert steps == sorted(steps) and steps.count(2) == 1


def test_artifacts_carry_provenance_and_evaluate(data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(data, train={"steps": 4, "tensorboard": True})
    res = train(cfg, tmp_path, progress=False)
    cfg = read_config(tmp_path / "best")
    prov = cfg.provenance
    assert prov["steps"] == 4 and prov["data"]["train"] == str(data)
    assert len(prov["data"]["files_sha256"]) == 64
    assert prov["training_config"]["model"]["args"]["channels"] == 4
    assert prov["val_metrics"]["psnr"] == pytest.approx(res.val_metrics["psnr"])
    loaded = load_artifact(tmp_path / "best")
    ev = evaluate(Restorer(loaded), find_pairs(data)[:2], get_preset(cfg.metric_preset))
    assert ev.summary()["psnr"]["mean"] == pytest.approx(res.val_metrics["psnr"], abs=1e-6)
    lines = train_log(tmp_path)
    assert {"step", "loss", "lr"} <= set(lines[0]) and any("val/psnr" in x for x in lines)
    assert any((tmp_path / "tensorboard").iterdir())


def _nan_on_calls(monkeypatch: pytest.MonkeyPatch, calls: set[int] | None) -> None:
    """Make the loss NaN on the given call numbers (1-based); None: from call 3 on."""
    real = restore_train.build_loss
    count = [0]

    def build(name: str, **kw: float):  # noqa: ANN202
        fn = real(name, **kw)

        def loss(out, inp, tgt):  # noqa: ANN001, ANN202
            count[0] += 1
            bad = count[0] >= 3 if calls is None else count[0] in calls
            value = fn(out, inp, tgt)
            return value * math.nan if bad else value

        return loss

    monkeypatch.setattr(restore_train, "build_loss", build)


def test_nan_steps_are_skipped(data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _nan_on_calls(monkeypatch, {3, 4})
    res = train(tiny_config(data, train={"nan_patience": 3}), tmp_path, progress=False)
    assert res.nan_skipped == 2 and res.rollbacks == 0 and res.steps == 8
    assert all(torch.isfinite(v).all() for v in _weights(tmp_path).values())


def test_nan_streak_rolls_back_at_half_lr(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nan_on_calls(monkeypatch, {6, 7})  # steps 6 and 7; last checkpoint at step 4
    cfg = tiny_config(data, train={"nan_patience": 2, "max_rollbacks": 1})
    res = train(cfg, tmp_path, progress=False)
    assert res.rollbacks == 1 and res.lr_scale == 0.5 and res.steps == 8
    log = train_log(tmp_path)
    assert {"step": 4, "rollback": 1, "lr_scale": 0.5} in log
    last = [x for x in log if "loss" in x][-1]
    assert last["step"] == 8 and last["lr"] == pytest.approx(2e-3 * 0.1 * 0.5)  # milestone, half
    assert load_checkpoint(tmp_path)["scheduler"]["lr_scale"] == 0.5


def test_persistent_nan_stops_with_a_clear_error(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _nan_on_calls(monkeypatch, None)
    cfg = tiny_config(data, train={"nan_patience": 2, "max_rollbacks": 2})
    with pytest.raises(TrainingDivergedError, match="after 2 rollback") as info:
        train(cfg, tmp_path, progress=False)
    assert isinstance(info.value, ClearsightError)
    assert all(torch.isfinite(v).all() for v in _weights(tmp_path).values())


def test_overfit_batch_reports_the_fall(data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(data, train={"steps": 40}, optim={"lr": 1e-2}, schedule={"milestones": []})
    res = train(cfg, tmp_path, overfit_batch=True, progress=False)
    assert res.overfit_ok and res.last_loss < 0.5 * res.first_loss
    cfg = tiny_config(data, train={"steps": 3}, optim={"lr": 1e-9})
    assert train(cfg, tmp_path / "b", overfit_batch=True, progress=False).overfit_ok is False


def test_resume_without_checkpoint_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ClearsightError, match="no checkpoint.pt"):
        train(None, tmp_path, resume=True, progress=False)


def test_resuming_a_finished_run_says_how_to_continue(data: Path, tmp_path: Path) -> None:
    cfg = tiny_config(data, train={"steps": 2, "ckpt_every": 2, "val_every": 2})
    train(cfg, tmp_path, progress=False)
    with pytest.raises(ClearsightError, match=r"already reached train.steps \(2\).*train.steps=N"):
        train(None, tmp_path, resume=True, progress=False)
    more = tiny_config(data, train={"steps": 3, "ckpt_every": 2, "val_every": 2})
    assert train(more, tmp_path, resume=True, progress=False).steps == 3


def test_losses() -> None:
    torch.manual_seed(0)
    inp, tgt = torch.rand(2, 3, 16, 16), torch.rand(2, 3, 16, 16)
    stages = [torch.rand(2, 3, 16, 16) for _ in range(3)]
    want = sum(((s - (inp - tgt)) ** 2).mean() for s in stages)
    assert torch.allclose(rescan_loss(stages, inp, tgt), want)
    exact = [inp - tgt]  # a residual model's perfect rain layer
    for name in ("l1", "mse", "charbonnier", "ssim"):
        zero = build_loss(name, residual=True)(exact, inp, tgt)
        assert float(zero) < 2e-3, name
        assert float(build_loss(name, residual=True)(stages, inp, tgt)) > float(zero), name
        # an image-predicting model (MBCNN's scales) is judged on its last output itself
        scales = [torch.rand(2, 3, 4, 4), torch.rand(2, 3, 8, 8), tgt.clone()]
        assert float(build_loss(name)(scales, inp, tgt)) < 2e-3, name
        assert float(build_loss(name, residual=True)(scales, inp, tgt)) > 1e-2, name
    with pytest.raises(ClearsightError, match="unknown loss"):
        build_loss("l3")


def _budgeted_run(
    data: Path,
    run: Path,
    monkeypatch: pytest.MonkeyPatch,
    clock: FakeClock,
    timing: int,
    minutes: float,
) -> TrainResult:
    """A 1000-step cosine run cut to `minutes` of `clock`, timed over `timing` steps."""
    monkeypatch.setattr(trainer.time, "perf_counter", clock)
    monkeypatch.setattr(train_budget, "TIMING_STEPS", timing)
    cfg = tiny_config(
        data,
        train={"steps": 1000, "max_minutes": minutes, "val_every": 1000, "ckpt_every": 1000},
        schedule={"name": "cosine", "min_lr": 1e-5, "milestones": []},
    )
    return train(cfg, run, progress=False)


def test_time_budget_cuts_the_steps_so_the_schedule_completes(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    res = _budgeted_run(data, tmp_path / "run", monkeypatch, FakeClock(), 2, 0.5)
    assert 2 < res.steps < 1000
    saved = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert saved["config"]["train"]["steps"] == res.steps  # the cut budget is recorded
    last = train_log(tmp_path / "run", "lr")[-1]
    assert last["step"] == res.steps and last["lr"] < 0.1 * 2e-3  # cosine nearly annealed
    assert (tmp_path / "run" / "last").is_dir()
    cut = train_log(tmp_path / "run", "budget")[0]  # the decision is logged, not only shown
    assert cut["budget"] == "cut" and cut["step"] == 2 and cut["planned_steps"] == 1000
    assert res.steps <= cut["fitted_steps"] < 1000


def test_restart_step_gives_a_cosine_from_optim_lr_to_min_lr_over_its_span() -> None:
    cfg = config_from_dict(
        {
            "optim": {"lr": 1e-3},
            "schedule": {"name": "cosine", "warmup_steps": 10, "min_lr": 1e-5, "restart_step": 600},
            "train": {"steps": 1000},
        }
    )
    lr = [cfg.optim.lr * lr_factor(cfg, s) for s in range(1001)]
    assert lr[4] == pytest.approx(5e-4)  # warm-up as before
    assert lr[10] == lr[599] == lr[600] == pytest.approx(1e-3)  # flat until the restart
    assert lr[800] == pytest.approx((1e-3 + 1e-5) / 2)  # half-way down its own span
    assert lr[1000] == pytest.approx(1e-5)
    assert all(a >= b for a, b in zip(lr[600:], lr[601:], strict=False))


def _budgeted_leg_config(data: Path, restart_step: int) -> TrainConfig:
    """A resumed leg planned for 5000 steps whose 0.5-minute budget fits far fewer."""
    return tiny_config(
        data,
        train={"steps": 5000, "max_minutes": 0.5, "val_every": 5000, "ckpt_every": 5000},
        schedule={"name": "cosine", "min_lr": 1e-5, "milestones": [], "restart_step": restart_step},
    )


def test_restart_step_restarts_a_resumed_legs_cosine_whatever_its_budget_fits(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _budgeted_run(data, tmp_path / "run", monkeypatch, FakeClock(), 2, 0.5)
    cfg = _budgeted_leg_config(data, restart_step=first.steps)
    res = train(cfg, tmp_path / "run", resume=True, progress=False)
    assert first.steps < res.steps < 5000  # the budget cut the leg
    leg = [r for r in train_log(tmp_path / "run", "lr") if r["step"] > first.steps]
    assert leg[0]["lr"] > 0.9 * 2e-3  # back near optim.lr, not where 5000 steps would put it
    assert leg[-1]["step"] == res.steps and leg[-1]["lr"] < 0.1 * 2e-3  # annealed in budget


def test_restart_step_the_budget_never_reaches_is_warned_and_logged(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = _budgeted_run(data, tmp_path / "run", monkeypatch, FakeClock(), 2, 0.5)
    cfg = _budgeted_leg_config(data, restart_step=4000)
    with pytest.warns(UserWarning, match=r"restart_step \(4000\).*without annealing"):
        res = train(cfg, tmp_path / "run", resume=True, progress=False)
    [warned] = train_log(tmp_path / "run", "warning")
    assert warned["restart_step"] == 4000
    assert first.steps < res.steps <= warned["fitted_steps"] < 4000
    last = train_log(tmp_path / "run", "lr")[-1]
    assert last["step"] == res.steps and last["lr"] == pytest.approx(2e-3)  # what it warns of


class _SpikyClock(FakeClock):
    """A `FakeClock` whose 4th and 5th calls take 20 s each: a burst of other work."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0

    def __call__(self) -> float:
        self.calls += 1
        self.t += 20.0 if self.calls in (4, 5) else self.tick
        return self.t


def test_time_budget_is_not_cut_by_a_burst_of_slow_steps(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # steps cost 2 s but two of the five timed ones took 21 s: their mean (9.4 s) would cut
    # the 3-minute budget to about 18 steps; the median keeps the ~65 that fit
    res = _budgeted_run(data, tmp_path / "run", monkeypatch, _SpikyClock(), 5, 3.0)
    assert 40 < res.steps < 80


def test_time_budget_with_slow_steps_is_fitted_within_a_quarter_of_it(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 100 timed steps of ~2 s would outlast the 3-minute budget: the backstop would stop the
    # run mid-schedule; timing ends at a quarter of the budget instead and the cosine anneals
    res = _budgeted_run(data, tmp_path / "run", monkeypatch, FakeClock(), 100, 3.0)
    assert 40 < res.steps < 100
    last = train_log(tmp_path / "run", "lr")[-1]
    assert last["step"] == res.steps and last["lr"] < 0.1 * 2e-3


def test_time_budget_hard_stop_still_exports(
    data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainer.time, "perf_counter", FakeClock())
    monkeypatch.setattr(train_budget, "TIMING_STEPS", 10_000)  # never fits: the backstop stops it
    monkeypatch.setattr(train_budget, "TIMING_SHARE", 2.0)
    cfg = tiny_config(data, train={"steps": 1000, "max_minutes": 0.1, "val_every": 1000})
    res = train(cfg, tmp_path / "run", progress=False)
    assert 1 <= res.steps < 20
    assert load_checkpoint(tmp_path / "run" / "checkpoint.pt")["step"] == res.steps
    assert train_log(tmp_path / "run", "budget") == [
        {"step": res.steps, "budget": "reached", "planned_steps": 1000}
    ]
    assert (tmp_path / "run" / "last").is_dir()


def test_model_init_fine_tunes_from_an_artifact_and_refuses_another_model(
    data: Path, tmp_path: Path
) -> None:
    train(tiny_config(data, train={"steps": 4}), tmp_path / "src", progress=False)
    ft_cfg = tiny_config(data, train={"steps": 2})
    ft_cfg.model.init = str(tmp_path / "src" / "last")
    (tmp_path / "ft").mkdir()
    run = trainer._Run(ft_cfg, tmp_path / "ft", init_dist("cpu"), False)
    source = load_artifact(tmp_path / "src" / "last").model.state_dict()
    for key, value in run.model.state_dict().items():
        assert torch.equal(value, source[key]), key
    res = train(ft_cfg, tmp_path / "ft2", progress=False)  # and it trains from there
    assert res.steps == 2
    other = tiny_config(data, model={"args": {"channels": 6, "stages": 2, "depth": 3}})
    other.model.init = str(tmp_path / "src" / "last")
    with pytest.raises(ClearsightError, match="model.init"):
        train(other, tmp_path / "other", progress=False)
