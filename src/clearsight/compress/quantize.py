"""Int8 post-training quantization through ONNX Runtime (`clearsight compress quantize`).

The input is the project's fp32 ONNX export (`export/onnx.py`, parity-checked against
PyTorch), or an fp32 `.onnx` file it wrote. `onnxruntime.quantization` does the work:

* `static` (the default): `quantize_static` in QDQ format, int8 weights per output channel,
  uint8 activations whose ranges come from calibration on real images (`CalibrationReader`:
  each image prepared with the model's own preprocessing spec and padded to its multiple,
  as `restore` feeds it). Calibration method: `minmax`, `entropy` or `percentile`.
* `dynamic`: `quantize_dynamic` (int8 weights, activations quantized per batch at run time;
  no calibration). ONNX Runtime quantizes only MatMul/Gemm this way on the CPU, not Conv, so
  for these convolutional restorers it changes little; it is kept for detectors' heads and
  for comparison.

Nodes left in fp32: by default every node between a graph output and the last convolution
that feeds it, that convolution included (RESCAN's 1x1 conv to the rain layer and the
subtraction, MBCNN's final bandpass join). An 8-bit output image quantized once more by the
graph costs its precision twice; excluding those few nodes costs almost no speed.
`--exclude NODE` adds more (names as in the fp32 graph; `nodes_of` lists them).

Detectors (`--layout decoded|astar`, `export/onnx_detect.py`): the same static QDQ on the
detector's parity-checked fp32 export, calibrated on whole images prepared as that file is
fed (`prepare_detection_image`), percentile ranges and 64 images by default, and two parts
kept fp32: the output path (box decode, sigmoids, score layout and the head's last
convolutions) and the stem with the first block (`input_path_nodes`). Both were measured
on YOLOX-Nano's contest mAP (docs/quantize.md); every other convolution is int8, so the
contest's MAdds count halves all the same (`measure/madds.py`).

The int8 file carries the fp32 export's metadata unchanged (`onnx_meta.py`: config,
preprocessing spec, export info, so `load_model` and the ONNX Runtime backend read it as they
read any export, shared-statistics tiling included; a detector's class map and layout too)
plus `precision: "int8"` and the quantization settings inside the export info, and
`clearsight_precision` as its own key.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.artifact import LoadedModel
from clearsight.errors import ClearsightError, OptionError
from clearsight.export.onnx_precision import (
    onnx_metadata,
    ort_version,
    precision_of,
    save_onnx_bytes,
    with_precision_metadata,
)
from clearsight.onnx_meta import EXPORT_KEY
from clearsight.runtime.ort_detect import LAYOUTS

METHODS = ("static", "dynamic")
CALIBRATIONS = ("minmax", "entropy", "percentile")
DEFAULT_CALIBRATION_IMAGES = 16
DETECT_CALIBRATION_IMAGES = 64
"""Detectors' default: more images than restoration's crops (one whole input each) make the
percentile ranges steadier; 128 whole YOLOX inputs outgrow 12 GB in the calibrator."""
DETECT_CALIBRATION = "percentile"
"""Detectors' default calibration method: min/max ranges of a few outlier activations left
YOLOX-Nano's contest mAP 0.258 where percentile kept 0.282 (docs/quantize.md)."""
DETECT_INPUT_CONVS = 3
"""Detectors keep their first convolutions in fp32 (`input_path_nodes`): with per-tensor
activations, channels of a BN-folded stem whose ranges differ a hundredfold lose the small
ones; quantizing YOLOX-Nano's stem conv alone took its contest mAP from 0.284 to 0.135."""
DEFAULT_CALIBRATION_CROP = 256
"""Calibration images are centre-cropped to this side (after padding to the model's
multiple): the calibrator keeps every intermediate tensor of a batch, so whole 700x700
MBCNN inputs would need tens of GB; crops keep the statistics of real content at 256x256."""
INT8_MAX_UNTILED_PIXELS = 1024 * 1024
"""An int8 graph whose export tiles earlier (RESCAN: above 512x512) runs untiled up to this
many pixels: RESCAN int8 at 1024x1024 measured 1.38x faster untiled than in its 512-pixel
shared-statistics tiles (22.6 s against 31.1 s, one thread, load average 5-6, side by side),
exact instead of taking the statistics from a downscale, at 924 MB peak growth (the official
fp32 code: 1,547 MB). `--tile` still tiles on request."""
_CONV_TYPES = ("Conv", "ConvTranspose", "MatMul", "Gemm")
_SHAPE_TYPES = ("Shape", "Constant", "ConstantOfShape")
_DATA_FIRST = ("Reshape", "Expand", "Tile", "Slice", "Pad", "Resize", "Upsample")


