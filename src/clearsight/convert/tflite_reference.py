"""Run the original TFLite SSD through the LiteRT interpreter: the reference a port is
checked against (parity tests, `benchmarks/detect_ap.py`). Needs `ai-edge-litert`.

Besides the four post-processed outputs it reads the raw box encodings and class logits the
post-processing op consumes (`experimental_preserve_all_tensors`), dequantized, with their
quantization step so a caller can bound the difference in steps.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from clearsight.errors import ArtifactError

_BOXES_TENSOR = "concat"  # [1, A, 1, 4] box encodings (ty, tx, th, tw)
_LOGITS_TENSOR = "concat_1"  # [1, A, 91] class logits, background at 0


@dataclass
class QuantizedOutput:
    """A dequantized tensor with the uint8 grid it came from."""

    value: np.ndarray
    step: float
    low: float  # the smallest and largest representable values: the int8 graph saturates
    high: float


@dataclass
class ReferenceResult:
    raw_boxes: QuantizedOutput
    raw_logits: QuantizedOutput
    boxes: np.ndarray  # [K, 4] normalized (ymin, xmin, ymax, xmax), as the op writes them
    classes: np.ndarray  # [K] label k = COCO id k + 1
    scores: np.ndarray  # [K]


def with_max_detections(tflite_bytes: bytes, max_detections: int) -> bytes:
    """The model bytes with the post-processing op's `max_detections` set (the op sizes its
    outputs from it at allocation). Patched in place in the op's flexbuffer options."""
    import tflite
    from flatbuffers import flexbuffers

    model = tflite.Model.GetRootAsModel(tflite_bytes, 0)
    sg = model.Subgraphs(0)
    for i in range(sg.OperatorsLength()):
        op = sg.Operators(i)
        code = model.OperatorCodes(op.OpcodeIndex()).CustomCode()
        if code != b"TFLite_Detection_PostProcess":
            continue
        opts = bytes(op.CustomOptionsAsNumpy())
        ref = flexbuffers.GetRoot(opts).AsMap["max_detections"]
        start, width = ref._buf._offset, ref._parent_width  # noqa: SLF001 - no public API
        patched = bytearray(opts)
        patched[start : start + width] = int(max_detections).to_bytes(width, "little")
        if tflite_bytes.count(opts) != 1:
            raise ArtifactError("post-processing options are not unique in the file")
        return tflite_bytes.replace(opts, bytes(patched))
    raise ArtifactError("no TFLite_Detection_PostProcess op")


class LiteRTReference:
    """The LiteRT interpreter over one SSD .tflite file, fed uint8 RGB 300x300 images."""

    def __init__(self, path: str | Path, max_detections: int | None = None) -> None:
        from ai_edge_litert.interpreter import Interpreter

        content = Path(path).read_bytes()
        if max_detections is not None:
            content = with_max_detections(content, max_detections)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "preserve_all_tensors is for debugging"
            self.interp = Interpreter(
                model_content=content, experimental_preserve_all_tensors=True, num_threads=1
            )
        self.interp.allocate_tensors()
        self._details = {d["name"]: d for d in self.interp.get_tensor_details()}
        self._input = self.interp.get_input_details()[0]["index"]
        self._outputs = [d["index"] for d in self.interp.get_output_details()]

    def _dequantized(self, name: str) -> QuantizedOutput:
        d = self._details[name]
        scale, zp = d["quantization"]
        q = self.interp.get_tensor(d["index"]).astype(np.float32)
        return QuantizedOutput((q - zp) * scale, scale, (0 - zp) * scale, (255 - zp) * scale)

    def __call__(self, image_uint8: np.ndarray) -> ReferenceResult:
        """`image_uint8`: [300, 300, 3] RGB."""
        self.interp.set_tensor(self._input, image_uint8[None].astype(np.uint8))
        self.interp.invoke()
        boxes, classes, scores, count = (self.interp.get_tensor(i) for i in self._outputs)
        k = int(count[0])
        raw_boxes = self._dequantized(_BOXES_TENSOR)
        raw_boxes.value = raw_boxes.value.reshape(-1, 4)
        raw_logits = self._dequantized(_LOGITS_TENSOR)
        raw_logits.value = raw_logits.value.reshape(raw_boxes.value.shape[0], -1)
        return ReferenceResult(
            raw_boxes, raw_logits, boxes[0, :k], classes[0, :k].astype(np.int64), scores[0, :k]
        )
