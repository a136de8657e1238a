"""ONNX Runtime backend: an exported `.onnx` file used wherever a model is.

`load_onnx` turns a file written by `clearsight export` into a `LoadedModel` whose `model` is
`OrtModel`, an `nn.Module` without parameters that calls an `onnxruntime.InferenceSession`
(CPU provider, as many intra-op threads as torch uses). Its config (architecture, task,
preprocessing spec, metric preset) is rebuilt from the ONNX metadata, so a restored image
gets the preprocessing the model was trained with and no flag can contradict it.

Tiling: a model without a tiled path of its own is tiled by the `Restorer` exactly as with
PyTorch (the generic blended tiler, `engine/tiling.py`), with the receptive radius stored in
the metadata. A model with its own tiled path (RESCAN, MBCNN) gets one here too: where its
receptive radius is finite the ORT model is tiled exactly (halo = radius); where it pools
globally (RESCAN's SE, MBCNN's tone blocks) the ORT model runs UNTILED, so the result is the
exact whole-image one but peak memory grows with the image (PyTorch's layer-synchronous or
shared-statistics tiled paths have no ONNX equivalent here).
"""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig
from clearsight.errors import ArtifactError, ClearsightError

CONFIG_KEY = "clearsight_config"
EXPORT_KEY = "clearsight_export"
PREPROCESS_KEY = "clearsight_preprocess"
EXPORT_FORMAT_VERSION = 1
BACKENDS = ("torch", "onnxruntime")


class UntiledWarning(UserWarning):
    """ONNX Runtime runs a globally pooling model untiled: memory grows with the image."""


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ClearsightError(f"onnxruntime is not installed ({exc})") from None
    return onnxruntime


def make_session(model: str | os.PathLike[str] | bytes, threads: int | None = None) -> Any:
    """A CPU `InferenceSession` using `threads` intra-op threads (default: torch's)."""
    ort = _ort()
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or torch.get_num_threads())
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # errors only: no shape-inference chatter on stderr
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(src, sess_options=opts, providers=["CPUExecutionProvider"])


def pad_to_multiple(x: torch.Tensor, m: int) -> torch.Tensor:
    """Pad bottom/right to a multiple of `m` like the models' own `restore` (reflect, or
    replicate where the image is too small to reflect)."""
    h, w = x.shape[-2:]
    ph, pw = (-h) % m, (-w) % m
    if ph or pw:
        mode = "reflect" if ph < h and pw < w else "replicate"
        x = F.pad(x, (0, pw, 0, ph), mode=mode)
    return x


class OrtModel(nn.Module):
    """An exported model run by ONNX Runtime, shaped like a clearsight model for `Restorer`.

    `restore(x)` pads to `pad_multiple`, runs the graph and crops back; `run_all(x)` returns
    every graph output by name (the main `output` and the stage/scale outputs).
    """

    def __init__(self, session: Any, export_info: dict[str, Any], source: str) -> None:
        super().__init__()
        self.session = session
        self.export_info = export_info
        self.source = source
        self.pad_multiple = int(export_info.get("pad_multiple", 1))
        radius = export_info.get("receptive_radius")
        self.receptive_radius = None if radius is None else int(radius)
        self.input_name = session.get_inputs()[0].name
        self.output_names = [o.name for o in session.get_outputs()]
        self.main_output = str(export_info.get("main_output", self.output_names[0]))
        self._warned_untiled = False
        if export_info.get("has_restore_tiled"):
            # Only models whose PyTorch form has its own tiled path get one here, so every
            # other model is tiled by the Restorer's generic tiler exactly as with PyTorch.
            self.restore_tiled = self._restore_tiled

    def run_all(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        """All graph outputs for `x` (H and W must be multiples of `pad_multiple`)."""
        arr = np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy())
        outs = self.session.run(None, {self.input_name: arr})
        return {n: torch.from_numpy(o) for n, o in zip(self.output_names, outs, strict=True)}

    def restore(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[-2:]
        y = self.run_all(pad_to_multiple(x, self.pad_multiple))[self.main_output]
        return y[..., :h, :w].to(x.device)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.restore(x)

    def _restore_tiled(
        self,
        x: torch.Tensor,
        *,
        tile: int = 256,
        progress: Callable[[int, int], None] | None = None,
        **_: Any,
    ) -> torch.Tensor:
        """Exact tiles (halo = receptive radius) where the radius is finite; else untiled,
        because global pooling needs the whole image and ONNX has no layer-synchronous path."""
        if self.receptive_radius is not None:
            from clearsight.engine.tiling import tiled_apply

            return tiled_apply(
                self.restore, x, tile=tile, halo=self.receptive_radius, progress=progress
            )
        h, w = x.shape[-2:]
        if not self._warned_untiled:  # once per model, not once per ensemble view
            self._warned_untiled = True
            warnings.warn(
                f"onnxruntime runs {self.source} untiled at {h}x{w}: its global pooling has no "
                "exact tiled ONNX path, so peak memory grows with the image (use --backend torch "
                "for bounded memory)",
                UntiledWarning,
                stacklevel=2,
            )
        y = self.restore(x)
        if progress is not None:
            progress(1, 1)
        return y


def _one_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:200] if text else type(exc).__name__


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


def load_onnx(path: str | os.PathLike[str] | bytes, source: str | None = None) -> LoadedModel:
    """Load an exported `.onnx` file (or its bytes) as a `LoadedModel` run by ONNX Runtime."""
    src = source or (str(path) if not isinstance(path, bytes) else "<onnx bytes>")
    if not isinstance(path, bytes) and not Path(path).is_file():
        raise ArtifactError(f"model artifact not found: {src}")
    try:
        session = make_session(path)
    except Exception as exc:  # onnxruntime raises several untyped errors for a bad file
        raise ArtifactError(f"{src}: not a readable ONNX model ({_one_line(exc)})") from None
    config, info = read_onnx_metadata(session, src)
    return LoadedModel(model=OrtModel(session, info, src), config=config, source=src)


def to_onnxruntime(loaded: LoadedModel, device: str = "cpu") -> LoadedModel:
    """The same model run by ONNX Runtime: exported in memory (with its parity check)."""
    if str(device) != "cpu":
        raise ClearsightError(f"--backend onnxruntime runs on the CPU; got --device {device}")
    if isinstance(loaded.model, OrtModel):
        return loaded
    from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx_bytes

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data, _ = export_onnx_bytes(loaded, parity_sizes=PARITY_SIZES_QUICK)
    out = load_onnx(data, source=f"{loaded.source} (onnxruntime)")
    return LoadedModel(model=out.model, config=loaded.config, source=out.source)


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ClearsightError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return name
