"""Video jobs say what happened: deleting a job that is still stopping, the duration limit
counted on the decoded frames (a header patched to ~0 s does not bypass it), and errors
raised inside OpenCV as one line instead of an internal error. Tiny clips made with PyAV at
run time (tests/video_utils.py)."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn

from tests.optional import need

need("fastapi")
from fastapi.testclient import TestClient  # noqa: E402

from clearsight.serve import ServeLimits, create_app  # noqa: E402
from clearsight.video.io import probe_video  # noqa: E402
from tests.helpers import loaded  # noqa: E402
from tests.test_serve_jobs import (  # noqa: E402
    StepNet,
    finished,
    jobs_root,
    queued,
    status,
    wait_for,
)
from tests.video_utils import decoded_frames, make_video  # noqa: E402


def patch_durations(src: Path, dst: Path) -> None:
    """Copy an mp4 with the movie's, track's and media's durations (mvhd, tkhd, mdhd) set
    to one tick: the header says the video lasts ~0 s, its frames' timestamps do not."""
    data = bytearray(src.read_bytes())
    for box, skip in ((b"mvhd", 4), (b"mdhd", 4), (b"tkhd", 8)):
        i = data.find(box)
        assert i >= 0, box
        version = data[i + 4]
        off = i + 8 + (16 if version == 1 else 8) + skip  # past version/flags and the times
        size = 8 if version == 1 else 4
        data[off : off + size] = (1).to_bytes(size, "big")
    dst.write_bytes(bytes(data))


def test_delete_while_a_cancelled_job_stops_answers_202_and_deletes_it_once_stopped(
    tmp_path: Path,
) -> None:
    clip = tmp_path / "clip.mp4"
    make_video(clip, n=6)
    net = StepNet()
    app = create_app({"id": loaded(net)}, ServeLimits(workers=1, job_workers=1, max_jobs=2))
    try:
        with TestClient(app) as client:
            job_id = queued(client, clip)
            folder = jobs_root(client) / job_id
            net.release(1)
            wait_for(lambda: net.calls == 2, "the second frame to start")  # one done, one held
            first = client.delete(f"/v1/jobs/{job_id}")
            assert first.status_code == 200 and first.json()["status"] == "cancelled"
            second = client.delete(f"/v1/jobs/{job_id}")  # the job is still stopping
            assert second.status_code == 202, second.text
            assert second.json()["status"] == "deleting"
            assert status(client, job_id)["status"] == "cancelled"  # listed until it stops
            net.release()
            wait_for(
                lambda: client.get(f"/v1/jobs/{job_id}").status_code == 404,
                "the job to be forgotten once stopped",
                10,
            )
            assert not folder.exists()
            assert client.delete(f"/v1/jobs/{job_id}").status_code == 404
    finally:
        net.release()


def test_a_header_patched_to_zero_seconds_does_not_bypass_the_duration_limit(
    tmp_path: Path,
) -> None:
    """4 s of frames (100 at 25 fps) whose mvhd/mdhd/tkhd durations say ~0 s: accepted
    (the header is within the limit), then failed once decoding passes the 2 s limit."""
    whole = tmp_path / "whole.mp4"
    make_video(whole, w=16, h=16, n=100, audio=None, pts=[40 * i for i in range(100)])
    crafted = tmp_path / "crafted.mp4"
    patch_durations(whole, crafted)
    assert (probe_video(crafted).duration or 0.0) < 0.01  # the lie the server is told
    assert len(decoded_frames(crafted)) == 100
    limits = ServeLimits(workers=1, max_video_seconds=2.0)
    with TestClient(create_app({"id": loaded(nn.Identity())}, limits)) as client:
        job_id = queued(client, crafted)  # 202: the header is within the limit
        failed = finished(client, job_id)
        assert failed["status"] == "failed", failed
        error = failed["error"]
        assert "\n" not in error and "the uploaded video decodes past 2 s" in error, error
        assert str(jobs_root(client)) not in error
        assert failed["progress"]["frames_done"] <= 50
        assert not (jobs_root(client) / job_id).exists()


