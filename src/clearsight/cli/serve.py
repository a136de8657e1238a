"""`clearsight serve`: the HTTP API and page (`clearsight.serve`) under uvicorn."""

from __future__ import annotations

from typing import Annotated

import typer

from clearsight.api import DEFAULT_SERVE_MODELS
from clearsight.cli._app import app, err_console, friendly
from clearsight.cli._options import DeviceOpt, MaxPixOpt


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
    ] = ",".join(DEFAULT_SERVE_MODELS),
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
    max_video_mb: Annotated[
        float, typer.Option("--max-video-mb", help="Largest video accepted as a job, in MB.")
    ] = 200.0,
    max_video_seconds: Annotated[
        float, typer.Option("--max-video-seconds", help="Longest video accepted as a job.")
    ] = 60.0,
    job_workers: Annotated[
        int, typer.Option("--job-workers", help="Video jobs run at once, each on a thread.")
    ] = 1,
    max_jobs: Annotated[
        int,
        typer.Option("--max-jobs", help="Video jobs queued or running at once; more get 503."),
    ] = 4,
    keep_jobs: Annotated[
        int,
        typer.Option(
            "--keep-jobs", help="Finished video jobs kept; the oldest go with their files."
        ),
    ] = 20,
    device: DeviceOpt = "cpu",
) -> None:
    """Serve the loaded models over HTTP: a page at /, the JSON API at /v1, docs at /docs."""
    from clearsight.api import Serving, serve

    def ready(serving: Serving) -> None:
        err_console.print(
            f"serving {', '.join(serving.models)} on {' and '.join(serving.urls)} "
            f"({serving.workers} inference threads, {serving.max_in_flight} images in flight)",
            highlight=False,
            soft_wrap=True,  # one line, however narrow the terminal
            markup=False,  # model names come from the user's file names
        )

    serve(
        [m.strip() for m in models.split(",") if m.strip()],
        host=host,
        port=port,
        workers=workers,
        max_in_flight=max_in_flight,
        max_upload_mb=max_upload_mb,
        timeout=timeout,
        max_pixels=max_pixels,
        max_video_mb=max_video_mb,
        max_video_seconds=max_video_seconds,
        job_workers=job_workers,
        max_jobs=max_jobs,
        keep_jobs=keep_jobs,
        device=device,
        on_ready=ready,
    )
