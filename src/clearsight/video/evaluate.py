"""Evaluating a restoration model on a video clip: restore it, score it, write the scores.

A clip is a folder holding the input frames (`rain/`, `moire/` or `input/`) and the clean
frames (`clean/`), matched by name, or two video files (input, clean). The input is
restored frame by frame (a `Restorer` or a frame function, as `restore_video` runs them) or
by a clip function (an iterator of frames in, one out: a model that looks at a window of
frames), and scored with `clearsight.metrics.warping.score_frames`: PSNR/SSIM per frame
under a metric preset and Lai et al.'s warping error with the flow from the clean frames.
Without clean frames only the flicker (the warping error along the input's flow) is
measured. Everything streams, a frame at a time. `on_start`/`on_frame` hand each frame's
input, restored and clean images, aligned by index, to an observer (the HTML report,
`clearsight.report.video`). docs/video.md.
"""

from __future__ import annotations

import csv
import io
import itertools
import json
import math
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.atomic import atomic_dir, atomic_write_text
from clearsight.errors import OptionError, PairingError, VideoReadError
from clearsight.io import read_image, to_uint8, write_image
from clearsight.metrics._errors import ShapeMismatchError
from clearsight.metrics.warping import FlowTooSmallError, flicker, score_frames
from clearsight.out_paths import check_output_folder
from clearsight.video.frames import FRAME_NAME, FRAMES_MARK, list_frames, open_source
from clearsight.video.options import check_fps
from clearsight.video.restore import frame_function

INPUT_FOLDERS = ("rain", "moire", "input")
CLEAN_FOLDER = "clean"
PER_FRAME_CSV = "per_frame.csv"
SUMMARY_JSON = "summary.json"
IMAGES_FOLDER = "restored"

ClipFn = Callable[[Iterator[np.ndarray]], Iterable[np.ndarray]]
DEFAULT_RATE = Fraction(25)
"""The frame rate given to a folder of frames when none is (for a report's player)."""


@dataclass
class ClipFrame:
    """One frame of a clip as the evaluator saw it: what `on_frame` receives."""

    index: int
    name: str
    input: np.ndarray
    restored: np.ndarray
    clean: np.ndarray | None


@dataclass
class VideoEvalResult:
    """Per-frame rows ({"name", "psnr", "ssim", "warping_error"}, or {"name", "flicker"}
    without clean frames) and the summary written to summary.json."""

    rows: list[dict[str, Any]]
    summary: dict[str, Any]
    files: list[Path] = field(default_factory=list)
    """What was written under out_dir."""


@dataclass
class _Clip:
    names: list[str] | None
    """Frame names (the input files' stems); None for a video: 000001, 000002, ..."""
    inputs: Callable[[], Iterator[np.ndarray]]
    clean: Callable[[], Iterator[np.ndarray]] | None
    video: Path | None = None
    """The input video (None for a folder of frames)."""

    def name(self, i: int) -> str:
        if self.names is not None and i < len(self.names):
            return self.names[i]
        return Path(FRAME_NAME.format(i + 1)).stem  # a video's frames (or a clip model's extra)


def _read_files(paths: list[Path]) -> Iterator[np.ndarray]:
    for p in paths:
        yield to_uint8(read_image(p))


def _video_frames(path: Path, fps: float | None) -> Iterator[np.ndarray]:
    with open_source(path, fps=fps or 25.0) as reader:
        for frame in reader.frames():
            yield frame.image


def _folder_clip(root: Path) -> _Clip:
    found = [root / n for n in INPUT_FOLDERS if (root / n).is_dir()]
    if not found:
        raise PairingError(
            f"{root}: no input frames folder ({', '.join(n + '/' for n in INPUT_FOLDERS)})"
        )
    if len(found) > 1:
        raise PairingError(f"{root}: several input folders ({', '.join(p.name for p in found)})")
    inputs = list_frames(found[0])
    clean_dir = root / CLEAN_FOLDER
    if not clean_dir.is_dir():
        return _Clip([p.stem for p in inputs], lambda: _read_files(inputs), None)
    clean = {p.stem: p for p in list_frames(clean_dir)}
    by_stem = {p.stem: p for p in inputs}
    for p in inputs:
        if p.stem not in clean:
            raise PairingError(f"{p}: no clean frame named {p.stem} in {clean_dir}")
    for stem, p in clean.items():
        if stem not in by_stem:
            raise PairingError(f"{p}: no input frame named {stem} in {found[0]}")
    ordered = [clean[p.stem] for p in inputs]
    return _Clip(
        [p.stem for p in inputs], lambda: _read_files(inputs), lambda: _read_files(ordered)
    )


