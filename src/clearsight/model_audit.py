"""`clearsight audit`: checks that catch the field's known model bugs (docs/architecture.md §6).

Each check builds a fresh copy of the model (same seed) so that one check's damage cannot
hide or cause another's failure:

- gradient flow: after one training step on a sample batch (a simple MSE loss summed over
  every output the training forward returns) every parameter has a finite, non-zero
  gradient; the ones that do not are named.
- forward purity: a training-mode forward changes no parameter or buffer other than
  normalisation statistics (the MBCNN port's `self.kernel = self.kernel * self.weights`).
- structure: one module object registered under two names; a submodule attribute assigned
  twice while the model was built (the second block silently replaces the first: this is
  seen by recording `nn.Module.__setattr__` during construction; once built, the lost block
  leaves no trace except a parameter count below the config's or the official figure);
  parameters never used in forward (forward hooks, and autograd reachability from the loss);
  the parameter count and layer shapes against the artifact config and the registry's
  official figure.
- preprocessing: the spec is present, sane (colour order, value range, std, resize) and
  consistent with the model (3 input channels, pad multiples divide, same size out).
- two steps: two consecutive optimizer steps succeed without `retain_graph`, and the
  optimizer still holds the model's parameters afterwards.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.modules.batchnorm import _NormBase

from clearsight.artifact import ModelConfig, load_artifact, make_config
from clearsight.errors import UnknownNameError
from clearsight.models.contract import DetectionModel, as_restoration_model
from clearsight.models.registry import build_model, count_parameters, get_spec, list_specs
from clearsight.preprocess import PreprocessSpec

DEFAULT_SIZE = 32
_SHOW = 8
_NORM_STATS = ("running_mean", "running_var", "num_batches_tracked")


@dataclass
class CheckResult:
    name: str
    passed: bool
    details: str


@dataclass
class AuditReport:
    model: str
    checks: list[CheckResult] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return all(c.passed for c in self.checks)

    def failed(self) -> list[CheckResult]:
        return [c for c in self.checks if not c.passed]

    def by_name(self, name: str) -> CheckResult:
        return next(c for c in self.checks if c.name == name)


def _names(items: list[str]) -> str:
    shown = ", ".join(items[:_SHOW])
    return shown + (f" and {len(items) - _SHOW} more" if len(items) > _SHOW else "")


# --------------------------------------------------------------------------- building


@contextlib.contextmanager
def record_reassignments(events: list[str]) -> Iterator[None]:
    """Record every submodule attribute that is assigned a second, different module."""
    original = nn.Module.__setattr__

    def setattr_(self: nn.Module, name: str, value: Any) -> None:
        if isinstance(value, nn.Module):
            old = self.__dict__.get("_modules", {}).get(name)
            if old is not None and old is not value:
                events.append(
                    f"{type(self).__name__}.{name}: {type(old).__name__} replaced by "
                    f"{type(value).__name__}"
                )
        original(self, name, value)

    nn.Module.__setattr__ = setattr_  # type: ignore[method-assign]
    try:
        yield
    finally:
        nn.Module.__setattr__ = original  # type: ignore[method-assign]


def _seeded(factory: Callable[[], nn.Module], seed: int) -> nn.Module:
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return factory()


def _outputs(y: Any) -> list[torch.Tensor]:
    """Every floating tensor in what forward returned (tensor, list/tuple, dict)."""
    if isinstance(y, torch.Tensor):
        return [y] if y.is_floating_point() else []
    if isinstance(y, dict):
        y = list(y.values())
    if isinstance(y, list | tuple):
        return [t for item in y for t in _outputs(item)]
    return []


def _loss(y: Any) -> torch.Tensor:
    outs = _outputs(y)
    if not outs:
        raise RuntimeError("forward returned no floating-point tensor to put a loss on")
    gen = torch.Generator().manual_seed(1)
    total = outs[0].new_zeros(())
    for o in outs:
        target = torch.rand(o.shape, generator=gen, dtype=o.dtype).to(o.device)
        total = total + ((o - target) ** 2).mean()
    return total


def _is_detector(model: nn.Module) -> bool:
    return isinstance(model, DetectionModel)


def _sample(model: nn.Module, spec: PreprocessSpec | None, size: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(0)
    if _is_detector(model):  # a detector sees its fixed input size (anchors, grids), always
        h, w = model.input_size  # type: ignore[union-attr]
        return torch.rand(2, 3, h, w, generator=gen)
    m = max(as_restoration_model(model).pad_multiple, spec.pad_multiple if spec else 1)
    side = m * max(1, math.ceil(size / m))
    return torch.rand(2, 3, side, side, generator=gen)


def _error(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}"


# --------------------------------------------------------------------------- checks


def check_gradient_flow(model: nn.Module, x: torch.Tensor) -> CheckResult:
    model.train()
    model.zero_grad(set_to_none=True)
    _loss(model(x)).backward()
    params = [(n, p) for n, p in model.named_parameters() if p.requires_grad]
    if any(p.grad is not None and not p.grad.abs().sum() > 0 for _, p in params):
        # Residual scales initialised to zero (NAFNet's beta and gamma, layer scale) hold
        # back every gradient behind them until the first step moves them: judge the
        # gradient after one plain SGD step, as a training run would see it.
        with torch.no_grad():
            for _, p in params:
                if p.grad is not None and torch.isfinite(p.grad).all():
                    p -= 1e-2 * p.grad
        model.zero_grad(set_to_none=True)
        _loss(model(x)).backward()
    none, bad, zero = [], [], []
    for n, p in params:
        if p.grad is None:
            none.append(n)
        elif not torch.isfinite(p.grad).all():
            bad.append(n)
        elif not p.grad.abs().sum() > 0:
            zero.append(n)
    parts = []
    if none:
        parts.append(f"no gradient: {_names(none)}")
    if bad:
        parts.append(f"non-finite gradient: {_names(bad)}")
    if zero:
        parts.append(f"zero gradient: {_names(zero)}")
    if parts:
        return CheckResult("gradient flow", False, "; ".join(parts))
    return CheckResult(
        "gradient flow", True, f"all {len(params)} parameter tensors get a finite, non-zero grad"
    )


def _norm_stat_names(model: nn.Module) -> set[str]:
    names = set()
    for prefix, mod in model.named_modules():
        if isinstance(mod, _NormBase):
            names |= {f"{prefix}.{s}" if prefix else s for s in _NORM_STATS}
    return names


def _tensors(model: nn.Module) -> dict[str, tuple[int, torch.Tensor]]:
    out = {n: (id(p), p.detach().clone()) for n, p in model.named_parameters()}
    out.update({n: (id(b), b.detach().clone()) for n, b in model.named_buffers()})
    return out


def check_forward_purity(model: nn.Module, x: torch.Tensor) -> CheckResult:
    model.train()
    allowed = _norm_stat_names(model)
    before = _tensors(model)
    params_before = {n for n, _ in model.named_parameters()}
    model(x)
    after = _tensors(model)
    params_after = {n for n, _ in model.named_parameters()}
    problems = []
    gone = sorted(set(before) - set(after))
    new = sorted(set(after) - set(before))
    if gone:
        problems.append(f"removed: {_names(gone)}")
    if new:
        problems.append(f"added: {_names(new)}")
    lost = sorted(params_before - params_after - set(gone))
    if lost:
        problems.append(f"no longer parameters: {_names(lost)}")
    replaced, changed = [], []
    for n in sorted(set(before) & set(after)):
        if n in allowed:
            continue
        (id0, v0), (id1, v1) = before[n], after[n]
        if id0 != id1:
            replaced.append(n)
        elif v0.shape != v1.shape or not torch.equal(v0, v1):
            changed.append(n)
    if replaced:
        problems.append(f"replaced by a new tensor: {_names(replaced)}")
    if changed:
        problems.append(f"values changed: {_names(changed)}")
    if problems:
        return CheckResult(
            "forward purity",
            False,
            "a training forward overwrote state (compute derived tensors into locals): "
            + "; ".join(problems),
        )
    extra = f" ({len(allowed)} normalisation statistics may change)" if allowed else ""
    return CheckResult("forward purity", True, f"no parameter or buffer changed{extra}")


def _reachable_parameters(loss: torch.Tensor) -> set[int]:
    seen: set[int] = set()
    found: set[int] = set()
    stack = [loss.grad_fn]
    while stack:
        fn = stack.pop()
        if fn is None or id(fn) in seen:
            continue
        seen.add(id(fn))
        var = getattr(fn, "variable", None)
        if isinstance(var, torch.Tensor):
            found.add(id(var))
        stack.extend(f for f, _ in fn.next_functions)
    return found


def _official_count(architecture: str, arch_args: dict[str, Any]) -> int | None:
    """The registry's reference parameter count, when the default arguments are used."""
    try:
        spec = get_spec(architecture)
    except UnknownNameError:
        return None
    if arch_args and arch_args != spec.default_args():
        return None
    return spec.reference_params


