"""The server's limits, one value shared by the app, the CLI and the tests."""

from __future__ import annotations

import os
from dataclasses import dataclass

DEFAULT_MAX_UPLOAD_BYTES = 25 * 1024 * 1024
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_MAX_VIDEO_BYTES = 200 * 1024 * 1024
DEFAULT_MAX_VIDEO_SECONDS = 60.0
DEFAULT_JOB_WORKERS = 1
DEFAULT_MAX_JOBS = 4
DEFAULT_KEEP_JOBS = 20
DEFAULT_JOB_RETRY_AFTER_S = 10


def default_workers() -> int:
    """Inference threads: half the cores (each forward pass uses several intra-op threads)."""
    return max(1, (os.cpu_count() or 2) // 2)


@dataclass(frozen=True)
class ServeLimits:
    """What one request may cost the server."""

    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    """Largest request body accepted (413 beyond it), counted while it arrives."""
    max_pixels: int | None = None
    """Decoded width*height limit; None: `clearsight.io`'s default (200M, or the env var)."""
    workers: int = 0
    """Inference threads; 0 picks `default_workers()`."""
    max_in_flight: int = 0
    """Images being decoded, restored or detected at once (running or queued for a worker);
    beyond it a request gets 503 with Retry-After. 0: twice the workers."""
    timeout_s: float = DEFAULT_TIMEOUT_S
    """A request still running after this gets 504 and frees its slot."""
    retry_after_s: int = 2
    max_video_bytes: int = DEFAULT_MAX_VIDEO_BYTES
    """Largest video upload accepted by `POST /v1/jobs` (413 beyond it)."""
    max_video_seconds: float = DEFAULT_MAX_VIDEO_SECONDS
    """Longest video accepted as a job (its duration is read before it is queued)."""
    job_workers: int = DEFAULT_JOB_WORKERS
    """Video jobs run at once, each on its own thread (apart from the image threads)."""
    max_jobs: int = DEFAULT_MAX_JOBS
    """Video jobs queued or running at once; beyond it `POST /v1/jobs` gets 503."""
    keep_jobs: int = DEFAULT_KEEP_JOBS
    """Finished jobs (done, failed, cancelled) remembered; the oldest beyond it are
    dropped with their result files."""
    job_retry_after_s: int = DEFAULT_JOB_RETRY_AFTER_S

    def __post_init__(self) -> None:
        workers = self.workers or default_workers()
        object.__setattr__(self, "workers", workers)
        object.__setattr__(self, "max_in_flight", self.max_in_flight or 2 * workers)
        for name in (
            "max_upload_bytes",
            "workers",
            "max_in_flight",
            "retry_after_s",
            "max_video_bytes",
            "job_workers",
            "max_jobs",
            "keep_jobs",
            "job_retry_after_s",
        ):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s!r}")
        if not self.max_video_seconds > 0:
            raise ValueError(f"max_video_seconds must be > 0, got {self.max_video_seconds!r}")
