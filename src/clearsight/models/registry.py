"""Architectures found by name.

An explicit registry (a decorator on a builder function) rather than filename magic:
`clearsight models` lists it, artifacts store the name and constructor arguments, and
loading rebuilds the module from them without unpickling anything.

The built-in architectures register when `clearsight.models` is imported, which Python does
before it imports this module, so the registry itself imports no architecture.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
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
    # Inclusive integer bounds of the constructor arguments that scale memory or time; an
    # artifact's config is checked against them before anything is built (docs/reliability.md).
    arg_bounds: Mapping[str, tuple[int, int]] = field(default_factory=dict, hash=False)

    def default_args(self) -> dict[str, Any]:
        """Constructor arguments the builder uses when none are given."""
        sig = inspect.signature(self.builder)
        return {
            k: p.default
            for k, p in sig.parameters.items()
            if p.default is not inspect.Parameter.empty
        }

    def bound_violations(self, args: Mapping[str, Any]) -> list[str]:
        """What in `args` breaks `arg_bounds`, one phrase each ("channels=1200 is ...")."""
        problems = []
        for key, (low, high) in self.arg_bounds.items():
            if key not in args:
                continue
            value = args[key]
            if isinstance(value, bool) or not isinstance(value, int):
                problems.append(f"{key}={value!r} is not an integer in {low}..{high}")
            elif not low <= value <= high:
                problems.append(f"{key}={value} is outside {low}..{high}")
        return problems


_REGISTRY: dict[str, ModelSpec] = {}


def register_model(
    name: str,
    *,
    task: str,
    description: str,
    metric_preset: str = "rgb",
    preprocess: PreprocessSpec | None = None,
    reference_params: int | None = None,
    arg_bounds: Mapping[str, tuple[int, int]] | None = None,
) -> Callable[[Callable[..., nn.Module]], Callable[..., nn.Module]]:
    """Register a builder function under `name` (keyword-only constructor arguments).

    `arg_bounds` maps integer arguments that scale memory or time to inclusive (low, high)
    bounds that an untrusted artifact config must respect.
    """

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
            arg_bounds=dict(arg_bounds or {}),
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
