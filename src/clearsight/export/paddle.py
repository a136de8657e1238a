"""Paddle inference models (`clearsight export MODEL --format paddle -o DIR`), parity-checked.

The route: the ONNX export (`export/onnx.py`, itself checked against PyTorch), a few graph
rewrites x2paddle needs (`export/onnx_rewrite.py`), x2paddle's ONNX converter in its own
process (`export/x2paddle_run.py`), then the saved model is loaded back with Paddle
Inference on the CPU and compared with the reference at two sizes, one of them odd; above
1e-4 nothing is written. The reference is PyTorch for a clearsight model and ONNX Runtime for
an ONNX file given as MODEL, so any ONNX file carrying clearsight metadata converts (the
detectors' contest-layout ONNX included).

The folder holds Paddle 3's inference files (`model.json`, the PIR program, and
`model.pdiparams`), and `clearsight.json`: the ONNX file's clearsight metadata (config,
preprocessing, export info), the Paddle input and output names in ONNX order with the ONNX
names they stand for, the rewrites made and the parity figures.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.artifact import LoadedModel
from clearsight.atomic import atomic_dir
from clearsight.errors import ClearsightError
from clearsight.export.onnx import (
    PARITY_SIZES,
    TOLERANCE,
    ExportError,
    _parity_input,
    export_onnx_bytes,
)
from clearsight.export.onnx_rewrite import rewrite_for_x2paddle

META_FILE = "clearsight.json"
PROGRAM_FILE = "model.json"
PARAMS_FILE = "model.pdiparams"
ASTAR_KEY = "astar"
"""`clearsight.json`'s entry for a contest-layout export: its MAdds and how they were counted."""
CONVERT_TIMEOUT_S = 1800
Reference = Callable[[np.ndarray], list[np.ndarray]]


@dataclass
class PaddleExport:
    path: Path
    sizes: list[tuple[int, int]]
    per_size: list[float]
    rewrites: list[str] = field(default_factory=list)

    @property
    def max_abs_diff(self) -> float:
        return max(self.per_size)


def _need_paddle() -> None:
    try:
        with warnings.catch_warnings():  # Paddle's import warns that ccache is missing
            warnings.simplefilter("ignore")
            import paddle  # noqa: F401
            import x2paddle  # noqa: F401
    except ImportError as exc:
        raise ClearsightError(
            f"--format paddle needs Paddle and x2paddle ({exc.name} is not installed): "
            "pip install 'clearsight[paddle]'"
        ) from None


@contextlib.contextmanager
def _quiet_native_stdout() -> Iterator[None]:
    """Paddle Inference's oneDNN passes print to the process's stdout from C++
    ("ReduceMeanCheckIfOneDNNSupport"); send file descriptor 1 to /dev/null meanwhile."""
    sys.stdout.flush()
    saved = os.dup(1)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 1)
            yield
    finally:
        os.dup2(saved, 1)
        os.close(saved)


class PaddlePredictor:
    """A Paddle inference model folder run by Paddle Inference on the CPU."""

    def __init__(
        self, folder: str | os.PathLike[str], threads: int = 1, onednn: bool | None = None
    ) -> None:
        """`onednn`: Paddle Inference's oneDNN kernels and passes (None: as the export
        recorded in `clearsight.json`, on unless its parity check needed them off)."""
        from paddle import inference

        self.folder = Path(folder)
        meta_path = self.folder / META_FILE
        if not meta_path.is_file():
            raise ClearsightError(f"{self.folder}: not a clearsight Paddle export (no {META_FILE})")
        self.meta = json.loads(meta_path.read_text(encoding="utf-8"))
        cfg = inference.Config(str(self.folder / PROGRAM_FILE), str(self.folder / PARAMS_FILE))
        cfg.disable_gpu()
        cfg.set_cpu_math_library_num_threads(threads)
        cfg.disable_glog_info()
        self.onednn = bool(self.meta.get("onednn", True)) if onednn is None else onednn
        if not self.onednn:
            cfg.disable_mkldnn()
        with _quiet_native_stdout():
            self._predictor = inference.create_predictor(cfg)
        self.input_name = self._predictor.get_input_names()[0]
        self.output_names = list(self._predictor.get_output_names())

    def run(self, x: np.ndarray) -> list[np.ndarray]:
        """Outputs in the ONNX graph's order."""
        handle = self._predictor.get_input_handle(self.input_name)
        handle.reshape(list(x.shape))
        handle.copy_from_cpu(np.ascontiguousarray(x, dtype=np.float32))
        with _quiet_native_stdout():
            self._predictor.run()
        return [self._predictor.get_output_handle(n).copy_to_cpu() for n in self.output_names]


