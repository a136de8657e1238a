"""The clearsight metadata of an exported ONNX file: its keys, writing and reading.

One module below both the exporter (`export/onnx.py`, which writes it) and the ONNX Runtime
backend (`runtime/ort_backend.py`, which reads it), so neither imports the other for it.
The artifact's config and preprocessing spec go into `metadata_props` as JSON next to the
export info (outputs, pad multiple, receptive radius, shared statistics), which makes the
file self-describing.
"""

from __future__ import annotations

import json
from typing import Any

from clearsight.artifact import ModelConfig
from clearsight.errors import ArtifactError

CONFIG_KEY = "clearsight_config"
EXPORT_KEY = "clearsight_export"
PREPROCESS_KEY = "clearsight_preprocess"
CLASSES_KEY = "clearsight_classes"
"""Detectors: the dataset class id and name of each label (`export/onnx_detect.py`)."""
PRECISION_KEY = "clearsight_precision"
"""Written by `compress quantize` ("int8"); absent from fp32 exports (read as "fp32")."""
EXPORT_FORMAT_VERSION = 1
STATS_INPUT = "global_stats"
"""Name of the tile graph's extra input: the shared statistics [N, sites, C]."""


def metadata_props(config: ModelConfig, export_info: dict[str, Any]) -> dict[str, str]:
    """The `metadata_props` entries an export writes (key -> JSON text)."""
    cfg = config.to_dict()
    return {
        CONFIG_KEY: json.dumps(cfg),
        PREPROCESS_KEY: json.dumps(cfg["preprocess"]),
        EXPORT_KEY: json.dumps(export_info),
    }


def read_onnx_metadata(session: Any, source: str) -> tuple[ModelConfig, dict[str, Any]]:
    """The clearsight config and export info stored in a session's model metadata."""
    meta = dict(session.get_modelmeta().custom_metadata_map or {})
    if CONFIG_KEY not in meta or EXPORT_KEY not in meta:
        raise ArtifactError(
            f"{source}: ONNX model carries no clearsight metadata "
            "(only files written by `clearsight export` can be used as models)"
        )
    try:
        config = ModelConfig.from_dict(json.loads(meta[CONFIG_KEY]), source)
        info = json.loads(meta[EXPORT_KEY])
    except json.JSONDecodeError as exc:
        raise ArtifactError(f"{source}: invalid clearsight metadata ({exc})") from None
    if not isinstance(info, dict) or int(info.get("format_version", 0)) > EXPORT_FORMAT_VERSION:
        raise ArtifactError(f"{source}: unsupported clearsight export metadata version")
    if len(session.get_inputs()) != 1:
        raise ArtifactError(
            f"{source}: expected one graph input, found {len(session.get_inputs())}"
        )
    return config, info
