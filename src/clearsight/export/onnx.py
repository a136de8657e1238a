"""ONNX export with a parity check (`clearsight export MODEL --format onnx`).

The graph is the model's inference `restore` path wrapped in a small module: input `input`
[N,3,H,W] in the model's own convention (the preprocessing spec is applied outside, as in
PyTorch), main output `output` (the restored image) plus the intermediate results where the
model has them: RESCAN's earlier stages (`stage1`..), MBCNN's 1/4 and 1/2 scale outputs
(`out_quarter`, `out_half`). Height and width are dynamic; every output has its own symbolic
dims. H and W must be multiples of the stored `pad_multiple` (the ORT backend pads, like
`restore`). Opset 17, through the TorchScript-based exporter (`dynamo=False`): it handles
these models at opset 17 and is 5-6x faster to export; the dynamo exporter needs opset >= 18
and failed to down-convert MBCNN.

The artifact's config and preprocessing spec go into `metadata_props` as JSON, so the file is
self-describing. Every export runs ONNX Runtime against PyTorch at two resolutions (one of
them odd-sized) and fails, leaving no file behind, when the max abs difference exceeds 1e-4.
"""

from __future__ import annotations

import io
import json
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clearsight.artifact import LoadedModel
from clearsight.atomic import atomic_write_bytes
from clearsight.engine.ort_backend import (
    CONFIG_KEY,
    EXPORT_FORMAT_VERSION,
    EXPORT_KEY,
    PREPROCESS_KEY,
    OrtModel,
    make_session,
    pad_to_multiple,
    read_onnx_metadata,
)
from clearsight.errors import ClearsightError

FORMATS = ("onnx",)
OPSET = 17
TOLERANCE = 1e-4
PARITY_SIZES: tuple[tuple[int, int], ...] = ((256, 256), (321, 481))
PARITY_SIZES_QUICK: tuple[tuple[int, int], ...] = ((64, 96), (67, 93))


class ExportError(ClearsightError):
    """An export failed (unsupported model, or ONNX Runtime disagrees with PyTorch)."""


@dataclass
class ParityResult:
    sizes: list[tuple[int, int]]
    max_abs_diff: float
    per_size: list[float]

    @property
    def ok(self) -> bool:
        return self.max_abs_diff <= TOLERANCE


class _RescanGraph(nn.Module):
    """RESCAN's restore: `x - rain` after the last stage, then after each earlier stage."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        rains = self.model._run(x, self.model.stages)
        return (x - rains[-1], *(x - r for r in rains[:-1]))


class _MbcnnGraph(nn.Module):
    """MBCNN's forward on a padded input: the full-resolution output first."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        quarter, half, full = self.model(x)
        return full, quarter, half


