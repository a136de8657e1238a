"""A clearsight model's weights under Paddle names (`.pdparams`), the import's inverse.

`python -m clearsight.convert.paddle_state MODEL OUT.pdparams` writes what `paddle.save`
writes for a state dict (a pickle of NumPy arrays, protocol 4) with the names and layouts of
the architecture's table (`paddle_maps`): Linear weights transposed, each folded conv split
back into a bias-free conv and a batch norm that is the identity up to its bias (scale 1,
mean 0, variance 1 - eps), MBCNN's bandpass in the baseline's Keras layout. A Paddle model
with those names loads it with `layer.set_state_dict(paddle.load(path))`, e.g. to fine-tune
clearsight's weights in Paddle, and `clearsight import paddle` reads it back exactly.
"""

from __future__ import annotations

import os
import pickle
import sys
from pathlib import Path

import numpy as np
from torch import nn

from clearsight.atomic import atomic_write_bytes
from clearsight.convert.paddle_import import OPTION_DEFAULTS
from clearsight.convert.paddle_maps import TABLES, Site
from clearsight.errors import ClearsightError


def _site_arrays(s: Site, mod: nn.Module, eps: float) -> dict[str, np.ndarray]:
    p = s.source
    if s.kind == "scale":
        return {f"{p}.scale": mod.scale.detach().cpu().numpy().astype(np.float32)}
    w = mod.weight.detach().cpu().numpy().astype(np.float32)
    bias = getattr(mod, "bias", None)
    b = None if bias is None else bias.detach().cpu().numpy().astype(np.float32)
    if s.kind == "conv":
        return {f"{p}.weight": w} | ({} if b is None else {f"{p}.bias": b})
    if s.kind == "linear":
        return {f"{p}.weight": np.ascontiguousarray(w.T)} | (
            {f"{p}.bias": b} if b is not None else {}
        )
    if s.kind == "conv_bn":
        n = w.shape[0]
        return {
            f"{p}.{s.conv}.weight": w,
            f"{p}.{s.bn}.weight": np.ones(n, np.float32),
            f"{p}.{s.bn}.bias": np.zeros(n, np.float32) if b is None else b,
            f"{p}.{s.bn}._mean": np.zeros(n, np.float32),
            f"{p}.{s.bn}._variance": np.full(n, 1.0 - eps, np.float32),
        }
    if s.kind == "bandpass":
        kernel = mod.kernel.detach().cpu().numpy()[:, :, 0, 0]  # [out, in]
        return {
            f"{p}.kernel": np.ascontiguousarray(kernel.T.reshape(1, 1, 64, 64), np.float32),
            f"{p}.it_weights": np.maximum(w, 0).reshape(1, 1, 64, 1),
        }
    raise ClearsightError(f"no Paddle layout for {s.kind!r}")


def paddle_state_dict(
    model: nn.Module, architecture: str, eps: float = OPTION_DEFAULTS["bn_eps"]
) -> dict[str, np.ndarray]:
    """`model`'s weights under the Paddle names of `architecture`'s table."""
    if architecture not in TABLES:
        raise ClearsightError(
            f"no Paddle table for {architecture!r}; supported: {', '.join(TABLES)}"
        )
    modules = dict(model.named_modules())
    out: dict[str, np.ndarray] = {}
    for s in TABLES[architecture](model):
        out.update(_site_arrays(s, modules[s.target], eps))
    return out


def save_pdparams(model_ref: str, out: str | os.PathLike[str]) -> Path:
    """Write the model `model_ref` (any `load_model` reference) as a `.pdparams` file."""
    from clearsight.zoo import resolve_model

    loaded = resolve_model(model_ref)
    state = paddle_state_dict(loaded.model, loaded.config.architecture)
    target = Path(out)
    atomic_write_bytes(target, pickle.dumps(state, protocol=4))
    return target


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit("usage: python -m clearsight.convert.paddle_state MODEL OUT.pdparams")
    print(save_pdparams(sys.argv[1], sys.argv[2]))
