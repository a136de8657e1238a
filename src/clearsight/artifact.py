"""Self-describing model artifacts (docs/architecture.md §3.1; limits in docs/reliability.md).

An artifact is a folder holding `model.safetensors` and `config.json`, or one
`.safetensors` file whose metadata carries the same JSON. The config names the
architecture and its constructor arguments, the task, the preprocessing spec, the
metric preset, the real layer shapes and the provenance, so loading rebuilds the module
from the registry and fills it from safetensors: nothing is ever unpickled.

A config is untrusted input: before anything real is built, its constructor arguments are
checked against the registry's declared bounds, and the module is built on the `meta`
device (shapes, no memory) so that every tensor shape can be compared with the safetensors
header. Only weights that exactly fit are then allocated and read.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file
from torch import nn

from clearsight._version import __version__
from clearsight.atomic import atomic_dir, atomic_path
from clearsight.errors import ArtifactError, ClearsightError
from clearsight.families import Backend, Family, family_of
from clearsight.models.registry import build_model, count_parameters, get_spec
from clearsight.models.widths import Widths, WidthsError, apply_widths, changed_widths
from clearsight.out_paths import check_not_input, check_output_file, check_replaced_folder
from clearsight.preprocess import PreprocessSpec

FORMAT_NAME = "clearsight.model"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"
WEIGHTS_FILE = "model.safetensors"
_METADATA_KEY = "clearsight_config"


@dataclass
class ModelConfig:
    """Everything needed to rebuild, feed and judge a model, without its weights."""

    architecture: str
    arch_args: dict[str, Any]
    task: str
    preprocess: PreprocessSpec
    metric_preset: str
    layer_shapes: dict[str, list[int]] = field(default_factory=dict)
    param_count: int = 0
    provenance: dict[str, Any] = field(default_factory=dict)
    name: str | None = None
    # Detection only: the dataset category id of each contiguous label (index = label), and
    # the names of those labels, so nothing downstream guesses COCO's sparse ids.
    class_ids: list[int] | None = None
    class_names: list[str] | None = None
    # Pruned models only: the width attributes (in/out channels, groups, features) of the
    # modules that differ from the architecture's default build (models/widths.py).
    widths: Widths = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        d = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "name": self.name,
            "architecture": self.architecture,
            "arch_args": self.arch_args,
            "task": self.task,
            "preprocess": self.preprocess.to_dict(),
            "metric_preset": self.metric_preset,
            "param_count": self.param_count,
            "layer_shapes": self.layer_shapes,
            "provenance": self.provenance,
        }
        if self.class_ids is not None:
            d["class_ids"] = list(self.class_ids)
        if self.class_names is not None:
            d["class_names"] = list(self.class_names)
        if self.widths:
            d["widths"] = {k: dict(v) for k, v in self.widths.items()}
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any], source: str = "config") -> ModelConfig:
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            raise ArtifactError(
                f"{source}: not a clearsight model config (no format={FORMAT_NAME!r})"
            )
        version = d.get("format_version")
        if not isinstance(version, int) or version > FORMAT_VERSION or version < 1:
            raise ArtifactError(
                f"{source}: format_version {version!r} is not supported "
                f"(this clearsight reads 1..{FORMAT_VERSION}; upgrade clearsight)"
            )
        for key, kind in _FIELD_TYPES.items():
            if d.get(key) is not None and not isinstance(d[key], kind):
                raise ArtifactError(
                    f"{source}: {key} must be {_KIND_NAMES[kind]}, got {type(d[key]).__name__}"
                )
        try:
            return cls(
                architecture=str(d["architecture"]),
                arch_args=dict(d.get("arch_args") or {}),
                task=_RENAMED_TASKS.get((str(d["architecture"]), str(d["task"])), str(d["task"])),
                preprocess=PreprocessSpec.from_dict(d.get("preprocess") or {}, source),
                metric_preset=str(d.get("metric_preset", "rgb")),
                layer_shapes=_shapes(d.get("layer_shapes"), source),
                param_count=int(d.get("param_count", 0)),
                provenance=dict(d.get("provenance") or {}),
                name=d.get("name"),
                class_ids=_int_list(d.get("class_ids"), "class_ids", source),
                class_names=_str_list(d.get("class_names"), "class_names", source),
                widths=_widths(d.get("widths"), source),
            )
        except KeyError as exc:
            raise ArtifactError(f"{source}: missing key {exc.args[0]!r}") from None


# Tasks an architecture was once saved under: S2VD artifacts and ONNX files made before the
# video family (docs/architecture.md §1.1) say "derain", which would run them frame by frame.
_RENAMED_TASKS = {("s2vd", "derain"): "video-derain"}

# The JSON type of each top-level config field (when present and not null).
_FIELD_TYPES: dict[str, type | tuple[type, ...]] = {
    "architecture": str,
    "task": str,
    "name": str,
    "metric_preset": str,
    "arch_args": dict,
    "preprocess": dict,
    "layer_shapes": dict,
    "provenance": dict,
    "param_count": int,
}
_KIND_NAMES = {str: "a string", dict: "an object", int: "an integer"}


def _shapes(v: Any, source: str) -> dict[str, list[int]]:
    shapes = v or {}
    if not all(
        isinstance(s, list) and all(type(n) is int and n >= 0 for n in s) for s in shapes.values()
    ):
        raise ArtifactError(f"{source}: layer_shapes must map names to lists of sizes")
    return {k: list(s) for k, s in shapes.items()}


def _int_list(v: Any, key: str, source: str) -> list[int] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(i, int) for i in v):
        raise ArtifactError(f"{source}: {key} must be a list of integers")
    return list(v)


def _str_list(v: Any, key: str, source: str) -> list[str] | None:
    if v is None:
        return None
    if not isinstance(v, list) or not all(isinstance(i, str) for i in v):
        raise ArtifactError(f"{source}: {key} must be a list of strings")
    return list(v)


def _widths(v: Any, source: str) -> Widths:
    if v is None:
        return {}
    ok = isinstance(v, dict) and all(
        isinstance(k, str)
        and isinstance(a, dict)
        and all(isinstance(n, str) and type(w) is int for n, w in a.items())
        for k, a in v.items()
    )
    if not ok:
        raise ArtifactError(f"{source}: widths must map module names to {{attribute: integer}}")
    return {k: dict(a) for k, a in v.items()}


@dataclass
class LoadedModel:
    """A model ready for inference plus the config that describes it.

    Callers ask `family` and `backend`, never the model's class or the task string
    (docs/architecture.md)."""

    model: nn.Module
    config: ModelConfig
    source: str
    backend: Backend = Backend.TORCH
    """What runs `model`; set where it is loaded (`runtime` for ONNX Runtime)."""

    @property
    def family(self) -> Family:
        """The task family of the model (`clearsight/families.py`)."""
        return family_of(self.config.task)

    @property
    def is_detector(self) -> bool:
        return self.family is Family.DETECTION

    @property
    def on_onnxruntime(self) -> bool:
        return self.backend is Backend.ONNXRUNTIME


def make_config(
    model: nn.Module,
    architecture: str,
    arch_args: dict[str, Any] | None = None,
    *,
    name: str | None = None,
    provenance: dict[str, Any] | None = None,
    preprocess: PreprocessSpec | None = None,
    metric_preset: str | None = None,
) -> ModelConfig:
    """Describe `model`, filling task/preprocess/preset defaults from the registry."""
    spec = get_spec(architecture)
    prov = {
        "created": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "clearsight_version": __version__,
    }
    prov.update(provenance or {})
    return ModelConfig(
        architecture=architecture,
        arch_args=dict(arch_args or {}),
        task=spec.task,
        preprocess=preprocess or spec.preprocess,
        metric_preset=metric_preset or spec.metric_preset,
        layer_shapes={k: list(v.shape) for k, v in model.state_dict().items()},
        param_count=count_parameters(model),
        provenance=prov,
        name=name,
    )


def _state_for_saving(model: nn.Module) -> dict[str, torch.Tensor]:
    # safetensors refuses shared or non-contiguous storage; clone to be safe.
    return {k: v.detach().to("cpu").contiguous().clone() for k, v in model.state_dict().items()}


def check_artifact_target(
    path: str | os.PathLike[str], source: str | os.PathLike[str] | None = None
) -> Path:
    """Where `save_artifact` may write: a `.safetensors` file (not the `source` it is made
    from), or a folder that is new, empty or an artifact (it holds `config.json`), since
    the folder is replaced whole; commands call it before any work, `save_artifact` again
    before it writes."""
    target = Path(path)
    if source is not None:
        check_not_input(target, source)
    if target.suffix == ".safetensors":
        return check_output_file(target, "artifact file")
    return check_replaced_folder(target, CONFIG_FILE, "artifact folder")


def save_artifact(model: nn.Module, path: str | os.PathLike[str], config: ModelConfig) -> Path:
    """Save `model` with `config` as a folder, or as one file when `path` ends in .safetensors.

    Both forms are written atomically: an interrupted save leaves any previous artifact at
    `path` intact and no half-written files behind.
    """
    target = Path(path)
    config.layer_shapes = {k: list(v.shape) for k, v in model.state_dict().items()}
    config.param_count = count_parameters(model)
    config.widths = changed_widths(model, _skeleton(config.architecture, config.arch_args))
    cfg_json = json.dumps(config.to_dict(), indent=2, sort_keys=False)
    state = _state_for_saving(model)
    if target.suffix == ".safetensors":
        with atomic_path(target) as tmp:
            save_file(state, str(tmp), metadata={_METADATA_KEY: cfg_json})
        return target
    check_artifact_target(target)
    with atomic_dir(target) as tmp_dir:
        with atomic_path(tmp_dir / WEIGHTS_FILE) as tmp:  # for its mode: see atomic_path
            save_file(state, str(tmp))
        (tmp_dir / CONFIG_FILE).write_text(cfg_json + "\n", encoding="utf-8")
    return target


def read_config(path: str | os.PathLike[str]) -> ModelConfig:
    """Read only the config of an artifact (folder or single file)."""
    p = Path(path)
    if p.is_dir():
        cfg_path = p / CONFIG_FILE
        if not cfg_path.is_file():
            raise ArtifactError(f"{p}: not a model artifact (no {CONFIG_FILE})")
        try:
            data = json.loads(cfg_path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ArtifactError(f"{cfg_path}: invalid JSON ({exc})") from None
        return ModelConfig.from_dict(data, str(cfg_path))
    if p.is_file():
        meta = _read_safetensors_metadata(p)
        if _METADATA_KEY not in meta:
            raise ArtifactError(f"{p}: safetensors file carries no clearsight config")
        try:
            data = json.loads(meta[_METADATA_KEY])
        except json.JSONDecodeError as exc:
            raise ArtifactError(f"{p}: invalid config metadata ({exc})") from None
        return ModelConfig.from_dict(data, str(p))
    raise ArtifactError(f"model artifact not found: {p}")


def _read_safetensors_metadata(p: Path) -> dict[str, str]:
    from safetensors import safe_open

    try:
        with safe_open(str(p), framework="pt") as fh:
            return dict(fh.metadata() or {})
    except (SafetensorError, OSError, ValueError) as exc:
        raise ArtifactError(f"{p}: not a readable safetensors file ({exc})") from None


def _weight_shapes(weights: Path) -> dict[str, list[int]]:
    """Tensor names and shapes from the safetensors header; no tensor data is read."""
    from safetensors import safe_open

    try:
        with safe_open(str(weights), framework="pt") as fh:
            return {k: list(fh.get_slice(k).get_shape()) for k in fh.keys()}  # noqa: SIM118
    except (SafetensorError, OSError, ValueError) as exc:
        raise ArtifactError(f"{weights}: cannot read weights ({exc})") from None


def _skeleton(architecture: str, arch_args: dict[str, Any]) -> nn.Module:
    """The architecture's default build on the `meta` device: shapes, no storage."""
    with torch.device("meta"):
        return build_model(architecture, **arch_args)