def _video_clip(input_path: Path, clean_path: Path | None, fps: float | None) -> _Clip:
    for p in (input_path, clean_path):
        if p is not None and not p.exists():
            raise VideoReadError(f"video not found: {p}")
    clean = None
    if clean_path is not None:
        clean = lambda: _video_frames(clean_path, fps)  # noqa: E731
    return _Clip(None, lambda: _video_frames(input_path, fps), clean, video=input_path)


def _frames_and_rate(data: _Clip, fps: float | None) -> tuple[int | None, Fraction]:
    """The clip's frame count (None when a video does not say) and frame rate: the input
    video's, or `fps` (default 25) for a folder of frames."""
    if data.video is None:
        rate = check_fps(fps) if fps is not None else DEFAULT_RATE
        return (len(data.names) if data.names is not None else None), rate
    with open_source(data.video) as reader:
        return reader.info.frames, reader.info.rate or DEFAULT_RATE


def _clip(pairs: Any, fps: float | None) -> _Clip:
    if isinstance(pairs, str | Path):
        root = Path(pairs)
        if root.is_dir():
            return _folder_clip(root)
        if not root.exists():
            raise PairingError(f"pairs folder not found: {root}")
        raise OptionError("pairs", f"{root} is a file; give a folder or (input, clean) videos")
    if isinstance(pairs, tuple | list) and len(pairs) == 2:
        clean = Path(pairs[1]) if pairs[1] is not None else None
        return _video_clip(Path(pairs[0]), clean, fps)
    raise OptionError("pairs", f"give a folder or (input, clean) video paths, got {pairs!r}")


def _restored(model: Any, frames: Iterator[np.ndarray], clip: bool) -> Iterator[np.ndarray]:
    if clip:
        yield from model(frames)
        return
    fn = frame_function(model)
    for img in frames:
        out = fn(img)
        if out.shape != img.shape or out.dtype != np.uint8:
            raise OptionError(
                "model", f"returned a {out.shape} {out.dtype} frame for a {img.shape} uint8 one"
            )
        yield out


def _blended(frames: Iterator[np.ndarray], temporal: bool, source: str) -> Iterator[np.ndarray]:
    if not temporal:
        yield from frames
        return
    from clearsight.video.temporal import TemporalBlend

    blend = TemporalBlend(source=source)
    for frame in frames:
        yield blend(frame)


def _model(model: Any, clip: bool) -> Any:
    """A model reference (a bundled name or an artifact path) becomes a `Restorer`."""
    if isinstance(model, str | Path):
        from clearsight.engine.inference import Restorer

        return Restorer.from_pretrained(str(model))
    if not callable(model) and not hasattr(model, "restore_image"):
        what = "a clip function" if clip else "a Restorer or a frame function"
        raise OptionError("model", f"expected {what}, got {type(model).__name__}")
    return model


def _describe(pairs: Any) -> str:
    if isinstance(pairs, tuple | list):
        return " and ".join(str(p) for p in pairs if p is not None)
    return str(pairs)


def _cannot_compute(what: str, pairs: Any, exc: FlowTooSmallError) -> FlowTooSmallError:
    """The clip's frames are too small for the optical flow its `what` is measured with."""
    return FlowTooSmallError(f"{_describe(pairs)}: the {what} cannot be computed: {exc}")


def _mean(values: list[float]) -> float | None:
    finite = [v for v in values if v is not None and not math.isnan(v)]
    return float(np.mean(finite)) if finite else None


