"""HTML reports: content, size bounds, the CLI option, and a real headless Chromium run."""

from __future__ import annotations

import io
import re
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.data.pairs import find_pairs
from clearsight.engine.evaluate import evaluate
from clearsight.engine.inference import Restorer
from clearsight.io import write_image
from clearsight.metrics.presets import get_preset
from clearsight.report.html import histogram_svg, render_eval_report, write_report
from clearsight.report.thumbs import ThumbnailCollector
from tests.helpers import TinyConvNet, loaded, random_image
from tests.optional import skip_reason

CHROMIUM = Path("/usr/bin/chromium")


def make_pairs(root: Path, n: int, h: int = 40, w: int = 56) -> Path:
    for i in range(n):
        tgt = random_image(h, w, seed=i)
        noise = np.random.default_rng(100 + i).integers(-20, 21, size=tgt.shape)
        inp = np.clip(tgt.astype(int) + noise, 0, 255).astype(np.uint8)
        write_image(root / "input" / f"{i:03d}.png", inp)
        write_image(root / "target" / f"{i:03d}.png", tgt)
    return root


def run_eval(root: Path) -> tuple[object, ThumbnailCollector]:
    thumbs = ThumbnailCollector(max_side=32)
    result = evaluate(
        Restorer(loaded(TinyConvNet())),
        find_pairs(root),
        get_preset("rgb"),
        model_name="tiny",
        data_name=str(root),
        on_images=thumbs,
    )
    return result, thumbs


def test_thumbnails_are_bounded_and_complete(tmp_path: Path) -> None:
    result, thumbs = run_eval(make_pairs(tmp_path, 3, h=80, w=120))
    assert set(thumbs.thumbs) == {"000", "001", "002"}
    for parts in thumbs.thumbs.values():
        assert set(parts) == {"input", "output", "target", "err", "removed"}
        for data in parts.values():
            im = Image.open(io.BytesIO(data))
            assert im.format == "JPEG" and max(im.size) == 32
    assert thumbs.nbytes < 3 * 5 * 4000


def test_histogram_svg_handles_edge_cases() -> None:
    svg = histogram_svg([20.0, 21.0, float("inf"), 30.0], "psnr")
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    assert svg.count("<rect") == 20 and "1 infinite not shown" in svg
    assert "no finite values" in histogram_svg([float("inf")], "psnr")
    assert histogram_svg([5.0, 5.0], "x").count("<rect") == 20


def test_report_is_self_contained_and_lists_every_image(tmp_path: Path) -> None:
    result, thumbs = run_eval(make_pairs(tmp_path / "d", 4))
    page = render_eval_report(result, thumbs.thumbs, card=[("architecture", "tiny<net>")])
    assert "tiny&lt;net&gt;" in page  # escaped
    assert page.count('class="detail"') == 4 and page.count('class="item"') == 4
    assert page.count("data:image/jpeg;base64,") == 4 * 5
    # nothing fetched from elsewhere: only the SVG namespace is a URL
    urls = set(re.findall(r"https?://[^\s\"'<>]+", page))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert "<script src" not in page and '<link rel="stylesheet"' not in page
    assert "rgb" in page and "latency ms" in page
    path = write_report(tmp_path / "out" / "r.html", page)
    assert path.read_text(encoding="utf-8") == page


def test_large_sets_show_worst_and_best_k(tmp_path: Path) -> None:
    result, thumbs = run_eval(make_pairs(tmp_path, 30, h=16, w=16))
    page = render_eval_report(result, thumbs.thumbs, k=3)
    assert page.count('class="item"') == 6
    tbody = page.split('<table id="results">')[1].split("</table>")[0]
    assert tbody.count("<tr") == 31  # header + every image, even those without thumbnails
    ranked = sorted(result.images, key=lambda r: r.metrics["psnr"])
    shown = re.findall(r'class="item" id="item-\d+" data-id="\d+" data-name="(\w+)"', page)
    assert shown == [r.name for r in ranked[:3]] + [r.name for r in ranked[-3:]]


