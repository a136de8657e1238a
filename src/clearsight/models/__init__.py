"""Model architectures, one file each, registered by name in `registry`."""

# Importing each architecture module registers it.
from clearsight.models import (  # noqa: F401
    esdnet,
    identity,
    mbcnn,
    nafnet,
    rescan,
    s2vd,
    ssd_mobilenet_v1,
    yolox_nano,
)
from clearsight.models.registry import build_model, get_spec, list_specs, register_model

__all__ = ["build_model", "get_spec", "list_specs", "register_model"]