def check_structure(
    model: nn.Module, x: torch.Tensor, config: ModelConfig | None, reassigned: list[str]
) -> CheckResult:
    problems: list[str] = []
    notes: list[str] = []
    # one object under several names (only modules that hold state matter)
    where: dict[int, list[str]] = {}
    for name, mod in model.named_modules(remove_duplicate=False):
        has_state = any(True for _ in mod.parameters(recurse=False)) or any(
            True for _ in mod.buffers(recurse=False)
        )
        if name and has_state:
            where.setdefault(id(mod), []).append(name)
    shared = [names for names in where.values() if len(names) > 1]
    for names in shared:
        problems.append(f"one module registered as {' and '.join(names)}")
    pwhere: dict[int, list[str]] = {}
    for name, p in model.named_parameters(remove_duplicate=False):
        pwhere.setdefault(id(p), []).append(name)
    shared_p = [n for n in pwhere.values() if len(n) > 1]
    owned_by_shared = {n for names in shared for n in names}
    for names in shared_p:
        if not any(n.rsplit(".", 1)[0] in owned_by_shared for n in names):
            problems.append(f"one parameter registered as {' and '.join(names)}")
    for event in reassigned:
        problems.append(f"submodule assigned twice while building, first one lost: {event}")
    for names in identical_modules(model):
        problems.append(
            f"{' and '.join(names)} hold identical weights (one block copied into another's "
            "place, e.g. a block lost to a reused name and filled from its twin)"
        )
    # used in forward?
    called: set[int] = set()
    hooks = [
        mod.register_forward_hook(lambda m, i, o: called.add(id(m)))
        for mod in model.modules()
        if any(True for _ in mod.parameters(recurse=False))
    ]
    try:
        model.train()
        loss = _loss(model(x))
    finally:
        for h in hooks:
            h.remove()
    reached = _reachable_parameters(loss)
    # A module whose weights are used functionally (fused gate convs, a bandpass product) is
    # not called but is used: only modules neither called nor reached are reported.
    never = [
        n
        for n, mod in model.named_modules()
        if any(True for _ in mod.parameters(recurse=False))
        and id(mod) not in called
        and not any(id(p) in reached for p in mod.parameters(recurse=False))
    ]
    if never:
        problems.append(f"modules never called in forward: {_names(never)}")
    unused = [
        n
        for n, p in model.named_parameters()
        if p.requires_grad and id(p) not in reached and n.rsplit(".", 1)[0] not in never
    ]
    if unused:
        problems.append(f"parameters the loss does not depend on: {_names(unused)}")
    # counts
    n_params = count_parameters(model)
    notes.append(f"{n_params:,} parameters")
    if config is not None:
        if config.param_count and config.param_count != n_params:
            problems.append(
                f"config says {config.param_count:,} parameters, the built module has {n_params:,}"
            )
        if config.layer_shapes:
            built = {k: list(v.shape) for k, v in model.state_dict().items()}
            missing = sorted(set(config.layer_shapes) - set(built))
            extra = sorted(set(built) - set(config.layer_shapes))
            wrong = sorted(
                k
                for k in set(built) & set(config.layer_shapes)
                if built[k] != config.layer_shapes[k]
            )
            for label, items in (("missing", missing), ("unexpected", extra), ("shape", wrong)):
                if items:
                    problems.append(f"layer shapes vs config, {label}: {_names(items)}")
        # a pruned artifact (narrowed widths) is not the official network by design
        official = None if config.widths else _official_count(config.architecture, config.arch_args)
        if config.widths:
            notes.append(f"pruned: {len(config.widths)} narrowed layers")
        if official is not None:
            if official != n_params:
                problems.append(f"official figure {official:,} parameters, built {n_params:,}")
            else:
                notes.append("matches the official figure")
    if problems:
        return CheckResult("structure", False, "; ".join(problems))
    return CheckResult(
        "structure",
        True,
        "no shared or reassigned modules, every parameter used; " + ", ".join(notes),
    )


