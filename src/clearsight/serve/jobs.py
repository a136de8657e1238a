"""Video jobs: a bounded queue, the job records, and their files' lifetime.

A video takes far longer than an HTTP request should wait, so `POST /v1/jobs` queues it and
answers at once; `job_workers` threads (their own, apart from the image threads) run the
jobs in order, and clients poll the record for progress. Each job owns one private folder
under the server's (mode 0700) folder: the upload is removed when the job ends, however it
ends; a failed or cancelled job's folder goes with it, a done job's result stays until the
job is deleted, dropped as one of the oldest beyond `keep_jobs`, or the server stops.
Cancelling a running job stops it at its next frame (`JobCancelled` raised from the
pipeline's frame callback, so the writers remove their half-written files); deleting one
that is still stopping forgets it once it has stopped. docs/serving.md.
"""

from __future__ import annotations

import enum
import logging
import secrets
import shutil
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from clearsight.errors import ClearsightError, library_reason
from clearsight.families import Family

if TYPE_CHECKING:
    from clearsight.video.io import DecodeLimit

log = logging.getLogger("clearsight.serve")
CLOSE_WAIT_S = 10.0
"""At shutdown, how long running jobs get to reach their next frame and clean up."""


class JobStatus(enum.Enum):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (JobStatus.QUEUED, JobStatus.RUNNING)


class JobCancelled(Exception):
    """Raised from a job's frame callback once it is cancelled: the pipeline aborts."""


class QueueFull(Exception):
    """No room for another job (queued and running jobs are at `max_jobs`)."""


@dataclass
class VideoJob:
    """One video job: what it runs on, where its files are, how far it got."""

    id: str
    model: str
    family: Family
    folder: Path
    upload: Path
    """The uploaded video (removed when the job ends)."""
    result: Path | None = None
    """The result video, once done."""
    detections: Path | None = None
    """Detection jobs: the JSON-lines file, once done."""
    status: JobStatus = JobStatus.QUEUED
    error: str | None = None
    frames_done: int = 0
    total_frames: int | None = None
    fps: float = 0.0
    created: float = field(default_factory=time.time)
    started: float | None = None
    finished: float | None = None
    cancel: threading.Event = field(default_factory=threading.Event)
    future: Future[None] | None = None
    busy: bool = False
    """A worker thread is on it (a cancelled job stays busy until its next frame)."""
    decode_limit: DecodeLimit | None = None
    """The most frames and seconds the job decodes (set by `check_upload`, whatever the
    header says)."""
    notes: list[str] = field(default_factory=list)
    """What the client should know about a job that ran (a temporal blend skipped)."""
    delete_when_done: bool = False
    """`DELETE` came while a cancelled job was still stopping: forget it once it has."""

    def on_start(self, total: int | None) -> None:
        """The pipeline's start callback (it must not raise: the pipeline owns nothing yet)."""
        self.total_frames = total

    def on_frame(self, done: int, fps: float) -> None:
        """The pipeline's per-frame callback: progress, and the way out when cancelled."""
        self.frames_done, self.fps = done, fps
        self.check()

    def check(self, *_: Any) -> None:
        """Leave the work (also usable as a model's tile-progress hook) once cancelled."""
        if self.cancel.is_set():
            raise JobCancelled()

    def private(self, text: str) -> str:
        """A message with the server's own paths replaced by what the client knows."""
        return text.replace(str(self.upload), "the uploaded video").replace(
            str(self.folder), "the job's folder"
        )

    def describe(self) -> dict[str, Any]:
        """The job as `GET /v1/jobs/{id}` answers it."""
        eta = None
        if self.status is JobStatus.RUNNING and self.total_frames and self.fps > 0:
            eta = round(max(0, self.total_frames - self.frames_done) / self.fps, 1)
        base = f"/v1/jobs/{self.id}"
        urls = {"status": base, "result": f"{base}/result"}
        if self.family is Family.DETECTION:
            urls["detections"] = f"{base}/result?part=detections"
        return {
            "id": self.id,
            "model": self.model,
            "status": self.status.value,
            "progress": {
                "frames_done": self.frames_done,
                "total_frames": self.total_frames,
                "fps": round(self.fps, 2),
                "eta_s": eta,
            },
            "error": self.error,
            "notes": list(self.notes),
            "created": self.created,
            "started": self.started,
            "finished": self.finished,
            "urls": urls,
        }


Work = Callable[[VideoJob], None]
"""Runs a job to the end: fills `job.result` (and `job.detections`), calls `job.on_start`
and `job.on_frame`, raises `JobCancelled` or a `ClearsightError` to stop."""


