"""S2VD's released derainer weights (`model_states/derainer_rho05.pt`) into a clearsight
artifact (`clearsight.models.s2vd`).

The file is a plain PyTorch state dict (an OrderedDict of tensors, saved on a GPU), so it is
read with `torch.load(weights_only=True, map_location="cpu")`: PyTorch's restricted
unpickler, which rebuilds tensors and containers and refuses any other object, so nothing in
the file can run code. The official names map one to one onto ours (`_RULES`); the widths
(features, residual blocks) are read from the shapes. Conversion refuses unless every
official tensor is mapped, every tensor of our module is filled and every shape agrees.

    python -m clearsight.convert.s2vd derainer_rho05.pt -o OUT_DIR
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import sys
from pathlib import Path

import torch

from clearsight.convert.state_fit import load_fitted, misfit
from clearsight.errors import ClearsightError
from clearsight.models.s2vd import S2VD

SOURCE = {
    "repository": "zsyOAOA/S2VD",
    "commit": "e6c09e06",
    "path": "model_states/derainer_rho05.pt",
    "licence": "MIT (Zongsheng Yue)",
}

# official name prefix -> ours (`body.{blocks}` / `body.{blocks+2}` are the output BN / conv)
_RULES: list[tuple[str, str]] = [
    (r"head\.0\.conv\.", "in_conv1."),
    (r"head\.2\.conv\.", "in_conv2."),
    (r"body\.(\d+)\.res\.0\.", r"blocks.\1.norm1."),
    (r"body\.(\d+)\.res\.2\.conv\.", r"blocks.\1.conv1."),
    (r"body\.(\d+)\.res\.3\.", r"blocks.\1.norm2."),
    (r"body\.(\d+)\.res\.5\.conv\.", r"blocks.\1.conv2."),
    (r"tail\.0\.conv\.", "refine1."),
    (r"tail\.2\.conv\.", "refine2."),
    (r"tail\.4\.conv\.", "refine3."),
]


class ConversionError(ClearsightError):
    """The weights file does not fit the S2VD module (names what is wrong)."""


def read_state(path: str | os.PathLike[str]) -> dict[str, torch.Tensor]:
    """The official state dict, through PyTorch's restricted (weights-only) unpickler."""
    try:
        state = torch.load(str(path), weights_only=True, map_location="cpu")
    except FileNotFoundError:
        raise ConversionError(f"{path}: file not found") from None
    except Exception as exc:  # noqa: BLE001 - torch raises many types for a bad/unsafe file
        msg = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ConversionError(f"{path}: not a weights-only PyTorch state dict ({msg})") from None
    if not isinstance(state, dict) or not all(
        isinstance(k, str) and isinstance(v, torch.Tensor) for k, v in state.items()
    ):
        raise ConversionError(f"{path}: expected a state dict of named tensors")
    return dict(state)


def official_widths(state: dict[str, torch.Tensor], source: str = "weights") -> dict[str, int]:
    """`channels` and `blocks` of the network the official state dict describes."""
    if "head.0.conv.weight" not in state:
        raise ConversionError(f"{source}: no head.0.conv.weight; not an S2VD DerainNet")
    blocks = {int(m.group(1)) for k in state if (m := re.match(r"body\.(\d+)\.res\.", k))}
    if not blocks or blocks != set(range(len(blocks))):
        raise ConversionError(f"{source}: residual blocks {sorted(blocks)} are not 0..n-1")
    return {"channels": int(state["head.0.conv.weight"].shape[0]), "blocks": len(blocks)}


def map_names(state: dict[str, torch.Tensor], blocks: int) -> dict[str, torch.Tensor]:
    """The official tensors under our names; unknown official names are an error."""
    rules = [
        *_RULES,
        (rf"body\.{blocks}\.", "out_norm."),
        (rf"body\.{blocks + 2}\.conv\.", "out_conv."),
    ]
    out: dict[str, torch.Tensor] = {}
    unmapped = []
    for key, tensor in state.items():
        for pattern, repl in rules:
            if re.match(pattern, key):
                out[re.sub("^" + pattern, repl, key)] = tensor
                break
        else:
            unmapped.append(key)
    if unmapped:
        raise ConversionError(f"official tensors with no place in our module: {unmapped[:5]}")
    return out


def convert_s2vd(path: str | os.PathLike[str]) -> tuple[S2VD, dict[str, int]]:
    """Our S2VD module filled from the official weights file, and its constructor args."""
    state = read_state(path)
    args = official_widths(state, str(path))
    model = S2VD(**args)
    mapped = map_names(state, args["blocks"])
    fit = misfit(model, mapped, "ours")
    if fit:
        raise ConversionError(
            f"{path}: weights do not fit S2VD{args}: missing {fit.missing[:5]}, unexpected "
            f"{fit.extra[:5]}, shape mismatch {fit.wrong[:3]}"
        )
    return load_fitted(model, mapped), args


def save_s2vd_artifact(
    path: str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    name: str = "video-derain",
    extra_provenance: dict[str, object] | None = None,
) -> Path:
    """Convert the official weights at `path` and save them as an artifact at `out`."""
    from clearsight.artifact import make_config, save_artifact

    model, args = convert_s2vd(path)
    provenance: dict[str, object] = {
        "converted_from": {
            **SOURCE,
            "sha256": hashlib.sha256(Path(path).read_bytes()).hexdigest(),
        },
        "converter": "clearsight.convert.s2vd (names mapped one to one, tensors unchanged)",
        "trained_on": "NTURain: synthetic training clips (labelled) and real rainy clips "
        "(unlabelled), S2VD's rho 0.5 release; not trained by us",
    }
    provenance.update(extra_provenance or {})
    config = make_config(model, "s2vd", args, name=name, provenance=provenance)
    return save_artifact(model, out, config)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m clearsight.convert.s2vd",
        description="Convert S2VD's derainer_rho05.pt into a clearsight artifact.",
    )
    parser.add_argument("weights", help="the official model_states/derainer_rho05.pt")
    parser.add_argument("-o", "--out", required=True, help="artifact folder (or .safetensors)")
    parser.add_argument("--name", default="video-derain", help="the artifact's name")
    ns = parser.parse_args(argv)
    try:
        print(save_s2vd_artifact(ns.weights, ns.out, name=ns.name))
    except ClearsightError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