def _run_x2paddle(onnx_path: Path, out_dir: Path, source: str) -> None:
    cmd = [sys.executable, "-m", "clearsight.export.x2paddle_run", str(onnx_path), str(out_dir)]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=CONVERT_TIMEOUT_S, env=env, check=False
    )
    program = out_dir / "inference_model" / PROGRAM_FILE
    if proc.returncode != 0 or not program.is_file():
        lines = [ln.strip() for ln in (proc.stderr + proc.stdout).splitlines() if ln.strip()]
        unsupported = [ln for ln in lines if "not supported" in ln or "unsupport" in ln.lower()]
        detail = (unsupported or [ln for ln in lines if "Error" in ln] or lines or ["no output"])[
            -1
        ]
        raise ExportError(f"{source}: x2paddle could not convert the ONNX graph: {detail}")


def _onnx_meta(data: bytes) -> tuple[dict[str, Any], list[str], str]:
    import onnx

    proto = onnx.load_from_string(data)
    meta: dict[str, Any] = {}
    for p in proto.metadata_props:
        try:
            meta[p.key] = json.loads(p.value)
        except json.JSONDecodeError:
            meta[p.key] = p.value
    return meta, [o.name for o in proto.graph.output], proto.graph.input[0].name


def _parity(
    folder: Path,
    onednn: bool,
    inputs: list[np.ndarray],
    reference: Reference,
    onnx_outputs: list[str],
    source: str,
    reference_name: str = "the reference",
) -> tuple[PaddlePredictor, list[float]]:
    """Run every input through Paddle Inference and the reference: the max abs difference
    per input (shape mismatches are an `ExportError`)."""
    predictor = PaddlePredictor(folder, onednn=onednn)
    if len(predictor.output_names) != len(onnx_outputs):
        raise ExportError(
            f"{source}: the Paddle model has {len(predictor.output_names)} outputs, "
            f"the ONNX graph {len(onnx_outputs)}"
        )
    per_size = []
    for x in inputs:
        got, ref = predictor.run(x), reference(x)
        diff = 0.0
        for name, g, r in zip(onnx_outputs, got, ref, strict=True):
            if tuple(g.shape) != tuple(r.shape):
                raise ExportError(
                    f"{source}: Paddle output {name!r} has shape {tuple(g.shape)}, "
                    f"{reference_name} {tuple(r.shape)} at input {tuple(x.shape)}"
                )
            diff = max(diff, float(np.abs(g - r).max()))
        per_size.append(diff)
    return predictor, per_size


