"""`clearsight models`: architectures and bundled models (`clearsight.list_models`).

The quick start's first output, so it must read well in an 80-column terminal and in a
pipe (where Rich assumes 80 columns): one line of short columns per model with its
description on the line under it, indented. `--wide` gives the one-row-per-model table for
wide terminals, `--json` the rows themselves.
"""

from __future__ import annotations

import json
import textwrap
from typing import Annotated, Any

import typer
from rich.table import Table

from clearsight.cli._app import app, console, friendly, say

COLUMNS = ("name", "kind", "task", "params", "preset")
INDENT = "  "


def _cells(row: dict[str, Any]) -> list[str]:
    return [row["name"], row["kind"], row["task"], f"{row['params']:,}", row["preset"]]


def _listing(rows: list[dict[str, Any]], width: int) -> list[str]:
    """Aligned columns, each model's description wrapped under its row within `width`."""
    cells = [list(COLUMNS)] + [_cells(r) for r in rows]
    widths = [max(len(c[i]) for c in cells) for i in range(len(COLUMNS))]

    def line(values: list[str]) -> str:
        parts = [
            v.rjust(w) if col == "params" else v.ljust(w)
            for col, v, w in zip(COLUMNS, values, widths, strict=True)
        ]
        return "  ".join(parts).rstrip()

    lines = [line(cells[0])]
    for row, values in zip(rows, cells[1:], strict=True):
        lines.append(line(values))
        lines += textwrap.wrap(
            row["description"],
            width=max(40, width),
            initial_indent=INDENT,
            subsequent_indent=INDENT,
        )
    return lines


def _table(rows: list[dict[str, Any]]) -> Table:
    table = Table(title="clearsight models")
    for col, kw in (
        ("name", {"style": "bold", "no_wrap": True}),
        ("kind", {}),
        ("task", {}),
        ("params", {"justify": "right"}),
        ("preset", {}),
        ("description", {}),
    ):
        table.add_column(col, **kw)
    for r in rows:
        table.add_row(*_cells(r), r["description"])
    return table


@app.command("models")
@friendly
def models_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
    wide: Annotated[
        bool,
        typer.Option("--wide", help="One table row per model, descriptions in a column."),
    ] = False,
) -> None:
    """List every architecture (with its default parameter count) and every bundled model."""
    from clearsight.api import list_models

    rows = list_models()
    if as_json:
        console.print_json(json.dumps(rows))
        return
    if wide:
        console.print(_table(rows))
        return
    header, *rest = _listing(rows, console.width)
    say((header, "bold"))
    for text in rest:
        say(text)
