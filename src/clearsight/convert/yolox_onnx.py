"""YOLOX-Nano weights from an ONNX export into `clearsight.models.yolox_nano`.

The ONNX file has no layer names (its initializers are numbered), so the weights are matched
by graph structure: the n-th Conv node of the graph feeds the n-th convolution the PyTorch
module runs, and before anything is copied the two graphs must agree on

- each conv's kernel, stride, padding, groups, weight and bias shapes, and
- each conv's producers: the convs whose outputs reach its input through activations,
  concatenations, pooling, resizing and slicing, in input order (so a swapped concatenation
  or a mis-wired skip connection is caught, not only a wrong shape).

Every initializer a Conv reads must be mapped and every module parameter filled; anything
else fails with the names left over. Batch norm is folded into the convs of this export.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import fx, nn

from clearsight.errors import ClearsightError
from clearsight.models.yolox_nano import YOLOXNano

# Ops that pass a tensor on without weights of their own: the producer walk goes through them.
_PASS_THROUGH = {
    "Sigmoid", "Mul", "Add", "Concat", "MaxPool", "Resize", "Slice", "Reshape", "Transpose",
}  # fmt: skip


class ConversionError(ClearsightError):
    """The ONNX graph does not fit the PyTorch module (names what is wrong)."""


@dataclass(frozen=True)
class _ConvSite:
    """One convolution, described the same way on both sides."""

    name: str  # module path in PyTorch; "weight initializer name" in ONNX
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    groups: int
    weight_shape: tuple[int, ...]
    bias_shape: tuple[int, ...]
    producers: tuple[int, ...]  # indices of the convs feeding it, in input order
    bias_name: str = ""  # ONNX only: the bias initializer's name


def _dedupe(seq: list[int]) -> tuple[int, ...]:
    return tuple(dict.fromkeys(seq))


def onnx_conv_sites(
    path: str | os.PathLike[str],
) -> tuple[list[_ConvSite], dict[str, np.ndarray], set[str]]:
    """The Conv nodes of the ONNX graph in node order, its initializers (numpy) by name, and
    the initializers that only non-Conv nodes read (slice bounds, resize scales, shapes)."""
    import onnx
    from onnx import numpy_helper

    try:
        model = onnx.load(str(path))
    except Exception as exc:  # noqa: BLE001 - onnx raises many types for a bad file
        raise ConversionError(f"{path}: not a readable ONNX model ({exc})") from None
    graph = model.graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    producer: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        for out in node.output:
            producer[out] = node
    conv_index: dict[int, int] = {}
    sites: list[_ConvSite] = []

    def feeders(tensor: str) -> list[int]:
        node = producer.get(tensor)
        if node is None:
            return []
        if node.op_type == "Conv":
            return [conv_index[id(node)]]
        if node.op_type not in _PASS_THROUGH:
            raise ConversionError(f"{path}: unexpected op {node.op_type} in the graph")
        found: list[int] = []
        for t in node.input:
            if t not in inits:
                found += feeders(t)
        return found

    for node in graph.node:
        if node.op_type != "Conv":
            continue
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
        if len(node.input) != 3:
            raise ConversionError(f"{path}: Conv node {node.output[0]} has no bias input")
        w, b = inits.get(node.input[1]), inits.get(node.input[2])
        if w is None or b is None:
            raise ConversionError(f"{path}: Conv node {node.output[0]} weights are not constants")
        pads = tuple(attrs.get("pads", (0, 0, 0, 0)))
        if pads[:2] != pads[2:]:
            raise ConversionError(f"{path}: Conv node {node.output[0]} has asymmetric pads {pads}")
        conv_index[id(node)] = len(sites)
        sites.append(
            _ConvSite(
                name=node.input[1],
                kernel=tuple(attrs.get("kernel_shape", w.shape[2:])),
                stride=tuple(attrs.get("strides", (1, 1))),
                padding=(int(pads[0]), int(pads[1])),
                groups=int(attrs.get("group", 1)),
                weight_shape=tuple(w.shape),
                bias_shape=tuple(b.shape),
                producers=_dedupe(feeders(node.input[0])),
                bias_name=node.input[2],
            )
        )
    conv_read = {t for n in graph.node if n.op_type == "Conv" for t in n.input}
    other_read = {t for n in graph.node if n.op_type != "Conv" for t in n.input}
    constants = {n for n in inits if n in other_read and n not in conv_read}
    return sites, inits, constants


def torch_conv_sites(model: nn.Module) -> list[_ConvSite]:
    """The module's convolutions in execution order, from a symbolic trace of `forward`."""
    traced = fx.symbolic_trace(model)
    modules = dict(traced.named_modules())
    conv_index: dict[fx.Node, int] = {}
    sites: list[_ConvSite] = []

    def feeders(arg: object) -> list[int]:
        if isinstance(arg, list | tuple):
            return [i for a in arg for i in feeders(a)]
        if not isinstance(arg, fx.Node):
            return []
        if arg in conv_index:
            return [conv_index[arg]]
        return [i for a in (*arg.args, *arg.kwargs.values()) for i in feeders(a)]

    for node in traced.graph.nodes:
        if node.op != "call_module" or not isinstance(modules[node.target], nn.Conv2d):
            continue
        conv = modules[node.target]
        assert isinstance(conv, nn.Conv2d)
        conv_index[node] = len(sites)
        sites.append(
            _ConvSite(
                name=str(node.target),
                kernel=tuple(conv.kernel_size),
                stride=tuple(conv.stride),
                padding=tuple(conv.padding),  # type: ignore[arg-type]
                groups=conv.groups,
                weight_shape=tuple(conv.weight.shape),
                bias_shape=tuple(conv.bias.shape) if conv.bias is not None else (),
                producers=_dedupe(feeders(node.args)),
            )
        )
    return sites