def evaluate_video(
    model: Any,
    pairs: str | Path | tuple[str | Path, str | Path | None],
    out_dir: str | Path | None = None,
    *,
    preset: str = "y-matlab",
    save_images: bool = False,
    fps: float | None = None,
    clip: bool = False,
    temporal: bool = False,
    on_start: Callable[[int | None, Fraction], None] | None = None,
    on_frame: Callable[[ClipFrame], None] | None = None,
) -> VideoEvalResult:
    """Restore a clip with `model` and score it against its clean frames.

    `pairs` is a folder holding the input frames (`rain/`, `moire/` or `input/`) and
    `clean/` (frames matched by name, in frame-number order; a name on one side only is a
    one-line `PairingError` naming it), or (input video, clean video); no `clean/` (or a
    None clean video) scores the flicker only. `model` is a `Restorer` (or a model
    reference for one) or a uint8 RGB frame function; with `clip=True`, a function from an
    iterator of frames to an iterable of restored frames (a window model). With `out_dir`:
    `per_frame.csv` (name, psnr, ssim, warping_error; or name, flicker), `summary.json`,
    and with `save_images` the restored frames as `restored/<input stem>.png`, each
    written atomically. `on_start(frames or None, frame rate)` once, then `on_frame` with
    each frame's input, restored and clean images (a `ClipFrame`), in order; `fps` is the
    frame rate of a folder of frames (default 25). `temporal`: the restored frames go
    through the flow-guided blend (`clearsight.video.temporal.TemporalBlend`, what
    `restore_video(temporal=True)` runs) before they are scored and saved.
    """
    out = check_output_folder(out_dir, "out_dir") if out_dir is not None else None
    if save_images and out is None:
        raise OptionError("save_images", "needs an out_dir to write the frames into")
    if fps is not None:
        check_fps(fps)
    data = _clip(pairs, fps)
    if save_images and out is not None:  # replaced whole: never an input, nor inside one
        from clearsight.output_plan import check_frames_folders

        given = [pairs] if isinstance(pairs, str | Path) else [p for p in pairs if p]
        check_frames_folders([out / IMAGES_FOLDER], given, "out_dir")
    files: list[Path] = []

    model = _model(model, clip)
    if on_start is not None:
        on_start(*_frames_and_rate(data, fps))
    tap = _Tap(data, on_frame)
    source = _describe(pairs)
    with _ImageSaver(out / IMAGES_FOLDER if save_images and out else None, data) as saver:
        if data.clean is not None:
            restored = _blended(_restored(model, tap.inputs(data.inputs()), clip), temporal, source)
            outputs = tap.outputs(saver.wrap(restored))
            try:
                score = score_frames(outputs, tap.clean(data.clean()), preset=preset)
            except ShapeMismatchError as exc:
                where = f"frame {data.name(max(0, saver.count - 1))}"
                raise ShapeMismatchError(f"{_describe(pairs)}: {where}: {exc}") from exc
            except FlowTooSmallError as exc:
                raise _cannot_compute("warping error", pairs, exc) from exc
            rows: list[dict[str, Any]] = [
                {
                    "name": data.name(i),
                    "psnr": r["psnr"],
                    "ssim": r["ssim"],
                    "warping_error": r.get("warping_error"),
                }
                for i, r in enumerate(score.rows)
            ]
            summary: dict[str, Any] = {
                "psnr": {"mean": _mean([r["psnr"] for r in rows])},
                "ssim": {"mean": _mean([r["ssim"] for r in rows])},
                "warping_error": {"mean": _mean([r["warping_error"] for r in rows[1:]])},
                "frames": len(rows),
                "preset": score.preset,
                "temporal": temporal,
            }
        else:
            model_in, guides = itertools.tee(data.inputs())  # in lockstep: one frame buffered
            restored = saver.wrap(
                _blended(_restored(model, tap.inputs(model_in), clip), temporal, source)
            )
            outputs = tap.without_clean(restored)
            try:
                result = flicker(outputs, guides)
            except FlowTooSmallError as exc:
                raise _cannot_compute("flicker", pairs, exc) from exc
            if saver.count == 0:
                raise PairingError(f"{pairs}: no frames to score")
            flick = [None, *result.per_frame]
            rows = [{"name": data.name(i), "flicker": v} for i, v in enumerate(flick)]
            summary = {
                "flicker": {"mean": _mean(result.per_frame)},
                "frames": len(rows),
                "temporal": temporal,
            }
    if saver.folder is not None:
        files.append(saver.folder)
    if out is not None:
        files += _write_scores(out, rows, summary)
    return VideoEvalResult(rows=rows, summary=summary, files=files)


