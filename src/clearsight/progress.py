"""The one progress bar: a rich `Progress` on stderr, shared by the CLI and the trainer.

Imported only when a bar is drawn (rich is not needed to import clearsight). Descriptions
are plain text, never markup: a file's name (`[red]a.png`) shows as itself.
"""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)


def progress_bar(
    console: Console | None = None, *, fields: Sequence[str] = (), disable: bool = False
) -> Progress:
    """Description, bar, done/total, any extra `fields` (format strings over the task, e.g.
    "loss {task.fields[loss]:.4g}"), elapsed and remaining time; on stderr by default."""
    columns: list[ProgressColumn] = [
        TextColumn("{task.description}", style="bold", markup=False),
        BarColumn(),
        MofNCompleteColumn(),
        *(TextColumn(f, markup=False) for f in fields),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
    ]
    return Progress(
        *columns, console=console or Console(stderr=True), transient=False, disable=disable
    )
