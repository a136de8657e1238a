"""Serving: the HTTP API and page (`clearsight.serve`) under uvicorn, on bound sockets."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from clearsight.errors import ClearsightError

DEFAULT_SERVE_MODELS = ("default-derain", "default-demoire", "default-detect")


@dataclass(frozen=True)
class Serving:
    """What a starting server serves: the model names, its URLs and its limits."""

    models: list[str]
    urls: list[str]
    workers: int
    max_in_flight: int


def serve(
    models: Sequence[str] = DEFAULT_SERVE_MODELS,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    workers: int = 0,
    max_in_flight: int = 0,
    max_upload_mb: float = 25.0,
    timeout: float = 120.0,
    max_pixels: int | None = None,
    max_video_mb: float = 200.0,
    max_video_seconds: float = 60.0,
    job_workers: int = 1,
    max_jobs: int = 4,
    keep_jobs: int = 20,
    device: str = "cpu",
    on_ready: Callable[[Serving], None] | None = None,
) -> None:
    """Serve `models` (bundled names, artifact paths, `.onnx` files; loaded once) over HTTP
    until interrupted: a page at /, the JSON API at /v1, docs at /docs (docs/serve.md).

    Binds `host` (loopback by default) and `port` (0: any free port) before loading the
    models, so a bad or busy address fails first. `workers` inference threads (0: half the
    cores), `max_in_flight` images at once (0: twice the workers; more get 503), uploads up
    to `max_upload_mb`, `timeout` seconds per request (then 504). Videos are jobs
    (`POST /v1/jobs`): up to `max_video_mb` and `max_video_seconds`, `job_workers` at a
    time, `max_jobs` queued or running (more get 503), `keep_jobs` finished ones kept
    (docs/serving.md#video-jobs). `on_ready(serving)` is
    called once the models are loaded, before the server runs. Returns when stopped
    (Ctrl-C). Raises `ClearsightError` when fastapi/uvicorn are missing, for a bad limit,
    address or model, or when the server does not start.
    """
    try:
        import uvicorn

        from clearsight.serve import ServeLimits, create_app
        from clearsight.serve.listen import bind_sockets, close_all, url
    except ImportError as exc:
        raise ClearsightError(
            f"`serve` needs fastapi, uvicorn and python-multipart ({exc.name} is missing); "
            "pip install 'clearsight[serve]'"
        ) from None
    for flag_name, value, low in (
        ("--workers", workers, 0),
        ("--max-in-flight", max_in_flight, 0),
        ("--max-upload-mb", max_upload_mb, 1e-6),
        ("--timeout", timeout, 1e-6),
        ("--max-video-mb", max_video_mb, 1e-6),
        ("--max-video-seconds", max_video_seconds, 1e-6),
        ("--job-workers", job_workers, 1),
        ("--max-jobs", max_jobs, 1),
        ("--keep-jobs", keep_jobs, 1),
    ):
        if not value >= low:
            raise ClearsightError(f"{flag_name}: must be {'> 0' if low else '>= 0'}, got {value}")
    limits = ServeLimits(
        max_upload_bytes=max(1, int(max_upload_mb * 1024 * 1024)),
        max_pixels=max_pixels,
        workers=workers,
        max_in_flight=max_in_flight,
        timeout_s=timeout,
        max_video_bytes=max(1, int(max_video_mb * 1024 * 1024)),
        max_video_seconds=max_video_seconds,
        job_workers=job_workers,
        max_jobs=max_jobs,
        keep_jobs=keep_jobs,
    )
    sockets = bind_sockets(host, port)  # a bad or busy address fails before the models load
    try:
        _share_cores(limits.workers)
        server_app = create_app(list(models), limits, device=device)
        server = uvicorn.Server(uvicorn.Config(server_app, log_level="warning"))
        if on_ready is not None:
            on_ready(
                Serving(
                    list(server_app.state.server.models),
                    [url(s) for s in sockets],
                    limits.workers,
                    limits.max_in_flight,
                )
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
    import torch

    torch.set_num_threads(max(1, (os.cpu_count() or 1) // workers))
