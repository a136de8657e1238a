"""`clearsight audit`: the known-bug checks of a model, as a PASS/FAIL table."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.table import Table
from rich.text import Text

from clearsight.cli._app import app, console, friendly, say


@app.command("audit")
@friendly
def audit_cmd(
    model: Annotated[str, typer.Argument(help="Architecture name or artifact path.")],
    size: Annotated[int, typer.Option("--size", help="Side of the sample batch, pixels.")] = 32,
    seed: Annotated[int, typer.Option("--seed", help="Seed for weights and the batch.")] = 0,
) -> None:
    """Check MODEL for the field's known bugs: gradients, purity, structure, spec, two steps."""
    from clearsight.api import audit

    report = audit(model, size=size, seed=seed)
    table = Table(title=f"audit {model}")
    table.add_column("check", style="bold")
    table.add_column("result")
    table.add_column("details")
    for c in report.checks:
        table.add_row(
            c.name,
            Text("PASS", style="green") if c.passed else Text("FAIL", style="bold red"),
            c.details,
        )
    console.print(table)
    failed = report.failed()
    if failed:
        say((f"{len(failed)} check(s) failed", "bold red"))
        raise typer.Exit(code=1)
    say(("ok:", "green"), f" all {len(report.checks)} checks passed")
