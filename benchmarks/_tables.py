"""The benchmark scripts' table printer: rich when installed, aligned plain text otherwise."""

from __future__ import annotations


def print_table(title: str, header: list[str], rows: list[list[str]]) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # plain text
        print(title)
        widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
        for r in [header, *rows]:
            print("  ".join(c.rjust(w) for c, w in zip(r, widths, strict=True)))
        return
    table = Table(title=title)
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for r in rows:
        table.add_row(*r)
    Console(width=140).print(table)
