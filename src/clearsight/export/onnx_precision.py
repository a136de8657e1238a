"""An exported ONNX model's precision: the metadata an int8 graph carries beside the fp32
export's (`precision`, `quantization`), and writing such bytes to disk.

Shared by post-training quantization (`compress/quantize.py`) and quantization-aware
training's int8 export (`engine/qat.py`), which sits below compression.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from clearsight.atomic import atomic_write_bytes
from clearsight.onnx_meta import EXPORT_KEY, PRECISION_KEY

__all__ = [
    "onnx_metadata",
    "ort_version",
    "precision_of",
    "save_onnx_bytes",
    "with_precision_metadata",
]


def with_precision_metadata(data: bytes, props: dict[str, str], extra: dict[str, Any]) -> bytes:
    """`data` with the fp32 export's metadata, its export info extended by `extra`."""
    import onnx

    proto = onnx.load_from_string(data)
    info = json.loads(props[EXPORT_KEY])
    info.update(extra)
    merged = {**props, EXPORT_KEY: json.dumps(info), PRECISION_KEY: str(extra["precision"])}
    del proto.metadata_props[:]
    for k, v in merged.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    proto.producer_name = "clearsight"
    return proto.SerializeToString()


def onnx_metadata(data: bytes) -> dict[str, str]:
    import onnx

    return {p.key: p.value for p in onnx.load_from_string(data).metadata_props}


def precision_of(export_info: dict[str, Any]) -> str:
    """An export's precision: "fp32" for files written before the key existed."""
    return str(export_info.get("precision", "fp32"))


def ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def save_onnx_bytes(data: bytes, out: str | os.PathLike[str]) -> Path:
    """Write ONNX bytes atomically, with the umask's modes (the temporary file is private)."""
    target = Path(out)
    atomic_write_bytes(target, data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(target, 0o666 & ~umask)
    return target
