"""Finding a model by what the user typed: an artifact path, a bundled model, or an architecture."""

from __future__ import annotations

import warnings
from pathlib import Path

import torch

from clearsight.artifact import LoadedModel, load_artifact, make_config, read_config
from clearsight.errors import ClearsightError, UnknownNameError
from clearsight.families import Family, family_of
from clearsight.hub import download_artifact, is_hub_ref
from clearsight.models.registry import build_model, get_spec, list_specs

BUNDLED_DIR = Path(__file__).resolve().parent / "assets" / "models"


class UntrainedModelWarning(UserWarning):
    """An architecture name was used without weights: outputs are meaningless."""


def bundled_models() -> dict[str, Path]:
    """Bundled trained models shipped inside the package, by name."""
    if not BUNDLED_DIR.is_dir():
        return {}
    return {
        p.name: p
        for p in sorted(BUNDLED_DIR.iterdir())
        if p.is_dir() and (p / "config.json").is_file()
    }


def known_model_names() -> list[str]:
    return sorted(bundled_models()) + [s.name for s in list_specs()]


def model_task(ref: str) -> str:
    """The task ("derain", "demoire", "detect", ...) of `ref`, read from its config or the
    registry without loading weights (an exported `.onnx` file is opened, as it must be;
    an `hf://` artifact is fetched)."""
    if is_hub_ref(ref):
        return read_config(download_artifact(ref)).task
    path, bundled = Path(ref), bundled_models()
    if path.suffix.lower() == ".onnx" and path.is_file():
        return resolve_model(ref).config.task
    if path.exists():
        return read_config(path).task
    if ref in bundled:
        return read_config(bundled[ref]).task
    try:
        return get_spec(ref).task
    except ClearsightError:
        return resolve_model(ref).config.task  # raises the one-line "unknown model" error


def model_family(ref: str) -> Family:
    """The task family of `ref` (`clearsight/families.py`), without loading weights."""
    return family_of(model_task(ref))


def resolve_model(ref: str, device: str | torch.device = "cpu", seed: int = 0) -> LoadedModel:
    """Load `ref`: an artifact path, an exported `.onnx` file (run by ONNX Runtime), a
    bundled model name, an architecture name, or `hf://OWNER/REPO[@REVISION]` (an artifact
    published on the Hugging Face Hub, `clearsight.hub`).

    An architecture name gives freshly initialised weights (seeded, so runs repeat) and an
    `UntrainedModelWarning`, except for weightless models such as `identity`.
    """
    if is_hub_ref(ref):
        return load_artifact(download_artifact(ref), device=device)
    path = Path(ref)
    if path.suffix.lower() == ".onnx" and path.is_file():
        from clearsight.runtime.ort_backend import load_onnx  # ONNX Runtime, CPU only

        return load_onnx(path)
    if path.exists():
        return load_artifact(path, device=device)
    bundled = bundled_models()
    if ref in bundled:
        return load_artifact(bundled[ref], device=device)
    if ref in {s.name for s in list_specs()}:
        spec = get_spec(ref)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            model = build_model(ref)
        model.eval().to(device)
        n_params = sum(p.numel() for p in model.parameters())
        if n_params:
            warnings.warn(
                f"architecture {ref!r} has no trained weights here; using a random "
                f"initialisation (seed {seed}): outputs are not meaningful",
                UntrainedModelWarning,
                stacklevel=2,
            )
        config = make_config(
            model,
            ref,
            spec.default_args(),
            name=ref,
            provenance={"weights": "random-init" if n_params else "none", "seed": seed},
        )
        return LoadedModel(model=model, config=config, source=f"architecture:{ref}")
    looks_like_path = any(sep in ref for sep in ("/", "\\")) or Path(ref).suffix
    if looks_like_path:
        raise UnknownNameError(f"model artifact not found: {ref}")
    raise UnknownNameError(
        f"unknown model {ref!r}; known: {', '.join(known_model_names())} (or a path to an artifact)"
    )


PRECISIONS = ("fp32", "int8")
INT8_SUFFIX = ".int8.onnx"
BUNDLED_INT8 = "model.int8.onnx"


def int8_path_for(ref: str | Path) -> Path:
    """Where the int8 version of a model lives (`clearsight compress quantize` writes it
    there by default; `--precision int8` looks there): beside the model, `x.onnx`,
    `x.safetensors` or `x/` -> `x.int8.onnx`; inside a bundled model's folder,
    `model.int8.onnx`; for a name that is no path, `NAME.int8.onnx` in the current folder."""
    bundled = bundled_models()
    p = Path(ref)
    if not p.exists() and str(ref) in bundled:
        return bundled[str(ref)] / BUNDLED_INT8
    if p.name.endswith(INT8_SUFFIX):
        return p
    stem = p.name[: -len(p.suffix)] if p.suffix and not p.is_dir() else p.name
    return p.with_name(stem + INT8_SUFFIX)


def find_int8(ref: str) -> Path:
    """The int8 ONNX model for `ref` (a model name or path), or an error saying how to make
    one. A bundled name is looked up in its folder, then as `NAME.int8.onnx` here."""
    from clearsight.errors import OptionError

    candidates = [int8_path_for(ref)]
    if ref in bundled_models() and not Path(ref).exists():
        candidates.append(Path(ref + INT8_SUFFIX))
    for c in candidates:
        if c.is_file():
            return c
    raise OptionError(
        "precision",
        f"no int8 model for {ref!r} (looked for {', '.join(map(str, candidates))}); make one "
        f"with `clearsight compress quantize {ref} --calibration IMAGES -o {candidates[-1]}`",
    )


def default_int8_output(ref: str, layout: str | None = None) -> Path:
    """`compress quantize`'s default output: beside a model file or folder, else (a bundled
    or architecture name) `NAME.int8.onnx` in the current folder, never inside the package.
    A detector's contest-layout file is `NAME-astar.int8.onnx` (`--precision int8` runs
    `NAME.int8.onnx`, which must be the `decoded` one)."""
    if ref in bundled_models() and not Path(ref).exists():
        path = Path(ref + INT8_SUFFIX)
    else:
        path = int8_path_for(ref)
    if layout == "astar" and not path.name.endswith("-astar" + INT8_SUFFIX):
        path = path.with_name(path.name[: -len(INT8_SUFFIX)] + "-astar" + INT8_SUFFIX)
    return path
