"""The int8 ONNX graph of a model trained with quantization-aware training (`engine/qat.py`),
written beside the run's `last/` artifact with its trained scales and zero points."""

from __future__ import annotations

import copy
import warnings
from typing import Any

from clearsight.artifact import LoadedModel
from clearsight.engine.qat import exportable
from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx_bytes
from clearsight.export.onnx_precision import onnx_metadata, ort_version, with_precision_metadata

__all__ = ["QAT_TOLERANCE", "qat_int8_onnx"]

QAT_TOLERANCE = 0.02
"""Max abs difference allowed between ONNX Runtime's QDQ graph and the PyTorch fake-quant
model it came from: a value on a rounding boundary may land one quantization step apart."""


def qat_int8_onnx(model: Any, config: Any, source: str) -> bytes:
    """The int8 QDQ ONNX bytes of a QAT-trained model, parity-checked against the fake-quant
    model, with the fp32 export's metadata plus `precision: "int8"` (`quantization.method:
    "qat"`)."""
    graph = exportable(copy.deepcopy(model).cpu().eval())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data, parity = export_onnx_bytes(
            LoadedModel(graph, config, source),
            parity_sizes=PARITY_SIZES_QUICK,
            tolerance=QAT_TOLERANCE,
        )
    settings = {
        "method": "qat",
        "format": "QDQ",
        "weights": "int8 per-channel (trained)",
        "activations": "uint8 (trained scales)",
        "parity_max_abs_diff": parity.max_abs_diff,
        "onnxruntime": ort_version(),
    }
    extra = {"precision": "int8", "quantization": settings}
    return with_precision_metadata(data, onnx_metadata(data), extra)
