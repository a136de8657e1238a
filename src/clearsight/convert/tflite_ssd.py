"""Convert the TF Object Detection API's quantized SSD-MobileNet-v1 TFLite file to a
clearsight artifact (`ssd-mobilenet-v1`, fp32).

The file is read with the `tflite` flatbuffer package (no interpreter): every convolution's
uint8 weights and int32 bias are dequantized, `(q - zero_point) * scale` per tensor or per
output channel, and transposed from TFLite's layouts (conv OHWI, depthwise 1HWC) to
PyTorch's OIHW. Batch norm is already folded into the biases by the TFLite converter.
Tensors are matched by their graph names, and each op's stride, padding and fused ReLU6 are
checked against the PyTorch module, so a file of another layout fails loudly.

    python -m clearsight.convert.tflite_ssd MODEL.tflite OUT_DIR [--name NAME]
        [--source "repo @ commit : path"] [--licence LICENCE]
"""

from __future__ import annotations

import argparse
import hashlib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clearsight.detection.coco_classes import COCO_IDS, COCO_NAMES
from clearsight.errors import ArtifactError

__all__ = ["TfliteGraph", "convert_tflite_ssd", "load_tflite_ssd", "postprocess_options"]

# tflite BuiltinOperator codes used here.
_CONV_2D, _DEPTHWISE_CONV_2D = 3, 4
_PADDING_SAME = 0
_RELU6 = 3
_NONE = 0


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    data: np.ndarray | None  # dequantized float32 constant, or None for activations
    scale: np.ndarray
    zero_point: np.ndarray
    quantized_dimension: int


@dataclass
class _Op:
    code: int
    custom: str | None
    inputs: list[int]
    outputs: list[int]
    options: Any
    custom_options: bytes | None


class TfliteGraph:
    """The first subgraph of a .tflite file: tensors (constants dequantized) and ops."""

    def __init__(self, path: str | Path) -> None:
        import tflite  # a flatbuffer reader only; imported here so the package stays optional

        self.path = Path(path)
        try:
            buf = self.path.read_bytes()
        except OSError as exc:
            raise ArtifactError(f"{self.path}: cannot read ({exc.strerror})") from None
        self.sha256 = hashlib.sha256(buf).hexdigest()
        try:
            model = tflite.Model.GetRootAsModel(buf, 0)
            sg = model.Subgraphs(0)
        except Exception as exc:  # noqa: BLE001 - any parse failure is a bad file
            raise ArtifactError(f"{self.path}: not a TFLite flatbuffer ({exc})") from None
        self.tensors: list[_Tensor] = []
        for i in range(sg.TensorsLength()):
            t = sg.Tensors(i)
            q = t.Quantization()
            scale = q.ScaleAsNumpy() if q is not None and q.ScaleLength() else np.ones(1)
            zp = q.ZeroPointAsNumpy() if q is not None and q.ZeroPointLength() else np.zeros(1)
            qdim = q.QuantizedDimension() if q is not None else 0
            raw = model.Buffers(t.Buffer()).DataAsNumpy()
            data = None
            shape = tuple(int(v) for v in t.ShapeAsNumpy())
            if isinstance(raw, np.ndarray) and raw.size:
                data = _dequantize(raw, t.Type(), shape, scale, zp, qdim)
            self.tensors.append(
                _Tensor(t.Name().decode(), shape, data, np.asarray(scale), np.asarray(zp), qdim)
            )
        self.ops: list[_Op] = []
        for i in range(sg.OperatorsLength()):
            op = sg.Operators(i)
            oc = model.OperatorCodes(op.OpcodeIndex())
            code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
            custom = oc.CustomCode().decode() if oc.CustomCode() else None
            options = None
            if code == _CONV_2D:
                options = tflite.Conv2DOptions()
            elif code == _DEPTHWISE_CONV_2D:
                options = tflite.DepthwiseConv2DOptions()
            if options is not None:
                table = op.BuiltinOptions()
                options.Init(table.Bytes, table.Pos)
            co = bytes(op.CustomOptionsAsNumpy()) if op.CustomOptionsLength() else None
            self.ops.append(
                _Op(
                    code,
                    custom,
                    [int(op.Inputs(j)) for j in range(op.InputsLength())],
                    [int(op.Outputs(j)) for j in range(op.OutputsLength())],
                    options,
                    co,
                )
            )
        self.inputs = [int(sg.Inputs(j)) for j in range(sg.InputsLength())]

    def tensor(self, name: str) -> _Tensor:
        for t in self.tensors:
            if t.name == name:
                return t
        raise ArtifactError(f"{self.path}: no tensor named {name!r}")


