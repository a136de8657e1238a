"""`clearsight compress`: smaller and faster models (`quantize`; see docs/quantize.md)."""

from __future__ import annotations

import typer

from clearsight.cli import compress_quantize
from clearsight.cli._app import app

compress_app = typer.Typer(help="Compress a model: int8 quantization.", no_args_is_help=True)
app.add_typer(compress_app, name="compress")
compress_quantize.register(compress_app)