def build_from_config(
    config: ModelConfig, *, source: str = "config", meta: bool = False
) -> nn.Module:
    """The module `config` describes, at its real widths: the registry's build, narrowed to
    the config's `widths` (a pruned model; models/widths.py) with empty tensors of the
    recorded shapes there, ready for `load_state_dict`. `meta`: shapes only, no storage."""
    try:
        if meta:
            model = _skeleton(config.architecture, config.arch_args)
        else:
            model = build_model(config.architecture, **config.arch_args)
        if config.widths:
            apply_widths(model, config.widths, config.layer_shapes)
    except (ClearsightError, WidthsError) as exc:
        raise ArtifactError(f"{source}: {exc}") from None
    return model


def _expected_shapes(config: ModelConfig, source: str) -> dict[str, list[int]]:
    """The state-dict shapes the config's module would have, without allocating it.

    Bounds first, so even the shape-only build stays small; then a build on the `meta`
    device, whose tensors have shapes but no storage, narrowed to the config's widths
    (never wider than the default build).
    """
    problems = get_spec(config.architecture).bound_violations(config.arch_args)
    if problems:
        raise ArtifactError(
            f"{source}: arch_args for {config.architecture!r} out of bounds: " + "; ".join(problems)
        )
    skeleton = build_from_config(config, source=source, meta=True)
    return {k: list(v.shape) for k, v in skeleton.state_dict().items()}