def onnx_to_paddle(
    data: bytes,
    out: str | os.PathLike[str],
    *,
    inputs: list[np.ndarray],
    reference: Reference,
    source: str,
    tolerance: float = TOLERANCE,
    reference_name: str = "PyTorch",
    extra_meta: dict[str, Any] | None = None,
) -> PaddleExport:
    """Convert ONNX `data` to a Paddle inference folder at `out`, written only after Paddle
    Inference matches `reference` on every input within `tolerance`; `extra_meta` joins
    `clearsight.json`."""
    _need_paddle()
    meta, onnx_outputs, onnx_input = _onnx_meta(data)
    rewritten, rewrites = rewrite_for_x2paddle(data)
    with tempfile.TemporaryDirectory(prefix="clearsight-x2paddle-") as work:
        work_dir = Path(work)
        onnx_path = work_dir / "model.onnx"
        onnx_path.write_bytes(rewritten)
        _run_x2paddle(onnx_path, work_dir / "x2paddle", source)
        produced = work_dir / "x2paddle" / "inference_model"
        with atomic_dir(out) as tmp:
            for name in (PROGRAM_FILE, PARAMS_FILE):
                shutil.copy2(produced / name, tmp / name)
            (tmp / META_FILE).write_text("{}", encoding="utf-8")
            checks = (inputs, reference, onnx_outputs, source, reference_name)
            onednn_error = ""
            try:
                predictor, per_size = _parity(tmp, True, *checks)
                onednn = True
            except ExportError:
                raise
            except Exception as exc:  # Paddle raises untyped errors from its oneDNN passes
                onednn_error = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0]}"
                predictor, per_size = _parity(tmp, False, *checks)
                onednn = False
            sizes = [(int(x.shape[-2]), int(x.shape[-1])) for x in inputs]
            if max(per_size) > tolerance:
                raise ExportError(
                    f"{source}: Paddle parity check failed: max abs difference "
                    f"{max(per_size):.3g} > {tolerance:g} against {reference_name} (sizes "
                    + ", ".join(f"{h}x{w}" for h, w in sizes)
                    + "); nothing written"
                )
            result = PaddleExport(Path(out), sizes, per_size, rewrites.describe())
            if not onednn:
                result.rewrites.append(
                    "Paddle Inference's oneDNN passes failed on this graph "
                    f"({onednn_error}); run it with config.disable_mkldnn()"
                )
            info = {
                "format": "paddle inference (PIR program model.json + model.pdiparams)",
                "converter": "x2paddle 1.6 onnx2paddle, after clearsight's ONNX rewrites",
                "onnx_rewrites": result.rewrites,
                "onednn": onednn,
                "input": {"paddle": predictor.input_name, "onnx": onnx_input},
                "outputs": [
                    {"paddle": p, "onnx": o}
                    for p, o in zip(predictor.output_names, onnx_outputs, strict=True)
                ],
                "parity": {
                    "reference": reference_name,
                    "sizes": [f"{h}x{w}" for h, w in sizes],
                    "per_size": per_size,
                    "tolerance": tolerance,
                },
                "onnx_metadata": meta,
                **(extra_meta or {}),
            }
            (tmp / META_FILE).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
    return result


def export_paddle(
    loaded: LoadedModel,
    out: str | os.PathLike[str],
    *,
    parity_sizes: tuple[tuple[int, int], ...] = PARITY_SIZES,
    tolerance: float = TOLERANCE,
) -> PaddleExport:
    """`loaded` (a clearsight model, or an ONNX file with clearsight metadata) as a Paddle
    inference folder at `out`, parity-checked against PyTorch (or ONNX Runtime)."""
    import torch

    from clearsight.models.contract import as_restoration_model
    from clearsight.preprocess import pad_to_multiple

    _need_paddle()
    if loaded.on_onnxruntime:
        return _export_onnx_model(loaded, out, parity_sizes, tolerance)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        data, _ = export_onnx_bytes(loaded, parity_sizes=parity_sizes, tolerance=tolerance)
    model = as_restoration_model(loaded.model.eval().to("cpu"))
    graph, _ = model.export_graph()
    pad = max(int(model.pad_multiple), int(loaded.config.preprocess.pad_multiple))
    inputs = [
        pad_to_multiple(_parity_input(loaded, h, w, seed=i), pad).numpy()
        for i, (h, w) in enumerate(parity_sizes)
    ]

    def reference(x: np.ndarray) -> list[np.ndarray]:
        with torch.no_grad():
            y = graph(torch.from_numpy(x))
        return [t.numpy() for t in (y if isinstance(y, tuple) else (y,))]

    return onnx_to_paddle(
        data, out, inputs=inputs, reference=reference, source=loaded.source, tolerance=tolerance
    )


