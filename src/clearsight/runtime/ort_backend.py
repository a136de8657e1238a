"""ONNX Runtime backend: an exported `.onnx` file used wherever a model is.

`load_onnx` turns a file written by `clearsight export` into a `LoadedModel` whose `model` is
`OrtModel`, an `nn.Module` without parameters that calls an `onnxruntime.InferenceSession`
(CPU provider, as many intra-op threads as torch uses). Its config (architecture, task,
preprocessing spec, metric preset) is rebuilt from the ONNX metadata, so a restored image
gets the preprocessing the model was trained with and no flag can contradict it.

Tiling: a model without a tiled path of its own is tiled by the `Restorer` exactly as with
PyTorch (the generic blended tiler, `clearsight/tiling.py`), with the receptive radius stored in
the metadata. A model with its own tiled path (RESCAN, MBCNN) gets one here too: where its
receptive radius is finite the ORT model is tiled exactly (halo = radius). Where it pools
globally (RESCAN's SE, MBCNN's tone blocks) the tiles share the whole image's statistics,
as PyTorch's MBCNN tiles do:

* the export names the value each pooling site computes (`shared_stats` in the metadata);
  from the same file two more graphs are derived on first use (`derive_graph`): the
  statistics graph (those values as outputs) and the tile graph (a second input
  `global_stats` [N, sites, C] replaces them, and the pooling that fed them is pruned);
* `restore_tiled` runs the statistics graph once on the whole image, or on an antialiased
  bicubic downscale to `stats_pixels` when the image is larger, then the tile graph over
  overlapping tiles (`tiled_apply` with the stored halo and blend), every tile fed the same
  statistics. An image within `stats_pixels` runs untiled instead: that one pass is already
  the exact result, at the memory the statistics pass needs anyway (`UntiledWarning` says so);
* RESCAN's halo is its receptive radius without SE (83 px), so its tiles equal the untiled
  output given the statistics; MBCNN's are PyTorch's (halo 32, blend 16). Defaults (stored
  at export): RESCAN 512-pixel tiles and statistics from at most 512x512 pixels (so the
  Restorer, which tiles it above 512x512, always takes them from a downscale); MBCNN as in
  PyTorch (untiled up to 1 MP, then 512-pixel tiles and statistics from at most 1 MP).

Peak memory is bounded by the statistics pass at `stats_pixels` plus one tile, whatever the
image size (RESCAN at 1024x1024: 1.6 GB tiled against 3.9 GB untiled; ORT keeps part of the
statistics pass's arena although each derived run asks it to shrink). Tiling costs time:
the halo (RESCAN at 1024x1024 with 512-pixel tiles computes 1.35x the pixels) plus the
statistics pass. A file exported before `shared_stats` existed still runs such models
untiled, with an `UntiledWarning`. Tiles of one image keep the arena between them; the last
hands it back.

Sessions leave out ONNX Runtime's NCHWc layout pass where most convolutions feed a `Split`
(RESCAN's fused GRU gates), which would put a reorder after each (`blocked_layout_pays`).
Even so, RESCAN's tiles make ONNX Runtime fp32 slower than torch at 1024x1024: the
`Restorer` warns where it was asked for by name (docs/export.md).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from clearsight.artifact import LoadedModel
from clearsight.errors import ArtifactError, ClearsightError
from clearsight.families import Backend, Family, family_of
from clearsight.models.contract import RestorationModel, TiledRestore, TilingLimits
from clearsight.onnx_meta import STATS_INPUT, read_onnx_metadata
from clearsight.preprocess import downscale_to_pixels, pad_to_multiple
from clearsight.runtime.ort_detect import OrtDetector
from clearsight.runtime.threads import spinning_allowed
from clearsight.tiling import grid_spans, tiled_apply

BACKENDS = ("torch", "onnxruntime")


class UntiledWarning(UserWarning):
    """ONNX Runtime runs a globally pooling model untiled although tiles were asked for."""


def _ort() -> Any:
    try:
        import onnxruntime
    except ImportError as exc:  # pragma: no cover - a declared dependency
        raise ClearsightError(f"onnxruntime is not installed ({exc})") from None
    return onnxruntime


NCHWC = "NchwcTransformer"
"""ONNX Runtime's blocked-channel layout pass (`ORT_ENABLE_ALL`, on AVX2/AVX-512 CPUs)."""


