"""What the restoration exporter (`export/onnx.py`) and the detection exporter
(`export/onnx_detect.py`) share: the opset, the tolerance, the error, the parity result and
the metadata writer; one module below both so neither imports the other for it."""

from __future__ import annotations

from dataclasses import dataclass

from clearsight.errors import ClearsightError

OPSET = 17
TOLERANCE = 1e-4


class ExportError(ClearsightError):
    """An export failed (unsupported model, or ONNX Runtime disagrees with PyTorch)."""


@dataclass
class ParityResult:
    sizes: list[tuple[int, int]]
    max_abs_diff: float
    per_size: list[float]
    shared_stats_diff: float | None = None
    """Max abs difference of the derived statistics and tile graphs (None: none derived)."""
    outputs: dict[str, float] | None = None
    """Detection: each output's max abs difference (boxes in input pixels)."""
    detections: str | None = None
    """Detection: how the final detections of both runtimes compared, in words."""

    @property
    def ok(self) -> bool:
        worst = max(self.max_abs_diff, self.shared_stats_diff or 0.0)
        return worst <= TOLERANCE


def add_metadata(data: bytes, props: dict[str, str]) -> bytes:
    """`data` with its `metadata_props` replaced by `props` and producer "clearsight"."""
    import onnx

    proto = onnx.load_from_string(data)
    del proto.metadata_props[:]
    for k, v in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    proto.producer_name = "clearsight"
    return proto.SerializeToString()
