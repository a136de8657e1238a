"""`clearsight astar-score`: `clearsight.api.astar_score`, printed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clearsight.cli._app import app, console, err_console, friendly
from clearsight.cli._options import DeviceOpt


@app.command("astar-score")
@friendly
def astar_score_cmd(
    model: Annotated[
        str,
        typer.Argument(
            help="Detection artifact, bundled model name, --layout astar .onnx file, or "
            "contest Paddle folder (export --format paddle --layout astar)."
        ),
    ],
    data: Annotated[
        Path, typer.Option("--data", "-d", help="Folder with annotations/ and val2017/.")
    ],
    json_out: Annotated[
        Path | None, typer.Option("--json", help="Also write the result JSON here.")
    ] = None,
    limit: Annotated[
        int | None, typer.Option("--limit", help="Only the first N images (a quick check).")
    ] = None,
    no_plus_one: Annotated[
        bool, typer.Option("--no-nms-plus-one", help="Turn off the +1 IoU quirk of the NMS.")
    ] = False,
    keep_last_single: Annotated[
        bool,
        typer.Option("--keep-last-single", help="Score a final batch of one image too."),
    ] = False,
    device: DeviceOpt = "cpu",
) -> None:
    """Score a detector as the Astar 2019 contest did: mAP, MAdds, penalty and score (each
    contest quirk is on unless turned off, and the result says which were)."""
    from clearsight.api import astar_score

    if limit is not None and limit < 1:
        raise typer.BadParameter(f"must be >= 1, got {limit}", param_hint="--limit")
    quirks = {}
    if no_plus_one:
        quirks["nms_plus_one"] = False
    if keep_last_single:
        quirks["drop_last_single"] = False
    result = astar_score(model, data, limit=limit, device=device, json_out=json_out, **quirks)
    console.print(
        f"mAP {result.map:.4f}  MAdds {result.madds:.1f} M  penalty {result.penalty:.2f}  "
        f"score {result.score:.2f}  ({result.images} images)",
        highlight=False,
    )
    on = ", ".join(k for k, v in result.quirks.items() if v is True) or "none"
    err_console.print(f"runtime: {result.runtime}; quirks on: {on}", highlight=False)
    if result.adapter:
        err_console.print(f"adapter: {result.adapter}", highlight=False)
    if json_out is not None:
        console.print(f"wrote {json_out}")
