"""`clearsight serve`'s video jobs: queued with 202, polled to done, the result video (and a
detector's JSON lines), 409/404, cancelling, the queue bound, refusals before queueing, old
jobs dropped with their files, and nothing left on disk at shutdown. Tiny clips made with
PyAV at run time (tests/video_utils.py)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from tests.optional import need

need("fastapi")
need("httpx")
from fastapi.testclient import TestClient  # noqa: E402

from clearsight.serve import ServeLimits, create_app  # noqa: E402
from tests.helpers import SlowNet, loaded, tiny_ssd  # noqa: E402
from tests.video_utils import decoded_frames, decoded_times, make_audio_only, make_video  # noqa: E402

FRAMES = 10


class StepNet(nn.Module):
    """Identity that lets a frame through only when the test releases a permit: a job held
    running at a known frame."""

    pad_multiple = 1
    receptive_radius = 0

    def __init__(self) -> None:
        super().__init__()
        self.permits = threading.Semaphore(0)
        self.calls = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        assert self.permits.acquire(timeout=30), "the test never let the frame through"
        return x

    def release(self, n: int = 1000) -> None:
        for _ in range(n):
            self.permits.release()


@pytest.fixture(scope="module")
def clip(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("clip") / "clip.mp4"
    make_video(path, n=FRAMES)
    return path


def wait_for(cond: Callable[[], Any], what: str, seconds: float = 15.0) -> Any:
    end = time.monotonic() + seconds
    while True:
        value = cond()
        if value:
            return value
        assert time.monotonic() < end, f"timed out waiting for {what}"
        time.sleep(0.02)


def submit(client: TestClient, path: Path, model: str = "id", **fields: str) -> Any:
    with open(path, "rb") as f:
        return client.post(
            "/v1/jobs", files={"video": (path.name, f)}, data={"model": model, **fields}
        )


def queued(client: TestClient, path: Path, model: str = "id", **fields: str) -> str:
    answer = submit(client, path, model, **fields)
    assert answer.status_code == 202, answer.text
    return str(answer.json()["id"])


def status(client: TestClient, job_id: str) -> dict[str, Any]:
    answer = client.get(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def finished(client: TestClient, job_id: str, seconds: float = 15.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = status(client, job_id)
        return body if body["status"] in ("done", "failed", "cancelled") else None

    return dict(wait_for(done, f"job {job_id} to finish", seconds))


def jobs_root(client: TestClient) -> Path:
    return Path(client.app.state.server.jobs.root)  # type: ignore[attr-defined]


def assert_one_line_error(answer: Any, status_code: int, *needles: str) -> str:
    assert answer.status_code == status_code, answer.text
    message = answer.json()["error"]
    assert "\n" not in message
    for needle in needles:
        assert needle in message, message
    return str(message)


@pytest.fixture()
def stepped() -> Iterator[tuple[TestClient, StepNet]]:
    """One job worker, two jobs at most, a model held at each frame."""
    net = StepNet()
    app = create_app({"id": loaded(net)}, ServeLimits(workers=1, job_workers=1, max_jobs=2))
    try:
        with TestClient(app) as client:
            yield client, net
    finally:
        net.release()


def test_a_job_is_queued_runs_to_done_and_returns_the_video_frame_for_frame(
    clip: Path, tmp_path: Path
) -> None:
    with TestClient(create_app({"id": loaded(nn.Identity())}, ServeLimits(workers=1))) as client:
        answer = submit(client, clip)
        assert answer.status_code == 202, answer.text
        body = answer.json()
        job_id = body["id"]
        assert body["status"] in ("queued", "running", "done")
        assert body["urls"] == {
            "status": f"/v1/jobs/{job_id}",
            "result": f"/v1/jobs/{job_id}/result",
        }
        assert answer.headers["location"] == f"/v1/jobs/{job_id}"

        done = finished(client, job_id)
        assert done["status"] == "done", done
        assert done["error"] is None
        assert done["progress"]["frames_done"] == FRAMES
        assert done["progress"]["total_frames"] == FRAMES

        result = client.get(f"/v1/jobs/{job_id}/result")
        assert result.status_code == 200
        assert result.headers["content-type"] == "video/mp4"
        out = tmp_path / "result.mp4"
        out.write_bytes(result.content)
        frames = decoded_frames(out)
        assert len(frames) == FRAMES
        assert decoded_times(out) == decoded_times(clip)
        inputs = decoded_frames(clip)
        diff = [
            np.abs(a.astype(int) - b.astype(int)).mean()
            for a, b in zip(frames, inputs, strict=True)
        ]
        assert max(diff) < 3.0, diff  # the identity model: the input, re-encoded at crf 18

        # the upload is gone once the job ended; only the result stays
        assert [p.name for p in (jobs_root(client) / job_id).iterdir()] == ["result.mp4"]
        models = client.get("/v1/models").json()["limits"]
        assert models["max_jobs"] == 4 and models["max_video_seconds"] == 60


def test_a_detection_job_gives_the_drawn_video_and_one_json_line_per_frame(
    clip: Path, tmp_path: Path
) -> None:
    models = {"id": loaded(nn.Identity()), "ssd": tiny_ssd()}
    with TestClient(create_app(models, ServeLimits(workers=1))) as client:
        job_id = queued(client, clip, "ssd", score_threshold="0.9")
        assert status(client, job_id)["urls"]["detections"] == (
            f"/v1/jobs/{job_id}/result?part=detections"
        )
        assert finished(client, job_id)["status"] == "done"
        lines = client.get(f"/v1/jobs/{job_id}/result", params={"part": "detections"})
        assert lines.status_code == 200
        assert lines.headers["content-type"] == "application/x-ndjson"
        records = [json.loads(line) for line in lines.text.splitlines()]
        assert [r["frame"] for r in records] == list(range(FRAMES))
        assert any(r["detections"] for r in records)  # the tiny SSD is confident
        video = client.get(f"/v1/jobs/{job_id}/result")
        (tmp_path / "drawn.mp4").write_bytes(video.content)
        assert len(decoded_frames(tmp_path / "drawn.mp4")) == FRAMES

        restored = queued(client, clip, "id")
        assert finished(client, restored)["status"] == "done"
        no_lines = client.get(f"/v1/jobs/{restored}/result?part=detections")
        assert_one_line_error(no_lines, 404, "no detections")
        bad_part = client.get(f"/v1/jobs/{restored}/result?part=audio")
        assert_one_line_error(bad_part, 422, "part")
        # a detector's option sent with a restorer is refused, naming it
        wrong = submit(client, clip, "id", score_threshold="0.5")
        assert_one_line_error(wrong, 422, "score_threshold")


def test_the_result_is_409_until_done_and_unknown_jobs_are_404(
    stepped: tuple[TestClient, StepNet], clip: Path
) -> None:
    client, net = stepped
    job_id = queued(client, clip)
    net.release(1)
    wait_for(lambda: status(client, job_id)["progress"]["frames_done"] == 1, "one frame")
    running = status(client, job_id)
    assert running["status"] == "running"
    assert running["progress"]["total_frames"] is not None
    early = client.get(f"/v1/jobs/{job_id}/result")
    assert_one_line_error(early, 409, "running", "1 of")
    for answer in (
        client.get("/v1/jobs/0123456789abcdef"),
        client.get("/v1/jobs/0123456789abcdef/result"),
        client.delete("/v1/jobs/0123456789abcdef"),
    ):
        assert_one_line_error(answer, 404, "unknown job")
    net.release()
    assert finished(client, job_id)["status"] == "done"
    assert client.get(f"/v1/jobs/{job_id}/result").status_code == 200


def test_delete_stops_a_running_job_at_its_next_frame_and_removes_its_files(
    stepped: tuple[TestClient, StepNet], clip: Path
) -> None:
    client, net = stepped
    job_id = queued(client, clip)
    folder = jobs_root(client) / job_id
    net.release(2)
    wait_for(lambda: net.calls == 3, "the third frame to start")  # two done, one held
    assert folder.is_dir()
    answer = client.delete(f"/v1/jobs/{job_id}")
    assert answer.status_code == 200, answer.text
    assert answer.json()["status"] == "cancelled"
    net.release()  # the held frame finishes; the job must stop there
    wait_for(lambda: not folder.exists(), "the job's folder to be removed", 10)
    after = status(client, job_id)
    assert after["status"] == "cancelled"
    assert after["progress"]["frames_done"] < FRAMES
    assert net.calls <= 4, net.calls  # it did not go on through the clip
    assert_one_line_error(client.get(f"/v1/jobs/{job_id}/result"), 409, "cancelled")
    wait_for(lambda: client.get("/healthz").json()["jobs"] == 0, "the worker to let go")
    assert list(jobs_root(client).iterdir()) == []


def test_a_full_queue_is_503_with_retry_after_and_a_queued_job_can_be_cancelled(
    stepped: tuple[TestClient, StepNet], clip: Path
) -> None:
    client, net = stepped
    first = queued(client, clip)
    wait_for(lambda: net.calls == 1, "the first job to start")
    second = queued(client, clip)
    assert status(client, second)["status"] == "queued"
    full = submit(client, clip)
    assert_one_line_error(full, 503, "2 video jobs")
    assert full.headers["retry-after"] == "10"
    assert sorted(p.name for p in jobs_root(client).iterdir()) == sorted([first, second])

    cancelled = client.delete(f"/v1/jobs/{second}")
    assert cancelled.json()["status"] == "cancelled"
    assert not (jobs_root(client) / second).exists()  # a queued job's files go at once
    third = queued(client, clip)  # its place is free again
    net.release()
    assert finished(client, first)["status"] == "done"
    assert finished(client, third)["status"] == "done"
    assert status(client, second)["status"] == "cancelled"
    assert net.calls == 2 * FRAMES  # the cancelled job never ran


def test_refusals_before_queueing_are_one_line_and_leave_no_file(
    clip: Path, tmp_path: Path
) -> None:
    limits = ServeLimits(workers=1, max_video_seconds=0.2, max_video_bytes=200_000)
    with TestClient(create_app({"id": loaded(nn.Identity())}, limits)) as client:
        root = jobs_root(client)
        too_long = assert_one_line_error(submit(client, clip), 422, "s long", "limit is 0.2 s")
        assert str(root) not in too_long

        junk = tmp_path / "junk.mp4"
        junk.write_bytes(b"not a video at all" * 100)
        message = assert_one_line_error(submit(client, junk), 422, "the uploaded video")
        assert "cannot open as a video" in message and str(root) not in message

        audio = tmp_path / "tone.mkv"
        make_audio_only(audio)
        assert_one_line_error(submit(client, audio), 422, "no video stream")

        big = tmp_path / "big.mp4"
        big.write_bytes(b"\0" * 300_000)
        assert_one_line_error(submit(client, big), 413, "limit")

        missing = client.post("/v1/jobs", data={"model": "id"}, files={"x": ("a", b"b")})
        assert_one_line_error(missing, 422, "unexpected file field")
        unknown = submit(client, clip, "nope")
        assert_one_line_error(unknown, 404, "unknown model")
        assert list(root.iterdir()) == []
        assert client.get("/healthz").json()["jobs"] == 0

    pixels = ServeLimits(workers=1, max_pixels=500)  # the clip is 32x32 = 1,024 pixels
    with TestClient(create_app({"id": loaded(nn.Identity())}, pixels)) as client:
        assert_one_line_error(submit(client, clip), 422, "32x32", "exceeds the limit")


def test_the_oldest_finished_jobs_are_dropped_with_their_files(clip: Path) -> None:
    limits = ServeLimits(workers=1, keep_jobs=1)
    with TestClient(create_app({"id": loaded(nn.Identity())}, limits)) as client:
        root = jobs_root(client)
        first = queued(client, clip)
        assert finished(client, first)["status"] == "done"
        assert (root / first / "result.mp4").is_file()
        second = queued(client, clip)
        assert finished(client, second)["status"] == "done"
        assert_one_line_error(client.get(f"/v1/jobs/{first}"), 404, "unknown job")
        assert not (root / first).exists()
        assert client.get(f"/v1/jobs/{second}/result").status_code == 200

        deleted = client.delete(f"/v1/jobs/{second}")  # a finished job: forgotten
        assert deleted.json() == {"id": second, "status": "deleted"}
        assert list(root.iterdir()) == []


def test_shutdown_stops_a_running_job_and_removes_every_file(tmp_path: Path) -> None:
    long_clip = tmp_path / "long.mp4"
    make_video(long_clip, n=60, audio=None, pts=[40 * i for i in range(60)])
    net = SlowNet()
    app = create_app({"id": loaded(net)}, ServeLimits(workers=1, max_jobs=3))
    with TestClient(app) as client:
        root = Path(app.state.server.root)
        first = queued(client, long_clip)
        client.delete(f"/v1/jobs/{first}")  # cancelled as it starts: nothing kept
        running = queued(client, long_clip)
        wait_for(lambda: status(client, running)["status"] == "running", "the job to run")
        assert root.is_dir()
        t0 = time.monotonic()
    assert time.monotonic() - t0 < 5.0
    assert not root.exists()
    assert net.calls < 60  # the running job stopped instead of finishing the clip


def test_the_serve_command_passes_its_job_limits_with_the_same_defaults(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import clearsight.serve
    from clearsight.cli import app as cli_app
    from clearsight.errors import ClearsightError

    seen: list[ServeLimits] = []

    def fake_app(models: Any, limits: ServeLimits, device: str = "cpu") -> Any:
        seen.append(limits)
        raise ClearsightError("stopped by the test")

    monkeypatch.setattr(clearsight.serve, "create_app", fake_app)
    threads = torch.get_num_threads()
    runner = CliRunner()
    try:
        base = ["serve", "--models", "identity", "--port", "0", "--workers", "1"]
        assert runner.invoke(cli_app, base).exit_code == 1
        more = ["--max-video-mb", "1", "--max-video-seconds", "2.5", "--job-workers", "2"]
        more += ["--max-jobs", "3", "--keep-jobs", "5"]
        assert runner.invoke(cli_app, base + more).exit_code == 1
        refused = runner.invoke(cli_app, [*base, "--max-jobs", "0"])
    finally:
        torch.set_num_threads(threads)
    defaults, given = seen
    reference = ServeLimits(workers=1)
    for name in ("max_video_bytes", "max_video_seconds", "job_workers", "max_jobs", "keep_jobs"):
        assert getattr(defaults, name) == getattr(reference, name), name
    assert (given.max_video_bytes, given.max_video_seconds) == (1024 * 1024, 2.5)
    assert (given.job_workers, given.max_jobs, given.keep_jobs) == (2, 3, 5)
    assert refused.exit_code == 1 and "--max-jobs: must be > 0, got 0" in refused.output


def test_a_video_without_a_stated_duration_is_stopped_at_the_limit(
    clip: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Some WebM recordings state no duration: the limit is then counted in frames."""
    import dataclasses

    import clearsight.video.io as video_io

    real = video_io.probe_video

    def no_duration(path: Any, **kw: Any) -> Any:
        return dataclasses.replace(real(path, **kw), duration=None, rate=Fraction(10))

    monkeypatch.setattr(video_io, "probe_video", no_duration)
    limits = ServeLimits(workers=1, max_video_seconds=0.5)  # 5 frames at 10 fps
    with TestClient(create_app({"id": loaded(nn.Identity())}, limits)) as client:
        job_id = queued(client, clip)
        failed = finished(client, job_id)
        assert failed["status"] == "failed"
        assert "more than 5 frames" in failed["error"] and "\n" not in failed["error"]
        assert failed["progress"]["frames_done"] == 5  # the 6th is refused as it decodes
        assert not (jobs_root(client) / job_id).exists()
