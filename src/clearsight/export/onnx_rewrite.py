"""Rewrites of an ONNX graph that keep its function but fit x2paddle 1.6.0 (docs/export.md).

x2paddle converts op by op and fails on a few patterns that PyTorch's exporter writes:

- **shape arithmetic** (`Shape` -> `Gather` -> `Add`/`Div`/`Mul` -> `Slice`, what `chunk`
  and TF-"SAME" padding trace to): x2paddle turns the int64 constants into parameters and
  mixes them with float division, which Paddle refuses. Every value that depends only on
  constants and on static dimensions is computed here (ONNX's reference evaluator, node by
  node) and stored as an initializer, so the slices get constant bounds; dynamic H and W
  stay dynamic.
- **`MaxPool` with a `dilations` attribute** (opset >= 10 writes `dilations=[1, 1]`):
  x2paddle asserts it is absent; all-ones dilations are the default and are dropped.
- **nearest `Resize`** (YOLOX's 2x upsampling): the `interpolate` op x2paddle writes carries
  a float-list attribute that Paddle Inference's oneDNN executor cannot take
  ("ConvertPirAttribute2RuntimeAttribute not support ArrayAttribute<DoubleAttribute>",
  Paddle 3.3, with `scale_factor` and with `size` alike). An integer-factor nearest upsample
  is exactly a depthwise `ConvTranspose` with a kernel of ones (kernel = stride = factor),
  which is what the graph gets instead; H and W may stay dynamic.
- **bilinear `Resize` to a fixed size** (the Astar contest adapter's 300x300 -> model-size
  resize): x2paddle skips the empty `roi`/`scales` inputs before the `sizes` one and fails
  ("list index out of range"). With static input and output sizes a half-pixel bilinear
  resize is a linear map per axis, so it becomes two `MatMul`s (and two `Transpose`s) with
  constant interpolation matrices (rows: output pixels; two weights each), which every runtime runs.

Each rewrite is counted and reported (`Rewrites`), so the export says what it changed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# Ops never folded (their values are not constants), and the largest folded value kept
# (a bigger one, e.g. a ConstantOfShape of a whole image, stays a node).
_NO_FOLD = {"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike", "Multinomial"}
_MAX_FOLDED = 1 << 16


@dataclass
class Rewrites:
    folded: Counter[str] = field(default_factory=Counter)
    maxpool_dilations: int = 0
    resize_nearest: int = 0
    resize_linear: int = 0

    def describe(self) -> list[str]:
        out = []
        if self.folded:
            ops = ", ".join(f"{n} {op}" for op, n in sorted(self.folded.items()))
            out.append(f"folded constant/static-shape nodes ({ops})")
        if self.maxpool_dilations:
            out.append(f"dropped dilations=1 from {self.maxpool_dilations} MaxPool")
        if self.resize_nearest:
            out.append(f"{self.resize_nearest} nearest Resize as a depthwise ConvTranspose of ones")
        if self.resize_linear:
            out.append(f"{self.resize_linear} fixed-size bilinear Resize as two MatMuls")
        return out


def _static_dims(proto: Any) -> dict[str, list[int | None]]:
    """Every value's dims after shape inference (None where symbolic)."""
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto, data_prop=True)
    out: dict[str, list[int | None]] = {}
    g = inferred.graph
    for vi in [*g.input, *g.value_info, *g.output]:
        t = vi.type.tensor_type
        if t.HasField("shape"):
            out[vi.name] = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
    return out


def _fold(proto: Any, rewrites: Rewrites) -> None:
    from onnx import numpy_helper
    from onnx.reference import ReferenceEvaluator

    g = proto.graph
    dims = _static_dims(proto)
    known: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    partial: dict[str, list[int | None]] = {}  # Shape outputs with symbolic entries
    keep = []
    for node in g.node:
        value: list[np.ndarray] | None = None
        if node.op_type == "Constant":
            value = list(ReferenceEvaluator(node).run(None, {}))
        elif node.op_type == "Shape" and not node.attribute and node.input[0] in dims:
            shape = dims[node.input[0]]
            if all(d is not None for d in shape):
                value = [np.array(shape, dtype=np.int64)]
            else:
                partial[node.output[0]] = shape
        elif (
            node.op_type == "Gather"
            and node.input[0] in partial
            and node.input[1] in known
            and not any(a.name == "axis" and a.i != 0 for a in node.attribute)
        ):
            idx = known[node.input[1]]
            picked = np.array(partial[node.input[0]], dtype=object)[idx]
            if all(d is not None for d in np.atleast_1d(picked)):
                value = [np.array(picked, dtype=np.int64)]
        elif (
            node.op_type not in _NO_FOLD
            and node.domain in ("", "ai.onnx")
            and node.input
            and all(not i or i in known for i in node.input)
        ):
            feeds = {i: known[i] for i in node.input if i}
            value = list(ReferenceEvaluator(node).run(None, feeds))
            if any(np.asarray(v).size > _MAX_FOLDED for v in value):
                value = None
        if value is None:
            keep.append(node)
            continue
        for name, v in zip(node.output, value, strict=True):
            known[name] = np.asarray(v)
        if node.op_type != "Constant":
            rewrites.folded[node.op_type] += 1
    # initializers for the folded values that the kept nodes (or the outputs) still read
    existing = {i.name for i in g.initializer}
    needed = {i for n in keep for i in n.input} | {o.name for o in g.output}
    for name in sorted(needed & set(known) - existing):
        g.initializer.append(numpy_helper.from_array(known[name], name))
    del g.node[:]
    g.node.extend(keep)