class QuantizeError(ClearsightError):
    """Quantization could not be done (bad input model, calibration data or option)."""


@dataclass(frozen=True)
class QuantizeOptions:
    """How to quantize; validated once, here."""

    method: str = "static"
    calibration: str | None = None
    """None: "minmax" for restoration models, `DETECT_CALIBRATION` for detectors."""
    per_channel: bool = True
    exclude: tuple[str, ...] = ()
    """Extra node names kept in fp32 (besides the output path, unless `keep_output_fp32` is
    off)."""
    keep_output_fp32: bool = True
    max_images: int | None = None
    """None: `DEFAULT_CALIBRATION_IMAGES`, or `DETECT_CALIBRATION_IMAGES` for detectors."""
    crop: int = DEFAULT_CALIBRATION_CROP
    """Restoration only: a detector is calibrated at its fixed input size."""
    layout: str | None = None
    """Detectors: the export layout, "decoded" (default) or "astar" (`export/onnx_detect.py`)."""

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise OptionError("method", f"unknown method {self.method!r}; known: static, dynamic")
        if self.calibration is not None and self.calibration not in CALIBRATIONS:
            known = ", ".join(CALIBRATIONS)
            raise OptionError("calibration_method", f"{self.calibration!r}; known: {known}")
        if self.max_images is not None and self.max_images < 1:
            raise OptionError("calibration_images", f"must be >= 1, got {self.max_images}")
        if self.crop < 16:
            raise OptionError("calibration_crop", f"must be >= 16 pixels, got {self.crop}")
        if self.layout is not None and self.layout not in LAYOUTS:
            known = ", ".join(LAYOUTS)
            raise OptionError("layout", f"unknown detection layout {self.layout!r}; known: {known}")
        object.__setattr__(self, "exclude", tuple(self.exclude))

    def for_task(self, detector: bool) -> QuantizeOptions:
        """These options with the task's defaults filled in."""
        from dataclasses import replace

        calib = DETECT_CALIBRATION if detector else "minmax"
        images = DETECT_CALIBRATION_IMAGES if detector else DEFAULT_CALIBRATION_IMAGES
        return replace(
            self,
            calibration=self.calibration or calib,
            max_images=self.max_images or images,
        )


@dataclass
class QuantizeResult:
    data: bytes
    """The int8 model's bytes (with metadata)."""
    fp32_data: bytes
    """The fp32 export it was made from (for the parity report)."""
    excluded: list[str]
    calibration_images: list[str] = field(default_factory=list)
    options: dict[str, Any] = field(default_factory=dict)


# -- calibration -------------------------------------------------------------------------
def calibration_images(folder: str | os.PathLike[str], limit: int) -> list[Path]:
    """The first `limit` images (by name) of `folder`, or of its input side when it holds
    pairs (`rain/`+`clean/`, `moire/`+`clean/`, `input/`+`target/`): the model is calibrated
    on what it will be fed, never on targets."""
    from clearsight.data.pairs import detect_layout
    from clearsight.io import list_images

    root = Path(folder)
    if not root.is_dir():
        raise QuantizeError(f"--calibration: {root} is not a folder of images")
    with contextlib.suppress(ClearsightError):  # else a plain folder of images
        root, _ = detect_layout(root)
    files = list_images(root)
    return files[:limit]


