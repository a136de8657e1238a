"""Layer widths that differ from an architecture's default build (pruned models).

A structurally pruned model keeps its architecture's module tree but some convolutions,
linear layers and norms have fewer channels. The artifact stores those real widths (the
`widths` key of its config: module name -> width attributes) next to the tensor shapes it
already stores, so loading builds the default architecture, narrows exactly those modules
and fills them from safetensors: no pruning library and no original model is needed
(docs/compress.md).

Narrowing edits modules in place (their class, padding, dilation, ... stay), and only ever
narrows: a config asking for a width or a tensor larger than the default build is refused,
so an untrusted config cannot make loading allocate more than the architecture would.

Imports only torch, so `artifact.py` can use it (docs/architecture.md §1).
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import nn

WIDTH_ATTRS = (
    "in_channels",
    "out_channels",
    "groups",
    "in_features",
    "out_features",
    "num_features",
    "num_channels",
    "num_groups",
)
"""The integer attributes of torch's layers that a channel pruner changes (convolutions,
linear layers, batch/instance norms, group norm)."""

Widths = dict[str, dict[str, int]]


class WidthsError(ValueError):
    """Recorded widths that do not fit the architecture (unknown module, wider than built)."""


def module_widths(model: nn.Module) -> Widths:
    """Every module's width attributes (`WIDTH_ATTRS` it has), by module name."""
    out: Widths = {}
    for name, m in model.named_modules():
        found = {a: getattr(m, a) for a in WIDTH_ATTRS if isinstance(getattr(m, a, None), int)}
        if found:
            out[name] = found
    return out


def changed_widths(model: nn.Module, reference: nn.Module) -> Widths:
    """The width attributes of `model` that differ from `reference` (the default build),
    only the changed modules and attributes; {} for an unpruned model."""
    ref = module_widths(reference)
    out: Widths = {}
    for name, attrs in module_widths(model).items():
        diff = {a: v for a, v in attrs.items() if ref.get(name, {}).get(a) != v}
        if diff:
            out[name] = diff
    return out


def apply_widths(
    model: nn.Module, widths: Mapping[str, Mapping[str, int]], shapes: Mapping[str, list[int]]
) -> None:
    """Narrow `model` (a default build) in place to `widths`, giving every parameter and
    buffer whose recorded shape in `shapes` (state-dict name -> shape) differs an empty
    tensor of that shape, ready for `load_state_dict`.

    Raises WidthsError on an unknown module or attribute, or on a width or tensor dimension
    larger than the default build's.
    """
    modules = dict(model.named_modules())
    for name, attrs in widths.items():
        m = modules.get(name)
        if m is None:
            raise WidthsError(f"widths: the architecture has no module {name!r}")
        for attr, value in attrs.items():
            now = getattr(m, attr, None)
            if attr not in WIDTH_ATTRS or not isinstance(now, int):
                raise WidthsError(f"widths: {name!r} has no width attribute {attr!r}")
            if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= now:
                raise WidthsError(f"widths: {name}.{attr}={value!r} is not an integer in 1..{now}")
            setattr(m, attr, value)
    for key, tensor in list(model.state_dict(keep_vars=True).items()):
        want = shapes.get(key)
        if want is None or list(tensor.shape) == list(want):
            continue
        too_big = len(want) != tensor.dim() or any(
            w > h or w < 0 for w, h in zip(want, tensor.shape, strict=True)
        )
        if too_big:
            raise WidthsError(
                f"widths: {key} is {list(want)}, larger than the architecture's "
                f"{list(tensor.shape)}"
            )
        owner_name, _, attr = key.rpartition(".")
        owner = modules[owner_name]
        empty = torch.empty(want, dtype=tensor.dtype, device=tensor.device)
        if isinstance(tensor, nn.Parameter):
            setattr(owner, attr, nn.Parameter(empty, requires_grad=tensor.requires_grad))
        else:
            owner._buffers[attr] = empty  # keeps the buffer registered (and persistent)
