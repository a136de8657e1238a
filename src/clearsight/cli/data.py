"""`clearsight synth moire|rain` and `clearsight check-data`: paired training data."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from clearsight.cli._app import app, console, friendly, progress, say
from clearsight.cli._options import ClipFpsOpt, MaxFramesOpt, MaxPixOpt
from clearsight.errors import OptionError

CocoOpt = Annotated[
    Path | None,
    typer.Option(
        "--coco",
        help="A COCO-format set (annotations/instances_*.json + images) to copy with degraded "
        "images and the same annotations, instead of --clean.",
    ),
]
synth_app = typer.Typer(
    help="Synthesise paired training data (degraded/clean).", no_args_is_help=True
)
app.add_typer(synth_app, name="synth")


@synth_app.command("moire")
@friendly
def synth_moire_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (moire/ and clean/).")],
    clean: Annotated[Path | None, typer.Option("--clean", help="Folder of clean images.")] = None,
    coco: CocoOpt = None,
    per_image: Annotated[
        int, typer.Option("--per-image", help="Synthetic pairs per clean image.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same pairs).")] = 0,
    match_tone: Annotated[
        bool,
        typer.Option("--match-tone", help="Apply the capture's tone change to the target too."),
    ] = False,
    max_pixels: MaxPixOpt = None,
    video: Annotated[
        bool,
        typer.Option(
            "--video",
            help="--clean is a video (or numbered frames, --fps) filmed by a moving camera: "
            "moiré that drifts coherently from frame to frame; numbered frame pairs in "
            "OUT/moire and OUT/clean.",
        ),
    ] = False,
    fps: ClipFpsOpt = None,
    max_frames: MaxFramesOpt = None,
) -> None:
    """Screen-camera moiré simulation: aligned OUT/moire and OUT/clean pairs, same size
    (--coco DATA: a COCO-format copy of DATA with moiré images, the same annotations)."""
    from clearsight.api import check_video_options, synth_moire, synth_moire_video

    if _source(clean, coco, video) is None:
        _synth_coco(coco, out, "moire", "-", seed)
        return
    assert clean is not None

    if video:
        check_video_options(fps=fps)
        if per_image != 1:
            raise OptionError("per_image", "is for images; --video makes one clip per video")
        with progress() as bar:
            task = bar.add_task("synth moire --video", total=None)
            report = synth_moire_video(
                clean, out, seed=seed, match_tone=match_tone, fps=fps, max_frames=max_frames,
                max_pixels=max_pixels, on_pair=lambda p: bar.advance(task),
            )  # fmt: skip
        console.print(f"wrote {report.pairs} frame pair(s) into {out}/moire and {out}/clean")
        return
    with progress() as bar:
        task = bar.add_task("synth moire", total=None)
        report = synth_moire(
            clean,
            out,
            per_image=per_image,
            seed=seed,
            match_tone=match_tone,
            max_pixels=max_pixels,
            on_pair=lambda p: bar.advance(task),
        )
    console.print(f"wrote {report.pairs} pair(s) into {out}/moire and {out}/clean")


@synth_app.command("rain")
@friendly
def synth_rain_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="Output folder (rain/ and clean/).")],
    clean: Annotated[Path | None, typer.Option("--clean", help="Folder of clean images.")] = None,
    coco: CocoOpt = None,
    preset: Annotated[
        str, typer.Option("--preset", help="light (Rain100L-like), heavy (Rain100H-like), mixed.")
    ] = "mixed",
    per_image: Annotated[
        int, typer.Option("--per-image", help="Synthetic pairs per clean image.")
    ] = 1,
    seed: Annotated[int, typer.Option("--seed", help="Random seed (same seed, same pairs).")] = 0,
    workers: Annotated[
        int, typer.Option("--workers", help="Worker processes (0: this process; same output).")
    ] = 0,
    max_pixels: MaxPixOpt = None,
    video: Annotated[
        bool,
        typer.Option(
            "--video",
            help="--clean is a video (or numbered frames, --fps): rain that moves coherently "
            "from frame to frame; numbered frame pairs in OUT/rain and OUT/clean.",
        ),
    ] = False,
    fps: ClipFpsOpt = None,
    max_frames: MaxFramesOpt = None,
) -> None:
    """Rain streaks (and haze for heavy rain) over clean photos: OUT/rain and OUT/clean pairs
    (--coco DATA: a COCO-format copy of DATA with rainy images, the same annotations)."""
    from clearsight.api import check_video_options, synth_rain, synth_rain_video

    if _source(clean, coco, video) is None:
        _synth_coco(coco, out, "rain", preset, seed)
        return
    assert clean is not None

    if video:
        check_video_options(fps=fps)
        with progress() as bar:
            task = bar.add_task(f"synth rain --video ({preset})", total=None)
            report = synth_rain_video(
                clean, out, seed=seed, preset=preset, fps=fps, max_frames=max_frames,
                on_pair=lambda p: bar.advance(task),
            )  # fmt: skip
        console.print(f"wrote {report.pairs} frame pair(s) into {out}/rain and {out}/clean")
        return
    with progress() as bar:
        task = bar.add_task(f"synth rain ({preset})", total=None)
        report = synth_rain(
            clean,
            out,
            preset=preset,
            per_image=per_image,
            seed=seed,
            workers=workers,
            max_pixels=max_pixels,
            on_pair=lambda p: bar.advance(task),
        )
    console.print(f"wrote {report.pairs} pair(s) into {out}/rain and {out}/clean")


def _source(clean: Path | None, coco: Path | None, video: bool) -> Path | None:
    """--clean, or None for --coco; exactly one of them (and --coco without --video)."""
    if (clean is None) == (coco is None):
        raise OptionError("clean", "give --clean FOLDER or --coco DATA (one of them)")
    if coco is not None and video:
        raise OptionError("coco", "is for COCO-format image sets, not --video")
    return clean


def _synth_coco(coco: Path | None, out: Path, kind: str, preset: str, seed: int) -> None:
    """`synth rain|moire --coco`: one progress bar and a line naming what was written."""
    from clearsight.api import synth_coco

    assert coco is not None
    label = f"synth {kind} --coco" + (f" ({preset})" if kind == "rain" else "")
    with progress() as bar:
        task = bar.add_task(label, total=None)
        report = synth_coco(coco, out, kind=kind, preset=preset, seed=seed,
                            on_image=lambda p: bar.advance(task))  # fmt: skip
    console.print(f"wrote {report.pairs} {kind} image(s) and their annotations into {out}")


@app.command("check-data")
@friendly
def check_data_cmd(
    data: Annotated[
        Path, typer.Argument(help="Folder with rain/clean, moire/clean or input/target pairs.")
    ],
    input_dir: Annotated[
        str | None, typer.Option("--input-dir", help="Input folder name under DATA.")
    ] = None,
    target_dir: Annotated[
        str | None, typer.Option("--target-dir", help="Target folder name under DATA.")
    ] = None,
    name_map: Annotated[
        str | None,
        typer.Option("--name-map", help="Target name from the input's stem, e.g. 'no{stem}'."),
    ] = None,
    side_by_side: Annotated[
        bool,
        typer.Option("--side-by-side", help="Each file holds both images side by side (RESCAN)."),
    ] = False,
    order: Annotated[
        str, typer.Option("--order", help="Side-by-side halves: clean-rain or rain-clean.")
    ] = "clean-rain",
    quick: Annotated[
        bool, typer.Option("--quick", help="Read file headers only (misses truncated data).")
    ] = False,
    psnr_floor: Annotated[
        float, typer.Option("--psnr-floor", help="Flag pairs whose PSNR is below this (dB).")
    ] = 10.0,
    strict: Annotated[
        bool,
        typer.Option("--strict", help="Misaligned, extreme or colour-swapped pairs fail too."),
    ] = False,
) -> None:
    """Check paired training data (names, sizes, readable files); exit 1 on any problem."""
    from clearsight.api import check_data

    report = check_data(
        data,
        input_dir=input_dir,
        target_dir=target_dir,
        name_map=name_map,
        side_by_side=side_by_side,
        order=order,
        quick=quick,
        psnr_floor=psnr_floor,
    )
    table = Table(title=f"check-data {data}")
    table.add_column("item", style="bold")
    table.add_column("value")
    for label, value in report.summary()[1:]:
        table.add_row(label, value)
    console.print(table)
    problems = report.problems() + (report.content_lines() if strict else [])
    if problems:
        say((f"problems ({len(problems)}):", "bold red"))
        for line in problems:
            say(f"  {line}")
    for line in report.warning_lines():
        if strict and line in problems:
            continue
        say(("warning:", "yellow"), f" {line}")
    if problems:
        say((f"{len(problems)} problem(s) found", "bold red"), f" in {data}")
        raise typer.Exit(code=1)
    say(("ok:", "green"), f" {report.n_pairs} pairs ready for training")
