"""The shared app: the Typer object, the consoles, one-line errors, warnings, progress.

Every command module registers on `app` and wraps its command in `friendly`, the CLI's one
error boundary: every exception becomes one line and exit code 1 (`--debug` shows the
traceback instead). A `ClearsightError` prints its message, an `OptionError` prints
`--flag: detail`, known OS causes get a specific line (a file where a folder is expected and
the reverse, permissions, disk full), an error from OpenCV or FFmpeg its own words on one
line (`errors.library_reason`), anything else is an `internal error` that points to
`--debug`. Warnings print as `warning: ...` lines.

Nothing the CLI prints is read as Rich markup or emoji codes: file names and messages are
user text (`[draft] a.png`, `:x:.png`, `bbox must be [x, y, w, h]`), so the consoles are
made without markup, and a line with a coloured label is built by `say` from plain strings
and (text, style) pairs. Lines are never wrapped by Rich (one message, one line).

Exit codes (README "Errors"): 0 success; 1 an error, the command did not finish; 2 a usage
error found by the parser (unknown flag, missing argument); 3 a folder run finished but some
inputs failed (listed in OUT/failures.csv); 130 interrupted.
"""

from __future__ import annotations

import errno
import functools
import re
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import click
import typer
from rich.console import Console
from rich.progress import Progress
from rich.text import Text

from clearsight import __version__
from clearsight.errors import ClearsightError, OptionError, library_reason

app = typer.Typer(
    name="clearsight",
    help="Compact vision models from data to a deployed artifact: restore images (derain, "
    "demoire), detect objects, evaluate, train, compress, export (ONNX, Paddle) and serve.",
    epilog="Exit codes: 0 success; 1 an error stopped the command (one line says why); "
    "2 a usage error; 3 a folder run finished but some inputs failed (OUT/failures.csv).",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    add_completion=False,
)
console = Console(markup=False, emoji=False, highlight=False, soft_wrap=True)
err_console = Console(stderr=True, markup=False, emoji=False, highlight=False, soft_wrap=True)

Part = str | tuple[str, str]
"""A piece of a printed line: plain text, or (text, Rich style)."""


def say(*parts: Part, err: bool = False) -> None:
    """Print one line built from plain strings and (text, style) pairs, on stdout (or
    stderr with `err`). No part is read as markup: `say(("failed:", "bold red"), " ", name)`
    prints any file name as itself. Every labelled line of the CLI goes through here."""
    (err_console if err else console).print(Text.assemble(*parts), soft_wrap=True)


def failure_line(source: object, reason: str) -> str:
    """'FILE: reason', naming the file once: a reason that already names it (the
    engines' reasons often start with it) is kept as it is."""
    src = str(source)
    if re.search(rf"(^|[\s'\"(]){re.escape(src)}($|[\s'\":),])", reason):
        return reason
    return f"{src}: {reason}"


def say_failed(source: object, reason: str) -> None:
    """`failed: FILE: reason` on stderr, one line: the printer of every folder run (restore,
    detect, local and Ray engines)."""
    say(("failed:", "bold red"), " ", failure_line(source, reason), err=True)


_STATE = {"debug": False}

EXIT_ERROR = 1
"""An error: the command did not finish (one line says why)."""
EXIT_SOME_FAILED = 3
"""A folder run finished, but some inputs failed (each named, and listed in failures.csv)."""
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


def _blocking_file(path: Path) -> Path | None:
    """The first existing parent of `path` that is a file (so `path` cannot be created)."""
    for parent in reversed(path.parents):
        if parent.exists() and not parent.is_dir():
            return parent
    return None


_TEMP_NAME = re.compile(r"^\.(?P<stem>.+)\.clearsight-\d+-[0-9a-f]+\.tmp(?P<suffix>\.[^/]*)?$")
"""`clearsight.atomic`'s temporary names: .<stem>.clearsight-<pid>-<hex>.tmp<suffix>."""


