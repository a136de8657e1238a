"""`clearsight import paddle|torch`: other frameworks' weights into a clearsight artifact."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from clearsight.cli._app import app, console, friendly, say

import_app = typer.Typer(
    help="Import weights trained in another framework as a clearsight artifact.",
    no_args_is_help=True,
)
app.add_typer(import_app, name="import")


@import_app.command("paddle")
@friendly
def import_paddle_cmd(
    weights: Annotated[Path, typer.Argument(help="Paddle state dict (.pdparams).")],
    arch: Annotated[
        str,
        typer.Option(
            "--arch", help="Architecture: mbcnn, mbcnn-light, rescan, ssd-mobilenet-v1, yolox-nano."
        ),
    ],
    out: Annotated[Path, typer.Option("--out", "-o", help="Artifact folder or .safetensors file.")],
    sets: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="key=value: an architecture argument (n_filters=32) or an import option "
            "(bn_eps=1e-5, lost_blocks=refuse|share). Repeatable.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Model name to record.")] = None,
) -> None:
    """Read WEIGHTS without Paddle (a restricted unpickler: nothing in the file runs), map
    every name and layout to ARCH, check every shape, and save an artifact."""
    from clearsight.api import check_artifact_target, import_paddle

    check_artifact_target(out)
    result = import_paddle(weights, arch, out, sets=sets or [], name=name)
    console.print(
        f"imported {result.tensors} tensors from {weights.name} as {result.architecture} "
        f"{result.arch_args}",
        highlight=False,
        soft_wrap=True,
    )
    for f in result.findings:
        say((f"finding ({f['check']}):", "yellow"), f" {f['detail']}")
    if result.findings:
        say(f"run `clearsight audit {result.path}` to see them checked")
    console.print(f"wrote {result.path}", highlight=False)


@import_app.command("torch")
@friendly
def import_torch_cmd(
    weights: Annotated[
        str,
        typer.Argument(
            help="PyTorch checkpoint (.pth/.pt/.tar) or hf://OWNER/REPO/FILE[@REVISION]."
        ),
    ],
    arch: Annotated[str, typer.Option("--arch", help="Architecture: esdnet, esdnet-l, nafnet.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="Artifact folder or .safetensors file.")],
    args: Annotated[
        str | None,
        typer.Option(
            "--args",
            help="Architecture arguments as JSON (e.g. '{\"width\": 16}'); by default they are "
            "inferred from the tensor shapes.",
        ),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Model name to record.")] = None,
) -> None:
    """Read WEIGHTS weights-only (a pickle that would run code is refused), map the official
    names (ESDNet's, NAFNet's or ClearView's NAFNet) to ARCH, check every shape, and save an
    artifact with a model card stub."""
    from clearsight.api import import_torch

    result = import_torch(weights, arch, out, args=args, name=name)
    console.print(
        f"imported {result.tensors} tensors from {weights} as {result.architecture} "
        f"{result.arch_args}",
        highlight=False,
        soft_wrap=True,
    )
    console.print(f"wrote {result.path}", highlight=False)
