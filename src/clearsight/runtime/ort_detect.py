"""ONNX Runtime backend for detectors: an exported detection graph under the detection contract.

`clearsight export` writes a detector in one of two layouts (`docs/export.md`):

* `decoded` (the default): outputs `boxes` [N, A, 4] (xyxy in network-input pixels) and
  `scores` [N, A, C] before NMS, then the raw head outputs (`raw`, or `raw0`, `raw1`, ...)
  that the architecture's `postprocess` reads. `OrtDetector.forward` returns those raw
  outputs in the PyTorch model's form, and `decode`/`postprocess` are the registered
  architecture's (anchors and strides come from its arguments, not from weights), so
  `Detector`, `detect_files` and the COCO evaluation run it exactly as the PyTorch model.
* `astar`: the Astar 2019 contest's interface (contest input, normalized boxes [N, M, 4],
  class-major scores [N, 81, M]); `run_contest` runs it for `clearsight astar-score`. It is
  not a `Detector` model: its input is the contest's, not the artifact's preprocessing.

The session is made by `runtime/ort_backend.py` (`load_onnx`), which reads the metadata.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import torch

from clearsight.errors import ClearsightError
from clearsight.models.contract import DetectionModel
from clearsight.models.registry import build_model

LAYOUTS = ("decoded", "astar")


class OrtDetector(DetectionModel):
    """An exported detector run by ONNX Runtime (see the module docstring)."""

    def __init__(
        self,
        session: Any,
        export_info: dict[str, Any],
        source: str,
        architecture: str,
        arch_args: dict[str, Any],
        model_data: str | os.PathLike[str] | bytes | None = None,
    ) -> None:
        super().__init__()
        self.session = session
        self.model_data = model_data
        """The file's path or bytes (the Astar scorer counts MAdds on the graph)."""
        self.export_info = export_info
        self.source = source
        self.layout = str(export_info.get("layout", "decoded"))
        if self.layout not in LAYOUTS:
            raise ClearsightError(f"{source}: unknown detection layout {self.layout!r}")
        self.input_size = tuple(int(v) for v in export_info["input_size"])  # type: ignore[assignment]
        self.num_classes = int(export_info["num_classes"])
        self.input_name = session.get_inputs()[0].name
        self.output_names = [o.name for o in session.get_outputs()]
        self.raw_outputs = [str(n) for n in export_info.get("raw_outputs", [])]
        self._reference: DetectionModel | None = None
        self._arch = (architecture, dict(arch_args))

    @property
    def reference(self) -> DetectionModel:
        """The registered architecture (untrained): its decoding and NMS, built on first use."""
        if self._reference is None:
            name, args = self._arch
            with torch.random.fork_rng(devices=[]):
                model = build_model(name, **args)
            if not isinstance(model, DetectionModel):
                raise ClearsightError(f"{self.source}: architecture {name!r} is not a detector")
            self._reference = model.eval()
        return self._reference

    @property
    def num_labels(self) -> int:
        """The architecture's own count (SSD: its background output is not a label)."""
        return self.reference.num_labels

    def run_all(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """Every graph output for the preprocessed batch `x`, by name."""
        arr = np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy())
        outs = self.session.run(None, {self.input_name: arr})
        return {n: torch.from_numpy(o) for n, o in zip(self.output_names, outs, strict=True)}

    def _require(self, layout: str, what: str) -> None:
        if self.layout != layout:
            hint = (
                "score it with `clearsight astar-score`"
                if self.layout == "astar"
                else "export it with --layout astar"
            )
            raise ClearsightError(
                f"{self.source}: an export in the {self.layout!r} layout cannot {what}; {hint}"
            )

    def check_runs_as_detector(self) -> None:
        """Raise the one-line error `Detector` gives for a contest-layout file."""
        self._require("decoded", "run as a detector (its input is the contest's tensor)")

    def forward(self, x: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, ...]:
        """The raw head output, in the form the PyTorch model's `forward` returns."""
        self.check_runs_as_detector()
        outs = self.run_all(x)
        raw = tuple(outs[n].to(x.device) for n in self.raw_outputs)
        return raw[0] if len(raw) == 1 else raw

    def decode(self, raw: Any) -> tuple[torch.Tensor, torch.Tensor]:
        return self.reference.decode(raw)

    def postprocess(self, raw: Any, **kwargs: Any) -> list[dict[str, torch.Tensor]]:
        return self.reference.postprocess(raw, **kwargs)

    def run_contest(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Contest input [N, 3, 300, 300] -> (boxes [N, M, 4], scores [N, 81, M])."""
        self._require("astar", "be scored as the contest model")
        outs = self.run_all(x)
        return outs["boxes"], outs["scores"]
