"""`clearsight serve`'s JSON API: every endpoint, every refusal, the limits, and the same
bytes as `clearsight restore` for the same input and options."""

from __future__ import annotations

import base64
import io
import struct
import threading
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from torch import nn
from typer.testing import CliRunner

from tests.optional import need

need("fastapi")
need("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from clearsight.cli import app as cli_app  # noqa: E402
from clearsight.serve import ServeLimits, create_app  # noqa: E402
from tests.helpers import SlowNet, loaded, random_image  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
COFFEE = REPO / "examples" / "rainy-coffee.png"


def png_bytes(img: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    return buf.getvalue()


def bomb_png(width: int, height: int) -> bytes:
    """A valid PNG header declaring width x height 1-bit pixels, with a few hundred bytes
    of zlib data: small on the wire, huge once decoded."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    ihdr = struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0)
    row = b"\x00" + b"\x00" * ((width + 7) // 8)
    idat = zlib.compress(row * 64, 9)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b"")


class GatedNet(nn.Module):
    """Identity that waits until the test opens its gate: a request held in flight."""

    pad_multiple = 1
    receptive_radius = 0

    def __init__(self) -> None:
        super().__init__()
        self.gate = threading.Event()
        self.entered = threading.Event()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return x


@pytest.fixture(scope="module")
def client() -> Iterator[TestClient]:
    models = ["identity", "default-detect"]
    with TestClient(create_app(models, ServeLimits(workers=2))) as c:
        yield c


def post(client: TestClient, url: str, data: bytes, **fields: str) -> object:
    return client.post(url, files={"image": ("any-name.txt", data)}, data=fields)


def assert_json_error(resp: object, status: int, *words: str) -> dict:
    assert resp.status_code == status, resp.text  # type: ignore[attr-defined]
    assert resp.headers["content-type"] == "application/json"  # type: ignore[attr-defined]
    body = resp.json()  # type: ignore[attr-defined]
    assert body["status"] == status
    assert "Traceback" not in body["error"] and "/tmp" not in body["error"]
    for w in words:
        assert w in body["error"], body["error"]
    return body


# ------------------------------------------------------------------------- endpoints


def test_healthz_and_models(client: TestClient) -> None:
    health = client.get("/healthz").json()
    assert health["status"] == "ok" and health["models"] == 2 and health["in_flight"] == 0
    rows = {m["name"]: m for m in client.get("/v1/models").json()["models"]}
    assert rows["identity"]["kind"] == "restore"
    assert rows["identity"]["tasks"] == ["derain", "demoire"]  # task "any": both
    assert rows["default-detect"]["tasks"] == ["detect"]
    assert rows["default-detect"]["architecture"] == "yolox-nano"


def test_page_static_files_and_docs(client: TestClient) -> None:
    page = client.get("/")
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]
    for src in ("/static/app.css", "/static/app.js"):
        assert src in page.text
        assert client.get(src).status_code == 200
    assert "http" not in page.text.replace("http-equiv", "")  # no CDN: works offline
    assert client.get("/docs").status_code == 200
    spec = client.get("/openapi.json").json()
    assert {"/v1/models", "/v1/restore", "/v1/detect", "/healthz"} <= set(spec["paths"])
    form = spec["paths"]["/v1/restore"]["post"]["requestBody"]["content"]
    assert "image" in form["multipart/form-data"]["schema"]["properties"]


def test_restore_png_and_json(client: TestClient) -> None:
    img = random_image(37, 53, seed=1)
    resp = post(client, "/v1/restore", png_bytes(img), model="identity")
    assert resp.status_code == 200 and resp.headers["content-type"] == "image/png"
    assert float(resp.headers["x-latency-ms"]) >= 0
    out = np.asarray(Image.open(io.BytesIO(resp.content)))
    np.testing.assert_array_equal(out, img)  # identity model, same size, no resizing

    body = post(client, "/v1/restore", png_bytes(img), model="identity", format="json").json()
    assert (body["width"], body["height"], body["model"]) == (53, 37, "identity")
    assert base64.b64decode(body["image_png"]) == resp.content


def test_restore_sniffs_content_not_the_name(client: TestClient) -> None:
    img = random_image(20, 30, seed=2)
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "BMP")
    resp = post(client, "/v1/restore", buf.getvalue(), model="identity")  # named .txt
    assert resp.status_code == 200
    np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(resp.content))), img)


def test_detect_returns_coco_results_and_drawn_image(client: TestClient) -> None:
    resp = post(client, "/v1/detect", COFFEE.read_bytes(), model="default-detect", draw="true")
    body = resp.json()
    assert resp.status_code == 200, body
    assert (body["width"], body["height"]) == (480, 320)
    assert "cup" in [r["name"] for r in body["results"]]
    for r in body["results"]:
        assert set(r) == {"image_id", "category_id", "bbox", "score", "name"}
        x, y, w, h = r["bbox"]
        assert w > 0 and h > 0 and x >= 0 and x + w <= 480.01 and r["score"] >= 0.3
    drawn = np.asarray(Image.open(io.BytesIO(base64.b64decode(body["image_png"]))))
    assert drawn.shape == (320, 480, 3)
    assert not np.array_equal(drawn, np.asarray(Image.open(COFFEE).convert("RGB")))
    high = post(client, "/v1/detect", COFFEE.read_bytes(), model="default-detect",
                score_threshold="0.6").json()  # fmt: skip
    assert "image_png" not in high
    assert len(high["results"]) < len(body["results"])
    assert all(r["score"] >= 0.6 for r in high["results"])


# ------------------------------------------------------------------------- refusals


def test_unknown_model_and_wrong_endpoint(client: TestClient) -> None:
    img = png_bytes(random_image(8, 8))
    assert_json_error(post(client, "/v1/restore", img, model="nope"), 404, "nope", "identity")
    assert_json_error(post(client, "/v1/detect", img, model="identity"), 422, "/v1/restore")
    assert_json_error(post(client, "/v1/restore", img, model="default-detect"), 422, "/v1/detect")
    assert_json_error(client.post("/v1/restore", data={"model": "identity"}), 415, "image")
    text_only = client.post("/v1/restore", files={"model": (None, "identity")})  # multipart
    assert_json_error(text_only, 422, "'image' is missing")
    assert_json_error(client.get("/v1/nothing"), 404)


@pytest.mark.parametrize(
    ("fields", "option", "words"),
    [
        ({"tile": "-1"}, "tile", ">= 0"),
        ({"tile": "big"}, "tile", "whole number"),
        ({"tta": "x9"}, "tta", "x9"),
        ({"scales": "1.0,zero"}, "scales", "zero"),
        ({"stages": "many"}, "stages", "many"),
        ({"stage_threshold": "-1"}, "stage_threshold", ">= 0"),
        ({"format": "gif"}, "format", "gif"),
        ({"tiles": "64"}, "tiles", "unknown field"),
    ],
)
def test_bad_restore_options_name_the_option(
    client: TestClient, fields: dict[str, str], option: str, words: str
) -> None:
    resp = post(client, "/v1/restore", png_bytes(random_image(8, 8)), model="identity", **fields)
    body = assert_json_error(resp, 422, words)
    assert body["option"] == option and body["error"].startswith(f"{option}: ")


def test_bad_detect_options(client: TestClient) -> None:
    img = png_bytes(random_image(8, 8))
    body = assert_json_error(
        post(client, "/v1/detect", img, model="default-detect", score_threshold="2"), 422, "[0, 1]"
    )
    assert body["option"] == "score_threshold"
    assert_json_error(
        post(client, "/v1/detect", img, model="default-detect", draw="maybe"), 422, "draw"
    )


def test_non_image_and_broken_image(client: TestClient) -> None:
    assert_json_error(
        post(client, "/v1/restore", b"GIF89a not supported", model="identity"), 415, "PNG"
    )
    assert_json_error(post(client, "/v1/restore", b"", model="identity"), 415)
    truncated = png_bytes(random_image(30, 30))[:60]
    assert_json_error(post(client, "/v1/restore", truncated, model="identity"), 422,
                      "the uploaded image")  # fmt: skip
    assert_json_error(client.post("/v1/restore", content=b"raw"), 415, "multipart")


def test_decompression_bomb_is_refused_from_its_header(client: TestClient) -> None:
    bomb = bomb_png(30_000, 30_000)  # 900 megapixels in well under a kilobyte
    assert len(bomb) < 2000
    assert_json_error(post(client, "/v1/restore", bomb, model="identity"), 413, "30000x30000")
    assert_json_error(post(client, "/v1/detect", bomb, model="default-detect"), 413, "limit")


def test_upload_and_pixel_limits() -> None:
    limits = ServeLimits(max_upload_bytes=4000, max_pixels=50 * 50, workers=1)
    with TestClient(create_app({"id": loaded(nn.Identity())}, limits)) as c:
        big = png_bytes(random_image(200, 200))  # ~120 kB of noise
        assert_json_error(post(c, "/v1/restore", big, model="id"), 413, "limit is 4,000 bytes")
        flat = np.zeros((60, 60, 3), np.uint8)  # small file, too many pixels
        assert len(png_bytes(flat)) < 4000
        assert_json_error(post(c, "/v1/restore", png_bytes(flat), model="id"), 413, "3,600")
        ok = post(c, "/v1/restore", png_bytes(np.zeros((40, 40, 3), np.uint8)), model="id")
        assert ok.status_code == 200


def test_private_folder_is_emptied_and_removed() -> None:
    app = create_app({"id": loaded(nn.Identity())}, ServeLimits(workers=1))
    root = app.state.server.root
    with TestClient(app) as c:
        assert root.is_dir() and (root.stat().st_mode & 0o077) == 0  # private: 0700
        assert post(c, "/v1/restore", png_bytes(random_image(9, 9)), model="id").status_code == 200
        assert post(c, "/v1/restore", b"\x89PNG\r\n\x1a\nbroken", model="id").status_code == 422
        assert list(root.iterdir()) == []  # each request's folder went with its response
    assert not root.exists()


# ------------------------------------------------------------------------- queue and time


def _wait(cond: object, seconds: float = 20.0) -> None:
    end = time.monotonic() + seconds
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, "timed out waiting"
        time.sleep(0.01)


def test_busy_server_answers_503_and_healthz_stays_up() -> None:
    net = GatedNet()
    limits = ServeLimits(workers=1, max_in_flight=1)
    app = create_app({"gated": loaded(net)}, limits)
    server = app.state.server
    img = png_bytes(random_image(16, 16))
    with TestClient(app) as c:
        first: dict[str, object] = {}
        t = threading.Thread(target=lambda: first.update(r=post(c, "/v1/restore", img,
                                                                   model="gated")))  # fmt: skip
        t.start()
        try:
            assert net.entered.wait(20)
            t0 = time.monotonic()
            health = c.get("/healthz")  # inference runs off the event loop
            assert health.status_code == 200 and health.json()["in_flight"] == 1
            assert time.monotonic() - t0 < 5
            busy = post(c, "/v1/restore", img, model="gated")
            assert_json_error(busy, 503, "busy")
            assert busy.headers["retry-after"] == str(limits.retry_after_s)
        finally:
            net.gate.set()
            t.join(30)
        assert first["r"].status_code == 200  # type: ignore[attr-defined]
        assert server.in_flight == 0
        assert post(c, "/v1/restore", img, model="gated").status_code == 200


def test_timeout_answers_504_and_frees_the_slot() -> None:
    net = GatedNet()
    app = create_app({"gated": loaded(net)}, ServeLimits(workers=2, max_in_flight=1,
                                                         timeout_s=0.5))  # fmt: skip
    img = png_bytes(random_image(16, 16))
    with TestClient(app) as c:
        try:
            assert_json_error(post(c, "/v1/restore", img, model="gated"), 504, "0.5 s")
            assert app.state.server.in_flight == 0  # the slot is free again...
            health = c.get("/healthz").json()
            assert health["in_flight"] == 0
        finally:
            net.gate.set()
        # ...so the next request runs (on the second thread) instead of getting 503
        assert post(c, "/v1/restore", img, model="gated").status_code == 200


# ------------------------------------------------------------------------- same as the CLI


@pytest.mark.parametrize(
    ("model", "fields"),
    [("identity", {}), ("default-derain", {"tta": "flip"}), ("default-derain", {"tile": "32"})],
)
def test_restored_bytes_equal_the_cli_output(
    tmp_path: Path, model: str, fields: dict[str, str]
) -> None:
    crop = np.asarray(Image.open(COFFEE).convert("RGB"))[40:88, 100:164]
    src = tmp_path / "in" / "crop.png"
    src.parent.mkdir()
    Image.fromarray(crop).save(src)
    args = ["restore", str(src), "--model", model, "--out", str(tmp_path / "out")]
    for k, v in fields.items():
        args += [f"--{k}", v]
    result = CliRunner().invoke(cli_app, args)
    assert result.exit_code == 0, result.output
    with TestClient(create_app([model], ServeLimits(workers=1))) as c:
        resp = post(c, "/v1/restore", src.read_bytes(), model=model, **fields)
    assert resp.status_code == 200, resp.text
    expected = (tmp_path / "out" / "crop.png").read_bytes()
    assert resp.content == expected
    if model != "identity":  # a real model changed the pixels: the equality is not trivial
        assert resp.content != src.read_bytes()


# ------------------------------------------------------------------------- the command


def test_serve_command_refuses_bad_models_and_limits_in_one_line() -> None:
    runner = CliRunner()
    res = runner.invoke(cli_app, ["serve", "--models", "no-such-model", "--port", "1"])
    assert res.exit_code == 1 and "no-such-model" in res.output
    assert "Traceback" not in res.output
    res = runner.invoke(cli_app, ["serve", "--models", "identity", "--max-upload-mb", "0"])
    assert res.exit_code == 1 and "--max-upload-mb: must be > 0, got 0.0" in res.output
    assert "serve" in runner.invoke(cli_app, ["--help"]).output


def test_abandoned_request_stops_at_the_next_tile() -> None:
    net = SlowNet()
    app = create_app({"slow": loaded(net)}, ServeLimits(workers=1, timeout_s=0.5))
    img = png_bytes(random_image(128, 128))  # 64 tiles of 16x16: over 3 s in all
    with TestClient(app) as c:
        assert_json_error(post(c, "/v1/restore", img, model="slow", tile="16"), 504)
        time.sleep(0.3)
        stopped_at = net.calls
        time.sleep(0.5)
        assert net.calls == stopped_at < 64  # the thread left the tile loop
        _wait(lambda: list(app.state.server.root.iterdir()) == [])


def test_models_by_artifact_path_and_onnx_file(tmp_path: Path) -> None:
    import clearsight
    from clearsight.errors import ClearsightError
    from clearsight.export.onnx import export_onnx

    with pytest.warns(UserWarning, match="rescan-conv"):
        arch = clearsight.load_model("rescan-conv")
    art = clearsight.save_artifact(arch.model, tmp_path / "my-derainer", arch.config)
    onnx, _ = export_onnx(clearsight.load_model("identity"), tmp_path / "plain.onnx")
    with TestClient(create_app([str(art), str(onnx)], ServeLimits(workers=1))) as c:
        rows = {m["name"]: m for m in c.get("/v1/models").json()["models"]}
        assert set(rows) == {"my-derainer", "plain"}  # file names' stems, never paths
        assert rows["my-derainer"]["tasks"] == ["derain"]
        img = random_image(24, 24, seed=3)
        out = post(c, "/v1/restore", png_bytes(img), model="plain")
        assert out.status_code == 200, out.text
        np.testing.assert_array_equal(np.asarray(Image.open(io.BytesIO(out.content))), img)
        by_path = post(c, "/v1/restore", png_bytes(img), model=str(onnx))
        assert by_path.status_code == 404  # a path is never looked up, only names
    with pytest.raises(ClearsightError, match="both called 'my-derainer'"):
        create_app([str(art), str(art)])