def identical_modules(model: nn.Module) -> list[list[str]]:
    """Groups of distinct same-type modules whose parameters are all equal, outermost only.

    Trained or randomly initialised blocks never coincide; equal ones mean weights copied
    from one block into another (what importing a model that lost a block to a reused
    attribute name does). Modules whose parameters are each constant (an initial scale of
    0.1, bandpass weights of 1) are skipped: they coincide legitimately before training.
    """
    groups: list[tuple[nn.Module, list[str]]] = []
    for name, mod in model.named_modules():
        params = list(mod.parameters())
        if not name or all(p.numel() < 2 or bool((p == p.flatten()[0]).all()) for p in params):
            continue
        for first, names in groups:
            other = list(first.parameters())
            if (
                type(first) is type(mod)
                and [p.shape for p in other] == [p.shape for p in params]
                and all(torch.equal(a, b) for a, b in zip(other, params, strict=True))
            ):
                names.append(name)
                break
        else:
            groups.append((mod, [name]))
    found = [names for _, names in groups if len(names) > 1]
    tops = {n for names in found for n in names}
    return [names for names in found if not any(n.startswith(t + ".") for n in names for t in tops)]


def _traced_forward(model: nn.Module, x: torch.Tensor, trace: list[Any]) -> torch.Tensor:
    """The restored output; `trace` gets the first convolution the input reaches: [name,
    channels it takes, channels it was given]. A forward pre-hook on every Conv2d traces
    what the input actually meets, through any channel-changing operation before it (MBCNN's
    pixel unshuffle turns 3 channels into 12), instead of comparing the first convolution's
    width with the spec. `trace` is filled even when the forward then crashes."""
    names = {id(m): n for n, m in model.named_modules()}
    handles = []

    def hook(mod: nn.Module, args: tuple[Any, ...]) -> None:
        if trace or not args or not isinstance(args[0], torch.Tensor):
            return
        t = args[0]
        if t.ndim == 4:
            trace.extend([names.get(id(mod), "?"), mod.in_channels, int(t.shape[1])])

    for mod in model.modules():
        if isinstance(mod, nn.Conv2d):
            handles.append(mod.register_forward_pre_hook(hook))
    try:
        with torch.no_grad():
            y = as_restoration_model(model).final_output(x)
    finally:
        for h in handles:
            h.remove()
    return y