def test_a_temporal_job_on_an_8x8_video_is_done_without_the_blend(tmp_path: Path) -> None:
    clip = tmp_path / "small.mp4"
    make_video(clip, w=8, h=8, n=4, audio=None)
    with TestClient(create_app({"id": loaded(nn.Identity())}, ServeLimits(workers=1))) as client:
        job_id = queued(client, clip, temporal="true")
        done = finished(client, job_id)
        assert done["status"] == "done", done
        assert done["progress"]["frames_done"] == 4
        assert done["notes"] == [
            "frames of 8x8 are too small for optical flow (it needs at least 8 pixels on each "
            "side and 12 on the longer one); the temporal blend was skipped"
        ]
        assert client.get(f"/v1/jobs/{job_id}/result").status_code == 200


class OpenCvFails(nn.Module):
    """A model whose frames OpenCV refuses (an error raised inside the library)."""

    pad_multiple = 1
    receptive_radius = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import cv2

        gray = np.zeros((4, 4), np.uint8)
        cv2.DISOpticalFlow_create(0).calc(gray, gray, None)
        return x


def test_an_opencv_error_in_a_job_is_one_line_not_an_internal_error(tmp_path: Path) -> None:
    clip = tmp_path / "clip.mp4"
    make_video(clip, n=3, audio=None)
    with TestClient(create_app({"id": loaded(OpenCvFails())}, ServeLimits(workers=1))) as client:
        failed = finished(client, queued(client, clip))
        assert failed["status"] == "failed"
        error = failed["error"]
        assert "internal error" not in error and "\n" not in error
        assert error.startswith("OpenCV: The input image must have"), error


def test_the_patch_helper_touches_only_the_duration_fields(tmp_path: Path) -> None:
    """The crafted file differs from its source in the duration fields alone."""
    whole = tmp_path / "whole.mp4"
    make_video(whole, w=16, h=16, n=5, audio=None)
    crafted = tmp_path / "crafted.mp4"
    patch_durations(whole, crafted)
    a, b = whole.read_bytes(), crafted.read_bytes()
    assert len(a) == len(b)
    changed = [i for i in range(len(a)) if a[i] != b[i]]
    assert 0 < len(changed) <= 3 * 8
    assert struct.unpack(">I", b[b.find(b"mdhd") + 20 : b.find(b"mdhd") + 24]) == (1,)


def test_the_decode_limit_counts_decoded_timestamps_and_frames(tmp_path: Path) -> None:
    """What the server's jobs rely on, at the reader: a video's own timestamps, and a folder
    of numbered frames' count, stop decoding whatever the header says."""
    from clearsight.errors import VideoReadError
    from clearsight.io import write_image
    from clearsight.video.frames import open_source
    from clearsight.video.io import DecodeLimit

    whole = tmp_path / "whole.mp4"
    make_video(whole, w=16, h=16, n=30, audio=None, pts=[40 * i for i in range(30)])
    crafted = tmp_path / "crafted.mp4"
    patch_durations(whole, crafted)
    seen = []
    past = r"decodes past 0.5 s \(frame 14 at 0.52 s\)"  # frame 13 is at 0.48 s
    reader = open_source(crafted, limit=DecodeLimit(0.5, 1000))
    with reader, pytest.raises(VideoReadError, match=past):
        for frame in reader.frames():
            seen.append(frame.index)
    assert seen == list(range(13))
    folder = tmp_path / "frames"
    for i in range(4):
        write_image(folder / f"{i + 1:05d}.png", np.zeros((8, 8, 3), np.uint8))
    reader = open_source(folder, fps=25, limit=DecodeLimit(10.0, 2, "the cap"))
    with reader, pytest.raises(VideoReadError, match=r"more than 2 frames, over the cap of 10 s"):
        list(reader.frames())
