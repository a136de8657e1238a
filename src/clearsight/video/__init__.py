"""Video in and out (PyAV), numbered frame folders, and image models run over videos.

`io` reads and writes video files, `frames` reads and writes folders of numbered frames,
`restore` runs a per-frame `Restorer` over either, and `score` measures a restored clip
against clean frames. docs/video.md describes what each does with timestamps, rotation,
odd sizes, audio and bad input.
"""

from clearsight.video.frames import FrameFolderReader, FrameFolderWriter, list_frames
from clearsight.video.io import (
    Frame,
    SideStreams,
    VideoInfo,
    VideoReader,
    VideoWriter,
    open_source,
    probe_video,
)
from clearsight.video.restore import VideoRestoreResult, restore_video

__all__ = [
    "Frame",
    "FrameFolderReader",
    "FrameFolderWriter",
    "SideStreams",
    "VideoInfo",
    "VideoReader",
    "VideoRestoreResult",
    "VideoWriter",
    "list_frames",
    "open_source",
    "probe_video",
    "restore_video",
]
