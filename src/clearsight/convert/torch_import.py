"""`clearsight import torch`: released PyTorch checkpoints into clearsight artifacts.

Layouts read (one table row per architecture, `LAYOUTS`):

- ESDNet / ESDNet-L (CVMI-Lab/UHDM `my_model`): the released `.pth` files are plain state
  dicts, the training `.tar` checkpoints hold one under `state_dict`; our names are theirs.
- NAFNet (megvii-research/NAFNet): BasicSR saves `{"params": state}` (or `params_ema`);
  names are ours except `sca.1` (ours `sca.conv`).
- NAFNet as ClearView names it (dronefreak/clearview): a state dict or a training
  checkpoint with `model_state_dict`; block layers `dwconv, conv2, conv3, conv4` are the
  official `conv2, conv3, conv4, conv5`.

Every file is read with `torch.load(weights_only=True)`: PyTorch's restricted unpickler
rebuilds tensors, containers and plain numbers and refuses any other object, so a pickle
that would run code is an error and nothing in it runs. `module.` and `_orig_mod.` prefixes
(DataParallel, `torch.compile`) are dropped. The architecture's arguments are inferred from
the tensor shapes (or given as JSON), every tensor must find its place and every place be
filled at its shape, else the import fails naming what does not fit.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from clearsight.convert.paddle_import import ImportResult
from clearsight.convert.state_fit import load_fitted, misfit
from clearsight.errors import ClearsightError

State = dict[str, torch.Tensor]
WRAPPER_KEYS = ("params", "params_ema", "state_dict", "model_state_dict", "model", "net")
PREFIXES = ("module.", "_orig_mod.")


class TorchImportError(ClearsightError):
    """A checkpoint that cannot be imported (names the file and what is wrong)."""


@dataclass(frozen=True)
class Layout:
    """How one family of released checkpoints maps onto one of our architectures."""

    name: str
    architecture: str
    detect: Callable[[State], bool]
    rename: Callable[[str], str]
    infer: Callable[[State, str], dict[str, Any]]
    card: dict[str, Any]


# --------------------------------------------------------------------------- reading


def read_checkpoint(path: Path, source: str) -> tuple[State, str | None]:
    """The state dict in `path` (and the wrapper key it sat under), weights-only."""
    try:
        obj = torch.load(str(path), weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise TorchImportError(f"{source}: file not found") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad/unsafe file
        first = next((ln for ln in str(exc).splitlines() if ln.strip()), type(exc).__name__)
        raise TorchImportError(
            f"{source}: not a weights-only PyTorch checkpoint, nothing in it was run "
            f"({first.strip()[:200]})"
        ) from None
    key = None
    if isinstance(obj, dict) and not _is_state(obj):
        key = next((k for k in WRAPPER_KEYS if isinstance(obj.get(k), dict)), None)
        if key is None:
            keys = ", ".join(map(str, list(obj)[:8]))
            raise TorchImportError(
                f"{source}: no state dict found (top-level keys: {keys}; looked for "
                f"{', '.join(WRAPPER_KEYS)})"
            )
        obj = obj[key]
    if not isinstance(obj, dict) or not _is_state(obj):
        raise TorchImportError(f"{source}: expected a state dict of named tensors")
    return {_strip(k): v for k, v in obj.items()}, key


def _is_state(d: dict[Any, Any]) -> bool:
    return bool(d) and all(isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in d.items())


def _strip(key: str) -> str:
    changed = True
    while changed:
        changed = False
        for p in PREFIXES:
            if key.startswith(p):
                key, changed = key[len(p) :], True
    return key


def _count(state: State, pattern: str) -> int:
    """How many distinct indices the first group of `pattern` takes in the state's names;
    the indices must be 0..n-1."""
    found = {int(m.group(1)) for k in state if (m := re.match(pattern, k))}
    if found and found != set(range(len(found))):
        raise TorchImportError(f"indices of {pattern} are {sorted(found)}, not 0..n-1")
    return len(found)


def _shape(state: State, key: str, source: str) -> torch.Size:
    if key not in state:
        raise TorchImportError(f"{source}: no {key}; not this architecture's checkpoint")
    return state[key].shape


# --------------------------------------------------------------------------- NAFNet


def _nafnet_infer(state: State, source: str) -> dict[str, Any]:
    width = int(_shape(state, "intro.weight", source)[0])
    levels = _count(state, r"downs\.(\d+)\.")
    enc = [
        _count(
            {k: v for k, v in state.items() if k.startswith(f"encoders.{i}.")},
            rf"encoders\.{i}\.(\d+)\.",
        )
        for i in range(levels)
    ]
    dec = [
        _count(
            {k: v for k, v in state.items() if k.startswith(f"decoders.{i}.")},
            rf"decoders\.{i}\.(\d+)\.",
        )
        for i in range(_count(state, r"ups\.(\d+)\."))
    ]
    middle = _count(state, r"middle_blks\.(\d+)\.")
    return {"width": width, "enc_blocks": enc, "middle_blocks": middle, "dec_blocks": dec}


_BLOCK = re.compile(r"^((?:encoders|decoders)\.\d+\.\d+|middle_blks\.\d+)\.(.+)$")
_CLEARVIEW_LAYERS = {"dwconv": "conv2", "conv2": "conv3", "conv3": "conv4", "conv4": "conv5"}


def _nafnet_official(key: str) -> str:
    m = _BLOCK.match(key)
    if m and m.group(2).startswith("sca.1."):
        return f"{m.group(1)}.sca.conv.{m.group(2)[len('sca.1.') :]}"
    return key


def _nafnet_clearview(key: str) -> str:
    m = _BLOCK.match(key)
    if not m:
        return key
    layer, _, rest = m.group(2).partition(".")
    return f"{m.group(1)}.{_CLEARVIEW_LAYERS.get(layer, layer)}.{rest}".rstrip(".")


def _is_clearview(state: State) -> bool:
    return any(".dwconv." in k for k in state)


# --------------------------------------------------------------------------- ESDNet


def _esdnet_infer(state: State, source: str) -> dict[str, Any]:
    dense = "rdb.conv_layers.0.conv.0.weight"
    return {
        "en_feature_num": int(_shape(state, "encoder.conv_first.0.weight", source)[0]),
        "en_inter_num": int(_shape(state, f"encoder.encoder_1.{dense}", source)[0]),
        "de_feature_num": int(_shape(state, "decoder.preconv_3.conv.0.weight", source)[0]),
        "de_inter_num": int(_shape(state, f"decoder.decoder_3.{dense}", source)[0]),
        "sam_number": _count(state, r"encoder\.encoder_1\.sam_blocks\.(\d+)\."),
    }


_ESDNET_FIGURES = (
    "PSNR the authors report for ESDNet (their paper, ECCV 2022): UHDM 22.12 dB (input "
    "17.12), FHDMi 24.50 (17.97), TIP2018 29.81 (20.30); ESDNet-L is reported higher on each"
)

_ESDNET_CARD = {
    "what": "ESDNet (Yu et al., 'Towards Efficient and Scale-Robust Ultra-High-Definition "
    "Image Demoireing', ECCV 2022)",
    "repository": "github.com/CVMI-Lab/UHDM",
    "licence": "Apache-2.0 (the authors' code and released checkpoints)",
    "published": "one checkpoint per training set (UHDM, FHDMi, TIP2018, LCDMoire), each for "
    "ESDNet and ESDNet-L, linked from the repository's README",
    "figures": _ESDNET_FIGURES,
}

LAYOUTS: dict[str, Layout] = {
    "nafnet-official": Layout(
        name="nafnet-official",
        architecture="nafnet",
        detect=lambda s: not _is_clearview(s),
        rename=_nafnet_official,
        infer=_nafnet_infer,
        card={
            "what": "NAFNet (Chen, Chu, Zhang and Sun, 'Simple Baselines for Image "
            "Restoration', ECCV 2022)",
            "repository": "github.com/megvii-research/NAFNet",
            "licence": "MIT (megvii-model)",
            "published": "GoPro (deblurring), REDS and SIDD (denoising) models linked from "
            "the repository's README; none for deraining",
            "figures": "PSNR the authors report: SIDD 40.30 dB (width 64), GoPro 33.69 dB "
            "(width 64); tasks other than deraining",
        },
    ),
    "nafnet-clearview": Layout(
        name="nafnet-clearview",
        architecture="nafnet",
        detect=_is_clearview,
        rename=_nafnet_clearview,
        infer=_nafnet_infer,
        card={
            "what": "NAFNet as trained for deraining by the ClearView project",
            "repository": "github.com/dronefreak/clearview (its own NAFNet implementation)",
            "licence": "Apache-2.0 (ClearView)",
            "published": "Hugging Face Hub: dronefreak/clearview-derain-nafnet-small (1.1 M "
            "parameters), dronefreak/clearview-derain-nafnet (Mid, 14.3 M), "
            "dronefreak/clearview-derain-nafnet-large (116 M)",
            "figures": "PSNR/SSIM ClearView reports for NAFNet Mid: SPA-Data 41.77/0.986, "
            "RealRain-1k-H 38.68/0.980, RealRain-1k-L 40.64/0.986 (Large: 41.99, 39.34, "
            "41.17)",
        },
    ),
    "esdnet": Layout(
        name="esdnet",
        architecture="esdnet",
        detect=lambda s: True,
        rename=lambda k: k,
        infer=_esdnet_infer,
        card=_ESDNET_CARD,
    ),
}
ARCHITECTURES = ("esdnet", "esdnet-l", "nafnet")


def layout_for(architecture: str, state: State) -> Layout:
    """The layout row for `architecture` that recognises `state`."""
    family = "esdnet" if architecture.startswith("esdnet") else architecture
    rows = [r for r in LAYOUTS.values() if r.architecture == family and r.detect(state)]
    if not rows:
        raise TorchImportError(f"--arch: no PyTorch layout for {architecture!r}")
    return rows[0]


# --------------------------------------------------------------------------- import


def parse_args_json(text: str | None) -> dict[str, Any]:
    """`--args` JSON (an object of constructor arguments), or {}."""
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TorchImportError(f"--args: not JSON ({exc.msg} at {exc.pos})") from None
    if not isinstance(value, dict):
        raise TorchImportError(f"--args: expected a JSON object, got {text!r}")
    return value


def convert_state(
    state: State, architecture: str, args: dict[str, Any], source: str
) -> tuple[torch.nn.Module, dict[str, Any], Layout]:
    """Our module for `architecture` filled from `state`; its arguments and the layout."""
    from clearsight.models.registry import build_model, get_spec

    if architecture not in ARCHITECTURES:
        raise TorchImportError(
            f"--arch: {architecture!r} has no PyTorch importer; "
            f"supported: {', '.join(ARCHITECTURES)}"
        )
    layout = layout_for(architecture, state)
    mapped = {layout.rename(k): v for k, v in state.items()}
    inferred = layout.infer(mapped, source)
    if architecture.startswith("esdnet"):
        sam = inferred["sam_number"]
        wanted = get_spec(architecture).default_args()["sam_number"]
        if sam != wanted and "sam_number" not in args:
            other = {1: "esdnet", 2: "esdnet-l"}.get(sam, f"esdnet with sam_number {sam}")
            raise TorchImportError(
                f"{source}: has {sam} SAM block(s) per level, {architecture} has {wanted}; "
                f"this is {other} (--arch {other.split()[0]})"
            )
    arch_args = {**inferred, **args}
    spec = get_spec(architecture)
    problems = spec.bound_violations(arch_args)
    if problems:
        raise TorchImportError(f"{source}: {'; '.join(problems)}")
    model = build_model(architecture, **arch_args)
    fit = misfit(model, mapped, f"{architecture} wants")
    if fit:
        parts = []
        if fit.missing:
            parts.append(f"missing {', '.join(fit.missing[:5])}")
        if fit.extra:
            parts.append(f"not mapped {', '.join(fit.extra[:5])}")
        if fit.wrong:
            parts.append(f"shape {'; '.join(fit.wrong[:3])}")
        raise TorchImportError(
            f"{source}: does not fit {architecture} {arch_args} ({layout.name} layout): "
            + " | ".join(parts)
        )
    return load_fitted(model, mapped), arch_args, layout


def import_torch(
    weights: str | os.PathLike[str],
    architecture: str,
    out: str | os.PathLike[str],
    *,
    args: dict[str, Any] | None = None,
    name: str | None = None,
) -> ImportResult:
    """Read `weights` (a path or `hf://OWNER/REPO/FILE[@REV]`) as `architecture` and save
    an artifact with a model card stub at `out`."""
    from clearsight.artifact import make_config, save_artifact
    from clearsight.hub import download_file, is_hub_ref

    source = str(weights)
    path = download_file(source) if is_hub_ref(source) else Path(weights)
    state, wrapper = read_checkpoint(path, source)
    model, arch_args, layout = convert_state(state, architecture, dict(args or {}), source)
    provenance = {
        "imported_from": {
            "format": "pytorch checkpoint (weights only)",
            "file": source if is_hub_ref(source) else path.name,
            "sha256": hashlib.sha256(path.read_bytes()).hexdigest(),
            "layout": layout.name,
            "wrapper_key": wrapper,
        },
        "converter": "clearsight import torch (clearsight.convert.torch_import)",
        "source": layout.card,
        "figures_measured_here": False,
    }
    config = make_config(model, architecture, arch_args, name=name, provenance=provenance)
    saved = save_artifact(model, out, config)
    if saved.is_dir():
        write_card(saved / "MODEL_CARD.md", architecture, arch_args, layout, source)
    return ImportResult(saved, architecture, arch_args, len(state), [])


def write_card(
    path: Path, architecture: str, arch_args: dict[str, Any], layout: Layout, source: str
) -> None:
    """A model card stub: what, where from, licence, the authors' figures (not measured)."""
    card = layout.card
    text = f"""# {path.parent.name}

**What:** {card["what"]}, architecture `{architecture}` {json.dumps(arch_args)}.

**Not trained here.** Imported by `clearsight import torch {source} --arch {architecture}`
({layout.name} layout, tensors unchanged; sha256 in the config's `provenance`).

**Source:** {card["repository"]}. Published: {card["published"]}.

**Licence:** {card["licence"]}.

**Figures:** {card["figures"]}. These are the authors' published numbers, not measured by
clearsight; check the import with `clearsight eval` on the data they evaluated on (see the
documentation's model pages).
"""
    path.write_text(text, encoding="utf-8")
