"""`train.max_minutes`: time the first steps, then fit the run's steps to the budget.

The step time is the median over the first `TIMING_STEPS` steps, or over the steps in
`TIMING_SHARE` of the budget (at least `MIN_TIMING_STEPS`), whichever ends first; the
steps are then cut to what fits in `TIME_MARGIN` of the time left, and the schedule with
them, so a budgeted run still anneals. A run that overshoots anyway stops at the budget.
"""

from __future__ import annotations

import statistics
import time
import warnings
from collections.abc import Callable
from typing import Any

from clearsight.engine.train_config import TrainConfig

__all__ = ["BudgetClock", "fit_budget"]

TIMING_STEPS = 100
"""With train.max_minutes, the step time is the median over this many first steps..."""
TIMING_SHARE = 0.25
"""...or over the steps in this share of the budget (at least `MIN_TIMING_STEPS`), whichever
ends first: timing 100 slow steps could spend most of the budget at the first learning rate
and leave the fitted schedule only its last minutes to anneal."""
MIN_TIMING_STEPS = 5
TIME_MARGIN = 0.92
"""Share of the remaining budget given to steps; the rest covers validation and exports."""


class BudgetClock:
    """The clock of one process's leg: when to fit the steps, and when time is up."""

    def __init__(self, minutes: float, start_step: int) -> None:
        self.budget_s = minutes * 60.0
        self.t0 = self.t_prev = time.perf_counter()
        self.s0 = start_step
        self.durations: list[float] = []
        self.timed = False

    def tick(self, step: int) -> tuple[float, bool, float, float]:
        """After step `step`: (elapsed s, fit now?, median step s, time left s)."""
        now = time.perf_counter()
        elapsed, n = now - self.t0, step - self.s0
        if not self.timed:
            self.durations.append(now - self.t_prev)
            self.t_prev = now
        due = not self.timed and (
            n >= TIMING_STEPS or (n >= MIN_TIMING_STEPS and elapsed >= TIMING_SHARE * self.budget_s)
        )
        # the median, so that slow first steps (loader start-up, a cache filling) or a short
        # burst of other work do not cut the run's steps for good
        step_s = statistics.median(self.durations) if due else 0.0
        return elapsed, due, step_s, self.budget_s - elapsed


def fit_budget(
    cfg: TrainConfig,
    step: int,
    step_s: float,
    left_s: float,
    log: Callable[[dict[str, Any]], None],
    bar: Any,
) -> None:
    """Cut `train.steps` (and multistep milestones) to what fits in `left_s` seconds.
    The decision goes to the train log too, where a run without progress output
    (`--no-progress`, a log file) still shows it."""
    t, sched = cfg.train, cfg.schedule
    fits = step + max(0, int(TIME_MARGIN * left_s / max(step_s, 1e-9)))
    log(
        {
            "step": step,
            "budget": "fits" if fits >= t.steps else "cut",
            "planned_steps": t.steps,
            "fitted_steps": min(fits, t.steps),
            "step_ms": round(step_s * 1000, 1),
        }
    )
    if fits >= t.steps:
        return
    scale = fits / t.steps
    sched.milestones = [max(1, round(m * scale)) for m in sched.milestones]
    sched.warmup_steps = min(sched.warmup_steps, fits // 2)
    bar.note(f"time budget: {t.steps} steps cut to {fits} ({step_s * 1000:.0f} ms/step)")
    if sched.name == "cosine" and fits <= sched.restart_step:
        # the restart's cosine would begin after the leg ends: it stays at optim.lr
        log(
            {
                "step": step,
                "warning": "restart_step_not_reached",
                "restart_step": sched.restart_step,
                "fitted_steps": fits,
            }
        )
        warnings.warn(
            f"schedule.restart_step ({sched.restart_step}) is at or after the last step "
            f"the time budget fits ({fits}): this leg ends at optim.lr without annealing; "
            "set it to the step the leg resumes from",
            stacklevel=2,
        )
    t.steps = fits
    bar.set_total(fits)