def blocked_layout_pays(graph: Any) -> bool:
    """Whether ONNX Runtime's NCHWc layout is worth it for `graph` (an ONNX GraphProto).

    NCHWc runs convolutions on channel blocks and pays where that layout flows from one
    convolution to the next. `Split` does not take it, so a convolution feeding a `Split`
    (RESCAN's fused GRU gates: 35 of its 58 convolutions) gets a `ReorderOutput` back to
    NCHW after it: RESCAN at 512x512 spent 1.2 s of 7.8 in reorders, and ran on 13% less
    CPU time without the pass (`benchmarks/restore_speed.py`). Where at least half the
    convolutions feed a `Split`, the pass is left out."""
    feeds_split = {i for n in graph.node if n.op_type == "Split" for i in n.input[:1]}
    convs = [n for n in graph.node if n.op_type == "Conv"]
    into_split = sum(1 for n in convs if feeds_split.intersection(n.output))
    return not convs or 2 * into_split < len(convs)


def _disabled_passes(model: str | os.PathLike[str] | bytes) -> list[str]:
    """The graph passes to leave out for `model` (`blocked_layout_pays`); none where the
    file cannot be parsed here (ONNX Runtime then says what is wrong with it)."""
    try:
        import onnx

        proto = (
            onnx.load_from_string(model)
            if isinstance(model, bytes)
            else onnx.load(str(model), load_external_data=False)
        )
    except Exception:  # not ONNX, or no onnx package: the session reports it
        return []
    return [] if blocked_layout_pays(proto.graph) else [NCHWC]


def make_session(
    model: str | os.PathLike[str] | bytes,
    threads: int | None = None,
    *,
    blocked_layout: bool | None = None,
) -> Any:
    """A CPU `InferenceSession` using `threads` intra-op threads (default: torch's), which
    sleep when idle unless `OMP_WAIT_POLICY=ACTIVE` (`runtime.threads`). `blocked_layout`:
    whether to run the NCHWc pass (None: where `blocked_layout_pays`)."""
    ort = _ort()
    if blocked_layout is None:
        disabled = _disabled_passes(model)
    else:
        disabled = [] if blocked_layout else [NCHWC]
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = int(threads or torch.get_num_threads())
    opts.inter_op_num_threads = 1
    spin = "1" if spinning_allowed() else "0"
    opts.add_session_config_entry("session.intra_op.allow_spinning", spin)
    opts.add_session_config_entry("session.inter_op.allow_spinning", spin)
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    opts.log_severity_level = 3  # errors only: no shape-inference chatter on stderr
    src = model if isinstance(model, bytes) else str(model)
    return ort.InferenceSession(
        src, sess_options=opts, providers=["CPUExecutionProvider"], disabled_optimizers=disabled
    )


def _prune(graph: Any, outputs: list[str]) -> None:
    """Keep only the nodes, initializers and value infos that `outputs` depend on."""
    from onnx import AttributeProto

    needed = set(outputs)

    def refs(node: Any) -> set[str]:
        names = set(node.input)
        for attr in node.attribute:  # values a subgraph may read from the outer scope
            subs = [attr.g] if attr.type == AttributeProto.GRAPH else list(attr.graphs)
            for sub in subs:
                for n in sub.node:
                    names |= refs(n)
        return names

    keep = []
    for node in reversed(graph.node):
        if needed.intersection(node.output):
            keep.append(node)
            needed |= refs(node)
    del graph.node[:]
    graph.node.extend(reversed(keep))
    inits = [t for t in graph.initializer if t.name in needed]
    del graph.initializer[:]
    graph.initializer.extend(inits)
    infos = [v for v in graph.value_info if v.name in needed]
    del graph.value_info[:]
    graph.value_info.extend(infos)