class _RestoreGraph(nn.Module):
    """Any other model: its `restore` (or forward), last output if it returns several."""

    def __init__(self, model: nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        restore = getattr(self.model, "restore", None)
        y = restore(x) if callable(restore) else self.model(x)
        if isinstance(y, list | tuple):
            y = y[-1]
        return y + 0.0 if y is x else y  # a graph output may not be its input


def export_graph(model: nn.Module) -> tuple[nn.Module, list[str]]:
    """The module to trace and its output names (main output first)."""
    from clearsight.models.mbcnn import MBCNN
    from clearsight.models.rescan import RESCAN

    if isinstance(model, RESCAN):
        return _RescanGraph(model), ["output"] + [f"stage{i}" for i in range(1, model.stages)]
    if isinstance(model, MBCNN):
        return _MbcnnGraph(model), ["output", "out_quarter", "out_half"]
    return _RestoreGraph(model), ["output"]


def _parity_input(loaded: LoadedModel, h: int, w: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return loaded.config.preprocess.to_model(torch.rand(1, 3, h, w, generator=g))


def _set_channel_dims(data: bytes, channels: dict[str, int]) -> bytes:
    """Give outputs their known channel count where tracing left a symbolic one."""
    import onnx

    proto = onnx.load_from_string(data)
    for out in proto.graph.output:
        dims = out.type.tensor_type.shape.dim
        if out.name in channels and len(dims) == 4:
            dims[1].Clear()
            dims[1].dim_value = channels[out.name]
    return proto.SerializeToString()


def _add_metadata(data: bytes, props: dict[str, str]) -> bytes:
    import onnx

    proto = onnx.load_from_string(data)
    del proto.metadata_props[:]
    for k, v in props.items():
        entry = proto.metadata_props.add()
        entry.key, entry.value = k, v
    proto.producer_name = "clearsight"
    return proto.SerializeToString()


def parity_check(
    loaded: LoadedModel,
    ort_model: OrtModel,
    graph: nn.Module,
    sizes: tuple[tuple[int, int], ...] = PARITY_SIZES,
) -> ParityResult:
    """Max abs difference of every output, ONNX Runtime vs PyTorch, at each size."""
    per_size = []
    m = ort_model.pad_multiple
    for i, (h, w) in enumerate(sizes):
        x = pad_to_multiple(_parity_input(loaded, h, w, seed=i), m)
        with torch.no_grad():
            ref = graph(x)
        ref_t = ref if isinstance(ref, tuple) else (ref,)
        got = ort_model.run_all(x)
        diff = 0.0
        for name, r in zip(ort_model.output_names, ref_t, strict=True):
            g = got[name]
            if tuple(g.shape) != tuple(r.shape):
                raise ExportError(
                    f"parity check: output {name!r} has shape {tuple(g.shape)} in ONNX Runtime "
                    f"but {tuple(r.shape)} in PyTorch at {h}x{w}"
                )
            diff = max(diff, float((g - r.float()).abs().max()))
        per_size.append(diff)
    return ParityResult(sizes=list(sizes), max_abs_diff=max(per_size), per_size=per_size)


def export_onnx_bytes(
    loaded: LoadedModel,
    *,
    parity_sizes: tuple[tuple[int, int], ...] = PARITY_SIZES,
    tolerance: float = TOLERANCE,
) -> tuple[bytes, ParityResult]:
    """Export `loaded` to ONNX bytes and check parity; raises `ExportError` above `tolerance`."""
    model = loaded.model.eval().to("cpu")
    if isinstance(model, OrtModel):
        raise ExportError(f"{loaded.source} is already an ONNX model")
    graph, names = export_graph(model)
    pad = max(int(getattr(model, "pad_multiple", 1)), int(loaded.config.preprocess.pad_multiple))
    size = -(-64 // pad) * pad
    example = _parity_input(loaded, size, size + pad, seed=99)
    axes: dict[str, dict[int, str]] = {"input": {0: "N", 2: "H", 3: "W"}}
    for n in names:
        axes[n] = {0: "N", 2: f"{n}_H", 3: f"{n}_W"}
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                graph,
                (example,),
                buf,
                input_names=["input"],
                output_names=names,
                opset_version=OPSET,
                dynamic_axes=axes,
                dynamo=False,
                do_constant_folding=True,
            )
            ref = graph(example)
    except Exception as exc:
        raise ExportError(
            f"{loaded.source}: ONNX export failed ({type(exc).__name__}: {exc})"
        ) from exc
    ref_t = ref if isinstance(ref, tuple) else (ref,)
    data = _set_channel_dims(
        buf.getvalue(), {n: int(r.shape[1]) for n, r in zip(names, ref_t, strict=True)}
    )
    info = {
        "format_version": EXPORT_FORMAT_VERSION,
        "opset": OPSET,
        "exporter": "torch.onnx (TorchScript, dynamo=False)",
        "torch_version": torch.__version__,
        "main_output": "output",
        "outputs": names,
        "pad_multiple": pad,
        "receptive_radius": getattr(model, "receptive_radius", None),
        "has_restore_tiled": callable(getattr(model, "restore_tiled", None)),
        "input_convention": "preprocessed (apply clearsight_preprocess first)",
    }
    cfg = loaded.config.to_dict()
    props = {
        CONFIG_KEY: json.dumps(cfg),
        PREPROCESS_KEY: json.dumps(cfg["preprocess"]),
        EXPORT_KEY: json.dumps(info),
    }
    data = _add_metadata(data, props)
    session = make_session(data)
    read_onnx_metadata(session, loaded.source)  # the round trip must work
    result = parity_check(loaded, OrtModel(session, info, loaded.source), graph, parity_sizes)
    if result.max_abs_diff > tolerance:
        raise ExportError(
            f"{loaded.source}: ONNX parity check failed: max abs difference "
            f"{result.max_abs_diff:.3g} > {tolerance:g} (sizes "
            + ", ".join(f"{h}x{w}" for h, w in result.sizes)
            + "); no file written"
        )
    return data, result


def export_onnx(
    loaded: LoadedModel,
    out: str | os.PathLike[str],
    *,
    parity_sizes: tuple[tuple[int, int], ...] = PARITY_SIZES,
    tolerance: float = TOLERANCE,
) -> tuple[Path, ParityResult]:
    """Export to `out` atomically, only after the parity check passed."""
    data, result = export_onnx_bytes(loaded, parity_sizes=parity_sizes, tolerance=tolerance)
    target = Path(out)
    atomic_write_bytes(target, data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(target, 0o666 & ~umask)  # the temporary file was private (mkstemp)
    return target, result


def default_output(model_ref: str, fmt: str) -> Path:
    stem = Path(model_ref).stem if Path(model_ref).suffix else Path(model_ref).name
    return Path(f"{stem or 'model'}.{fmt}")


def check_format(fmt: str) -> str:
    f = fmt.lower()
    if f not in FORMATS:
        raise ClearsightError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    return f


def describe(result: ParityResult) -> dict[str, Any]:
    return {
        "sizes": [f"{h}x{w}" for h, w in result.sizes],
        "max_abs_diff": result.max_abs_diff,
        "per_size": result.per_size,
        "tolerance": TOLERANCE,
    }
