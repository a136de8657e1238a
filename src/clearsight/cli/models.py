"""`clearsight models`: architectures and bundled models (`clearsight.list_models`)."""

from __future__ import annotations

import json
from typing import Annotated

import typer
from rich.table import Table

from clearsight.cli._app import app, console, friendly


@app.command("models")
@friendly
def models_cmd(
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")] = False,
) -> None:
    """List every architecture (with its default parameter count) and every bundled model."""
    from clearsight.api import list_models

    rows = list_models()
    if as_json:
        console.print_json(json.dumps(rows))
        return
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
        table.add_row(
            r["name"], r["kind"], r["task"], f"{r['params']:,}", r["preset"], r["description"]
        )
    console.print(table)