def check_preprocessing(
    model: nn.Module, config: ModelConfig | None, x: torch.Tensor
) -> CheckResult:
    if config is None or config.preprocess is None:
        return CheckResult("preprocessing", False, "no preprocessing spec in the model config")
    spec = config.preprocess
    problems = []
    if spec.color_order not in ("RGB", "BGR"):
        problems.append(f"colour order {spec.color_order!r} is not RGB or BGR")
    lo, hi = spec.value_range
    if not (math.isfinite(lo) and math.isfinite(hi) and lo < hi and max(abs(lo), abs(hi)) <= 65535):
        problems.append(f"value range {list(spec.value_range)} is not a sane [lo, hi]")
    if len(spec.mean) != 3 or len(spec.std) != 3:
        problems.append("mean and std need 3 values (one per input channel)")
    elif not all(math.isfinite(s) and s > 0 for s in spec.std):
        problems.append(f"std {list(spec.std)} must be finite and > 0")
    elif not all(math.isfinite(m) for m in spec.mean):
        problems.append(f"mean {list(spec.mean)} is not finite")
    if spec.resize == "fixed" and spec.size is None:
        problems.append("resize 'fixed' without a size")
    if not isinstance(spec.pad_multiple, int) or spec.pad_multiple < 1:
        problems.append(f"pad multiple {spec.pad_multiple!r} must be an int >= 1")
    else:
        own = as_restoration_model(model).pad_multiple
        a, b = max(own, spec.pad_multiple), min(own, spec.pad_multiple)
        if a % b:
            problems.append(
                f"the model pads to multiples of {own}, the spec to {spec.pad_multiple}: "
                "neither divides the other"
            )
    model.eval()
    trace: list[Any] = []
    y: torch.Tensor | None = None
    crash: Exception | None = None
    try:
        y = _traced_forward(model, x, trace)
    except Exception as exc:  # reported below, unless a cause is already named
        crash = exc
    if trace:
        name, n_in, got = trace
        if n_in != got:
            # the spec's 3 channels (or what the model made of them before this conv, e.g.
            # a pixel unshuffle's 12) do not fit the first convolution the input reaches
            fed = "the spec feeds 3" if got == 3 else f"it receives {got} from the spec's 3"
            problems.append(f"the first conv {name} takes {n_in} channels, {fed}")
    if not problems and crash is not None:
        problems.append(f"a forward on the spec's 3-channel input raised {_error(crash)}")
    if not problems and y is not None and not _is_detector(model) and y.shape != x.shape:
        problems.append(
            f"input {tuple(x.shape)} gave output {tuple(y.shape)}: a restoration "
            "model must return the size it was given"
        )
    if problems:
        return CheckResult("preprocessing", False, "; ".join(problems))
    return CheckResult(
        "preprocessing",
        True,
        f"{spec.color_order}, range {list(spec.value_range)}, pad multiple {spec.pad_multiple}; "
        + ("3 input channels" if _is_detector(model) else "3 input channels, same size out"),
    )


