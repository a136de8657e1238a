"""Architectures found by name.

An explicit registry (a decorator on a builder function) rather than filename magic:
`clearsight models` lists it, artifacts store the name and constructor arguments, and
loading rebuilds the module from them without unpickling anything.

The built-in architectures register when `clearsight.models` is imported, which Python does
before it imports this module, so the registry itself imports no architecture.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from clearsight.errors import UnknownNameError
from clearsight.preprocess import PreprocessSpec


@dataclass(frozen=True)
class ModelSpec:
    """What the registry knows about one architecture name."""

    name: str
    builder: Callable[..., nn.Module]
    task: str
    description: str
    metric_preset: str
    preprocess: PreprocessSpec = field(default_factory=PreprocessSpec)
    reference_params: int | None = None
    """The parameter count of the reference implementation at the default arguments (the
    official code's figure; `clearsight audit` checks the built module against it)."""

    def default_args(self) -> dict[str, Any]:
        """Constructor arguments the builder uses when none are given."""
        sig = inspect.signature(self.builder)
        return {
            k: p.default
            for k, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty
        }


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    *,
    task: str,
    description: str,
    metric_preset: str = "rgb",
    preprocess: PreprocessSpec | None = None,
    reference_params: int | None = None,
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Register a builder function under `name` (keyword-only constructor arguments)."""

    def deco(fn: Callable[..., nn.Module]) -> Callable[..., nn.Module]:
        if name in _REGISTRY:
            raise ValueError(f"architecture {name!r} is registered twice")
        _REGISTRY[name] = ModelSpec(
            name=name,
            builder=fn,
            task=task,
            description=description,
            metric_preset=metric_preset,
            preprocess=preprocess or PreprocessSpec(),
            reference_params=reference_params,
        )
        return fn

    return deco


def unregister_model(name: str) -> None:
    """Forget architecture `name` (a test's temporary architecture; unknown names are an
    UnknownNameError)."""
    if _REGISTRY.pop(name, None) is None:
        raise UnknownNameError(f"unknown architecture {name!r}")


def get_spec(name: str) -> ModelSpec:
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise UnknownNameError(f"unknown architecture {name!r}; known: {known}") from None


def build_model(name: str, **kwargs: Any) -> nn.Module:
    """Build architecture `name` with constructor arguments `kwargs` (defaults elsewhere)."""
    spec = get_spec(name)
    try:
        return spec.builder(**kwargs)
    except TypeError as exc:
        raise UnknownNameError(f"bad arguments for architecture {name!r}: {exc}") from None


def list_specs() -> list[ModelSpec]:
    return [_REGISTRY[k] for k in sorted(_REGISTRY)]


def count_parameters(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
