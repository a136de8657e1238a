"""The Astar 2019 contest's MAdds count, on a PyTorch module.

The contest counted FLOPs per operator and reported MAdds = FLOPs / 2 (in millions):

- convolution (any groups): 2 * Hout * Wout * Cout * (kh * kw * Cin / groups, + 1 only when
  the layer has a bias);
- pooling: Hout * Wout * C * k^2;  fully connected: k_in * k_out;
- sigmoid, tanh, ReLU, leaky ReLU, PReLU: 1 per element;  batch norm: 2 per element;
- everything else is free: ReLU6, hard-swish, add, concat, softmax, box decoding.
- If any operator is quantized, the whole total is halved.

Counting is by forward hooks on leaf modules during one run at the contest size, batch 1,
so work done by functional calls (`torch.sigmoid(x)`, `x + y`) is invisible; the contest
counted those ops as free or (sigmoid) as a negligible one per element, and a model that
wants them counted uses the module form. Quantized modules (`torch.ao.nn.quantized`, their
dynamic variants, or any quantized parameter) set `quantized`, which halves the total.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn

_ELEMENTWISE = (nn.Sigmoid, nn.Tanh, nn.ReLU, nn.LeakyReLU, nn.PReLU)
_BATCHNORM = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)
_POOL = (nn.MaxPool2d, nn.AvgPool2d)
_ADAPTIVE_POOL = (nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d)


@dataclass
class MAddsCount:
    """FLOPs per layer at one input size, and whether the contest would halve the total."""

    flops: int
    quantized: bool
    halve_quantized: bool = True
    layers: list[tuple[str, str, int]] = field(default_factory=list)  # (name, type, flops)

    @property
    def madds(self) -> float:
        """Millions of multiply-adds as the contest reports them (FLOPs / 2e6, halved if
        quantized and `halve_quantized`)."""
        m = self.flops / 2e6
        return m / 2 if self.quantized and self.halve_quantized else m


def _is_quantized_module(m: nn.Module) -> bool:
    mod = type(m).__module__
    if mod.startswith(("torch.ao.nn.quantized", "torch.nn.quantized", "torch.ao.nn.intrinsic.q")):
        return True
    tensors = list(m.parameters(recurse=False)) + list(m.buffers(recurse=False))
    return any(t.is_quantized for t in tensors)


def _weight(m: nn.Module) -> torch.Tensor | None:
    w = getattr(m, "weight", None)
    if callable(w):  # quantized modules expose weight() / bias() as methods
        w = w()
    return w if isinstance(w, torch.Tensor) else None


def _has_bias(m: nn.Module) -> bool:
    b = getattr(m, "bias", None)
    if callable(b):
        b = b()
    return isinstance(b, torch.Tensor)


def _layer_flops(m: nn.Module, x: torch.Tensor, y: torch.Tensor) -> int | None:
    """FLOPs of one leaf module for one image, or None where the contest counts nothing."""
    name = type(m).__name__
    per_image = y[0] if y.dim() > 1 else y
    if hasattr(m, "kernel_size") and hasattr(m, "groups") and "Conv" in name:
        w = _weight(m)
        if w is None or y.dim() != 4:
            return None
        cout, cin_per_group, kh, kw = w.shape
        h, wd = y.shape[-2:]
        return 2 * h * wd * cout * (kh * kw * cin_per_group + int(_has_bias(m)))
    if hasattr(m, "in_features") and hasattr(m, "out_features"):
        rows = max(per_image.numel() // m.out_features, 1)
        return rows * m.in_features * m.out_features
    if isinstance(m, _POOL):
        k = m.kernel_size
        return per_image.numel() * (k * k if isinstance(k, int) else math.prod(k))
    if isinstance(m, _ADAPTIVE_POOL):
        kh = math.ceil(x.shape[-2] / y.shape[-2])
        kw = math.ceil(x.shape[-1] / y.shape[-1])
        return per_image.numel() * kh * kw
    if isinstance(m, _ELEMENTWISE):
        return per_image.numel()
    if isinstance(m, _BATCHNORM):
        return 2 * per_image.numel()
    return None


def count_madds(
    model: nn.Module,
    input_size: tuple[int, int] = (300, 300),
    *,
    example: torch.Tensor | None = None,
    halve_quantized: bool = True,
) -> MAddsCount:
    """Count the contest's FLOPs of `model` on one [1, 3, H, W] input (zeros unless
    `example` is given). The model runs once in eval mode without gradients."""
    x0 = example if example is not None else torch.zeros(1, 3, *input_size)
    layers: list[tuple[str, str, int]] = []
    quantized = any(_is_quantized_module(m) for m in model.modules())
    hooks = []
    for name, m in model.named_modules():
        # Leaves, and quantized modules whose packed weights sit in a child module.
        if any(True for _ in m.children()) and not _is_quantized_module(m):
            continue

        def hook(mod: nn.Module, inputs, output, name: str = name) -> None:
            x = inputs[0] if inputs else None
            if not isinstance(output, torch.Tensor) or not isinstance(x, torch.Tensor):
                return
            f = _layer_flops(mod, x, output)
            if f is not None:
                layers.append((name, type(mod).__name__, int(f)))

        hooks.append(m.register_forward_hook(hook))
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            out = model(x0)
        quantized = quantized or any(
            t.is_quantized for t in _flatten(out) if isinstance(t, torch.Tensor)
        )
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    return MAddsCount(sum(f for _, _, f in layers), quantized, halve_quantized, layers)


def _flatten(out: object) -> list[object]:
    if isinstance(out, (list, tuple)):
        return [t for o in out for t in _flatten(o)]
    if isinstance(out, dict):
        return [t for o in out.values() for t in _flatten(o)]
    return [out]


# --- the same count on an exported ONNX graph ------------------------------------------------

_ONNX_ELEMENTWISE = ("Sigmoid", "Tanh", "Relu", "LeakyRelu", "PRelu")
_ONNX_QUANTIZED = (
    "QuantizeLinear", "DequantizeLinear", "QLinearConv", "QLinearMatMul", "ConvInteger",
    "MatMulInteger", "DynamicQuantizeLinear",
)  # fmt: skip


def count_madds_onnx(model: bytes | str, *, halve_quantized: bool = True) -> MAddsCount:
    """The contest's FLOPs of an ONNX graph at batch 1, from its inferred shapes (the rules of
    `count_madds`; no library counts the contest's rules, so they are applied here).

    Conv, QLinearConv and ConvInteger as convolutions; MaxPool/AveragePool and their global
    forms as pooling; Gemm and MatMul with a constant 2-D weight as fully connected;
    Sigmoid, Tanh, Relu, LeakyRelu, PRelu one per element, except a Sigmoid whose only use is
    multiplying its own input (SiLU / swish, which the contest counted free, as `count_madds`
    does for `nn.SiLU`); BatchNormalization two. Any quantize, dequantize or integer op marks
    the graph quantized. Unlike the hook counter this sees functional sigmoids too.
    """
    import onnx
    from onnx import numpy_helper, shape_inference

    proto = onnx.load_from_string(model) if isinstance(model, bytes) else onnx.load(model)
    for inp in proto.graph.input:
        dims = inp.type.tensor_type.shape.dim
        if dims and not dims[0].HasField("dim_value"):
            dims[0].Clear()
            dims[0].dim_value = 1
    proto = shape_inference.infer_shapes(proto, data_prop=True)
    g = proto.graph
    shapes: dict[str, list[int]] = {}
    for v in [*g.input, *g.value_info, *g.output]:
        dims = v.type.tensor_type.shape.dim
        shapes[v.name] = [d.dim_value if d.HasField("dim_value") else -1 for d in dims]
    inits = {t.name: numpy_helper.to_array(t).shape for t in g.initializer}
    users: dict[str, list[onnx.NodeProto]] = {}
    for node in g.node:
        for name in node.input:
            users.setdefault(name, []).append(node)

    unknown = [
        n
        for node in g.node
        for n in (*node.input[:1], *node.output[:1])
        if n and n not in inits and any(d < 0 for d in shapes.get(n, [-1]))
    ]
    if unknown:  # shapes computed in the graph (e.g. SAME padding): run it once to see them
        shapes.update(_runtime_shapes(proto, unknown))

    def shape(name: str, node: onnx.NodeProto) -> list[int]:
        s = shapes.get(name)
        if s is None or any(d < 0 for d in s):
            raise ValueError(f"count_madds_onnx: no static shape for {node.op_type} {name!r}")
        return s

    def attr(node: onnx.NodeProto, key: str) -> list[int]:
        for a in node.attribute:
            if a.name == key:
                return list(a.ints)
        return []

    layers: list[tuple[str, str, int]] = []
    quantized = False
    for node in g.node:
        op, name = node.op_type, node.name or node.output[0]
        quantized = quantized or op in _ONNX_QUANTIZED
        flops: int | None = None
        if op in ("Conv", "ConvInteger", "QLinearConv"):
            w_name = node.input[3] if op == "QLinearConv" else node.input[1]
            cout, cin_g, kh, kw = inits.get(w_name) or shape(w_name, node)
            has_bias = len(node.input) > (8 if op == "QLinearConv" else 2) and op != "ConvInteger"
            _, _, ho, wo = shape(node.output[0], node)
            flops = 2 * ho * wo * cout * (kh * kw * cin_g + int(has_bias))
        elif op in ("MaxPool", "AveragePool"):
            k = attr(node, "kernel_shape")
            flops = math.prod(shape(node.output[0], node)[1:]) * math.prod(k)
        elif op in ("GlobalAveragePool", "GlobalMaxPool"):
            _, c, h, w = shape(node.input[0], node)
            flops = c * h * w
        elif op in ("Gemm", "MatMul") and node.input[1] in inits and len(inits[node.input[1]]) == 2:
            k_in, k_out = inits[node.input[1]]
            rows = max(math.prod(shape(node.output[0], node)[1:]) // k_out, 1)
            flops = rows * k_in * k_out
        elif op in _ONNX_ELEMENTWISE:
            uses = users.get(node.output[0], [])
            swish = (
                op == "Sigmoid"
                and len(uses) == 1
                and uses[0].op_type == "Mul"
                and node.input[0] in uses[0].input
            )
            if not swish:
                flops = math.prod(shape(node.output[0], node)[1:])
        elif op == "BatchNormalization":
            flops = 2 * math.prod(shape(node.output[0], node)[1:])
        if flops is not None:
            layers.append((name, op, int(flops)))
    return MAddsCount(sum(f for _, _, f in layers), quantized, halve_quantized, layers)


def _runtime_shapes(proto: object, names: list[str]) -> dict[str, list[int]]:
    """The shapes of `names` in one ONNX Runtime run of `proto` on zeros at batch 1."""
    import numpy as np
    import onnx
    import onnxruntime as ort

    m = onnx.ModelProto()
    m.CopyFrom(proto)  # type: ignore[arg-type]
    inputs = {i.name for i in m.graph.input}
    outputs = {o.name for o in m.graph.output}
    wanted = [n for n in dict.fromkeys(names) if n not in inputs]
    m.graph.output.extend(onnx.ValueInfoProto(name=n) for n in wanted if n not in outputs)
    session = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {}
    for i in session.get_inputs():
        dims = [d if isinstance(d, int) else 1 for d in i.shape]
        feeds[i.name] = np.zeros(dims, dtype=np.float32)
    outs = session.run(wanted, feeds)
    shapes = {n: list(o.shape) for n, o in zip(wanted, outs, strict=True)}
    shapes.update({i.name: list(feeds[i.name].shape) for i in session.get_inputs()})
    return shapes