def derive_graph(data: bytes, stats: dict[str, Any], main_output: str, kind: str) -> bytes:
    """A graph derived from an export with `shared_stats` (the model's bytes; see the module
    docstring): `kind` "stats" outputs `main_output` and the statistics; "tile" takes
    `global_stats` [N, sites, C] in place of them and outputs `main_output` only."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    proto = onnx.load_from_string(data)
    g = proto.graph
    sites = [str(n) for n in stats["sites"]]
    main = [o for o in g.output if o.name == main_output]
    del g.output[:]
    g.output.extend(main)
    if kind == "stats":
        g.output.extend(helper.make_tensor_value_info(n, TensorProto.FLOAT, None) for n in sites)
    elif kind == "tile":
        name = str(stats.get("input", STATS_INPUT))
        shape = ["N", len(sites), int(stats["channels"])]
        g.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, shape))
        renamed = {site: f"{name}_{k}" for k, site in enumerate(sites)}
        for node in g.node:
            for i, inp in enumerate(node.input):
                if inp in renamed:
                    node.input[i] = renamed[inp]
        gathers = []
        for k, site in enumerate(sites):
            index = f"{name}_index_{k}"
            g.initializer.append(numpy_helper.from_array(np.array(k, dtype=np.int64), index))
            gathers.append(helper.make_node("Gather", [name, index], [renamed[site]], axis=1))
        nodes = gathers + list(g.node)
        del g.node[:]
        g.node.extend(nodes)
    else:
        raise ValueError(f"unknown derived graph {kind!r}")
    _prune(g, [o.name for o in g.output])
    return proto.SerializeToString()


def _shrink_arena() -> Any:
    """Run options that hand the CPU arena's memory back after the run: the statistics
    pass and the tiles run in two sessions whose arenas would otherwise both stay at
    their peaks (RESCAN tiled at 1024x1024: 2.7 GB instead of 1.6 GB)."""
    opts = _ort().RunOptions()
    opts.add_run_config_entry("memory.enable_memory_arena_shrinkage", "cpu:0")
    return opts


class OrtModel(RestorationModel):
    """An exported model run by ONNX Runtime, under the same contract as a PyTorch model.

    `restore(x)` pads to `pad_multiple`, runs the graph and crops back; `run_all(x)` returns
    every graph output by name (the main `output` and the stage/scale outputs). With
    `model_data` (the file's path or bytes) and `shared_stats` in the metadata it tiles
    globally pooling models with shared statistics (`global_stats`, `run_shared`).
    """

    def __init__(
        self,
        session: Any,
        export_info: dict[str, Any],
        source: str,
        model_data: str | os.PathLike[str] | bytes | None = None,
    ) -> None:
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
        self.model_data = model_data
        """The file's path or bytes (as `OrtDetector.model_data`): tiling and int8 re-read it."""
        self._derived: dict[str, Any] = {}
        self.shrink_every_tile = False
        """Hand the arena back after every tile, not only the last (the former behaviour,
        kept for benchmarks)."""
        self.blocked_layout: bool | None = None
        """The derived graphs' NCHWc choice (`make_session`); None decides per graph."""
        stats = export_info.get("shared_stats")
        self.shared_stats: dict[str, Any] | None = (
            stats if isinstance(stats, dict) and model_data is not None else None
        )
        if self.shared_stats is not None:
            # statistics from the whole image up to this many pixels, else from a downscale
            self.stats_pixels = int(self.shared_stats["stats_pixels"])
            # what the Restorer reads to decide when and how big to tile
            limit = self.shared_stats.get("max_untiled_pixels")
            self.tiling = TilingLimits(
                default_tile=int(self.shared_stats["default_tile"]),
                max_untiled_pixels=None if limit is None else int(limit),
            )
        if export_info.get("has_restore_tiled"):
            # Only models whose PyTorch form has its own tiled path get one here, so every
            # other model is tiled by the Restorer's generic tiler exactly as with PyTorch.
            self.restore_tiled = self._restore_tiled

    def tiled_path(self) -> TiledRestore | None:
        # the instance attribute set above (absent for exports without a tiled path)
        return self.__dict__.get("restore_tiled")

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

    # -- shared statistics ------------------------------------------------------------------
    def _session(self, kind: str) -> Any:
        """The derived "stats" or "tile" session, built on first use."""
        if kind not in self._derived:
            if self.shared_stats is None:
                raise ClearsightError(f"{self.source}: no shared-statistics graphs in this export")
            data = self.model_data
            if not isinstance(data, bytes):
                assert data is not None
                data = Path(data).read_bytes()
            derived = derive_graph(data, self.shared_stats, self.main_output, kind)
            self._derived[kind] = make_session(derived, blocked_layout=self.blocked_layout)
        return self._derived[kind]

    @staticmethod
    def _array(x: torch.Tensor) -> np.ndarray:
        return np.ascontiguousarray(x.detach().to("cpu", torch.float32).numpy())

    def global_stats(self, x: torch.Tensor, *, max_pixels: int | None = -1) -> torch.Tensor:
        """The statistics [N, sites, C] of the whole image `x`, from an antialiased bicubic
        downscale to `max_pixels` when it is larger (-1: `stats_pixels`; None: never)."""
        assert self.shared_stats is not None
        budget = self.stats_pixels if max_pixels == -1 else max_pixels
        x = downscale_to_pixels(x, budget, self.pad_multiple)
        x = pad_to_multiple(x, self.pad_multiple)
        session = self._session("stats")
        feeds = {self.input_name: self._array(x)}
        outs = session.run(list(self.shared_stats["sites"]), feeds, _shrink_arena())
        return torch.from_numpy(np.stack(outs, axis=1))

    def run_shared(
        self, x: torch.Tensor, stats: torch.Tensor, *, shrink: bool = True
    ) -> torch.Tensor:
        """The main output for `x` (H, W multiples of `pad_multiple`) with every global
        pooling site using `stats` [N, sites, C] instead of pooling `x`. `shrink`: hand the
        arena's memory back after the run (False between tiles of one image, whose next
        tile needs the same memory again: RESCAN tiled at 1024x1024 used 5% less CPU time)."""
        assert self.shared_stats is not None
        feeds = {self.input_name: self._array(x), self.shared_stats["input"]: self._array(stats)}
        tile = self._session("tile")
        opts = _shrink_arena() if shrink else None
        return torch.from_numpy(tile.run([self.main_output], feeds, opts)[0])

    def restore_shared(
        self,
        x: torch.Tensor,
        stats: torch.Tensor,
        *,
        tile: int,
        halo: int | None = None,
        blend: int | None = None,
        progress: Callable[[int, int], None] | None = None,
    ) -> torch.Tensor:
        """Overlapping tiles of `x` (any size), every one run with the same `stats`; `halo`
        and `blend` default to the export's (RESCAN: exact given the statistics)."""
        assert self.shared_stats is not None
        halo = int(self.shared_stats["halo"]) if halo is None else halo
        blend = int(self.shared_stats["blend"]) if blend is None else blend

        total = len(grid_spans(x.shape[-2], tile)) * len(grid_spans(x.shape[-1], tile))
        done = 0

        def run(t: torch.Tensor) -> torch.Tensor:
            nonlocal done
            done += 1
            h, w = t.shape[-2:]
            padded = pad_to_multiple(t, self.pad_multiple)
            y = self.run_shared(padded, stats, shrink=self.shrink_every_tile or done >= total)
            return y[..., :h, :w]

        y = tiled_apply(run, x, tile=tile, halo=halo, blend=blend, progress=progress)
        return y.to(x.device)

    def _restore_tiled(
        self,
        x: torch.Tensor,
        *,
        tile: int = 256,
        progress: Callable[[int, int], None] | None = None,
        stats_pixels: int | None = -1,
        **_: Any,
    ) -> torch.Tensor:
        """Exact tiles (halo = receptive radius) where the radius is finite; tiles sharing
        whole-image statistics where the model pools globally; else (an export without
        `shared_stats`) untiled.

        `stats_pixels`: -1 uses the model's; None always takes the statistics from the
        full-resolution image and tiles anyway (what PyTorch's MBCNN does; for comparisons).
        """
        if self.receptive_radius is not None:
            return tiled_apply(
                self.restore, x, tile=tile, halo=self.receptive_radius, progress=progress
            )
        h, w = x.shape[-2:]
        budget = getattr(self, "stats_pixels", None) if stats_pixels == -1 else stats_pixels
        if self.shared_stats is not None and (budget is None or h * w > budget):
            stats = self.global_stats(x, max_pixels=budget)
            return self.restore_shared(x, stats, tile=tile, progress=progress)
        if not self._warned_untiled:  # once per model, not once per ensemble view
            self._warned_untiled = True
            why = (
                f"it is within the {budget:,}-pixel budget of its whole-image statistics, "
                "whose pass is the exact result at the same memory"
                if self.shared_stats is not None
                else "this export has no shared-statistics graphs for its global pooling, so "
                "peak memory grows with the image (re-export it, or use --backend torch)"
            )
            warnings.warn(
                f"onnxruntime runs {self.source} untiled at {h}x{w}: {why}",
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


def load_onnx(
    path: str | os.PathLike[str] | bytes,
    source: str | None = None,
    *,
    blocked_layout: bool | None = None,
) -> LoadedModel:
    """Load an exported `.onnx` file (or its bytes) as a `LoadedModel` run by ONNX Runtime:
    an `OrtModel` for restoration, an `OrtDetector` (`runtime/ort_detect.py`) for detection.
    `blocked_layout` forces the NCHWc pass on or off (`make_session`; for benchmarks)."""
    src = source or (str(path) if not isinstance(path, bytes) else "<onnx bytes>")
    if not isinstance(path, bytes) and not Path(path).is_file():
        raise ArtifactError(f"model artifact not found: {src}")
    try:
        session = make_session(path, blocked_layout=blocked_layout)
    except Exception as exc:  # onnxruntime raises several untyped errors for a bad file
        raise ArtifactError(f"{src}: not a readable ONNX model ({_one_line(exc)})") from None
    config, info = read_onnx_metadata(session, src)
    model: torch.nn.Module
    if family_of(config.task) is Family.DETECTION:
        model = OrtDetector(
            session, info, src, config.architecture, config.arch_args, model_data=path
        )
    else:
        model = OrtModel(session, info, src, model_data=path)
        model.blocked_layout = blocked_layout
    return LoadedModel(model=model, config=config, source=src, backend=Backend.ONNXRUNTIME)


def check_backend(name: str) -> str:
    if name not in BACKENDS:
        raise ClearsightError(f"unknown backend {name!r}; known: {', '.join(BACKENDS)}")
    return name


def ort_precision(model: object) -> str | None:
    """The precision an ONNX Runtime model was exported at (fp32, fp16, int8); None for a
    PyTorch model."""
    if not isinstance(model, OrtModel):
        return None
    return str(model.export_info.get("precision", "fp32"))
