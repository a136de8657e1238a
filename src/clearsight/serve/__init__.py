"""`clearsight serve`: restoration and detection over HTTP (FastAPI), with a page.

`create_app(models=..., limits=...)` builds the app without starting a server, so tests
drive it with FastAPI's test client; `clearsight serve` hands it to uvicorn.
"""

from __future__ import annotations

from clearsight.serve.app import create_app
from clearsight.serve.limits import ServeLimits
from clearsight.serve.registry import ServedModel, load_models

__all__ = ["ServeLimits", "ServedModel", "create_app", "load_models"]