def _export_onnx_model(
    loaded: LoadedModel,
    out: str | os.PathLike[str],
    parity_sizes: tuple[tuple[int, int], ...],
    tolerance: float,
) -> PaddleExport:
    """An ONNX file given as MODEL: ONNX Runtime is the reference; a graph input with a fixed
    H and W (a detector's) is fed that size with two different images."""
    ort_model = loaded.model
    data = ort_model.model_data  # type: ignore[union-attr]
    data = Path(data).read_bytes() if not isinstance(data, bytes) else data
    session = ort_model.session  # type: ignore[union-attr]
    shape = session.get_inputs()[0].shape
    fixed = all(isinstance(d, int) for d in shape[2:4])
    sizes = [tuple(shape[2:4])] * 2 if fixed else list(parity_sizes)
    m = int(ort_model.pad_multiple) if not loaded.is_detector else 1
    inputs = []
    for i, (h, w) in enumerate(sizes):
        x = _parity_input(loaded, int(h), int(w), seed=i)
        if not fixed:
            from clearsight.preprocess import pad_to_multiple

            x = pad_to_multiple(x, m)
        inputs.append(x.numpy())
    name = session.get_inputs()[0].name

    def reference(x: np.ndarray) -> list[np.ndarray]:
        return list(session.run(None, {name: x}))

    return onnx_to_paddle(
        data,
        out,
        inputs=inputs,
        reference=reference,
        source=loaded.source,
        tolerance=tolerance,
        reference_name="ONNX Runtime",
    )


def export_contest_paddle(
    loaded: LoadedModel, out: str | os.PathLike[str], *, tolerance: float = TOLERANCE
) -> PaddleExport:
    """A detector in the Astar 2019 contest's layout as a Paddle inference folder: input the
    contest's [N, 3, 300, 300] BGR tensor in (x - 127.5) * 0.007843, outputs `boxes`
    [N, M, 4] and `scores` [N, 81, M] (`detection/astar.py`'s `ContestAdapter`), traced at
    a fixed 300x300 and checked against the PyTorch adapter on two contest tensors.

    `clearsight.json` records, under `astar`, the adapter's MAdds as `astar-score` counts
    them on the PyTorch model (forward hooks), so scoring the folder reports the same figure
    without PyTorch or the ONNX graph at hand."""
    import io

    import torch

    from clearsight.detection.astar import CONTEST_SIZE, ContestAdapter
    from clearsight.export.onnx import OPSET, _add_metadata
    from clearsight.measure.madds import count_madds
    from clearsight.onnx_meta import EXPORT_FORMAT_VERSION, metadata_props

    _need_paddle()
    if not loaded.is_detector or loaded.on_onnxruntime:
        raise ClearsightError(
            f"{loaded.source}: --layout astar with --format paddle needs a clearsight detector "
            "(artifact or bundled name), not a restoration model or an ONNX file"
        )
    adapter = ContestAdapter(loaded.model, loaded.config).eval()
    h, w = CONTEST_SIZE
    gen = torch.Generator().manual_seed(0)
    example = (torch.rand(1, 3, h, w, generator=gen) * 255 - 127.5) * 0.007843
    buf = io.BytesIO()
    with warnings.catch_warnings(), torch.no_grad():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            adapter, (example,), buf, input_names=["input"], output_names=["boxes", "scores"],
            opset_version=OPSET, dynamo=False, do_constant_folding=True,
        )  # fmt: skip
    info = {
        "format_version": EXPORT_FORMAT_VERSION,
        "opset": OPSET,
        "layout": "astar-2019 contest: boxes [N,M,4] normalized xyxy, scores [N,81,M]",
        "outputs": ["boxes", "scores"],
        "main_output": "boxes",
        "adapter": adapter.note,
    }
    data = _add_metadata(buf.getvalue(), metadata_props(loaded.config, info))
    inputs = [
        ((torch.rand(1, 3, h, w, generator=gen) * 255 - 127.5) * 0.007843).numpy() for _ in range(2)
    ]

    def reference(x: np.ndarray) -> list[np.ndarray]:
        with torch.no_grad():
            return [t.numpy() for t in adapter(torch.from_numpy(x))]

    count = count_madds(adapter, CONTEST_SIZE)
    astar = {
        "layout": info["layout"],
        "madds_flops": count.flops,
        "quantized": count.quantized,
        "madds_counted_on": "the PyTorch ContestAdapter at 300x300 by forward hooks, as "
        "astar-score counts the PyTorch model",
        "adapter": adapter.note,
    }
    return onnx_to_paddle(
        data, out, inputs=inputs, reference=reference, source=loaded.source,
        tolerance=tolerance, extra_meta={ASTAR_KEY: astar},
    )  # fmt: skip


