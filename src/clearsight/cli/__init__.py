"""The `clearsight` command: a thin layer over the Python API (`import clearsight`).

Each command parses its arguments, makes one API call and prints the result; `_app` holds
the shared Typer app, consoles, one-line errors and the progress bar. The command modules
register on the app when imported here, in the order `clearsight --help` lists them.
"""

from __future__ import annotations

import importlib

from clearsight.api import DEFAULT_STAGE_THRESHOLD
from clearsight.cli._app import app, console, err_console, main

COMMAND_MODULES = (
    "models",
    "restore",
    "detect",
    "astar",
    "evaluate",
    "data",
    "train",
    "compare",
    "audit",
    "export",
    "compress",
    "imports",
    "serve",
)
for _name in COMMAND_MODULES:  # each registers its commands on `app`, in this order
    importlib.import_module(f"clearsight.cli.{_name}")

__all__ = ["DEFAULT_STAGE_THRESHOLD", "app", "console", "err_console", "main"]