def _target_of(path: Path) -> Path:
    """The file a temporary name stands for (`.failures.clearsight-1-ab.tmp.csv` ->
    `failures.csv`): an error while writing it is about the target, which the user knows."""
    m = _TEMP_NAME.match(path.name)
    if m is None:
        return path
    suffix = m["suffix"] or ""
    return path.with_name(m["stem"] + ("" if suffix == ".old" else suffix))


def _os_error_line(exc: OSError) -> str | None:
    """A specific line for an OS error about a path, or None for one without a path."""
    if exc.filename is None:
        return None
    path = _target_of(Path(str(exc.filename)))
    if isinstance(exc, IsADirectoryError):
        return f"{path} is a folder, expected a file"
    if isinstance(exc, NotADirectoryError | FileExistsError):
        if path.exists() and not path.is_dir():
            return f"{path} is a file, expected a folder"
        blocker = _blocking_file(path)
        if blocker is not None:
            return f"{path}: {blocker} is a file, not a folder"
        if isinstance(exc, FileExistsError):
            return f"{path} already exists"
    if isinstance(exc, PermissionError):
        return f"{path}: permission denied"
    if isinstance(exc, FileNotFoundError):
        blocker = _blocking_file(path)
        return f"{path}: {blocker} is a file, not a folder" if blocker else f"{path}: not found"
    if exc.errno == errno.ENOSPC:
        return f"{path}: no space left on the device"
    return f"{path}: {exc.strerror or exc}"


def exception_line(exc: BaseException) -> str:
    """Any exception as the one line the CLI prints for it."""
    if isinstance(exc, ClearsightError):
        return error_line(exc)
    if isinstance(exc, OSError):
        line = _os_error_line(exc)
        if line is not None:
            return line
    if isinstance(exc, MemoryError):
        return "out of memory; try a smaller --tile or --max-pixels"
    library = library_reason(exc)
    if library is not None:  # OpenCV or FFmpeg refused an input: its own words, one line
        return library
    text = str(exc).strip().splitlines()
    detail = f"{type(exc).__name__}: {text[0]}" if text and text[0] else type(exc).__name__
    if "CUDA" in detail and ("not compiled" in detail or "no CUDA" in detail.lower()):
        return f"CUDA is not available here ({detail}); use --device cpu"
    return f"internal error ({detail}); run `clearsight --debug ...` for the traceback"


def _report(exc: BaseException) -> None:
    say(("error:", "bold red"), " ", exception_line(exc), err=True)


_PASS_THROUGH = (
    typer.Exit,
    getattr(typer, "Abort", click.Abort),
    click.exceptions.Exit,
    click.ClickException,
    click.Abort,
)
"""The parser's and typer's own exits and usage errors: not errors of a command."""


def friendly(fn: F) -> F:
    """The error boundary: any exception becomes one line and exit 1, unless --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("always")
                warnings.showwarning = _show_warning
                return fn(*args, **kwargs)
        except _PASS_THROUGH:
            raise  # the parser's and typer's own exits and usage errors
        except Exception as exc:
            if _STATE["debug"]:
                raise
            _report(exc)
            raise typer.Exit(code=EXIT_ERROR) from None

    return wrapper  # type: ignore[return-value]


def _show_warning(message: Warning | str, category: type[Warning], *args: Any, **kw: Any) -> None:
    say(("warning:", "yellow"), " ", str(message), err=True)


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
    from clearsight.api import progress_bar

    return progress_bar(err_console, disable=not err_console.is_terminal)


def main() -> None:
    """Console entry point. Compute threads sleep when idle (`runtime.threads`): set before
    any command imports torch."""
    from clearsight.api import prefer_sleeping_threads

    prefer_sleeping_threads()
    try:
        app()
    except KeyboardInterrupt:
        say("interrupted", err=True)
        sys.exit(130)
    except Exception as exc:  # outside a command (a callback): the same one line
        if _STATE["debug"]:
            raise
        _report(exc)
        sys.exit(EXIT_ERROR)