def is_paddle_folder(path: str | os.PathLike[str]) -> bool:
    """A folder holding a clearsight Paddle export (`clearsight.json` and the model files)."""
    p = Path(path)
    return p.is_dir() and all((p / n).is_file() for n in (META_FILE, PROGRAM_FILE, PARAMS_FILE))


def load_contest_paddle(folder: str | os.PathLike[str]) -> Any:
    """A contest-layout Paddle folder (`export_contest_paddle`) as the scorer's
    `detection.astar.ContestModel`: run by Paddle Inference, MAdds as recorded at export."""
    from clearsight.artifact import ModelConfig
    from clearsight.detection.astar import ContestModel
    from clearsight.measure.madds import MAddsCount
    from clearsight.onnx_meta import CONFIG_KEY

    _need_paddle()
    path = Path(folder)
    meta = json.loads((path / META_FILE).read_text(encoding="utf-8"))
    astar = meta.get(ASTAR_KEY)
    if not isinstance(astar, dict) or "madds_flops" not in astar:
        raise ClearsightError(
            f"{path}: not a contest-layout Paddle export (no {ASTAR_KEY!r} entry in "
            f"{META_FILE}); write one with clearsight export DETECTOR --format paddle "
            "--layout astar"
        )
    cfg = meta.get("onnx_metadata", {}).get(CONFIG_KEY)
    if not isinstance(cfg, dict):
        raise ClearsightError(f"{path}: {META_FILE} carries no clearsight config")
    config = ModelConfig.from_dict(cfg, str(path))
    count = MAddsCount(flops=int(astar["madds_flops"]), quantized=bool(astar["quantized"]))
    note = (
        "Paddle Inference runs the exported contest-layout model; MAdds counted on "
        f"{astar['madds_counted_on']} (recorded in {META_FILE} at export)"
    )
    if astar.get("adapter"):
        note += f"; {astar['adapter']}"
    runner = PaddleContestRunner(path)
    return ContestModel(runner, config, count, str(path), note, runner.runtime)


class PaddleContestRunner:
    """A contest-layout Paddle folder as the scorer's model: contest batch in, (boxes,
    scores) torch tensors out, one image at a time (the folder is traced at batch 1)."""

    runtime = "paddle-inference"

    def __init__(self, folder: str | os.PathLike[str]) -> None:
        self.predictor = PaddlePredictor(folder)

    def __call__(self, x: Any) -> tuple[Any, Any]:
        import torch

        outs = [self.predictor.run(x[i : i + 1].cpu().numpy()) for i in range(x.shape[0])]
        boxes = torch.from_numpy(np.concatenate([o[0] for o in outs]))
        scores = torch.from_numpy(np.concatenate([o[1] for o in outs]))
        return boxes, scores
