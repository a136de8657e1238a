"""`clearsight serve` in headless Chromium: the real command on a free port, the page
restoring `examples/rainy-coffee.png` (the slider moves the split) and detecting objects
(labelled boxes drawn), a video as a job (its progress, then input and result side by
side), an error shown as a message, on a laptop and a phone screen.

Screenshots go to the test's folder, and also to $CLEARSIGHT_SCREENSHOT_DIR when set
(the README's come from `CLEARSIGHT_SCREENSHOT_DIR=docs/img`).
"""

from __future__ import annotations

import io
import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.optional import need
from tests.test_report import CHROMIUM, _browser

need("fastapi")
need("uvicorn")

REPO = Path(__file__).resolve().parents[1]
COFFEE = REPO / "examples" / "rainy-coffee.png"
CLIP = REPO / "examples" / "rainy-coffee-clip.mp4"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
RESULT_TIMEOUT_MS = 300_000  # one RESCAN pass on a shared, busy CPU


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server_url() -> Iterator[str]:
    """`clearsight serve` as a user starts it, on a free loopback port."""
    port = _free_port()
    cmd = [sys.executable, "-m", "clearsight", "serve", "--port", str(port), "--models",
           "default-derain,default-detect", "--workers", "1"]  # fmt: skip
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(url + "/healthz", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                out = proc.stdout.read().decode() if proc.stdout else ""  # type: ignore[union-attr]
                pytest.fail(f"clearsight serve did not start:\n{out}")
            time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(30)


def _save(png: bytes, name: str, tmp_path: Path) -> Path:
    """Keep a screenshot (256 colours: small enough for the repository)."""
    out = tmp_path / name
    Image.open(io.BytesIO(png)).convert("RGB").quantize(256).save(out, optimize=True)
    extra = os.environ.get("CLEARSIGHT_SCREENSHOT_DIR")
    if extra:
        Path(extra).mkdir(parents=True, exist_ok=True)
        (Path(extra) / name).write_bytes(out.read_bytes())
    return out


def _open(browser: object, url: str, width: int, height: int) -> tuple[object, list[str]]:
    page = browser.new_page(viewport={"width": width, "height": height})  # type: ignore[attr-defined]
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.goto(url + "/")
    page.wait_for_function("document.querySelectorAll('#model option').length > 0")
    return page, errors


def _detect(page: object) -> int:
    page.select_option("#task", "detect")  # type: ignore[attr-defined]
    page.set_input_files("#file", str(COFFEE))  # type: ignore[attr-defined]
    page.click("#run")  # type: ignore[attr-defined]
    page.wait_for_selector("#detections:not([hidden])", timeout=RESULT_TIMEOUT_MS)  # type: ignore[attr-defined]
    page.wait_for_function("document.getElementById('det-image').naturalWidth > 0")  # type: ignore[attr-defined]
    return int(page.locator("#boxes .box").count())  # type: ignore[attr-defined]


def test_page_restores_and_detects_in_chromium(server_url: str, tmp_path: Path) -> None:
    sync_playwright = _browser()
    with sync_playwright() as p:  # type: ignore[operator]
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=LAUNCH_ARGS)
        try:
            page, errors = _open(browser, server_url, 1280, 800)
            tasks = page.eval_on_selector_all("#task option", "os => os.map(o => o.value)")
            assert tasks == ["derain", "detect"]

            # restoration: progress while it runs, then the before/after slider
            page.select_option("#task", "derain")
            page.set_input_files("#file", str(COFFEE))
            page.click("#run")
            page.wait_for_selector("#progress:not([hidden])", timeout=30_000)
            page.wait_for_selector("#result:not([hidden])", timeout=RESULT_TIMEOUT_MS)
            assert page.locator("#error").is_hidden()
            page.wait_for_function(
                "document.getElementById('after').naturalWidth > 0 && "
                "document.getElementById('before').naturalWidth > 0"
            )
            assert page.evaluate("document.getElementById('after').naturalWidth") == 480
            assert "ms" in page.inner_text("#latency")
            assert page.get_attribute("#download", "href").startswith("blob:")
            compare = page.locator("#compare")
            page.locator("#split").fill("10")
            clip = "document.getElementById('after-wrap').style.clipPath"
            assert page.evaluate(clip) == "inset(0px 0px 0px 10%)"
            shot_10 = compare.screenshot()
            page.locator("#split").fill("90")
            assert page.evaluate(clip) == "inset(0px 0px 0px 90%)"
            shot_90 = compare.screenshot()
            a = np.asarray(Image.open(io.BytesIO(shot_10)).convert("L"), dtype=np.float64)
            b = np.asarray(Image.open(io.BytesIO(shot_90)).convert("L"), dtype=np.float64)
            assert a.shape == b.shape and np.abs(a - b).mean() > 0.5  # what is shown changed
            page.locator("#split").fill("50")
            _save(page.screenshot(full_page=True), "serve-restore-desktop.png", tmp_path)

            # detection: labelled boxes over the image, one per result
            n_boxes = _detect(page)
            assert n_boxes >= 1
            labels = page.locator("#boxes .box span").all_inner_texts()
            assert len(labels) == n_boxes and any(t.startswith("cup ") for t in labels)
            size = page.locator("#boxes .box").first.bounding_box()
            assert size["width"] > 20 and size["height"] > 20
            _save(page.screenshot(full_page=True), "serve-detect-desktop.png", tmp_path)

            # a video is a job: progress polled, then the input and the result play side by
            # side, with the detections as JSON lines beside the download
            page.set_input_files("#file", str(CLIP))
            page.click("#run")
            page.wait_for_selector("#videos:not([hidden])", timeout=RESULT_TIMEOUT_MS)
            assert page.locator("#error").is_hidden() and page.locator("#compare").is_hidden()
            ready = "id => document.getElementById(id).readyState >= 1"
            for vid in ("video-before", "video-after"):
                page.wait_for_function(f"({ready})('{vid}')", timeout=30_000)
            durations = [page.evaluate(f"document.getElementById('{v}').duration")
                         for v in ("video-before", "video-after")]  # fmt: skip
            assert durations[0] > 0.5 and abs(durations[0] - durations[1]) < 0.1
            assert page.get_attribute("#download-lines", "href").startswith("/v1/jobs/")
            _save(page.screenshot(full_page=True), "serve-video-desktop.png", tmp_path)

            # an error is a readable message on the page, not a broken result
            page.select_option("#task", "derain")
            page.set_input_files(
                "#file",
                files=[
                    {
                        "name": "notes.png",
                        "mimeType": "image/png",
                        "buffer": b"this is not an image",
                    }
                ],  # fmt: skip
            )
            page.click("#run")
            page.wait_for_selector("#error:not([hidden])", timeout=30_000)
            assert "not an image" in page.inner_text("#error")
            assert page.locator("#result").is_hidden()
            assert errors == []

            # phone-sized screen: the same page, stacked, no sideways scrolling
            phone, phone_errors = _open(browser, server_url, 390, 844)
            assert _detect(phone) >= 1
            scroll = phone.evaluate("document.documentElement.scrollWidth")
            assert scroll <= 390
            frame = phone.locator("#det-frame").bounding_box()
            assert frame["width"] <= 390
            _save(phone.screenshot(full_page=True), "serve-detect-phone.png", tmp_path)
            assert phone_errors == []
        finally:
            browser.close()
