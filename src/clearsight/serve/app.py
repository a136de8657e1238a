"""The FastAPI app: the page, `/v1/models`, `/v1/restore`, `/v1/detect`, `/v1/jobs`,
`/healthz`.

Requests are read with a byte cap (413), parsed in memory, sniffed (415), then handed to a
fixed pool of inference threads so the event loop keeps answering (`/healthz` stays fast
while images are restored). At most `max_in_flight` images are in the pool at once; the
next gets 503 with Retry-After. A request past `timeout_s` gets 504 and frees its slot; its
thread stops at the model's next tile. Every error is JSON `{"error": ...}`, never a
traceback; a client that disconnects mid-upload is one info line in the log. A video is a
job (`serve/jobs.py`): checked, queued, answered 202 at once, and polled.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import shutil
import tempfile
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from pathlib import Path
from typing import IO, Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse, Response
from fastapi.staticfiles import StaticFiles
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.formparsers import MultiPartException, MultiPartParser
from starlette.requests import ClientDisconnect

from clearsight._version import __version__
from clearsight.artifact import LoadedModel
from clearsight.errors import ClearsightError, OptionError, library_reason
from clearsight.families import FAMILIES, Family
from clearsight.io import resolve_max_pixels
from clearsight.serve.jobs import ACTIVE, JobQueue, JobStatus, QueueFull, VideoJob
from clearsight.serve.limits import ServeLimits
from clearsight.serve.options import (
    check_fields,
    check_job_fields,
    field_name,
    flag_true,
    restore_options,
    score_threshold,
)
from clearsight.serve.registry import DEFAULT_MODELS, ServedModel, load_models, restore_front
from clearsight.serve.sniff import SUPPORTED, sniff_image
from clearsight.serve.video_work import check_upload, plan_work, upload_suffix
from clearsight.serve.work import Abandoned, Job, TooManyPixels, detect_job, restore_job

log = logging.getLogger("clearsight.serve")
STATIC = Path(__file__).with_name("static")
T = TypeVar("T")


class ApiError(Exception):
    """An error answered as JSON with this status (and optional headers)."""

    def __init__(self, status: int, message: str, headers: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.headers = status, message, headers or {}


def _error_response(
    status: int, message: str, headers: dict[str, str] | None = None, **extra: Any
) -> JSONResponse:
    return JSONResponse({"error": message, "status": status, **extra}, status, headers=headers)


def _clearsight_status(exc: ClearsightError) -> int:
    if isinstance(exc, TooManyPixels):
        return 413
    return 422  # a bad option, an unreadable image: the request is understood but refused


class _InMemoryMultiPart(MultiPartParser):
    """Starlette's parser with the upload kept in memory: the body is capped before parsing,
    so nothing spills to a temporary file outside the server's private folder."""

    spool_max_size = 1 << 62


class _SpooledMultiPart(MultiPartParser):
    """For videos: past 1 MiB the upload spills to an anonymous temporary file (mode 0600,
    unnamed, gone when closed), then is copied into its job's private folder."""

    spool_max_size = 1 << 20


