"""What the benchmark scripts share: median timers (one function, or several interleaved)
and a table printer (rich when installed, aligned plain text otherwise)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def interleaved(fns: list[Callable[[], object]], runs: int) -> list[float]:
    """Median seconds of each function, timed in alternating rounds after one warm-up each."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(runs):
        for i, fn in enumerate(fns):
            t0 = time.perf_counter()
            fn()
            times[i].append(time.perf_counter() - t0)
    return [statistics.median(t) for t in times]


def median_time(fn: Callable[[], T], runs: int) -> tuple[float, T]:
    """Median seconds of `runs` calls after one untimed warm-up, and the last call's result."""
    out = fn()
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), out


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
