"""The shared app: the Typer object, the consoles, one-line errors, warnings, progress.

Every command module registers on `app` and wraps its command in `friendly`, which turns
a `ClearsightError` into one line and exit code 1 (`--debug` shows the traceback), an
`OptionError` into `--flag: detail`, and warnings into `warning: ...` lines.
"""

from __future__ import annotations

import functools
import sys
import warnings
from collections.abc import Callable
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.progress import Progress

from clearsight._version import __version__
from clearsight.errors import ClearsightError, OptionError

app = typer.Typer(
    name="clearsight",
    help="Restore images with compact models: derain, demoire, restore, evaluate.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console()
err_console = Console(stderr=True)

_STATE = {"debug": False}
F = TypeVar("F", bound=Callable[..., Any])

FLAGS = {"ensemble": "tta"}
"""CLI flags whose name differs from the `InferenceOptions` field they set."""


def flag(option: str) -> str:
    """The command-line spelling of an option: "stage_threshold" -> "--stage-threshold"."""
    return "--" + FLAGS.get(option, option).replace("_", "-")


def error_line(exc: ClearsightError) -> str:
    """An error as the CLI prints it: options by their flag, `--tile: must be >= 0, got -1`."""
    if isinstance(exc, OptionError):
        return f"{flag(exc.option)}: {exc.detail}"
    return str(exc)


def friendly(fn: F) -> F:
    """Report `ClearsightError` as one line and exit 1, unless --debug was given."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except ClearsightError as exc:
            if _STATE["debug"]:
                raise
            err_console.print(
                f"[bold red]error:[/] {error_line(exc)}", highlight=False, soft_wrap=True
            )
            raise typer.Exit(code=1) from None

    return wrapper  # type: ignore[return-value]


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
    err_console.print(f"[yellow]warning:[/] {message}", highlight=False, soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        console.print(f"clearsight {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    debug: Annotated[bool, typer.Option("--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    _STATE["debug"] = debug


def progress() -> Progress:
    """The progress bar on stderr, drawn only on a terminal."""
    from clearsight.progress import progress_bar

    return progress_bar(err_console, disable=not err_console.is_terminal)


def main() -> None:
    """Console entry point."""
    try:
        app()
    except KeyboardInterrupt:
        err_console.print("interrupted")
        sys.exit(130)
