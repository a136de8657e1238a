"""Fitting a mapped state dict into a freshly built module: what is missing, left over or of
the wrong shape (for one error naming them all), then a strict load in the module's dtypes.
Shared by the importers of released weights (`torch_import`, `s2vd`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

import torch
from torch import nn

M = TypeVar("M", bound=nn.Module)


@dataclass(frozen=True)
class Misfit:
    """Names the module wants but the mapped state lacks, names it holds that the module
    has no place for, and `name is [shape], <theirs> [shape]` lines."""

    missing: list[str]
    extra: list[str]
    wrong: list[str]

    def __bool__(self) -> bool:
        return bool(self.missing or self.extra or self.wrong)


def misfit(model: nn.Module, mapped: dict[str, torch.Tensor], wants: str) -> Misfit:
    """How `mapped` fails to fit `model`; `wants` labels the module's shape in `wrong`
    ("ours", "nafnet wants")."""
    ours = model.state_dict()
    return Misfit(
        missing=sorted(set(ours) - set(mapped)),
        extra=sorted(set(mapped) - set(ours)),
        wrong=[
            f"{k} is {list(mapped[k].shape)}, {wants} {list(ours[k].shape)}"
            for k in sorted(set(ours) & set(mapped))
            if mapped[k].shape != ours[k].shape
        ],
    )


def load_fitted(model: M, mapped: dict[str, torch.Tensor]) -> M:
    """`model` in eval mode holding `mapped` (checked by `misfit`), cast to its dtypes."""
    ours = model.state_dict()
    model.load_state_dict({k: v.to(ours[k].dtype) for k, v in mapped.items()}, strict=True)
    return model.eval()