def _maxpool_dilations(proto: Any, rewrites: Rewrites) -> None:
    for node in proto.graph.node:
        if node.op_type != "MaxPool":
            continue
        for a in list(node.attribute):
            if a.name == "dilations" and all(v == 1 for v in a.ints):
                node.attribute.remove(a)
                rewrites.maxpool_dilations += 1


def _resize_nearest(proto: Any, rewrites: Rewrites) -> None:
    """Nearest upsampling by integer factors as a depthwise ConvTranspose with a kernel of
    ones (kernel = stride = the factor: every output pixel is one input pixel times 1)."""
    from onnx import helper, numpy_helper

    g = proto.graph
    dims = _static_dims(proto)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for i, node in enumerate(g.node):
        if node.op_type != "Resize" or len(node.input) < 3 or node.input[2] not in inits:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        mode = attrs.get("mode", b"nearest")
        ctm = attrs.get("coordinate_transformation_mode", b"half_pixel")
        shape = dims.get(node.input[0])
        scales = inits[node.input[2]].astype(np.float64)
        if (
            mode != b"nearest"
            or ctm not in (b"asymmetric", b"half_pixel", b"pytorch_half_pixel")
            or not shape
            or len(shape) != 4
            or shape[1] is None
            or scales.shape != (4,)
            or not (scales[:2] == 1).all()
            or not (scales[2:] == np.round(scales[2:])).all()
            or not (scales[2:] >= 1).all()
        ):
            continue
        c, (sh, sw) = int(shape[1]), (int(v) for v in scales[2:])
        weight = f"{node.output[0]}__ones"
        g.initializer.append(numpy_helper.from_array(np.ones((c, 1, sh, sw), np.float32), weight))
        deconv = helper.make_node(
            "ConvTranspose",
            [node.input[0], weight],
            list(node.output),
            name=f"{node.name}__as_deconv",
            group=c,
            kernel_shape=[sh, sw],
            strides=[sh, sw],
        )
        g.node.remove(node)
        g.node.insert(i, deconv)
        rewrites.resize_nearest += 1


def _linear_matrix(n_in: int, n_out: int) -> np.ndarray:
    """[n_out, n_in]: half-pixel linear interpolation along one axis (source positions
    clamped to the input, as PyTorch's and ONNX Runtime's bilinear resize do)."""
    src = np.clip((np.arange(n_out) + 0.5) * (n_in / n_out) - 0.5, 0, n_in - 1)
    i0 = np.floor(src).astype(np.int64)
    i1 = np.minimum(i0 + 1, n_in - 1)
    w1 = src - i0
    a = np.zeros((n_out, n_in), np.float64)
    rows = np.arange(n_out)
    np.add.at(a, (rows, i0), 1 - w1)
    np.add.at(a, (rows, i1), w1)
    return a.astype(np.float32)


def _resize_linear(proto: Any, rewrites: Rewrites) -> None:
    """A bilinear resize between static sizes (given by a constant `sizes` input) as
    ((x @ A_w^T)^T @ A_h^T)^T, transposing the last two axes (MatMul broadcasts over N, C)."""
    from onnx import helper, numpy_helper

    g = proto.graph
    dims = _static_dims(proto)
    inits = {i.name: numpy_helper.to_array(i) for i in g.initializer}
    for node in list(g.node):
        if node.op_type != "Resize" or len(node.input) != 4 or node.input[3] not in inits:
            continue
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        ctm = attrs.get("coordinate_transformation_mode", b"half_pixel")
        shape = dims.get(node.input[0])
        sizes = inits[node.input[3]].astype(np.int64)
        if (
            attrs.get("mode", b"nearest") != b"linear"
            or ctm not in (b"half_pixel", b"pytorch_half_pixel")
            or attrs.get("antialias", 0)
            or any(attrs.get(k) for k in ("axes", "exclude_outside", "keep_aspect_ratio_policy"))
            or not shape
            or len(shape) != 4
            or shape[2] is None
            or shape[3] is None
            or sizes.shape != (4,)
            or (ctm == b"pytorch_half_pixel" and min(sizes[2:]) == 1)
        ):
            continue
        (h, w), (oh, ow) = (int(v) for v in shape[2:]), (int(v) for v in sizes[2:])
        out = node.output[0]
        a_ht, a_wt = f"{out}__rows_t", f"{out}__cols_t"
        g.initializer.append(numpy_helper.from_array(_linear_matrix(h, oh).T.copy(), a_ht))
        g.initializer.append(numpy_helper.from_array(_linear_matrix(w, ow).T.copy(), a_wt))
        # right-multiplications only: x2paddle mis-shapes a MatMul whose 2-D operand is first
        t = [f"{out}__t{k}" for k in range(3)]
        new = [
            helper.make_node("MatMul", [node.input[0], a_wt], [t[0]], name=f"{node.name}__w"),
            helper.make_node("Transpose", [t[0]], [t[1]], perm=[0, 1, 3, 2]),
            helper.make_node("MatMul", [t[1], a_ht], [t[2]], name=f"{node.name}__h"),
            helper.make_node("Transpose", [t[2]], [out], perm=[0, 1, 3, 2]),
        ]
        pos = list(g.node).index(node)
        g.node.remove(node)
        for n in reversed(new):
            g.node.insert(pos, n)
        rewrites.resize_linear += 1


def rewrite_for_x2paddle(data: bytes) -> tuple[bytes, Rewrites]:
    """The rewritten model's bytes and what was rewritten."""
    import onnx

    proto = onnx.load_from_string(data)
    rewrites = Rewrites()
    _fold(proto, rewrites)
    _maxpool_dilations(proto, rewrites)
    _resize_nearest(proto, rewrites)
    _resize_linear(proto, rewrites)
    onnx.checker.check_model(proto)
    return proto.SerializeToString(), rewrites
