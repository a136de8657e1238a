"""`clearsight import paddle`: a Paddle `.pdparams` state dict into a clearsight artifact.

The file is read by `paddle_pickle` (no Paddle needed, nothing in the pickle runs); each
clearsight module's weights come from the Paddle layer its architecture's table names
(`paddle_maps`), converted where Paddle's layout differs (Linear weights transposed, batch
norm `_mean`/`_variance` folded into the conv, the MBCNN baseline's bandpass layout); every
tensor's shape is checked. All problems (missing names, names nothing maps, wrong shapes)
are collected and raised in one error.

Two mistakes of the Paddle demoiré baseline (docs/architecture.md §6) leave traces in its
weights, and the import names them as `findings` stored in the artifact's provenance, which
`clearsight audit` reports under the check each belongs to:

- the bandpass kernel overwritten in forward (`self.kernel = self.kernel * self.it_weights`):
  the saved kernel is no longer the inverse DCT but the DCT times the weights of every past
  forward. The Paddle model's next forward uses `saved kernel * it_weights`, so that product
  is imported (it is still the DCT scaled per frequency): the imported model computes what
  the Paddle model computes, and the finding goes to `forward purity`.
- a global block lost to a reused attribute name (`_t1_global_block` twice): one block's
  weights are missing and the Paddle model runs the other one at both sites. Refused unless
  `--set lost_blocks=share`, which imports that block into both sites (the Paddle model's
  function); the finding goes to `structure`.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from clearsight.convert.paddle_maps import TABLES, Site
from clearsight.convert.paddle_pickle import read_pdparams
from clearsight.errors import ClearsightError

# Import options given with --set (everything else is an architecture argument).
OPTION_DEFAULTS: dict[str, Any] = {"bn_eps": 1e-5, "lost_blocks": "refuse"}
_BN_PARTS = ("weight", "bias", "_mean", "_variance")
# Relative tolerance for "the saved bandpass kernel is the DCT scaled per frequency".
_BANDPASS_RTOL = 1e-3


class PaddleImportError(ClearsightError):
    """The state dict does not fit the architecture (lists every problem)."""


@dataclass
class ImportResult:
    path: Path
    architecture: str
    arch_args: dict[str, Any]
    tensors: int
    findings: list[dict[str, str]] = field(default_factory=list)


def parse_sets(items: list[str] | None) -> dict[str, Any]:
    """`key=value` strings -> dict; values parse as JSON (numbers, true/false) else strings."""
    out: dict[str, Any] = {}
    for item in items or []:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ClearsightError(f"--set: expected key=value, got {item!r}")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out


def _split_sets(architecture: str, sets: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    from clearsight.models.registry import get_spec

    spec = get_spec(architecture)
    options = {**OPTION_DEFAULTS, **{k: v for k, v in sets.items() if k in OPTION_DEFAULTS}}
    arch_args = {k: v for k, v in sets.items() if k not in OPTION_DEFAULTS}
    known = set(spec.default_args())
    unknown = sorted(set(arch_args) - known)
    if unknown:
        raise ClearsightError(
            f"--set: unknown key(s) {', '.join(unknown)} for {architecture} (architecture "
            f"arguments: {', '.join(sorted(known)) or 'none'}; import options: "
            f"{', '.join(OPTION_DEFAULTS)})"
        )
    problems = spec.bound_violations(arch_args)
    if problems:
        raise ClearsightError(f"--set: {'; '.join(problems)}")
    if options["lost_blocks"] not in ("refuse", "share"):
        raise ClearsightError("--set lost_blocks: 'refuse' or 'share'")
    if not isinstance(options["bn_eps"], int | float) or not options["bn_eps"] > 0:
        raise ClearsightError(f"--set bn_eps: a number > 0, got {options['bn_eps']!r}")
    return {**spec.default_args(), **arch_args}, options


class _Converter:
    """Fills a state dict from Paddle arrays, recording every problem instead of stopping."""

    def __init__(self, arrays: dict[str, np.ndarray], expected: dict[str, torch.Size]) -> None:
        self.arrays = arrays
        self.expected = expected
        self.used: set[str] = set()
        self.missing: list[str] = []
        self.shapes: list[str] = []
        self.state: dict[str, torch.Tensor] = {}
        self.findings: list[dict[str, str]] = []

    def take(self, name: str) -> np.ndarray | None:
        if name not in self.arrays:
            self.missing.append(name)
            return None
        self.used.add(name)
        return np.asarray(self.arrays[name], dtype=np.float32)

    def put(self, target: str, value: np.ndarray, source: str) -> None:
        want = tuple(self.expected[target])
        if tuple(value.shape) != want:
            self.shapes.append(f"{source} {list(value.shape)} -> {target} needs {list(want)}")
            return
        self.state[target] = torch.from_numpy(np.ascontiguousarray(value, dtype=np.float32))

    def site(self, s: Site, options: dict[str, Any]) -> None:
        t, p = s.target, s.source
        if s.kind in ("conv", "linear"):
            w = self.take(f"{p}.weight")
            b = self.take(f"{p}.bias") if f"{t}.bias" in self.expected else None
            if w is not None:
                if s.kind == "linear":
                    w = w.T  # Paddle's Linear stores [in, out]
                self.put(f"{t}.weight", w, f"{p}.weight")
            if b is not None:
                self.put(f"{t}.bias", b, f"{p}.bias")
        elif s.kind == "conv_bn":
            self._conv_bn(s, float(options["bn_eps"]))
        elif s.kind == "scale":
            v = self.take(f"{p}.scale")
            if v is not None:
                self.put(f"{t}.scale", v.reshape(-1), f"{p}.scale")
        elif s.kind == "bandpass":
            self._bandpass(s)

    def _conv_bn(self, s: Site, eps: float) -> None:
        p = s.source
        w = self.take(f"{p}.{s.conv}.weight")
        bias = self.arrays.get(f"{p}.{s.conv}.bias")
        if bias is not None:
            self.used.add(f"{p}.{s.conv}.bias")
        bn = [self.take(f"{p}.{s.bn}.{part}") for part in _BN_PARTS]
        if w is None or any(v is None for v in bn):
            return
        gamma, beta, mean, var = bn  # type: ignore[misc]
        if not gamma.shape == beta.shape == mean.shape == var.shape == (w.shape[0],):
            self.shapes.append(
                f"{p}.{s.bn}: batch norm of {[list(v.shape) for v in bn]} for a conv with "
                f"{w.shape[0]} outputs"
            )
            return
        # fold in float64: y = gamma * (conv(x) + b - mean) / sqrt(var + eps) + beta
        scale = gamma.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
        b0 = np.zeros_like(mean, dtype=np.float64) if bias is None else bias.astype(np.float64)
        self.put(f"{s.target}.weight", w * scale[:, None, None, None], f"{p}.{s.conv}.weight")
        self.put(f"{s.target}.bias", (b0 - mean) * scale + beta, f"{p}.{s.bn}")

    def _bandpass(self, s: Site) -> None:
        from clearsight.models.mbcnn import BANDPASS_CHANNELS, idct_kernel

        p, t = s.source, s.target
        w = self.take(f"{p}.it_weights")
        if w is None:
            return
        if w.size != BANDPASS_CHANNELS:
            self.shapes.append(f"{p}.it_weights {list(w.shape)} -> {t}.weight needs [64]")
            return
        w = w.reshape(-1).astype(np.float64)
        idct = idct_kernel()[:, :, 0, 0].double().numpy()  # [out, in]
        if f"{p}.kernel" in self.arrays:
            self.used.add(f"{p}.kernel")
            k = np.asarray(self.arrays[f"{p}.kernel"], dtype=np.float64)
            if k.size != BANDPASS_CHANNELS**2:
                self.shapes.append(f"{p}.kernel {list(k.shape)} -> {t} needs [1, 1, 64, 64]")
                return
            k = k.reshape(BANDPASS_CHANNELS, BANDPASS_CHANNELS).T  # Keras [in, out] -> [out, in]
            # the saved kernel is the DCT times a per-frequency factor (1 when never overwritten)
            factor = (k * idct).sum(0) / (idct * idct).sum(0)
            rebuilt = idct * factor[None, :]
            err = np.abs(k - rebuilt).max() / max(np.abs(k).max(), 1e-12)
            if err > _BANDPASS_RTOL:
                self.shapes.append(
                    f"{p}.kernel is not the inverse DCT scaled per frequency (relative error "
                    f"{err:.2g}): not MBCNN's bandpass"
                )
                return
            if np.abs(factor - 1).max() > _BANDPASS_RTOL:
                self.findings.append(
                    {
                        "check": "forward purity",
                        "detail": (
                            f"{p}.kernel was overwritten in forward (saved as the inverse DCT "
                            f"times factors {factor.min():.3g}..{factor.max():.3g}: "
                            "`self.kernel = self.kernel * it_weights`); imported as the "
                            "product the Paddle model's next forward uses"
                        ),
                    }
                )
            w = w * factor
        if (w < 0).any():
            self.findings.append(
                {
                    "check": "structure",
                    "detail": f"{p}.it_weights has {int((w < 0).sum())} negative values; "
                    "MBCNN keeps them >= 0 (Keras NonNeg) and the import clips them",
                }
            )
            w = np.maximum(w, 0)
        self.put(f"{t}.weight", w, f"{p}.it_weights")


def _share_lost_blocks(arrays: dict[str, np.ndarray], sites: list[Site]) -> list[str]:
    """Copy `X.*` to `X1.*` and `X2.*` where the table wants X1/X2 and the dict has only X."""
    wanted = {re.sub(r"\..*$", "", s.source) for s in sites}
    lost = []
    for base in sorted({w[:-1] for w in wanted if re.search(r"_global_block[12]$", w)}):
        one, two = f"{base}1", f"{base}2"
        has = {n for n in arrays if n.startswith(base + ".")}
        if has and not any(n.startswith((one + ".", two + ".")) for n in arrays):
            lost.append(base)
            for n in has:
                rest = n[len(base) :]
                arrays[one + rest] = arrays[two + rest] = arrays[n]
                del arrays[n]
    return lost


def _lost_blocks(arrays: dict[str, np.ndarray], sites: list[Site]) -> list[str]:
    probe = dict.fromkeys(arrays, np.zeros(0))
    return _share_lost_blocks(probe, sites)


def _check_sizes(
    arrays: dict[str, np.ndarray], architecture: str, model: nn.Module, source: str
) -> None:
    """Refuse, before any conversion copies it (to float32, float64 to fold batch norm), a
    tensor larger than every tensor of the architecture: it cannot fit anywhere."""
    largest = max(v.numel() for v in model.state_dict().values())
    big = [f"{k} {list(a.shape)}" for k, a in arrays.items() if a.size > largest]
    if big:
        raise PaddleImportError(
            f"{source}: tensor(s) larger than any {architecture} tensor ({largest:,} values): "
            + ", ".join(big[:5])
        )


def convert_state(
    arrays: dict[str, np.ndarray],
    architecture: str,
    model: nn.Module,
    options: dict[str, Any],
    source: str,
) -> tuple[dict[str, torch.Tensor], list[dict[str, str]]]:
    """The converted state dict for `model` and the findings; raises one error listing all."""
    _check_sizes(arrays, architecture, model, source)
    sites = TABLES[architecture](model)
    arrays = dict(arrays)
    findings: list[dict[str, str]] = []
    lost = _lost_blocks(arrays, sites)
    if lost and options["lost_blocks"] == "share":
        _share_lost_blocks(arrays, sites)
        for base in lost:
            findings.append(
                {
                    "check": "structure",
                    "detail": (
                        f"{base} is one block where the architecture has {base}1 and {base}2: "
                        "a reused attribute name lost one (the Paddle model ran the other "
                        "twice); imported into both sites"
                    ),
                }
            )
    expected = {k: v.shape for k, v in model.state_dict().items()}
    conv = _Converter(arrays, expected)
    for s in sites:
        conv.site(s, options)
    unmapped = sorted(set(arrays) - conv.used)
    fixed = {n for n, _ in model.named_buffers()}  # the IDCT kernel: constructed, not loaded
    unfilled = sorted(set(expected) - set(conv.state) - fixed)
    problems = []
    if lost and options["lost_blocks"] != "share":
        problems.append(
            "lost block(s) "
            + ", ".join(f"{b} (one block where {b}1 and {b}2 belong)" for b in lost)
            + ": a reused attribute name in the Paddle model; --set lost_blocks=share imports "
            "it into both sites"
        )
    if conv.missing:
        problems.append(f"missing in the file: {', '.join(conv.missing)}")
    if unmapped:
        problems.append(f"not mapped to {architecture}: {', '.join(unmapped)}")
    if conv.shapes:
        problems.append(f"shape: {'; '.join(conv.shapes)}")
    if unfilled and not problems:
        problems.append(f"not filled: {', '.join(unfilled)}")
    if problems:
        raise PaddleImportError(f"{source}: does not fit {architecture}: " + " | ".join(problems))
    return conv.state, findings + conv.findings


def import_paddle(
    weights: str | os.PathLike[str],
    architecture: str,
    out: str | os.PathLike[str],
    *,
    sets: dict[str, Any] | None = None,
    name: str | None = None,
) -> ImportResult:
    """Read `weights` (.pdparams) as `architecture` and save an artifact at `out`."""
    from clearsight.artifact import make_config, save_artifact
    from clearsight.models.registry import build_model

    if architecture not in TABLES:
        raise ClearsightError(
            f"--arch: no Paddle table for {architecture!r}; supported: {', '.join(TABLES)}"
        )
    arch_args, options = _split_sets(architecture, dict(sets or {}))
    src = Path(weights)
    arrays = read_pdparams(src)
    model = build_model(architecture, **arch_args)
    state, findings = convert_state(arrays, architecture, model, options, str(src))
    model.load_state_dict(state, strict=False)  # buffers (the IDCT kernel) stay as built
    provenance = {
        "imported_from": {
            "format": "paddle state dict (.pdparams)",
            "file": src.name,
            "sha256": hashlib.sha256(src.read_bytes()).hexdigest(),
            "options": options,
        },
        "converter": "clearsight import paddle (clearsight.convert.paddle_import)",
        "findings": findings,
    }
    config = make_config(model, architecture, arch_args, name=name, provenance=provenance)
    if getattr(model, "task", None) == "detect":
        _set_classes(config, model)
    path = save_artifact(model, out, config)
    return ImportResult(path, architecture, arch_args, len(state), findings)


def _set_classes(config: Any, model: nn.Module) -> None:
    """COCO class ids for the two COCO layouts (91 raw classes with background, or 80)."""
    from clearsight.detection.coco_classes import COCO_IDS, COCO_NAMES

    n = int(model.num_classes)  # type: ignore[arg-type]
    if n == 91:  # SSD: raw class k (1..90) is COCO id k
        from clearsight.convert.tflite_ssd import coco91_class_names

        config.class_ids, config.class_names = list(range(1, 91)), coco91_class_names()
    elif n == 80:
        config.class_ids, config.class_names = list(COCO_IDS), list(COCO_NAMES)
