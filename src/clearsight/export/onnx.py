"""ONNX export with a parity check (`clearsight export MODEL --format onnx`).

The graph is the one the model's contract gives (`export_graph()`, by default its
`final_output` wrapped in a small module; `models/contract.py`): input `input`
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

Global pooling sites (RESCAN's SE gates, MBCNN's tone vectors): the graph is the same, but
the value each site computes from its own input (the model's `stats_layout()` says where,
its `global_stats_hooks()` records them) gets a stable name (`stat0`, `stat1`, ..., in
call order) and the metadata's `shared_stats` entry lists them with the tiling parameters.
From that the ONNX Runtime backend derives, at load time, a statistics graph (those values as
outputs) and a tile graph (an extra input `global_stats` [N, sites, C] replacing them), so
tiles share the whole image's statistics as PyTorch's tiled paths do (see
`runtime/ort_backend.py`). Both derived graphs are parity-checked here as well: the statistics
against PyTorch's, the tile graph with foreign statistics against PyTorch run with the same.

`to_onnxruntime` (export in memory, then load) lives here, so the exporter imports the ONNX
Runtime backend and never the other way round; the metadata keys and reading both use are in
`clearsight/onnx_meta.py`.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clearsight.artifact import LoadedModel
from clearsight.atomic import atomic_write_bytes
from clearsight.errors import ClearsightError
from clearsight.export.common import OPSET, TOLERANCE, ExportError, ParityResult
from clearsight.export.common import add_metadata as _add_metadata
from clearsight.export.onnx_detect import export_detection_bytes
from clearsight.models.contract import RestorationModel, as_restoration_model
from clearsight.onnx_meta import (
    EXPORT_FORMAT_VERSION,
    STATS_INPUT,
    metadata_props,
    read_onnx_metadata,
)
from clearsight.preprocess import pad_to_multiple
from clearsight.runtime.ort_backend import OrtModel, load_onnx, make_session

FORMATS = ("onnx", "paddle")  # paddle: export/paddle.py
PARITY_SIZES: tuple[tuple[int, int], ...] = ((256, 256), (321, 481))
PARITY_SIZES_QUICK: tuple[tuple[int, int], ...] = ((64, 96), (67, 93))


class _WithStats(nn.Module):
    """`graph`'s outputs followed by the statistics of the model's global pooling sites."""

    def __init__(self, graph: nn.Module, model: RestorationModel) -> None:
        super().__init__()
        self.graph = graph
        self.model = model

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        with self.model.global_stats_hooks() as rec:
            out = self.graph(x)
        return (*(out if isinstance(out, tuple) else (out,)), *rec)


def _strip_outputs(data: bytes, names: list[str]) -> bytes:
    """Drop `names` from the graph outputs: the values stay, named, inside the graph."""
    import onnx

    proto = onnx.load_from_string(data)
    keep = [o for o in proto.graph.output if o.name not in names]
    del proto.graph.output[:]
    proto.graph.output.extend(keep)
    produced = {o for n in proto.graph.node for o in n.output}
    missing = [n for n in names if n not in produced]
    if missing:
        raise ExportError(f"statistics values {missing} are not computed by any graph node")
    return proto.SerializeToString()


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


def shared_stats_parity(
    loaded: LoadedModel,
    ort_model: OrtModel,
    graph: nn.Module,
    size: tuple[int, int],
) -> float:
    """Max abs difference of the derived graphs against PyTorch at `size`: the statistics of
    an image, and the main output of the tile graph fed a different image's statistics (so a
    tile graph that still pooled its own input would fail)."""
    model = as_restoration_model(loaded.model)
    h, w = size
    m = ort_model.pad_multiple
    x = pad_to_multiple(_parity_input(loaded, h, w, seed=0), m)
    other = pad_to_multiple(_parity_input(loaded, h, w, seed=1).flip(-1) * 0.5, m)
    with torch.no_grad():
        with model.global_stats_hooks() as rec:
            graph(x)
        ref_stats = torch.stack(rec, 1)
        with model.global_stats_hooks() as rec:
            graph(other)
        foreign = torch.stack(rec, 1)
        with model.global_stats_hooks(shared=foreign):
            ref = graph(x)
    ref_out = ref[0] if isinstance(ref, tuple) else ref
    got_stats = ort_model.global_stats(x, max_pixels=None)
    got_out = ort_model.run_shared(x, foreign)
    if tuple(got_stats.shape) != tuple(ref_stats.shape):
        raise ExportError(
            f"parity check: statistics have shape {tuple(got_stats.shape)} in ONNX Runtime "
            f"but {tuple(ref_stats.shape)} in PyTorch"
        )
    return max(
        float((got_stats - ref_stats.float()).abs().max()),
        float((got_out - ref_out.float()).abs().max()),
    )


def _trace(
    loaded: LoadedModel,
    model: RestorationModel,
    graph: nn.Module,
    names: list[str],
    sites: list[str],
    pad: int,
) -> bytes:
    """The traced graph's bytes: dynamic H and W, the statistics sites named inside the
    graph (not outputs) and every output's known channel count."""
    size = -(-64 // pad) * pad
    example = _parity_input(loaded, size, size + pad, seed=99)
    axes: dict[str, dict[int, str]] = {"input": {0: "N", 2: "H", 3: "W"}}
    for n in names:
        axes[n] = {0: "N", 2: f"{n}_H", 3: f"{n}_W"}
    for n in sites:
        axes[n] = {0: "N"}
    # eval(): the exporter restores the traced module's mode afterwards, and a new wrapper
    # module is in training mode, which would leave the caller's model in training mode
    traced = (_WithStats(graph, model) if sites else graph).eval()
    buf = io.BytesIO()
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")
            torch.onnx.export(
                traced,
                (example,),
                buf,
                input_names=["input"],
                output_names=names + sites,
                opset_version=OPSET,
                dynamic_axes=axes,
                dynamo=False,
                do_constant_folding=True,
            )
            with model.global_stats_hooks() if sites else contextlib.nullcontext([]) as rec:
                ref = graph(example)
    except Exception as exc:
        raise ExportError(
            f"{loaded.source}: ONNX export failed ({type(exc).__name__}: {exc})"
        ) from exc
    if len(rec) != len(sites):
        raise ExportError(
            f"{loaded.source}: expected {len(sites)} global pooling sites, found {len(rec)}"
        )
    ref_t = ref if isinstance(ref, tuple) else (ref,)
    return _set_channel_dims(
        _strip_outputs(buf.getvalue(), sites) if sites else buf.getvalue(),
        {n: int(r.shape[1]) for n, r in zip(names, ref_t, strict=True)},
    )


def export_onnx_bytes(
    loaded: LoadedModel,
    *,
    parity_sizes: tuple[tuple[int, int], ...] = PARITY_SIZES,
    tolerance: float = TOLERANCE,
    layout: str | None = None,
) -> tuple[bytes, ParityResult]:
    """Export `loaded` to ONNX bytes and check parity; raises `ExportError` above `tolerance`.
    A detector goes through `export/onnx_detect.py` in `layout` (default "decoded")."""
    if loaded.on_onnxruntime:
        raise ExportError(f"{loaded.source} is already an ONNX model")
    if loaded.is_detector:
        return export_detection_bytes(loaded, layout or "decoded", tolerance=tolerance)
    if layout is not None:
        raise ExportError(
            f"--layout applies to detectors; {loaded.source} is a {loaded.config.task!r} model"
        )
    model = as_restoration_model(loaded.model.eval().to("cpu"))
    graph, names = model.export_graph()
    layout = model.stats_layout()
    sites = [f"stat{k}" for k in range(layout["sites"])] if layout else []
    pad = max(int(model.pad_multiple), int(loaded.config.preprocess.pad_multiple))
    data = _trace(loaded, model, graph, names, sites, pad)
    info = {
        "format_version": EXPORT_FORMAT_VERSION,
        "opset": OPSET,
        "exporter": "torch.onnx (TorchScript, dynamo=False)",
        "torch_version": torch.__version__,
        "main_output": "output",
        "outputs": names,
        "pad_multiple": pad,
        "receptive_radius": model.receptive_radius,
        "has_restore_tiled": model.tiled_path() is not None,
        "input_convention": "preprocessed (apply clearsight_preprocess first)",
    }
    if layout:
        info["shared_stats"] = {**layout, "input": STATS_INPUT, "sites": sites}
    data = _add_metadata(data, metadata_props(loaded.config, info))
    session = make_session(data)
    read_onnx_metadata(session, loaded.source)  # the round trip must work
    ort_model = OrtModel(session, info, loaded.source, model_data=data)
    result = parity_check(loaded, ort_model, graph, parity_sizes)
    if result.max_abs_diff > tolerance:
        raise ExportError(
            f"{loaded.source}: ONNX parity check failed: max abs difference "
            f"{result.max_abs_diff:.3g} > {tolerance:g} (sizes "
            + ", ".join(f"{h}x{w}" for h, w in result.sizes)
            + "); no file written"
        )
    if sites:
        small = min(parity_sizes, key=lambda s: s[0] * s[1])
        result.shared_stats_diff = shared_stats_parity(loaded, ort_model, graph, small)
        if result.shared_stats_diff > tolerance:
            raise ExportError(
                f"{loaded.source}: ONNX parity check of the tiled (shared statistics) graphs "
                f"failed: max abs difference {result.shared_stats_diff:.3g} > {tolerance:g} "
                f"at {small[0]}x{small[1]}; no file written"
            )
    return data, result


def export_onnx(
    loaded: LoadedModel,
    out: str | os.PathLike[str],
    *,
    parity_sizes: tuple[tuple[int, int], ...] = PARITY_SIZES,
    tolerance: float = TOLERANCE,
    layout: str | None = None,
) -> tuple[Path, ParityResult]:
    """Export to `out` atomically, only after the parity check passed."""
    data, result = export_onnx_bytes(
        loaded, parity_sizes=parity_sizes, tolerance=tolerance, layout=layout
    )
    target = Path(out)
    atomic_write_bytes(target, data)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(target, 0o666 & ~umask)  # the temporary file was private (mkstemp)
    return target, result


def to_onnxruntime(loaded: LoadedModel, device: str = "cpu") -> LoadedModel:
    """The same model run by ONNX Runtime: exported in memory (with its parity check)."""
    if str(device) != "cpu":
        raise ClearsightError(f"--backend onnxruntime runs on the CPU; got --device {device}")
    if loaded.on_onnxruntime:
        return loaded
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data, _ = export_onnx_bytes(loaded, parity_sizes=PARITY_SIZES_QUICK)
    out = load_onnx(data, source=f"{loaded.source} (onnxruntime)")
    return LoadedModel(out.model, loaded.config, out.source, backend=out.backend)


def default_output(model_ref: str, fmt: str, layout: str | None = None) -> Path:
    """MODEL.onnx, or MODEL-astar.onnx for the contest layout."""
    stem = Path(model_ref).stem if Path(model_ref).suffix else Path(model_ref).name
    tail = f"-{layout}" if layout not in (None, "decoded") else ""
    return Path(f"{stem or 'model'}{tail}.{fmt}")


def check_format(fmt: str) -> str:
    f = fmt.lower()
    if f not in FORMATS:
        raise ClearsightError(f"unknown export format {fmt!r}; known: {', '.join(FORMATS)}")
    return f


def describe(result: ParityResult) -> dict[str, Any]:
    out = {
        "sizes": [f"{h}x{w}" for h, w in result.sizes],
        "max_abs_diff": result.max_abs_diff,
        "per_size": result.per_size,
        "tolerance": TOLERANCE,
    }
    if result.shared_stats_diff is not None:
        out["shared_stats_diff"] = result.shared_stats_diff
    if result.outputs is not None:
        out["outputs"] = result.outputs
        out["detections"] = result.detections
    return out
