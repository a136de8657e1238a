"""`compare`: per-image differences between two models under one preset."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.data.pairs import find_pairs
from clearsight.engine.compare import compare, compare_results
from clearsight.engine.evaluate import EvalResult, ImageResult
from clearsight.engine.inference import Restorer
from clearsight.errors import ClearsightError
from clearsight.metrics.presets import get_preset
from clearsight.models.identity import Identity
from clearsight.report.html import render_compare_report
from clearsight.report.thumbs import ThumbnailCollector
from tests.helpers import TinyConvNet, loaded
from tests.test_report import make_pairs


def result(model: str, psnrs: list[float], preset: str = "rgb") -> EvalResult:
    r = EvalResult(preset=get_preset(preset), model=model, data="d")
    for i, p in enumerate(psnrs):
        r.images.append(ImageResult(f"{i:02d}", {"psnr": p, "ssim": 0.5}, latency_ms=1.0))
    return r


def test_counts_gains_losses_and_mean() -> None:
    a = result("a", [20.0, 20.0, 20.0, math.inf, 30.0])
    b = result("b", [22.0, 19.0, 20.005, math.inf, 27.0])
    cmp = compare_results(a, b)
    c = cmp.counts("psnr")
    assert (c["better"], c["worse"], c["equal"]) == (1, 2, 2)
    assert c["mean_delta"] == pytest.approx((2 - 1 + 0.005 + 0 - 3) / 5)
    assert [d.name for d in cmp.gains(5)] == ["00"]
    assert [d.name for d in cmp.losses(5)] == ["04", "01"]  # largest loss first
    assert cmp.summary()["psnr"]["better"] == 1


def test_refuses_mismatched_results() -> None:
    with pytest.raises(ClearsightError, match="different presets"):
        compare_results(result("a", [1.0]), result("b", [1.0], preset="y-matlab"))
    with pytest.raises(ClearsightError, match="different images"):
        compare_results(result("a", [1.0]), result("b", [1.0, 2.0]))


def test_compare_models_and_report(tmp_path: Path) -> None:
    data = make_pairs(tmp_path / "d", 3)
    ta, tb = ThumbnailCollector(max_side=32), ThumbnailCollector(max_side=32)
    cmp = compare(
        Restorer(loaded(Identity())),
        Restorer(loaded(TinyConvNet())),
        find_pairs(data),
        get_preset("rgb"),
        model_a="identity",
        model_b="tiny",
        on_images_a=ta,
        on_images_b=tb,
    )
    assert len(cmp.deltas) == 3
    for d in cmp.deltas:
        assert d.delta["psnr"] == pytest.approx(d.b["psnr"] - d.a["psnr"])
    c = cmp.counts()
    assert c["better"] + c["worse"] + c["equal"] == 3
    page = render_compare_report(cmp, ta.thumbs, tb.thumbs)
    assert page.count('class="item"') == 3 and "delta psnr" in page
    assert page.count("data:image/jpeg;base64,") == 3 * 6


def test_compare_cli(tmp_path: Path) -> None:
    data = make_pairs(tmp_path / "d", 2, h=24, w=24)
    out = tmp_path / "cmp.html"
    args = ["compare", "--data", str(data), "-m", "identity", "-m", "rescan", "-p", "y-matlab"]
    res = CliRunner().invoke(app, [*args, "--report", str(out)])
    assert res.exit_code == 0, res.output
    assert "B better on" in res.output and "mean delta" in res.output
    assert "y-matlab" in res.output
    page = out.read_text(encoding="utf-8")
    assert "rescan" in page and "149,823" in page  # model B's card
    one = CliRunner().invoke(app, ["compare", "--data", str(data), "-m", "identity"])
    assert one.exit_code == 1 and "exactly two" in one.output
