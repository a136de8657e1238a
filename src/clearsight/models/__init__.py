"""Model architectures, one file each, registered by name in `registry`."""

from clearsight.models import identity, mbcnn, rescan, yolox_nano  # noqa: F401  (register on import)
from clearsight.models.registry import build_model, get_spec, list_specs, register_model

__all__ = ["build_model", "get_spec", "list_specs", "register_model"]