class Server:
    """The shared state behind the routes: models, limits, pool, slots, private folder."""

    def __init__(self, models: dict[str, ServedModel], limits: ServeLimits) -> None:
        self.models, self.limits = models, limits
        self.max_pixels = resolve_max_pixels(limits.max_pixels)  # a bad env var fails here
        self.pool = ThreadPoolExecutor(limits.workers, thread_name_prefix="clearsight-infer")
        self.root = Path(tempfile.mkdtemp(prefix="clearsight-serve-"))  # mode 0700
        self.in_flight = 0
        self.jobs = JobQueue(
            self.root / "jobs",
            workers=limits.job_workers,
            max_jobs=limits.max_jobs,
            keep=limits.keep_jobs,
        )

    def close(self) -> None:
        self.jobs.close()
        self.pool.shutdown(wait=False, cancel_futures=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def model(self, name: str | None, family: Family | None = None) -> ServedModel:
        if not name:
            raise ApiError(422, "field 'model' is missing; see GET /v1/models")
        served = self.models.get(name)
        if served is None:
            known = ", ".join(self.models)
            raise ApiError(404, f"unknown model {name!r}; this server has: {known}")
        if family is not None and (family is Family.DETECTION) != served.is_detector:
            other = FAMILIES[served.loaded.family].serve_endpoint
            raise ApiError(422, f"model {name!r} is a {served.task!r} model; send it to {other}")
        return served

    async def read_form(self, request: Request) -> tuple[bytes, dict[str, str]]:
        """The `image` bytes and the text fields, the body read with the upload cap."""
        limit = self.limits.max_upload_bytes
        async with self.form(request, "image", limit, _InMemoryMultiPart) as (upload, fields):
            return await upload.read(), fields

    @asynccontextmanager
    async def form(
        self, request: Request, file_field: str, limit: int, parser: type[MultiPartParser]
    ) -> AsyncIterator[tuple[UploadFile, dict[str, str]]]:
        """The one uploaded file `file_field` and the text fields, the body read with the
        upload cap `limit`; the upload is closed when the block ends."""
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit + 64 * 1024:
            raise ApiError(413, _too_big(int(declared), limit))
        ctype = request.headers.get("content-type", "")
        if not ctype.startswith("multipart/form-data"):
            raise ApiError(
                415, f"send a multipart/form-data body with the file field {file_field!r}"
            )

        async def capped() -> AsyncGenerator[bytes, None]:
            total = 0
            async for chunk in request.stream():
                total += len(chunk)
                if total > limit + 64 * 1024:  # the form's own bytes around the file
                    raise ApiError(413, _too_big(total, limit, at_least=True))
                yield chunk

        try:
            parsed = await parser(request.headers, capped(), max_files=1, max_fields=32).parse()
        except MultiPartException as exc:
            raise ApiError(400, f"malformed form: {exc.message}") from None
        fields: dict[str, str] = {}
        upload: UploadFile | None = None
        try:
            for key, value in parsed.multi_items():
                if isinstance(value, UploadFile):
                    if key != file_field:
                        raise OptionError(
                            key, f"unexpected file field; send the {file_field} as {file_field!r}"
                        )
                    upload = value
                else:
                    fields[key] = value
            if upload is None:
                raise ApiError(
                    422,
                    f"field {file_field!r} is missing: attach the {file_field} file as "
                    f"{file_field!r}",
                )
            if upload.size is not None and upload.size > limit:
                raise ApiError(413, _too_big(upload.size, limit))
            yield upload, fields
        finally:
            await parsed.close()  # every upload, also when a field is refused

    def job(self, data: bytes) -> Job:
        fmt = sniff_image(data)
        if fmt is None:
            raise ApiError(
                415, f"the uploaded file is not an image this server reads ({SUPPORTED})"
            )
        return Job(data, fmt, self.root, self.max_pixels)

    def job_room(self) -> None:
        """503 with Retry-After when no video job could be queued now."""
        try:
            self.jobs.check_room()
        except QueueFull:
            raise self.queue_full() from None

    def queue_full(self) -> ApiError:
        return ApiError(
            503,
            f"the server has {self.limits.max_jobs} video jobs queued or running, its "
            "limit; retry later",
            {"Retry-After": str(self.limits.job_retry_after_s)},
        )

    def find_job(self, job_id: str) -> VideoJob:
        job = self.jobs.get(job_id)
        if job is None:
            raise ApiError(
                404,
                f"unknown job {job_id!r} (a finished job is kept until "
                f"{self.limits.keep_jobs} newer ones have finished)",
            )
        return job

    async def submit_video(self, request: Request) -> VideoJob:
        """Read, check and queue a video job (refusals are answered before it is queued)."""
        limits = self.limits
        self.job_room()  # before reading a large upload
        async with self.form(request, "video", limits.max_video_bytes, _SpooledMultiPart) as (
            upload,
            fields,
        ):
            served = self.model(fields.get("model"))
            check_job_fields(fields, served.loaded.family)
            work = plan_work(served, fields, self.max_pixels, self.models)
            job = self.jobs.new(served.name, served.loaded.family, upload_suffix(upload.filename))
            try:
                await upload.seek(0)
                await asyncio.to_thread(_save, upload.file, job.upload)
            except BaseException:
                self.jobs.discard(job)
                raise
        try:
            await asyncio.to_thread(check_upload, job, self.max_pixels, limits.max_video_seconds)
            self.jobs.submit(job, work)
        except QueueFull:
            raise self.queue_full() from None
        except BaseException:
            self.jobs.discard(job)
            raise
        return job

    async def run(self, job: Job, fn: Callable[[], T]) -> T:
        """Run `fn` on an inference thread within a slot; 503 when none is free, 504 late."""
        limits = self.limits
        if self.in_flight >= limits.max_in_flight:
            raise ApiError(
                503,
                f"the server is busy ({self.in_flight} images in flight); retry shortly",
                {"Retry-After": str(limits.retry_after_s)},
            )
        self.in_flight += 1
        future = self.pool.submit(fn)
        try:
            return await asyncio.wait_for(asyncio.wrap_future(future), limits.timeout_s)
        except TimeoutError:
            job.cancelled.set()
            future.cancel()  # still queued: never runs; running: stops at its next tile
            raise ApiError(
                504, f"the image took longer than the server's limit of {limits.timeout_s:g} s"
            ) from None
        finally:
            self.in_flight -= 1


def _size(n: int) -> str:
    """Bytes as people read them: 25.0 MB, 3,900 bytes."""
    return f"{n / (1024 * 1024):.1f} MB" if n >= 1024 * 1024 else f"{n:,} bytes"


def _too_big(size: int, limit: int, at_least: bool = False) -> str:
    more = "over " if at_least else ""
    return f"the upload is {more}{_size(size)}; the server's limit is {_size(limit)}"


def _save(src: IO[bytes], dst: Path) -> None:
    with open(dst, "xb") as out:
        shutil.copyfileobj(src, out, 1 << 20)


def _result_file(job: VideoJob, part: str | None) -> tuple[Path, str, str]:
    """The file `GET /v1/jobs/{id}/result` answers: (path, media type, download name)."""
    if job.status is not JobStatus.DONE:
        if job.status in ACTIVE:
            total = f" of {job.total_frames}" if job.total_frames else ""
            why = f"is {job.status.value} ({job.frames_done}{total} frames done)"
        elif job.status is JobStatus.FAILED:
            why = f"failed: {job.error}"
        else:
            why = "was cancelled"
        raise ApiError(409, f"job {job.id} {why}; a result exists once its status is done")
    key = (part or "video").strip().lower()
    if key == "video" and job.result is not None:
        return job.result, "video/mp4", f"clearsight-{job.id}.mp4"
    if key == "detections":
        if job.detections is None:
            raise ApiError(404, f"job {job.id} ran a restoration model; it has no detections")
        return job.detections, "application/x-ndjson", f"clearsight-{job.id}.jsonl"
    raise OptionError("part", f"expected video or detections, got {part!r}")


def _png_b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def create_app(
    models: Sequence[str] | Mapping[str, LoadedModel] = DEFAULT_MODELS,
    limits: ServeLimits | None = None,
    device: str = "cpu",
) -> FastAPI:
    """The app serving `models` (references loaded now, or loaded models by name)."""
    server = Server(load_models(models, device=device), limits or ServeLimits())

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncGenerator[None, None]:
        yield
        server.close()

    app = FastAPI(
        title="clearsight",
        version=__version__,
        description="Image restoration (derain, demoiré) and object detection.",
        lifespan=lifespan,
    )
    app.state.server = server
    _install_errors(app)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    async def page() -> FileResponse:
        return FileResponse(STATIC / "index.html", media_type="text/html")

    @app.get("/healthz", summary="Liveness: answers while images are being processed")
    async def healthz() -> dict[str, Any]:
        return {
            "status": "ok",
            "models": len(server.models),
            "in_flight": server.in_flight,
            "max_in_flight": server.limits.max_in_flight,
            "jobs": server.jobs.active(),
        }

    @app.get("/v1/models", summary="The loaded models and the tasks each serves")
    async def list_models() -> dict[str, Any]:
        return {
            "models": [m.describe() for m in server.models.values()],
            "limits": {
                "max_upload_bytes": server.limits.max_upload_bytes,
                "max_pixels": server.max_pixels,
                "max_in_flight": server.limits.max_in_flight,
                "timeout_s": server.limits.timeout_s,
                "max_video_bytes": server.limits.max_video_bytes,
                "max_video_seconds": server.limits.max_video_seconds,
                "max_jobs": server.limits.max_jobs,
                "job_workers": server.limits.job_workers,
                "keep_jobs": server.limits.keep_jobs,
            },
        }

    @app.post(
        FAMILIES[Family.RESTORATION].serve_endpoint,
        summary="Restore an image (PNG out, or JSON with a base64 PNG when format=json)",
        responses={200: {"content": {"image/png": {}, "application/json": {}}}},
        openapi_extra=_form_schema(
            {
                "model": "name from GET /v1/models",
                "tile": "tile size in pixels (0: never tile; empty: automatic)",
                "tta": "none, flip or x8",
                "scales": "comma-separated scales, e.g. 1.0,0.75",
                "stages": "all, auto or a number (multi-stage models)",
                "stage_threshold": "with stages=auto",
                "format": "png (default) or json",
            }
        ),
    )
    async def restore(request: Request) -> Response:
        data, fields = await server.read_form(request)
        check_fields(fields, "restore")
        served = server.model(fields.get("model"), Family.RESTORATION)
        options = restore_options(fields)
        out_format = (fields.get("format") or "png").strip().lower()
        if out_format not in ("png", "json"):
            raise OptionError("format", f"expected png or json, got {out_format!r}")
        job = server.job(data)
        png, facts = await server.run(job, lambda: restore_job(job, served, options))
        if out_format == "json":
            return JSONResponse({"model": served.name, **facts, "image_png": _png_b64(png)})
        headers = {
            "X-Latency-Ms": f"{facts['latency_ms']:.2f}",
            "Content-Disposition": 'inline; filename="restored.png"',
        }
        return Response(png, media_type="image/png", headers=headers)

    @app.post(
        FAMILIES[Family.DETECTION].serve_endpoint,
        summary="Detect objects: COCO results JSON, optionally with a drawn copy (base64 PNG)",
        openapi_extra=_form_schema(
            {
                "model": "name of a detection model from GET /v1/models",
                "score_threshold": "keep boxes scoring at least this (0-1)",
                "restore": "a served restoration model run first (auto: default-derain "
                "where the image looks rainy)",
                "draw": "true: include the image with its boxes drawn",
            }
        ),
    )
    async def detect(request: Request) -> JSONResponse:
        from clearsight.engine.detector import DEFAULT_SCORE_THRESHOLD

        data, fields = await server.read_form(request)
        check_fields(fields, "detect")
        served = server.model(fields.get("model"), Family.DETECTION)
        threshold = score_threshold(fields, DEFAULT_SCORE_THRESHOLD)
        draw = flag_true(fields, "draw", False)
        chain = _chain(served, restore_front(server.models, fields.get("restore")))
        job = server.job(data)
        results, drawn, facts = await server.run(
            job, lambda: detect_job(job, served, threshold, draw, chain)
        )
        body: dict[str, Any] = {"model": served.name, **facts, "results": results}
        if drawn is not None:
            body["image_png"] = _png_b64(drawn)
        return JSONResponse(body)

    @app.post(
        "/v1/jobs",
        status_code=202,
        summary="Queue a video (any model): 202 with the job's id and URLs, then poll it",
        openapi_extra=_form_schema(
            {
                "model": "name from GET /v1/models (restoration or detection)",
                "tile": "restorers: tile size in pixels (0: never tile; empty: automatic)",
                "tta": "restorers: none, flip or x8",
                "scales": "restorers: comma-separated scales",
                "stages": "restorers: all, auto or a number",
                "stage_threshold": "restorers: with stages=auto",
                "temporal": "restorers: true blends each frame with the warped previous one",
                "score_threshold": "detectors: keep boxes scoring at least this (0-1)",
                "track": "detectors: true keeps an object's id across frames (ByteTrack)",
                "restore": "detectors: a served restoration model run on the frames first",
            },
            file_field="video",
        ),
    )
    async def submit_job(request: Request) -> JSONResponse:
        job = await server.submit_video(request)
        body = job.describe()
        return JSONResponse(body, 202, headers={"Location": body["urls"]["status"]})

    @app.get("/v1/jobs/{job_id}", summary="A video job: status, progress (frames, fps, ETA)")
    async def job_status(job_id: str) -> dict[str, Any]:
        return server.find_job(job_id).describe()

    @app.get(
        "/v1/jobs/{job_id}/result",
        summary="A done job's video (mp4), or with part=detections a detector's JSON lines",
        responses={200: {"content": {"video/mp4": {}, "application/x-ndjson": {}}}},
    )
    async def job_result(job_id: str, part: str | None = None) -> FileResponse:
        path, media, name = _result_file(server.find_job(job_id), part)
        return FileResponse(
            path, media_type=media, filename=name, content_disposition_type="inline"
        )

    @app.delete(
        "/v1/jobs/{job_id}",
        summary="Cancel a queued or running job, or delete a finished one (202 while a "
        "cancelled job is still stopping: it is deleted once it has)",
    )
    async def delete_job(job_id: str) -> JSONResponse:
        job = server.find_job(job_id)
        if job.status in ACTIVE:
            server.jobs.cancel(job)
            return JSONResponse(job.describe())
        if server.jobs.delete(job):
            return JSONResponse({"id": job.id, "status": "deleted"})
        return JSONResponse(
            {
                "id": job.id,
                "status": "deleting",
                "detail": "the job is still stopping; it is deleted, files and record, once "
                "it has (then GET answers 404)",
            },
            202,
        )

    return app


def _chain(served: ServedModel, front: tuple[Any, bool] | None) -> Any:
    """The served detector behind the served restoration model `front` (None: itself)."""
    if front is None:
        return None
    from clearsight.engine.inference import Restorer
    from clearsight.engine.pipeline import Pipeline

    loaded, gated = front
    detector = served.detector
    return Pipeline(detector.loaded, detector.device, restorer=Restorer(loaded), gated=gated)


def _form_schema(fields: dict[str, str], file_field: str = "image") -> dict[str, Any]:
    """The multipart request body for the docs (the route parses the form itself, with caps)."""
    props: dict[str, Any] = {file_field: {"type": "string", "format": "binary"}}
    props.update({k: {"type": "string", "description": v} for k, v in fields.items()})
    return {
        "requestBody": {
            "required": True,
            "content": {
                "multipart/form-data": {
                    "schema": {
                        "type": "object",
                        "required": [file_field, "model"],
                        "properties": props,
                    }
                }
            },
        }
    }


def _install_errors(app: FastAPI) -> None:
    """Every error as `{"error": message, "status": code}`; tracebacks only in the log."""

    @app.exception_handler(ApiError)
    async def api_error(_: Request, exc: ApiError) -> JSONResponse:
        return _error_response(exc.status, exc.message, exc.headers)

    @app.exception_handler(OptionError)
    async def option_error(_: Request, exc: OptionError) -> JSONResponse:
        name = field_name(exc.option)
        return _error_response(422, f"{name}: {exc.detail}", option=name)

    @app.exception_handler(ClearsightError)
    async def clearsight_error(_: Request, exc: ClearsightError) -> JSONResponse:
        return _error_response(_clearsight_status(exc), str(exc))

    @app.exception_handler(ClientDisconnect)
    async def client_gone(request: Request, _: ClientDisconnect) -> Response:
        # A client that closes its connection mid-upload is normal (a closed tab, a lost
        # network): one line, no traceback. Nobody is left to read the response.
        log.info("%s %s: the client disconnected before its request arrived",
                 request.method, request.url.path)  # fmt: skip
        return Response(status_code=400)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error_response(exc.status_code, str(exc.detail), getattr(exc, "headers", None))

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return _error_response(422, "invalid request: " + "; ".join(
            str(e.get("msg", e)) for e in exc.errors()))  # fmt: skip

    @app.exception_handler(Exception)
    async def internal_error(_: Request, exc: Exception) -> JSONResponse:
        if isinstance(exc, Abandoned):
            return _error_response(504, "the request was abandoned after its time limit")
        library = library_reason(exc, file_name="the upload")  # the library's own words
        if library is not None:
            return _error_response(422, library)
        log.exception("internal error")
        return _error_response(500, f"internal error ({type(exc).__name__}); see the server log")


__all__ = ["ApiError", "Server", "create_app"]