def prepare_image(path: Path, loaded: LoadedModel, pad_multiple: int, crop: int) -> np.ndarray:
    """One calibration input [1, 3, H, W] float32: read, centre-cropped to at most `crop`
    (a multiple of `pad_multiple`), the model's preprocessing, padded as `restore` pads."""
    from clearsight.io import image_to_tensor, read_image
    from clearsight.preprocess import pad_to_multiple

    x = image_to_tensor(read_image(path))
    h, w = x.shape[-2:]
    side = max(pad_multiple, crop // pad_multiple * pad_multiple)
    ch, cw = min(h, side), min(w, side)
    top, left = (h - ch) // 2, (w - cw) // 2
    x = x[..., top : top + ch, left : left + cw]
    x = pad_to_multiple(loaded.config.preprocess.to_model(x), pad_multiple)
    return np.ascontiguousarray(x.numpy().astype(np.float32))


def prepare_detection_image(path: Path, loaded: LoadedModel, layout: str) -> np.ndarray:
    """One detector calibration input [1, 3, H, W] float32, made as the file will be fed:
    the contest's Lanczos stretch to 300x300, BGR, (x - 127.5) * 0.007843 for `astar`
    (`detection/astar.py`, as `astar-score` feeds it), else the artifact's own resize or
    letterbox (`detection/preprocess.py`, as `detect` and `eval` feed it)."""
    from clearsight.detection.astar import contest_preprocess
    from clearsight.detection.preprocess import prepare
    from clearsight.io import read_image

    try:
        if layout == "astar":
            x = contest_preprocess(path)[0]
        else:
            x = prepare(read_image(path), loaded.config.preprocess)[0].numpy()
    except ClearsightError:
        raise
    except Exception as exc:  # PIL's errors for a file that is no image
        raise QuantizeError(f"--calibration: cannot read {path} ({exc})") from None
    return np.ascontiguousarray(x[None].astype(np.float32))


def _reader_class() -> type:
    from onnxruntime.quantization import CalibrationDataReader

    class CalibrationReader(CalibrationDataReader):  # type: ignore[misc]
        """Feeds the prepared calibration images one by one (ORT's reader protocol)."""

        def __init__(self, inputs: list[np.ndarray], input_name: str) -> None:
            self.inputs = inputs
            self.input_name = input_name
            self._it = iter(self.inputs)

        def get_next(self) -> dict[str, np.ndarray] | None:
            x = next(self._it, None)
            return None if x is None else {self.input_name: x}

        def rewind(self) -> None:
            self._it = iter(self.inputs)

    return CalibrationReader


# -- graph helpers -----------------------------------------------------------------------
def nodes_of(data: bytes) -> list[tuple[str, str]]:
    """(name, op type) of every node of an ONNX graph, in graph order."""
    import onnx

    return [(n.name, n.op_type) for n in onnx.load_from_string(data).graph.node]


def output_path_nodes(data: bytes) -> list[str]:
    """Names of the nodes between each graph output and the last convolution (included)
    that feeds it: walking back from the output, through every non-conv node, stopping at
    convolutions and at graph inputs and initializers."""
    import onnx

    g = onnx.load_from_string(data).graph
    producer = {o: n for n in g.node for o in n.output}
    found: list[str] = []
    seen: set[str] = set()
    todo = [o.name for o in g.output]
    while todo:
        name = todo.pop()
        node = producer.get(name)
        if node is None or node.name in seen or node.op_type in _SHAPE_TYPES:
            continue
        seen.add(node.name)
        found.append(node.name)
        if node.op_type not in _CONV_TYPES:
            # a reshape's target shape is not data on the path, only its first input is
            todo.extend(node.input[:1] if node.op_type in _DATA_FIRST else node.input)
    return found


def input_path_nodes(data: bytes, convs: int) -> list[str]:
    """Names of the nodes from the first convolution (included) to the (`convs` + 1)-th
    (excluded), in graph order (the exporter writes nodes in module order): the stem and
    first block, which detectors keep in fp32 (`DETECT_INPUT_CONVS`). What comes before the
    first convolution (the contest input conversion, YOLOX's space-to-depth slices) is
    quantized: 8-bit pixels lose nothing to 8 bits (and YOLOX-Nano's contest mAP measured
    0.267 with it in fp32 against 0.276 quantized, docs/quantize.md)."""
    found: list[str] = []
    seen = 0
    for name, op in nodes_of(data):
        if op in _CONV_TYPES:
            if seen == convs:
                break
            seen += 1
        if seen and op not in _SHAPE_TYPES:
            found.append(name)
    return found


# -- the work ----------------------------------------------------------------------------
def fp32_onnx(loaded: LoadedModel, layout: str | None = None) -> bytes:
    """The fp32 ONNX bytes of `loaded`: exported (parity-checked) from a PyTorch model, a
    detector in `layout` (default "decoded"), or the file an fp32 ONNX model was loaded from."""
    from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx_bytes

    model = loaded.model
    is_detector = loaded.is_detector
    if layout is not None and not is_detector:
        raise OptionError(
            "layout", f"applies to detectors; {loaded.source} is a {loaded.config.task!r} model"
        )
    if loaded.on_onnxruntime:
        if precision_of(model.export_info) != "fp32":
            raise QuantizeError(
                f"{loaded.source} is already quantized ({precision_of(model.export_info)})"
            )
        if is_detector and layout is not None and layout != model.layout:
            raise OptionError(
                "layout",
                f"{loaded.source} is an ONNX export in the {model.layout!r} layout, not "
                f"{layout!r}; export the detector again with --layout {layout}",
            )
        src = model.model_data
        if src is None:
            raise QuantizeError(f"{loaded.source}: the ONNX model's bytes are not available")
        return src if isinstance(src, bytes) else Path(src).read_bytes()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if is_detector:
            data, _ = export_onnx_bytes(loaded, layout=layout or "decoded")
        else:
            data, _ = export_onnx_bytes(loaded, parity_sizes=PARITY_SIZES_QUICK)
    return data


def quantize_model(
    loaded: LoadedModel,
    calibration: str | os.PathLike[str] | None,
    options: QuantizeOptions | None = None,
) -> QuantizeResult:
    """Quantize `loaded` to int8; `calibration` is a folder of real images (static only)."""
    detector = loaded.is_detector
    opts = (options or QuantizeOptions()).for_task(detector)
    paths: list[Path] = []
    if opts.method == "static":  # a bad folder fails before the export's minute
        if calibration is None:
            raise OptionError("calibration", "static quantization needs a folder of images")
        paths = calibration_images(calibration, int(opts.max_images or 1))
        if not paths:
            raise QuantizeError(f"--calibration: {calibration} holds no images")
    fp32 = fp32_onnx(loaded, opts.layout)
    props = onnx_metadata(fp32)
    info = json.loads(props[EXPORT_KEY])
    known = {name for name, _ in nodes_of(fp32)}
    unknown = [n for n in opts.exclude if n not in known]
    if unknown:
        raise OptionError(
            "exclude", f"no node named {', '.join(map(repr, unknown))} in the fp32 graph"
        )
    kept: list[str] = []
    if opts.keep_output_fp32:
        # the output path: box decode, sigmoids and the last convolutions of a detector
        kept += output_path_nodes(fp32)
        if detector:
            kept += input_path_nodes(fp32, DETECT_INPUT_CONVS)
    excluded = list(dict.fromkeys([*kept, *opts.exclude]))
    used: list[str] = []
    with tempfile.TemporaryDirectory(prefix="clearsight-quant-") as tmp:
        src, dst = Path(tmp) / "fp32.onnx", Path(tmp) / "int8.onnx"
        src.write_bytes(fp32)
        if opts.method == "static":
            if detector:
                layout = str(info.get("layout", "decoded"))
                inputs = [prepare_detection_image(p, loaded, layout) for p in paths]
            else:
                pad = int(info.get("pad_multiple", 1))
                inputs = [prepare_image(p, loaded, pad, opts.crop) for p in paths]
            used = [str(p) for p in paths]
            _static(src, dst, inputs, opts, excluded)
        else:
            _dynamic(src, dst, opts, excluded)
        data = dst.read_bytes()
    static = opts.method == "static"
    settings = {
        "method": opts.method,
        "format": "QDQ" if static else "QOperator",
        "weights": "int8 per-channel" if opts.per_channel else "int8 per-tensor",
        "activations": "uint8" if static else "dynamic",
        "calibration": opts.calibration if static else None,
        "calibration_images": len(used),
        "calibration_crop": opts.crop if static and not detector else None,
        "excluded_nodes": excluded,
        "onnxruntime": ort_version(),
    }
    extra: dict[str, Any] = {"precision": "int8", "quantization": settings}
    stats = info.get("shared_stats")
    if isinstance(stats, dict) and int(stats.get("max_untiled_pixels") or 0) < (
        INT8_MAX_UNTILED_PIXELS
    ):
        extra["shared_stats"] = {**stats, "max_untiled_pixels": INT8_MAX_UNTILED_PIXELS}
    data = with_precision_metadata(data, props, extra)
    return QuantizeResult(
        data=data,
        fp32_data=fp32,
        excluded=excluded,
        calibration_images=used,
        options=asdict(opts),
    )


def _static(
    src: Path, dst: Path, inputs: list[np.ndarray], opts: QuantizeOptions, excluded: list[str]
) -> None:
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    method = {
        "minmax": CalibrationMethod.MinMax,
        "entropy": CalibrationMethod.Entropy,
        "percentile": CalibrationMethod.Percentile,
    }[str(opts.calibration)]
    import onnxruntime

    reader = _reader_class()(inputs, "input")
    # the calibration sessions are ONNX Runtime's own: without this their graph optimizer
    # logs a warning per unused initializer (the detectors' export leaves dozens)
    onnxruntime.set_default_logger_severity(3)
    with warnings.catch_warnings(), _histogram_errors(opts):
        warnings.simplefilter("ignore")
        quantize_static(
            src,
            dst,
            reader,
            quant_format=QuantFormat.QDQ,
            per_channel=opts.per_channel,
            activation_type=QuantType.QUInt8,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=excluded,
            calibrate_method=method,
            extra_options={"CalibMovingAverage": False},
        )


@contextlib.contextmanager
def _histogram_errors(opts: QuantizeOptions) -> Any:
    """ONNX Runtime's histogram calibrators (entropy, percentile) fail on a tensor whose
    calibration values are all but constant; say so in one line, with the way out."""
    try:
        yield
    except ValueError as exc:
        if "bins" not in str(exc):
            raise
        raise QuantizeError(
            f"--calibration-method {opts.calibration}: a tensor's calibration values are "
            f"(nearly) constant ({exc}); use more images or --calibration-method minmax"
        ) from None


def _dynamic(src: Path, dst: Path, opts: QuantizeOptions, excluded: list[str]) -> None:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        quantize_dynamic(
            src,
            dst,
            per_channel=opts.per_channel,
            weight_type=QuantType.QInt8,
            nodes_to_exclude=excluded,
        )


def save_quantized(result: QuantizeResult, out: str | os.PathLike[str]) -> Path:
    """Write the int8 model atomically (readable as the fp32 export is)."""
    return save_onnx_bytes(result.data, out)
