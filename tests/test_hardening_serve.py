"""The server's failures from the second hardening round: a client that goes away
mid-upload, a bad or busy `--port`, the pixel limit missing from `/v1/models`, and uploads
left unclosed when a request is refused. Network tests use 127.0.0.1 only."""

from __future__ import annotations

import gc
import http.client
import logging
import socket
import threading
import time
import warnings
from collections.abc import Iterator

import pytest
from torch import nn
from typer.testing import CliRunner

from tests.optional import need

need("fastapi")
need("uvicorn")
need("httpx")
import uvicorn  # noqa: E402
from fastapi.testclient import TestClient  # noqa: E402

from clearsight.cli import app as cli_app  # noqa: E402
from clearsight.io import DEFAULT_MAX_PIXELS, MAX_PIXELS_ENV  # noqa: E402
from clearsight.serve import ServeLimits, create_app  # noqa: E402
from tests.helpers import loaded  # noqa: E402

LOOPBACK = "127.0.0.1"
BOUNDARY = "clearsight-test-boundary"


def _wait(cond: object, seconds: float, what: str) -> None:
    end = time.monotonic() + seconds
    while not cond():  # type: ignore[operator]
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


@pytest.fixture()
def live_server(caplog: pytest.LogCaptureFixture) -> Iterator[tuple[uvicorn.Server, int]]:
    """A real uvicorn server in a thread, on a loopback port the kernel picked; its log
    (uvicorn's and the app's, tracebacks included) goes to `caplog`."""
    caplog.set_level(logging.INFO)
    app = create_app({"id": loaded(nn.Identity())}, ServeLimits(workers=1))
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        app, log_config=None, log_level="info", timeout_graceful_shutdown=5, lifespan="on"
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        _wait(lambda: server.started, 30, "the server to start")
        yield server, port
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
    assert not thread.is_alive(), "the server did not stop"


def _stalled_upload(port: int) -> socket.socket:
    """A multipart POST declaring 1 MB, of which only the headers and ~8 kB arrive."""
    part = (
        (
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="model"\r\n\r\nid\r\n'
            f'--{BOUNDARY}\r\nContent-Disposition: form-data; name="image"; filename="a.png"\r\n'
            "Content-Type: image/png\r\n\r\n"
        ).encode()
        + b"\x89PNG\r\n\x1a\n"
        + b"\0" * 8000
    )
    head = (
        f"POST /v1/restore HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\n"
        f"Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n"
        "Content-Length: 1000000\r\n\r\n"
    ).encode()
    conn = socket.create_connection((LOOPBACK, port), timeout=5)
    conn.sendall(head + part)
    return conn


def test_client_disconnect_mid_upload_is_one_info_line_not_a_traceback(
    live_server: tuple[uvicorn.Server, int], caplog: pytest.LogCaptureFixture
) -> None:
    server, port = live_server
    uploads = 3
    for _ in range(uploads):
        conn = _stalled_upload(port)
        _wait(lambda: len(server.server_state.tasks) == 1, 10, "the server to read the upload")
        conn.close()  # the client goes away mid-body
        _wait(lambda: not server.server_state.tasks, 10, "the server to drop the request")
    log = caplog.text
    assert "Traceback" not in log, log
    assert "internal error" not in log and "Exception in ASGI" not in log, log
    disconnects = [r for r in caplog.records if "disconnect" in r.getMessage()]
    assert len(disconnects) <= uploads and all(r.levelno <= logging.INFO for r in disconnects)
    # ... and the server still answers
    client = http.client.HTTPConnection(LOOPBACK, port, timeout=10)
    try:
        client.request("GET", "/healthz")
        resp = client.getresponse()
        assert resp.status == 200 and b'"in_flight":0' in resp.read()
    finally:
        client.close()


# ------------------------------------------------------------------------- --port


@pytest.mark.parametrize("port", ["70000", "65536", "-1"])
def test_out_of_range_port_is_refused_before_the_models_load(port: str) -> None:
    res = CliRunner().invoke(cli_app, ["serve", "--port", port, "--models", "no-such-model"])
    assert res.exit_code == 1, res.output
    assert f"--port: must be 0 to 65535, got {port}" in res.output
    assert "no-such-model" not in res.output  # the port is checked before any model loads
    assert "serving" not in res.output and "Traceback" not in res.output
    assert "internal error" not in res.output