def test_eval_cli_writes_report(tmp_path: Path) -> None:
    data = make_pairs(tmp_path / "d", 2)
    out = tmp_path / "rep" / "report.html"
    res = CliRunner().invoke(app, ["eval", "-m", "identity", "-d", str(data), "--report", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "identity" in page and page.count('class="item"') == 2
    bad = CliRunner().invoke(app, ["eval", "-m", "identity", "-d", str(data), "--report-k", "0"])
    assert bad.exit_code == 1 and "--report-k" in bad.output


# --------------------------------------------------------------------------- browser


def _browser() -> object:
    if not CHROMIUM.exists():
        pytest.skip(
            f"no browser: {CHROMIUM} is missing (install Debian's `chromium`; .ci/run does)"
        )
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip(skip_reason("playwright"))
    return sync_playwright


def _variance(png: bytes) -> float:
    return float(np.asarray(Image.open(io.BytesIO(png)).convert("L"), dtype=np.float64).var())


def test_report_in_headless_chromium(tmp_path: Path) -> None:
    sync_playwright = _browser()
    result, thumbs = run_eval(make_pairs(tmp_path / "d", 3, h=60, w=90))
    report = write_report(tmp_path / "report.html", render_eval_report(result, thumbs.thumbs))
    with sync_playwright() as p:  # type: ignore[operator]
        browser = p.chromium.launch(
            executable_path=str(CHROMIUM),
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking"],
        )
        try:
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            errors: list[str] = []
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(report.as_uri())
            page.wait_for_load_state("load")
            assert errors == []
            widths = page.evaluate(
                "Array.from(document.querySelectorAll('.item img')).map(i => i.naturalWidth)"
            )
            assert len(widths) == 15 and min(widths) > 0
            assert _variance(page.screenshot(full_page=True)) > 0

            # sorting by psnr (descending on a second click) reorders the rows
            head = page.locator("#results th", has_text="psnr")
            head.click()
            up = page.evaluate(
                "Array.from(document.querySelectorAll('#results tbody tr td:nth-child(2)'))"
                ".map(td => parseFloat(td.dataset.v))"
            )
            assert up == sorted(up)
            head.click()
            down = page.evaluate(
                "Array.from(document.querySelectorAll('#results tbody tr td:nth-child(2)'))"
                ".map(td => parseFloat(td.dataset.v))"
            )
            assert down == sorted(up, reverse=True)

            assert page.locator("#modal").is_hidden()
            page.locator("#results tr.detail").first.click()
            assert page.locator("#modal").is_visible()
            widths = page.evaluate("Array.from(document.images).map(i => i.naturalWidth)")
            assert min(widths) > 0  # the slider's images too
            slider = page.locator("#slider")
            clip = "document.getElementById('sl-after-wrap').style.clipPath"
            page.locator("#sl-range").fill("10")
            assert page.evaluate(clip) == "inset(0px 0px 0px 10%)"
            shot_10 = slider.screenshot()
            page.locator("#sl-range").fill("90")
            assert page.evaluate(clip) == "inset(0px 0px 0px 90%)"
            shot_90 = slider.screenshot()
            assert shot_10 != shot_90  # the visible split moved (input and output differ)
            assert _variance(shot_90) > 0
            page.keyboard.press("Escape")
            assert page.locator("#modal").is_hidden()
            assert errors == []
        finally:
            browser.close()


@pytest.mark.realdata
def test_real_rain100l_report_subset(tmp_path: Path, shared_data: Path) -> None:
    """A real report on five Rain100L pairs (identity model) renders its real thumbnails."""
    src = shared_data / "derain" / "Rain100L"
    for sub in ("rain", "clean"):
        (tmp_path / sub).mkdir()
        for name in ("001.png", "003.png", "004.png", "010.png", "055.png"):
            shutil.copy(src / sub / name, tmp_path / sub / name)
    out = tmp_path / "report.html"
    res = CliRunner().invoke(
        app, ["eval", "-m", "identity", "-d", str(tmp_path), "--report", str(out)]
    )
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert page.count('class="item"') == 5 and page.count("data:image/jpeg;base64,") == 25
    for name in ("001", "003", "004", "010", "055"):
        assert f'data-name="{name}"' in page