def _dequantize(
    raw: np.ndarray, ttype: int, shape: tuple[int, ...], scale, zp, qdim: int
) -> np.ndarray:
    # tflite TensorType: 0 float32, 2 int32, 3 uint8, 9 int8
    dtypes = {0: np.float32, 2: np.int32, 3: np.uint8, 9: np.int8}
    if ttype not in dtypes:
        raise ArtifactError(f"unsupported TFLite tensor type {ttype}")
    q = np.frombuffer(raw.tobytes(), dtype=dtypes[ttype]).reshape(shape)
    if ttype == 0:
        return q.astype(np.float32)
    scale = np.asarray(scale, dtype=np.float64)
    zp = np.asarray(zp, dtype=np.float64)
    if scale.size > 1:  # per-axis: one scale/zero point along `qdim`
        bshape = [1] * len(shape)
        bshape[qdim] = -1
        scale, zp = scale.reshape(bshape), zp.reshape(bshape)
    return ((q.astype(np.float64) - zp) * scale).astype(np.float32)


def postprocess_options(graph: TfliteGraph) -> dict[str, Any]:
    """The TFLite_Detection_PostProcess op's custom options (scale factors, NMS settings)."""
    from flatbuffers import flexbuffers

    for op in graph.ops:
        if op.custom == "TFLite_Detection_PostProcess" and op.custom_options:
            return dict(flexbuffers.Loads(op.custom_options))
    raise ArtifactError(f"{graph.path}: no TFLite_Detection_PostProcess op")


def _tflite_name_to_module(name: str) -> str | None:
    """The PyTorch module a TFLite conv weight feeds, from the API's scope names."""
    fe = "FeatureExtractor/MobilenetV1/"
    if re.fullmatch(fe + r"MobilenetV1/Conv2d_0/weights_quant/.*", name):
        return "conv0.0"
    block = fe + r"MobilenetV1/Conv2d_(\d+)_(depthwise|pointwise)/weights_quant/.*"
    if m := re.fullmatch(block, name):
        kind = "dw" if m.group(2) == "depthwise" else "pw"
        return f"blocks.{int(m.group(1)) - 1}.{kind}.0"
    if m := re.fullmatch(fe + r"Conv2d_13_pointwise_(1|2)_Conv2d_(\d+)_.*/weights_quant/.*", name):
        kind = "reduce" if m.group(1) == "1" else "conv"
        return f"extras.{int(m.group(2)) - 2}.{kind}.0"
    if m := re.fullmatch(r"BoxPredictor_(\d+)/(BoxEncoding|Class)Predictor/weights_quant/.*", name):
        kind = "box_heads" if m.group(2) == "BoxEncoding" else "class_heads"
        return f"{kind}.{m.group(1)}"
    return None


def load_tflite_ssd(path: str | Path) -> tuple[torch.nn.Module, TfliteGraph]:
    """Build `ssd-mobilenet-v1` and fill it from the TFLite file; every tensor is checked."""
    from clearsight.models.ssd_mobilenet_v1 import BOX_CODER_SCALES, SSDMobileNetV1

    graph = TfliteGraph(path)
    inp = graph.tensors[graph.inputs[0]]
    if inp.shape[1:3] != (300, 300) or inp.shape[3] != 3:
        raise ArtifactError(f"{graph.path}: input is {inp.shape}, expected [1,300,300,3]")
    cin = graph.tensor(
        "FeatureExtractor/MobilenetV1/MobilenetV1/Conv2d_0/weights_quant/FakeQuantWithMinMaxVars"
    ).shape[0]
    model = SSDMobileNetV1(num_classes=91, depth_multiplier=cin / 32, input_size=300)
    opts = postprocess_options(graph)
    scales = (opts["y_scale"], opts["x_scale"], opts["h_scale"], opts["w_scale"])
    if scales != BOX_CODER_SCALES or opts["num_classes"] != 90:
        raise ArtifactError(f"{graph.path}: post-processing options {opts} do not match")
    modules = dict(model.named_modules())
    state = model.state_dict()
    filled: set[str] = set()
    for op in graph.ops:
        if op.code not in (_CONV_2D, _DEPTHWISE_CONV_2D):
            continue
        wt, bt = graph.tensors[op.inputs[1]], graph.tensors[op.inputs[2]]
        key = _tflite_name_to_module(wt.name)
        if key is None or wt.data is None or bt.data is None:
            raise ArtifactError(f"{graph.path}: unexpected convolution weight {wt.name!r}")
        conv = modules[key]
        _check_op(op, conv, key, graph.tensors[op.outputs[0]])
        w = wt.data.transpose(3, 0, 1, 2) if op.code == _DEPTHWISE_CONV_2D else wt.data
        if op.code == _CONV_2D:
            w = w.transpose(0, 3, 1, 2)  # OHWI -> OIHW
        for suffix, value in (("weight", w), ("bias", bt.data)):
            k = f"{key}.{suffix}"
            if tuple(state[k].shape) != value.shape:
                raise ArtifactError(
                    f"{graph.path}: {wt.name} gives {k} shape {value.shape}, "
                    f"the model has {tuple(state[k].shape)}"
                )
            state[k] = torch.from_numpy(np.ascontiguousarray(value))
            filled.add(k)
    missing = sorted(set(state) - filled)
    if missing:
        raise ArtifactError(f"{graph.path}: no weights for {', '.join(missing)}")
    model.load_state_dict(state)
    return model.eval(), graph


