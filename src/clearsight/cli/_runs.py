"""The printers of folder runs (restore, derain, demoire, detect): progress bars, one line
per file or failure, the summary, and exit 3 when some inputs failed."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import typer

from clearsight.cli._app import EXIT_SOME_FAILED, progress, say, say_failed

Summary = TypeVar("Summary")


def run_on_ray(
    what: str, start: Callable[..., Summary], line: Callable[[Summary], str] | None = None
) -> Summary:
    """`start(on_start=..., on_result=...)` (a Ray run) under a progress bar, printing each
    failed image as it comes back (`say_failed`, as the local engine does). Should
    failures.csv be unwritable, the run's `line(summary)` is printed before the error, so
    the summary is not lost."""
    from clearsight.api import FailuresCsvError

    with progress() as bar:
        task = bar.add_task(what, total=None)

        def on_result(r: object) -> None:
            bar.advance(task)
            if getattr(r, "status", "") != "done":
                say_failed(getattr(r, "source", ""), getattr(r, "reason", ""))

        try:
            return start(
                on_start=lambda todo, _skipped: bar.update(task, total=todo), on_result=on_result
            )
        except FailuresCsvError as exc:
            if exc.run is not None and line is not None:
                bar.stop()
                say(line(exc.run))
            raise


def finish_ray(summary: Any, line: Callable[[Any], str]) -> None:
    """Print a Ray run's last line; exit 3 (some inputs failed) when failures.csv lists any."""
    say(line(summary))
    if summary.failures_csv is not None:
        say(f"failures listed in {summary.failures_csv}")
        raise typer.Exit(code=EXIT_SOME_FAILED)


def existing_policy(skip_existing: bool | None) -> str | None:
    """--skip-existing/--overwrite as the API's `existing` (None: the engine's default)."""
    return None if skip_existing is None else ("skip" if skip_existing else "overwrite")


def run_videos_summarised(
    videos: Any,
    one: Callable[..., Any],
    out: Any,
    summary: Callable[[int, int], None],
    **options: Any,
) -> list[Any]:
    """`clearsight.api.run_videos` printing each failed video and then `summary(done,
    failed)`, also when failures.csv cannot be written (before that error); returns the
    failed videos."""
    from clearsight import api

    try:
        ok, failed, _ = api.run_videos(
            videos, one, out, on_failure=lambda f: say_failed(f.source, f.reason), **options
        )
    except api.FailuresCsvError as exc:  # the run's account still gets printed
        if exc.run is not None:
            summary(len(exc.run[0]), len(exc.run[1]))
        raise
    summary(len(ok), len(failed))
    return failed