class JobQueue:
    """The server's video jobs: at most `max_jobs` queued or running, `workers` at a time,
    `keep` finished ones remembered (oldest dropped first, files and all)."""

    def __init__(self, root: Path, *, workers: int, max_jobs: int, keep: int) -> None:
        self.root = root
        self.max_jobs, self.keep = max_jobs, keep
        self.pool = ThreadPoolExecutor(workers, thread_name_prefix="clearsight-video-job")
        self.jobs: dict[str, VideoJob] = {}  # in creation order
        self.lock = threading.Lock()
        self.closed = False

    def _active(self) -> int:
        """Jobs queued or running (a cancelled job counts until its thread lets go); call
        with the lock held."""
        return sum(1 for j in self.jobs.values() if j.status in ACTIVE or j.busy)

    def active(self) -> int:
        with self.lock:
            return self._active()

    def check_room(self) -> None:
        """`QueueFull` now, before an upload is read, when no job could be queued."""
        with self.lock:
            if self.closed or self._active() >= self.max_jobs:
                raise QueueFull()

    def new(self, model: str, family: Family, suffix: str) -> VideoJob:
        """A job record with its own folder (not queued yet: `submit` queues it)."""
        job_id = secrets.token_hex(8)
        folder = self.root / job_id
        folder.mkdir(parents=True, mode=0o700)
        return VideoJob(job_id, model, family, folder, folder / f"input{suffix}")

    def discard(self, job: VideoJob) -> None:
        """Forget a job that was never queued (its upload was refused)."""
        shutil.rmtree(job.folder, ignore_errors=True)

    def submit(self, job: VideoJob, work: Work) -> None:
        """Queue `job`; `QueueFull` when there is no room (the job is then discarded)."""
        with self.lock:
            if self.closed or self._active() >= self.max_jobs:
                full = True
            else:
                full = False
                self.jobs[job.id] = job
                job.future = self.pool.submit(self._run, job, work)
        if full:
            self.discard(job)
            raise QueueFull()

    def get(self, job_id: str) -> VideoJob | None:
        with self.lock:
            return self.jobs.get(job_id)

    def cancel(self, job: VideoJob) -> None:
        """Cancel a queued or running job: a queued one never starts and its files go now;
        a running one stops at its next frame (or tile) and its thread removes them."""
        with self.lock:
            if job.status not in ACTIVE:
                return
            job.cancel.set()
            job.status, job.finished = JobStatus.CANCELLED, time.time()
            never_ran = job.future is not None and job.future.cancel()
        if never_ran:
            shutil.rmtree(job.folder, ignore_errors=True)
        self._evict()

    def delete(self, job: VideoJob) -> bool:
        """Forget a finished job and remove its files: True when done now. A cancelled job
        whose thread is still stopping cannot be: it is forgotten as its thread lets go,
        and this answers False (the route says so with 202)."""
        with self.lock:
            if job.busy:
                job.delete_when_done = True
                return False
            self.jobs.pop(job.id, None)
        shutil.rmtree(job.folder, ignore_errors=True)
        return True

    def _run(self, job: VideoJob, work: Work) -> None:
        with self.lock:
            cancelled = job.cancel.is_set()
            if not cancelled:
                job.status, job.started, job.busy = JobStatus.RUNNING, time.time(), True
        if cancelled:  # cancelled as this thread picked it up
            shutil.rmtree(job.folder, ignore_errors=True)
            return
        error: str | None = None
        try:
            work(job)
        except JobCancelled:
            pass
        except ClearsightError as exc:
            error = job.private(str(exc))
        except Exception as exc:
            library = library_reason(exc)  # OpenCV or FFmpeg refused the video: its words
            if library is not None:
                error = job.private(library)
            else:  # a bug: the log has the traceback, the client one line
                log.exception("video job %s failed", job.id)
                error = f"internal error ({type(exc).__name__}); see the server log"
        finally:
            job.upload.unlink(missing_ok=True)
            with self.lock:
                if job.cancel.is_set():
                    ok = False  # cancelled meanwhile: the status says so already
                elif error is None:
                    job.status, ok = JobStatus.DONE, True
                    job.total_frames = job.frames_done
                else:
                    job.status, job.error, ok = JobStatus.FAILED, error, False
                if job.finished is None:
                    job.finished = time.time()
                job.busy = False
                if job.delete_when_done:
                    self.jobs.pop(job.id, None)
            if not ok or job.delete_when_done:
                shutil.rmtree(job.folder, ignore_errors=True)
            self._evict()

    def _evict(self) -> None:
        """Drop the oldest finished jobs beyond `keep`, with their files."""
        with self.lock:
            finished = [j for j in self.jobs.values() if j.status not in ACTIVE and not j.busy]
            finished.sort(key=lambda j: j.finished or 0.0)
            dropped = finished[: max(0, len(finished) - self.keep)]
            for j in dropped:
                del self.jobs[j.id]
        for j in dropped:
            shutil.rmtree(j.folder, ignore_errors=True)

    def close(self) -> None:
        """Server shutdown: cancel every job, give running ones a moment to stop, and
        remove every job's files."""
        with self.lock:
            self.closed = True
            for job in self.jobs.values():
                job.cancel.set()
            running = [j.future for j in self.jobs.values() if j.future is not None]
        self.pool.shutdown(wait=False, cancel_futures=True)
        wait_futures([f for f in running if not f.done()], timeout=CLOSE_WAIT_S)
        shutil.rmtree(self.root, ignore_errors=True)


__all__ = ["JobCancelled", "JobQueue", "JobStatus", "QueueFull", "VideoJob", "Work"]