def convert_yolox_onnx(path: str | os.PathLike[str]) -> YOLOXNano:
    """A `YOLOXNano` holding the weights of the YOLOX-Nano ONNX export at `path`."""
    path = Path(path)
    if not path.is_file():
        raise ConversionError(f"ONNX model not found: {path}")
    src, inits, constants = onnx_conv_sites(path)
    model = YOLOXNano()
    dst = torch_conv_sites(model)
    if len(src) != len(dst):
        raise ConversionError(
            f"{path}: {len(src)} Conv nodes in the graph, {len(dst)} convolutions in yolox-nano"
        )
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    for i, (s, d) in enumerate(zip(src, dst, strict=True)):
        for field in ("kernel", "stride", "padding", "groups", "weight_shape", "bias_shape",
                      "producers"):  # fmt: skip
            if getattr(s, field) != getattr(d, field):
                raise ConversionError(
                    f"{path}: conv #{i} ({s.name} -> {d.name}) differs in {field}: "
                    f"ONNX {getattr(s, field)} vs module {getattr(d, field)}"
                )
        state[f"{d.name}.weight"] = torch.from_numpy(inits[s.name].copy())
        state[f"{d.name}.bias"] = torch.from_numpy(inits[s.bias_name].copy())
        used.update((s.name, s.bias_name))
    leftover = sorted(set(inits) - used - constants)
    if leftover:
        raise ConversionError(f"{path}: initializers not mapped to any layer: {leftover}")
    missing = sorted(set(model.state_dict()) - set(state))
    if missing:
        raise ConversionError(f"{path}: module parameters not filled: {missing}")
    model.load_state_dict(state, strict=True)
    return model.eval()


ONNX_SOURCE = {
    "repository": "skpawar1305/rs_yolox",
    "commit": "18ff8bc3",
    "path": "weights/yolox_nano.onnx",
    "licence": "Apache-2.0 (Megvii YOLOX)",
}


def save_yolox_artifact(
    onnx_path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    name: str = "default-detect",
    extra_provenance: dict[str, object] | None = None,
) -> Path:
    """Convert the ONNX export at `onnx_path` and save it as a COCO detection artifact."""
    import hashlib

    from clearsight.artifact import make_config, save_artifact
    from clearsight.detection.coco_classes import COCO_IDS, COCO_NAMES

    onnx_path = Path(onnx_path)
    model = convert_yolox_onnx(onnx_path)
    provenance: dict[str, object] = {
        "converted_from": {
            **ONNX_SOURCE,
            "sha256": hashlib.sha256(onnx_path.read_bytes()).hexdigest(),
        },
        "converter": "clearsight.convert.yolox_onnx (batch norm folded into the convs)",
        "trained_on": "COCO 2017 train (Megvii's YOLOX-Nano release); not trained by us",
    }
    provenance.update(extra_provenance or {})
    config = make_config(model, "yolox-nano", {"num_classes": 80}, name=name,
                         provenance=provenance)  # fmt: skip
    config.class_ids = list(COCO_IDS)
    config.class_names = list(COCO_NAMES)
    return save_artifact(model, out, config)


if __name__ == "__main__":  # python -m clearsight.convert.yolox_onnx ONNX OUT_DIR
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m clearsight.convert.yolox_onnx YOLOX_NANO.onnx OUT_DIR")
    print(save_yolox_artifact(sys.argv[1], sys.argv[2]))
