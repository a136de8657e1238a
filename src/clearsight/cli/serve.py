"""`clearsight serve`: the HTTP API and page (`clearsight.serve`) under uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from clearsight.cli._app import app, err_console, friendly
from clearsight.cli._options import DeviceOpt, MaxPixOpt
from clearsight.errors import ClearsightError

DEFAULT_SERVE_MODELS = "default-derain,default-demoire,default-detect"


@app.command("serve")
@friendly
def serve_cmd(
    host: Annotated[
        str, typer.Option("--host", help="Address to bind (loopback unless you say otherwise).")
    ] = "127.0.0.1",
    port: Annotated[
        int, typer.Option("--port", help="TCP port, 0 to 65535 (0: any free port).")
    ] = 8000,
    models: Annotated[
        str,
        typer.Option(
            "--models",
            help="Comma-separated models to load once: bundled names, artifact paths, .onnx files.",
        ),
    ] = DEFAULT_SERVE_MODELS,
    workers: Annotated[
        int, typer.Option("--workers", help="Inference threads (0: half the CPU cores).")
    ] = 0,
    max_in_flight: Annotated[
        int,
        typer.Option(
            "--max-in-flight",
            help="Images processed or queued at once; more get 503 (0: twice --workers).",
        ),
    ] = 0,
    max_upload_mb: Annotated[
        float, typer.Option("--max-upload-mb", help="Largest upload accepted, in MB.")
    ] = 25.0,
    timeout: Annotated[
        float, typer.Option("--timeout", help="Seconds before a request gets 504.")
    ] = 120.0,
    max_pixels: MaxPixOpt = None,
    device: DeviceOpt = "cpu",
) -> None:
    """Serve the loaded models over HTTP: a page at /, the JSON API at /v1, docs at /docs."""
    try:
        import uvicorn

        from clearsight.serve import ServeLimits, create_app
        from clearsight.serve.listen import bind_sockets, close_all, url
    except ImportError as exc:
        raise ClearsightError(
            f"`serve` needs fastapi, uvicorn and python-multipart ({exc.name} is missing); "
            "pip install 'clearsight[serve]'"
        ) from None
    refs = [m.strip() for m in models.split(",") if m.strip()]
    for flag_name, value, low in (
        ("--workers", workers, 0),
        ("--max-in-flight", max_in_flight, 0),
        ("--max-upload-mb", max_upload_mb, 1e-6),
        ("--timeout", timeout, 1e-6),
    ):
        if not value >= low:
            raise ClearsightError(f"{flag_name}: must be {'> 0' if low else '>= 0'}, got {value}")
    limits = ServeLimits(
        max_upload_bytes=max(1, int(max_upload_mb * 1024 * 1024)),
        max_pixels=max_pixels,
        workers=workers,
        max_in_flight=max_in_flight,
        timeout_s=timeout,
    )
    sockets = bind_sockets(host, port)  # a bad or busy address fails before the models load
    try:
        _share_cores(limits.workers)
        server_app = create_app(refs, limits, device=device)
        server = uvicorn.Server(uvicorn.Config(server_app, log_level="warning"))
        err_console.print(
            f"serving {', '.join(server_app.state.server.models)} on "
            f"{' and '.join(url(s) for s in sockets)} "
            f"({limits.workers} inference threads, {limits.max_in_flight} images in flight)",
            highlight=False,
            soft_wrap=True,  # one line, however narrow the terminal
            markup=False,  # model names come from the user's file names
        )
        try:
            server.run(sockets=sockets)
        except KeyboardInterrupt:
            pass  # Ctrl-C is how a server is stopped (uvicorn.run does the same)
        except SystemExit as exc:  # uvicorn's startup failure exits 3, which means otherwise
            raise ClearsightError(f"the server did not start (uvicorn exit {exc.code})") from None
        if not server.started:
            raise ClearsightError("the server did not start; see the lines above")
    finally:
        close_all(sockets)


def _share_cores(workers: int) -> None:
    """Split torch's intra-op threads between the inference threads, so N concurrent images
    do not each spawn a thread per core."""
    import os

    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
