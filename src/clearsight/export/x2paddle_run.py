"""Run x2paddle's ONNX converter in its own process (`python -m clearsight.export.x2paddle_run
MODEL.onnx OUT_DIR`), with the two ONNX shims it needs today.

x2paddle 1.6.0 (the current release) was written against ONNX < 1.17: it reads
`onnx.version.version` and imports `onnx.mapping.TENSOR_TYPE_TO_NP_TYPE`, both removed from
ONNX since. The shims give it both from today's API (`onnx.__version__`,
`onnx.helper.tensor_dtype_to_np_dtype`); nothing else of ONNX is changed. A separate process,
because x2paddle prints every node it converts to stdout, switches Paddle into static-graph
mode and imports the Python code it generates; none of that should touch the caller.
"""

from __future__ import annotations

import contextlib
import sys
import types


def install_onnx_shims() -> None:
    """`onnx.version` and `onnx.mapping` as x2paddle 1.6.0 expects them."""
    import onnx
    from onnx import TensorProto, helper

    if not hasattr(onnx, "version"):
        onnx.version = types.SimpleNamespace(version=onnx.__version__)  # type: ignore[attr-defined]
    if "onnx.mapping" not in sys.modules:
        mapping = types.ModuleType("onnx.mapping")
        table = {}
        for _, value in TensorProto.DataType.items():
            with contextlib.suppress(Exception):  # types without a NumPy dtype (bfloat16, ...)
                table[value] = helper.tensor_dtype_to_np_dtype(value)
        mapping.TENSOR_TYPE_TO_NP_TYPE = table  # type: ignore[attr-defined]
        sys.modules["onnx.mapping"] = mapping
        onnx.mapping = mapping  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m clearsight.export.x2paddle_run MODEL.onnx OUT_DIR", file=sys.stderr)
        return 2
    install_onnx_shims()
    from x2paddle.convert import onnx2paddle

    log = sys.stderr
    with contextlib.redirect_stdout(log):  # the per-node progress lines
        onnx2paddle(argv[0], argv[1], disable_feedback=True, enable_onnx_checker=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