def _fit_detail(expected: dict[str, list[int]], got: dict[str, list[int]]) -> str:
    missing = sorted(set(expected) - set(got))
    extra = sorted(set(got) - set(expected))
    wrong = sorted(k for k in set(expected) & set(got) if expected[k] != got[k])
    parts = []
    if missing:
        parts.append(f"missing {missing[:5]}")
    if extra:
        parts.append(f"unexpected {extra[:5]}")
    if wrong:
        shown = ", ".join(f"{k} is {got[k]}, architecture needs {expected[k]}" for k in wrong[:3])
        parts.append(f"shape mismatch {wrong[:5]} ({shown})")
    return "; ".join(parts)


def load_artifact(path: str | os.PathLike[str], device: str | torch.device = "cpu") -> LoadedModel:
    """Rebuild the architecture from the config and fill it from safetensors (no pickle).

    The config's arguments and the weights' shapes are checked before the module is
    allocated, so a config cannot make loading use memory the weights do not justify.
    """
    p = Path(path)
    config = read_config(p)
    weights = p / WEIGHTS_FILE if p.is_dir() else p
    if not weights.is_file():
        raise ArtifactError(f"{p}: weights file {WEIGHTS_FILE} is missing")
    source = str(p / CONFIG_FILE) if p.is_dir() else str(p)
    expected = _expected_shapes(config, source)
    got = _weight_shapes(weights)
    if expected != got:
        raise ArtifactError(
            f"{weights}: weights do not fit architecture {config.architecture!r}: "
            + _fit_detail(expected, got)
        )
    try:
        state = load_file(str(weights), device="cpu")
    except (SafetensorError, OSError, ValueError) as exc:
        raise ArtifactError(f"{weights}: cannot read weights ({exc})") from None
    model = build_from_config(config, source=source)
    model.load_state_dict(state, strict=True)
    model.eval().to(device)
    return LoadedModel(model=model, config=config, source=str(p))