def test_port_in_use_is_one_line_and_exit_1_before_the_models_load() -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind((LOOPBACK, 0))
        busy.listen(1)
        port = str(busy.getsockname()[1])
        args = ["serve", "--host", LOOPBACK, "--port", port]
        res = CliRunner().invoke(cli_app, [*args, "--models", "no-such-model"])
        assert res.exit_code == 1, res.output
        assert f"--port: {port} is already in use on {LOOPBACK}" in res.output
        assert "no-such-model" not in res.output and "serving" not in res.output
        res = CliRunner().invoke(cli_app, [*args, "--models", "identity"])
        assert res.exit_code == 1, res.output  # never 3: that is "some inputs failed"
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and "already in use" in lines[0], res.output


def test_serving_is_printed_once_the_socket_is_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    """`--port 0` takes a free port: the line names the port actually bound, and the
    server is handed that very socket, still open, and closes it when it stops."""
    handed: list[tuple[socket.socket, int]] = []

    def fake_run(self: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
        handed.extend((s, s.getsockname()[1]) for s in sockets or [])
        self.started = True

    monkeypatch.setattr(uvicorn.Server, "run", fake_run)
    res = CliRunner().invoke(
        cli_app, ["serve", "--host", LOOPBACK, "--port", "0", "--models", "identity"]
    )
    assert res.exit_code == 0, res.output
    assert len(handed) == 1
    sock, bound = handed[0]
    assert bound != 0 and f"serving identity on http://{LOOPBACK}:{bound} " in res.output
    assert sock.fileno() == -1  # closed once the server stopped


def test_unresolvable_host_is_one_line() -> None:
    res = CliRunner().invoke(
        cli_app, ["serve", "--host", "no-such-host.invalid", "--port", "0", "--models", "x"]
    )
    assert res.exit_code == 1, res.output
    assert "--host: " in res.output and "no-such-host.invalid" in res.output
    assert "Traceback" not in res.output and "serving" not in res.output


# ------------------------------------------------------------------------- /v1/models


def test_models_limits_report_max_pixels(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(MAX_PIXELS_ENV, raising=False)
    model = {"id": loaded(nn.Identity())}
    with TestClient(create_app(model, ServeLimits(workers=1, max_pixels=1234))) as c:
        assert c.get("/v1/models").json()["limits"]["max_pixels"] == 1234
    with TestClient(create_app(model, ServeLimits(workers=1))) as c:
        assert c.get("/v1/models").json()["limits"]["max_pixels"] == DEFAULT_MAX_PIXELS
    monkeypatch.setenv(MAX_PIXELS_ENV, "5000")
    with TestClient(create_app(model, ServeLimits(workers=1))) as c:
        assert c.get("/v1/models").json()["limits"]["max_pixels"] == 5000


# ------------------------------------------------------------------------- uploads closed


def test_refused_uploads_are_closed() -> None:
    """Each refusal after the form is parsed closes every upload: no ResourceWarning."""
    requests = {
        "wrong file field": ({"photo": ("a.png", b"\x89PNG....")}, {"model": "id"}, 422),
        "two file fields": (
            [("image", ("a.png", b"\x89PNG")), ("photo", ("b.png", b"\x89PNG"))],
            {"model": "id"},
            400,
        ),
        "oversize image": ({"image": ("a.png", b"\x89PNG" + b"\0" * 5000)}, {"model": "id"}, 413),
        "not an image": ({"image": ("a.png", b"hello")}, {"model": "id"}, 415),
        "unknown model": ({"image": ("a.png", b"\x89PNG")}, {"model": "nope"}, 404),
    }
    limits = ServeLimits(workers=1, max_upload_bytes=4000)
    with TestClient(create_app({"id": loaded(nn.Identity())}, limits)) as c:
        for what, (files, data, status) in requests.items():
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                resp = c.post("/v1/restore", files=files, data=data)
                gc.collect()
            assert resp.status_code == status, (what, resp.text)
            leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
            assert leaks == [], (what, leaks)
