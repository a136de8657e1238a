"""The video device check (scripts/device_video_check.py) in small, on the CPU: the same
steps a GPU call runs, so a session lent a device spends its minutes on the check, not on
the script's bugs."""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import REPO_ROOT


def _script():  # noqa: ANN202
    spec = importlib.util.spec_from_file_location(
        "device_video_check", REPO_ROOT / "scripts" / "device_video_check.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_synthetic_clip_rains_and_the_rain_moves() -> None:
    rain, clean = _script().synthetic_clip(3, 40, 48, seed=0)
    assert len(rain) == len(clean) == 3 and rain[0].shape == (40, 48, 3)
    pairs = zip(rain, clean, strict=True)
    streaks = [(r.astype(int) - c.astype(int)).max(axis=2) > 0 for r, c in pairs]
    assert 0 < streaks[0].mean() < 0.5  # some rain, not a sheet
    assert not np.array_equal(streaks[0], streaks[1])  # it falls between frames


@pytest.mark.slow
def test_the_windows_agree_and_training_resumes_on_the_cpu(tmp_path: Path) -> None:
    mod = _script()
    win = mod.check_windows("cpu", n=4, h=32, w=48, runs=1)
    assert win["max_abs_diff_cpu_vs_cpu_uint8"] == 0 and win["frames"] == 4
    train = mod.check_training("cpu", steps=2, size=64, tmp=tmp_path)
    assert train["steps"] == 2 and train["resumed_to_step"] == 3
    assert math.isfinite(train["last_loss"]) and math.isfinite(train["resumed_last_loss"])
    assert 0 < train["val_psnr_after"] < 100
