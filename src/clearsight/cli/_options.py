"""Options that several commands share (model, tiling, ensemble, stages, report)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

ModelOpt = Annotated[
    str, typer.Option("--model", "-m", help="Artifact path, bundled model or architecture name.")
]
TileOpt = Annotated[
    int | None,
    typer.Option(
        "--tile", help="Tile size in pixels (0: never tile; default: tile above 512x512)."
    ),
]
TtaOpt = Annotated[
    str, typer.Option("--tta", help="Self-ensemble: none, flip or x8 (flips and rotations).")
]
MaxPixOpt = Annotated[
    int | None,
    typer.Option(
        "--max-pixels",
        help="Refuse images with more decoded pixels (default 200M, or $CLEARSIGHT_MAX_PIXELS).",
    ),
]
ClipFpsOpt = Annotated[
    float | None,
    typer.Option(
        "--fps", help="With --video: frame rate of a frames folder (0.001 to 1000 per second)."
    ),
]
MaxFramesOpt = Annotated[
    int | None, typer.Option("--max-frames", help="With --video: at most this many frames.")
]
DeviceOpt = Annotated[str, typer.Option("--device", help="torch device, e.g. cpu or cuda.")]
BackendOpt = Annotated[
    str,
    typer.Option("--backend", help="torch, or onnxruntime (exports the model to ONNX first)."),
]
RestoreBackendOpt = Annotated[
    str,
    typer.Option(
        "--backend",
        help="auto (the default): per image size, the backend benchmarks/restore_speed.py "
        "measured faster for the model's architecture (torch where nothing was measured); "
        "torch; or onnxruntime (exports the model to ONNX first).",
    ),
]
PrecisionOpt = Annotated[
    str,
    typer.Option(
        "--precision",
        help="fp32, or int8: run MODEL.int8.onnx (made by `compress quantize`) with ONNX Runtime.",
    ),
]
ScalesOpt = Annotated[
    str,
    typer.Option(
        "--scales",
        help="Multi-scale prediction: comma-separated scales averaged with --tta, e.g. 1.0,0.75.",
    ),
]
StagesOpt = Annotated[
    str,
    typer.Option(
        "--stages",
        help="Stages of a multi-stage model (RESCAN): all (as trained), auto (each image stops "
        "once a stage changes it by less than --stage-threshold) or a number N.",
    ),
]
StageThresholdOpt = Annotated[
    float,
    typer.Option(
        "--stage-threshold",
        help="With --stages auto: stop once a stage changes the image by less than this "
        "(mean absolute difference, 0-1 image units).",
    ),
]

ReportOpt = Annotated[
    Path | None, typer.Option("--report", help="Write a self-contained HTML report here.")
]
ReportKOpt = Annotated[
    int,
    typer.Option("--report-k", help="Sets over 24 images: show the K worst and K best in it."),
]
SkipExistingOpt = Annotated[
    bool | None,
    typer.Option(
        "--skip-existing/--overwrite",
        help="Keep outputs that exist (resume a run), or replace them (the default; "
        "--engine ray resumes unless --overwrite is given).",
    ),
]
FailFastOpt = Annotated[
    bool,
    typer.Option("--fail-fast", help="Stop at the first input that fails (exit 1)."),
]

VerboseOpt = Annotated[
    bool,
    typer.Option(
        "--verbose",
        "-v",
        help="Also say which backend --backend auto chose, from which measurement.",
    ),
]

EngineOpt = Annotated[
    str,
    typer.Option(
        "--engine",
        help="local (this process) or ray (an actor pool, one model per worker; docs/scale.md).",
    ),
]
AddressOpt = Annotated[
    str | None,
    typer.Option(
        "--address", help="With --engine ray: an existing cluster (auto, ray://head:10001)."
    ),
]
WorkersOpt = Annotated[
    int, typer.Option("--workers", help="With --engine ray: workers, each holding one model.")
]
BatchSizeOpt = Annotated[
    int, typer.Option("--batch-size", help="With --engine ray: images per worker call.")
]

# -- a restoration model before the detector (docs/guides/detect.md) ----------------------
RestoreOpt = Annotated[
    str | None,
    typer.Option(
        "--restore",
        help="Restore each image (video) with this model before detecting, in memory; "
        "'auto': the bundled derainer, only where the image looks rainy; 'auto:MODEL'.",
    ),
]
SaveRestoredOpt = Annotated[
    Path | None,
    typer.Option("--save-restored", help="With --restore: also write what the detector saw."),
]

# -- video inputs (docs/video.md) ---------------------------------------------------------
StartOpt = Annotated[
    float | None, typer.Option("--start", help="Videos: start this many seconds in (>= 0).")
]
DurationOpt = Annotated[
    float | None, typer.Option("--duration", help="Videos: this many seconds only (> 0).")
]
CrfOpt = Annotated[
    int | None,
    typer.Option(
        "--crf",
        help="Videos: quality, lower is better, within the encoder's range: 0-51 for libx264 "
        "(0: lossless) and libx265, 0-63 for libvpx-vp9 and AV1, 4-63 for libvpx; default "
        "18 (other codecs take none).",
    ),
]
CodecOpt = Annotated[
    str,
    typer.Option(
        "--codec",
        help="Videos: an FFmpeg video encoder, e.g. libx264 (the default, yuv420p), libx265, "
        "libvpx-vp9, ffv1.",
    ),
]
TemporalOpt = Annotated[
    bool,
    typer.Option(
        "--temporal",
        help="Videos: blend each output with the flow-warped previous one where the "
        "occlusion tests pass (less flicker; it helps per-frame models, not video-derain: "
        "docs/video.md).",
    ),
]
DemoireTemporalOpt = Annotated[
    bool,
    typer.Option(
        "--temporal/--no-temporal",
        help="Videos: blend each output with the flow-warped previous one where the occlusion "
        "tests pass; on by default for demoiré, where it measured less than half the flicker "
        "for 0.05 dB of PSNR (docs/video.md).",
    ),
]
KeepPartialOpt = Annotated[
    bool,
    typer.Option(
        "--keep-partial", help="Videos: keep the frames written before a failure (default: none)."
    ),
]
KeepContainerOpt = Annotated[
    bool,
    typer.Option(
        "--keep-container", help="Videos: write the input's container (.mkv, .mov) not .mp4."
    ),
]
FpsOpt = Annotated[
    float | None,
    typer.Option(
        "--fps",
        help="A folder given is one video of numbered frames (00001.png, ...) at this frame "
        "rate (0.001 to 1000 per second), restored to OUT/<folder name>.mp4 (default: a "
        "folder is read as images).",
    ),
]
FramesOutOpt = Annotated[
    Path | None,
    typer.Option(
        "--frames-out",
        help="Videos: also write each restored video as numbered PNGs here "
        "(DIR/<video name>/ when there are several).",
    ),
]
