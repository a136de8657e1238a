"""One output plan for every folder run: each input's output paths, checked before any work.

`restore`, `derain`, `demoire` and `detect`, on images, videos and folders of numbered
frames, on either engine, name their outputs here and go through one set of checks before
a model is loaded (docs/reliability.md, "What a run writes"):

- `-o` is a folder or can become one (a file there is one error, not one per input);
- no two inputs write one output: a clash (`a.mp4` and `a.mkv` both give `OUT/a.mp4`; a
  frames folder `clip/` read with `--fps` and a video `clip.mp4`) is refused with one line
  naming both inputs. Images keep their extension (`a.png` and `a.jpg` do not clash);
- no output is an input, and no output folder is, is inside or holds an input: `-o` may
  not be (or be inside) an input folder, `--frames-out` may not be, hold or be inside any
  input, since the frames folder is replaced as a whole;
- leftovers of killed runs are swept and `--skip-existing` applies alike to every kind
  (`prepare_outputs`, `finished`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from clearsight.errors import ClearsightError
from clearsight.out_paths import check_output_file, check_output_folder

RUN_FILES = ("failures.csv",)
"""Files a folder run writes in OUT itself (detect adds `detections.json`)."""

VIDEO_SUFFIXES = (".mp4", ".mov", ".mkv", ".avi", ".webm", ".m4v")
"""File names read as videos (any container FFmpeg decodes; these are the usual ones)."""


class OutputClashError(ClearsightError):
    """The plan of a run would write one output twice, or write over (or into) an input."""


def is_video(path: str | os.PathLike[str]) -> bool:
    return Path(path).suffix.lower() in VIDEO_SUFFIXES


def video_output(stem: Path, source: Path, keep_container: bool) -> Path:
    """`stem.mp4`, or `stem` with the source's own suffix when `keep_container` (a folder of
    numbered frames has none: .mp4). The suffix is added, not swapped: `my.clip` becomes
    `my.clip.mp4`, not `my.mp4`."""
    suffix = source.suffix.lower() if keep_container and is_video(source) else ".mp4"
    return stem.with_name(stem.name + suffix)


@dataclass
class MediaPlan:
    """The image inputs of a run (files and folders, as given) and its videos with the
    output path (without suffix) each will have under OUT."""

    images: list[str] = field(default_factory=list)
    videos: list[tuple[Path, Path]] = field(default_factory=list)


def split_media(inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]) -> MediaPlan:
    """Videos apart from images: a video file given goes to `OUT/<stem>`, a video inside a
    folder (or a video-named link there that leads nowhere) to `OUT/<its path inside the
    folder>` (as images do); a folder stays an image input when it holds images."""
    from clearsight.errors import ImageReadError
    from clearsight.io import list_images

    def has_images(folder: Path) -> bool:
        try:
            return bool(list_images(folder, recursive=True))
        except ImageReadError:  # a folder without images
            return False

    plan = MediaPlan()
    root = Path(out)
    for item in inputs:
        p = Path(item)
        if is_video(p) and p.exists() and not p.is_dir():  # a pipe too: failed, not opened
            plan.videos.append((p, root / p.stem))
        elif p.is_dir():
            found = sorted(v for v in p.rglob("*") if is_video(v) and _file_or_broken_link(v))
            plan.videos += [(v, root / v.relative_to(p).with_suffix("")) for v in found]
            if not found or has_images(p):
                plan.images.append(str(item))
        else:
            plan.images.append(str(item))
    return plan


def _file_or_broken_link(path: Path) -> bool:
    """A file, or a link that loops or leads nowhere: the user put it there, so the run
    lists it as a failed input (as a folder's broken image links are) rather than passing
    over it without a word."""
    return path.is_file() or (path.is_symlink() and not path.exists())


@dataclass(frozen=True)
class VideoOutput:
    """What one video (or numbered-frame folder) of a run writes: `target`, the video
    file; `sidecars`, files beside it (detect's `.jsonl`); `frames`, a numbered-PNG folder
    (`--frames-out`), replaced as a whole."""

    source: Path
    target: Path
    sidecars: tuple[Path, ...] = ()
    frames: Path | None = None

    @property
    def files(self) -> tuple[Path, ...]:
        return (self.target, *self.sidecars)


@dataclass
class RunPlan:
    """A run's outputs, checked: `images` are the image inputs as given (the image engine
    names their outputs with `runtime.batch.plan_outputs`, listed in `image_outputs`),
    `videos` each video's outputs."""

    out: Path
    images: list[str] = field(default_factory=list)
    image_outputs: list[tuple[Path, Path]] = field(default_factory=list)
    videos: list[VideoOutput] = field(default_factory=list)

    def outputs(self) -> Iterator[Path]:
        """Every file the run may write (frames folders not included)."""
        yield from (dst for _, dst in self.image_outputs)
        for v in self.videos:
            yield from v.files


def _frames_folder(frames_out: Path, out: Path, stem: Path, several: bool) -> Path:
    """--frames-out DIR for one video; DIR/<its path under OUT, without suffix> for several."""
    return frames_out / stem.relative_to(out) if several else frames_out


def plan_run(
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    fps: float | None = None,
    frames_out: str | os.PathLike[str] | None = None,
    keep_container: bool = False,
    sidecars: Sequence[str] = (),
    plan_images: bool = True,
    run_files: Sequence[str] = RUN_FILES,
) -> RunPlan:
    """The outputs of a run over `inputs` into `out`, checked before any work (module doc).

    `fps`: each folder given is one video of numbered frames (OUT/<folder name>.mp4);
    `frames_out`: each video also written as numbered PNGs there (DIR/<name>/ when there are
    several); `keep_container`: a video keeps its container's suffix; `sidecars`: suffixes
    of the files written beside each video (detect: `.jsonl`); `plan_images`: name the image
    outputs here too (False where another planner lists them: globs and URIs on Ray);
    `run_files`: the files the run itself writes in OUT (`failures.csv`; detect's
    `detections.json`), which no input's output may be or lie under. Raises
    `OutputPathError` (a file as `-o`) or `OutputClashError`, naming both paths.
    """
    out_dir = check_output_folder(out)
    frames_dir = check_output_folder(frames_out, "--frames-out") if frames_out else None
    given = [Path(i) for i in inputs]
    folders = [p for p in given if fps is not None and p.is_dir()]
    media = split_media([p for p in given if p not in folders], out_dir)
    stems = [(f, out_dir / f.resolve().name) for f in folders] + media.videos
    plan = RunPlan(out_dir, images=media.images)
    if plan_images and media.images:
        from clearsight.runtime.batch import plan_outputs

        plan.image_outputs = plan_outputs([Path(i) for i in media.images], out_dir)
    planned: set[tuple[str, Path]] = set()
    for source, stem in stems:
        target = video_output(stem, source, keep_container)
        same = (os.path.realpath(source), target)  # given twice (itself and its folder): once
        if same in planned:
            continue
        planned.add(same)
        extra = tuple(stem.with_name(stem.name + s) for s in sidecars)
        frames = None
        if frames_dir is not None:
            frames = _frames_folder(frames_dir, out_dir, stem, len(stems) > 1)
        plan.videos.append(VideoOutput(source, target, extra, frames))
    keys = _Keys()
    _check_clashes(plan, keys)
    _check_run_files(plan, run_files, keys)
    _check_inputs(plan, [p for p in given if p.exists()], frames_dir, keys)
    return plan


def _check_run_files(plan: RunPlan, names: Sequence[str], resolved: _Keys) -> None:
    """No input's output is, or lies under, a file the run writes itself in OUT: an input
    folder `failures.csv/` or `detections.json/` made detect do all its work and then stop
    at `OUT/detections.json is a folder`."""
    own = [(name, resolved(plan.out / name)) for name in names]
    written: list[tuple[Path, Path]] = list(plan.image_outputs)
    for v in plan.videos:
        written += [(v.source, f) for f in (*v.files, *([v.frames] if v.frames else []))]
    for source, path in written:
        key = resolved(path)
        for name, home in own:
            if _inside(key, home) or _inside(home, key):
                raise OutputClashError(
                    f"{path} (of {source}) would be written where the run writes its "
                    f"{plan.out / name}; rename the input or choose another --out"
                )


class _Keys(dict[Path, str]):
    """Paths as compared for clashes: absolute, links resolved; each resolved once per
    plan (a folder run may plan many thousands)."""

    def __call__(self, path: Path) -> str:
        key = self.get(path)
        if key is None:
            key = self[path] = os.path.realpath(path)
        return key


def _inside(path: str, folder: str) -> bool:
    """`path` is `folder` or lies under it (both resolved)."""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def _check_clashes(plan: RunPlan, resolved: _Keys) -> None:
    """One output per path: two inputs onto one file, or a frames folder (replaced whole)
    holding another input's output, is an `OutputClashError` naming both inputs."""
    seen: dict[str, tuple[Path, Path]] = {}
    files: list[tuple[Path, Path]] = list(plan.image_outputs)
    files += [(v.source, f) for v in plan.videos for f in v.files]
    for source, path in files:
        key = resolved(path)
        if key in seen and resolved(seen[key][0]) != resolved(source):
            raise OutputClashError(
                f"two inputs would be written to {path}: {seen[key][0]} and {source}; "
                "rename one of them or run them separately"
            )
        seen[key] = (source, path)
    for key, (source, path) in seen.items():  # a file where another output needs a folder
        for parent in Path(key).parents:  # a resolved path's parents are resolved too
            taken = seen.get(str(parent))
            if taken is not None:
                raise OutputClashError(
                    f"two inputs would be written to {taken[1]}: {taken[0]} (a file) and "
                    f"{source} (a folder, for {path}); rename one of them or run them separately"
                )
    folders = [(v.source, v.frames) for v in plan.videos if v.frames is not None]
    for i, (source, folder) in enumerate(folders):
        home = resolved(folder)
        for other, path in files:  # its own video too: the folder is replaced whole
            if _inside(resolved(path), home):
                raise OutputClashError(
                    f"the frames of {source} would replace {folder}, where {path} (of {other}) "
                    "is written; choose another --frames-out"
                )
        for other, path in folders[i + 1 :]:
            if _inside(resolved(path), home) or _inside(home, resolved(path)):
                raise OutputClashError(
                    f"two inputs would write their frames to {folder}: {source} and {other}; "
                    "rename one of them or run them separately"
                )


def _check_inputs(
    plan: RunPlan, inputs: Sequence[Path], frames_dir: Path | None, resolved: _Keys
) -> None:
    """No output onto an input: `-o` not an input folder nor inside one, no output file
    that is an input, and `--frames-out` neither an input, inside one, nor holding one."""
    out = resolved(plan.out)
    named = {resolved(p): p for p in [*inputs, *(s for s, _ in plan.image_outputs)]}
    named.update({resolved(v.source): v.source for v in plan.videos})
    sources = list(named)
    for given in inputs:
        if given.is_dir() and _inside(out, resolved(given)):
            raise OutputClashError(
                f"output folder {plan.out} is inside the input folder {given} (a rerun would "
                "read its outputs as inputs); choose another --out"
            )
    own = {resolved(dst): resolved(src) for src, dst in plan.image_outputs}
    own.update({resolved(f): resolved(v.source) for v in plan.videos for f in v.files})
    for path in plan.outputs():
        key = resolved(path)
        if key in sources:
            whose = "its input" if own.get(key) == key else f"the input {path}"
            raise OutputClashError(f"output {path} would overwrite {whose}; choose another --out")
    folders = [v.frames for v in plan.videos if v.frames is not None]
    if frames_dir is not None:
        folders.append(frames_dir)
    check_frames_folders(folders, list(named.values()), "--frames-out", resolved)


def check_frames_folders(
    folders: Sequence[Path],
    inputs: Sequence[str | os.PathLike[str]],
    option: str = "--out",
    resolved: _Keys | None = None,
) -> None:
    """A folder of numbered frames is replaced whole, so none of `folders` may be, hold or
    lie inside an input (`synth --video --clean OUT/clean -o OUT` replaced the input frames
    with what it had read of them: with `--max-frames 1`, one)."""
    resolved = resolved if resolved is not None else _Keys()
    named = {resolved(Path(p)): Path(p) for p in inputs if Path(p).exists()}
    for folder in folders:
        home = resolved(folder)
        for source, given in named.items():
            if _inside(source, home) or _inside(home, source):
                raise OutputClashError(
                    f"{option} {folder} is, holds or is inside the input {given} "
                    "(a frames folder is replaced whole); choose a folder apart from the inputs"
                )


def prepare_outputs(out: Path, outputs: Iterable[Path], started: float) -> None:
    """Before any work: remove what killed runs left in OUT and the outputs' folders
    (temporaries of dead writers older than `started`, `clearsight.atomic`)."""
    from clearsight.runtime.failures import sweep_output_folders

    sweep_output_folders(out, outputs, started)


def finished(video: VideoOutput) -> bool:
    """All of a video's outputs exist (`--skip-existing` keeps them), as an image's output
    existing keeps it."""
    done = all(f.is_file() for f in video.files)
    return done and (video.frames is None or video.frames.is_dir())


FIXED_OUTPUTS = ("per_image.csv", "per_frame.csv", "summary.json", "report.html")
"""The files `eval` may write in its --out folder."""

READ_SUFFIXES = (*VIDEO_SUFFIXES, ".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp",
                 ".json")  # fmt: skip
"""Files of a data set a run reads: images, videos and COCO annotations."""


def plan_fixed_outputs(
    out: str | os.PathLike[str] | None,
    report: str | os.PathLike[str] | None = None,
    *,
    inputs: Sequence[str | os.PathLike[str]] = (),
    files: Sequence[str] = FIXED_OUTPUTS,
    report_files: Sequence[str | os.PathLike[str]] = (),
) -> None:
    """The plan of a run whose outputs have fixed names (`eval`: `files` in `out`, the
    `report` page and `report_files` beside it): every path checked before any work, none
    an input (`_check_not_read`), and the leftovers of killed runs swept from their
    folders, as a folder run's are."""
    from clearsight.atomic import sweep_leftovers

    folders: list[Path] = []
    given = [Path(i) for i in inputs]
    if out is not None:
        folders.append(check_output_folder(out, "--out"))
        _check_not_read("--out", [Path(out) / name for name in files], given, named=False)
    if report is not None:
        folders.append(check_output_file(report, "--report").parent)
        pages = [Path(report), *map(Path, report_files)]
        _check_not_read("--report", pages, given, named=True)
    for folder in folders:
        sweep_leftovers(folder)


def _check_not_read(
    option: str, written: Sequence[Path], inputs: Sequence[Path], *, named: bool
) -> None:
    """No output of a fixed-name run is a file it reads: not an input given as a file, nor,
    for paths the user `named` (a report), an image, video or annotations file inside an
    input folder (a report named after a clean image used to replace it with HTML). The
    run's own fixed names (`summary.json` in an --out inside the set) and a report page
    beside the set, rewritten by a rerun, are fine."""
    resolved = _Keys()
    given = {resolved(p): p for p in inputs if p.exists()}
    folders = [(k, p) for k, p in given.items() if p.is_dir()]
    for path in written:
        key = resolved(path)
        if key in given and not given[key].is_dir():
            raise OutputClashError(f"{option}: {path} is an input; choose another path")
        if not named or not Path(key).is_file() or Path(key).suffix.lower() not in READ_SUFFIXES:
            continue
        for home, folder in folders:
            if _inside(key, home):
                raise OutputClashError(
                    f"{option}: {path} is a file of the input {folder}; choose another path"
                )