def check_two_steps(model: nn.Module, x: torch.Tensor) -> CheckResult:
    model.train()
    params = [p for p in model.parameters() if p.requires_grad]
    ids = {id(p) for p in params}
    opt = torch.optim.Adam(params, lr=1e-3)
    losses = []
    for step in (1, 2):
        opt.zero_grad(set_to_none=True)
        try:
            loss = _loss(model(x))
            loss.backward()
            opt.step()
        except RuntimeError as exc:
            return CheckResult("two optimizer steps", False, f"step {step} failed: {_error(exc)}")
        losses.append(float(loss.detach()))
    problems = []
    now = {n for n, p in model.named_parameters() if id(p) not in ids}
    if now:
        problems.append(
            f"parameters replaced during training (the optimizer no longer updates them): "
            f"{_names(sorted(now))}"
        )
    if not all(math.isfinite(v) for v in losses):
        problems.append(f"non-finite loss: {losses}")
    if problems:
        return CheckResult("two optimizer steps", False, "; ".join(problems))
    return CheckResult(
        "two optimizer steps", True, f"losses {losses[0]:.4g} -> {losses[1]:.4g}, no retain_graph"
    )


# --------------------------------------------------------------------------- driver


def audit_model(
    factory: Callable[[], nn.Module],
    *,
    config: ModelConfig | None = None,
    label: str = "model",
    size: int = DEFAULT_SIZE,
    seed: int = 0,
) -> AuditReport:
    """Run every check, each on a fresh model from `factory` (built under the same seed)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a tiny batch: extra threads only cost (and fight neighbours)
    try:
        return _audit_model(factory, config, label, size, seed)
    finally:
        torch.set_num_threads(threads)


def _audit_model(
    factory: Callable[[], nn.Module],
    config: ModelConfig | None,
    label: str,
    size: int,
    seed: int,
) -> AuditReport:
    report = AuditReport(model=label)
    reassigned: list[str] = []
    with record_reassignments(reassigned):
        probe = _seeded(factory, seed)
    x = _sample(probe, config.preprocess if config else None, size)

    trainable = any(p.requires_grad for p in probe.parameters())

    def run(name: str, fn: Callable[[nn.Module], CheckResult]) -> None:
        if not trainable and name in ("gradient flow", "two optimizer steps"):
            report.checks.append(CheckResult(name, True, "no trainable parameters: nothing to do"))
            return
        try:
            report.checks.append(fn(_seeded(factory, seed)))
        except Exception as exc:  # a crashing model fails the check, not the audit
            report.checks.append(CheckResult(name, False, f"raised {_error(exc)}"))

    run("gradient flow", lambda m: check_gradient_flow(m, x))
    run("forward purity", lambda m: check_forward_purity(m, x))
    run("structure", lambda m: check_structure(m, x, config, reassigned))
    run("preprocessing", lambda m: check_preprocessing(m, config, x))
    run("two optimizer steps", lambda m: check_two_steps(m, x))
    apply_findings(report, (config.provenance.get("findings") if config else None) or [])
    return report


def apply_findings(report: AuditReport, findings: list[dict[str, str]]) -> None:
    """Fail the check each recorded finding belongs to (an importer's view of the source
    model's own bugs, e.g. `clearsight import paddle`: docs/paddle.md), with its detail."""
    for f in findings:
        if not isinstance(f, dict):
            continue
        name, detail = str(f.get("check", "structure")), str(f.get("detail", ""))
        check = next((c for c in report.checks if c.name == name), None)
        if check is None:
            report.checks.append(CheckResult(name, False, f"imported weights: {detail}"))
        elif check.passed:
            check.passed = False
            check.details = f"imported weights: {detail} (the module as built: {check.details})"
        else:
            check.details = f"imported weights: {detail}; {check.details}"


def audit(ref: str, *, size: int = DEFAULT_SIZE, seed: int = 0) -> AuditReport:
    """Audit an architecture name or a saved artifact (folder or .safetensors file)."""
    if Path(ref).exists():
        loaded = load_artifact(ref)
        config = loaded.config

        def factory() -> nn.Module:
            return load_artifact(ref).model

        return audit_model(factory, config=config, label=ref, size=size, seed=seed)
    if ref not in {s.name for s in list_specs()}:
        raise UnknownNameError(
            f"unknown model {ref!r}: give an architecture name "
            f"({', '.join(s.name for s in list_specs())}) or an artifact path"
        )
    spec = get_spec(ref)

    def build() -> nn.Module:
        return build_model(ref)

    config = make_config(_seeded(build, seed), ref, spec.default_args(), name=ref)
    return audit_model(build, config=config, label=ref, size=size, seed=seed)