def _write_scores(out: Path, rows: list[dict[str, Any]], summary: dict[str, Any]) -> list[Path]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=list(rows[0]), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    atomic_write_text(out / PER_FRAME_CSV, buf.getvalue())
    atomic_write_text(out / SUMMARY_JSON, json.dumps(summary, indent=2) + "\n")
    return [out / PER_FRAME_CSV, out / SUMMARY_JSON]


class _Tap:
    """Hands `on_frame` each frame's input, restored and clean images, aligned by index: a
    clip model reads ahead of what it returns, so the inputs it read wait in a queue (as
    many as the model holds) until their restored frame comes out. Does nothing without
    `on_frame`."""

    def __init__(self, clip: _Clip, on_frame: Callable[[ClipFrame], None] | None) -> None:
        self.clip = clip
        self.on_frame = on_frame
        self._inputs: deque[np.ndarray] = deque()
        self._restored: deque[np.ndarray] = deque()
        self._done = 0

    def inputs(self, frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for img in frames:
            if self.on_frame is not None:
                self._inputs.append(img)
            yield img

    def outputs(self, frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for img in frames:
            if self.on_frame is not None:
                self._restored.append(img)
            yield img

    def clean(self, frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        """The clean frames, as `score_frames` reads them: each after its restored frame."""
        for img in frames:
            if self.on_frame is not None and self._inputs and self._restored:
                self._emit(self._inputs.popleft(), self._restored.popleft(), img)
            yield img

    def without_clean(self, frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for img in frames:
            if self.on_frame is not None and self._inputs:
                self._emit(self._inputs.popleft(), img, None)
            yield img

    def _emit(self, inp: np.ndarray, restored: np.ndarray, clean: np.ndarray | None) -> None:
        assert self.on_frame is not None
        i = self._done
        self.on_frame(ClipFrame(i, self.clip.name(i), inp, restored, clean))
        self._done += 1


def _check_own_folder(folder: Path) -> None:
    """An existing `folder` is replaced only when empty or written here (it holds
    `FRAMES_MARK` and nothing but PNGs), as a frames folder is: an `OUT/restored` of the
    user's was deleted by `eval --video --save-images`."""
    if not folder.exists():
        return
    if not folder.is_dir():
        raise VideoReadError(f"{folder} is a file, where the restored frames go")
    names = sorted(p.name for p in folder.iterdir())
    others = [n for n in names if n != FRAMES_MARK and not n.endswith(".png")]
    if others or (names and FRAMES_MARK not in names):
        raise VideoReadError(
            f"{folder} already holds files not written by clearsight ({(others or names)[0]}, "
            "...); choose another --out, or move them"
        )


class _ImageSaver:
    """Writes the restored frames as <stem>.png into a temporary folder that replaces
    `folder` once every frame is written (`clearsight.atomic.atomic_dir`)."""

    def __init__(self, folder: Path | None, clip: _Clip) -> None:
        self.folder = folder
        self.clip = clip
        self.count = 0
        self._ctx: Any = None
        self._tmp: Path | None = None

    def __enter__(self) -> _ImageSaver:
        if self.folder is not None:
            _check_own_folder(self.folder)
            self._ctx = atomic_dir(self.folder)
            self._tmp = self._ctx.__enter__()
            (self._tmp / FRAMES_MARK).write_text(
                "restored frames written by clearsight eval; a rerun replaces this folder\n",
                encoding="utf-8",
            )
        return self

    def wrap(self, frames: Iterator[np.ndarray]) -> Iterator[np.ndarray]:
        for i, img in enumerate(frames):
            if self._tmp is not None:
                write_image(self._tmp / f"{self.clip.name(i)}.png", img)
            self.count = i + 1
            yield img

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)


__all__ = ["ClipFrame", "VideoEvalResult", "evaluate_video"]