def _check_op(op: _Op, conv: torch.nn.Conv2d, key: str, out: _Tensor) -> None:
    o = op.options
    stride = (o.StrideH(), o.StrideW())
    act = o.FusedActivationFunction()
    if "heads" in key:
        ok_act = act == _NONE
    else:
        # ReLU6 is either fused, or (the backbone here) left to the uint8 output's range,
        # zero point 0 and 255 steps reaching 6.0, which saturates exactly like ReLU6.
        top = float(out.scale[0]) * 255
        ok_act = act == _RELU6 or (act == _NONE and out.zero_point[0] == 0 and abs(top - 6) < 0.01)
    if o.Padding() != _PADDING_SAME or stride != tuple(conv.stride) or not ok_act:
        raise ArtifactError(
            f"TFLite op for {key}: padding {o.Padding()}, stride {stride}, activation {act} "
            f"do not match the PyTorch layer (SAME, {tuple(conv.stride)}, "
            f"{'none' if 'heads' in key else 'ReLU6'})"
        )
    if op.code == _DEPTHWISE_CONV_2D and o.DepthMultiplier() != 1:
        raise ArtifactError(f"TFLite op for {key}: depth multiplier {o.DepthMultiplier()} != 1")


def tflite_anchors(graph: TfliteGraph) -> np.ndarray:
    """The anchors constant the post-processing op reads: [A, 4] as (yc, xc, h, w)."""
    for op in graph.ops:
        if op.custom == "TFLite_Detection_PostProcess":
            t = graph.tensors[op.inputs[2]]
            if t.data is None:
                break
            return t.data
    raise ArtifactError(f"{graph.path}: no anchors constant")


def coco91_class_names() -> list[str]:
    """Names of labels 0..89 (COCO ids 1..90); ids COCO does not use are named '???'."""
    by_id = dict(zip(COCO_IDS, COCO_NAMES, strict=True))
    return [by_id.get(i, "???") for i in range(1, 91)]


def convert_tflite_ssd(
    src: str | Path,
    out: str | Path,
    *,
    name: str | None = None,
    source: str | None = None,
    licence: str | None = None,
) -> Path:
    """Convert the TFLite file at `src` into a clearsight artifact folder (or .safetensors);
    `source` and `licence` (where the file came from, its weights' licence) go into the
    provenance as given."""
    from clearsight.artifact import make_config, save_artifact

    model, graph = load_tflite_ssd(src)
    opts = postprocess_options(graph)
    config = make_config(
        model,
        "ssd-mobilenet-v1",
        {"num_classes": 91, "depth_multiplier": model_depth_multiplier(model), "input_size": 300},
        name=name,
        provenance={
            "converted_from": graph.path.name,
            "source_sha256": graph.sha256,
            "converter": "python -m clearsight.convert.tflite_ssd",
            "tflite_postprocess_options": {k: opts[k] for k in sorted(opts)},
            "note": "uint8 weights dequantized to float32; activations are not quantized here",
        }
        | ({"source": source} if source else {})
        | ({"licence": licence} if licence else {}),
    )
    # Raw class k (1..90) is COCO id k; the post-processed label k-1 maps to it.
    config.class_ids = list(range(1, 91))
    config.class_names = coco91_class_names()
    return save_artifact(model, out, config)


def model_depth_multiplier(model: torch.nn.Module) -> float:
    return model.conv0[0].out_channels / 32


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m clearsight.convert.tflite_ssd")
    p.add_argument("tflite", help="the quantized SSD-MobileNet-v1 .tflite file")
    p.add_argument("out", help="artifact folder (or .safetensors file) to write")
    p.add_argument("--name", default=None, help="the artifact's name")
    p.add_argument("--source", default=None, help="where the file came from (provenance)")
    p.add_argument("--licence", default=None, help="the weights' licence (provenance)")
    a = p.parse_args(argv)
    path = convert_tflite_ssd(a.tflite, a.out, name=a.name, source=a.source, licence=a.licence)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
