"""Structured channel pruning with Torch-Pruning's dependency graph (docs/compress.md).

`prune_model` removes whole channels until the model's MACs, recounted after every step,
reach a target. Torch-Pruning traces the model once and groups every set of coupled
channels (residual adds, concatenations, depthwise convolutions, RESCAN's recurrent state
and SE gates, MBCNN's multi-scale joins, detection heads) so they go together; the layers
whose width is semantic come from the model contract (`prune_protected()`), never from a
list here. Why a library: the dependency graph of four different architectures is exactly
the part that is easy to get subtly wrong by hand.

MACs are recounted with the project's counters after each step (never scaled from the
ratio): MACs per pixel for restoration (`measure.macs.count_macs`), the contest MAdds for
detection (`measure.madds.count_madds`). The pruned model keeps its architecture's
module tree, so the saved artifact records its real widths and reloads without
Torch-Pruning (`models/widths.py`).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from clearsight.artifact import LoadedModel, ModelConfig, save_artifact
from clearsight.errors import ClearsightError, OptionError
from clearsight.models.contract import DetectionModel, RestorationModel
from clearsight.models.registry import count_parameters

IMPORTANCES = ("l1", "taylor", "group", "energy")
MAX_ROUND_SHARE = 0.5
"""At most this share of the current channels of a group goes in one round."""
MIN_SHARE = 0.02
"""The smallest share a round removes (a last round closing a tiny gap)."""
MAX_ROUNDS = 40
RESTORATION_MAC_SIZE = (64, 64)
"""Input side for restoration MACs per pixel (docs/architecture.md §5.2 counts at 64x64)."""
TRACE_SIZE = 64


class PruneError(ClearsightError):
    """A model that cannot be pruned as asked (not declared prunable, target unreachable)."""


@dataclass
class Cost:
    """What the before/after table shows for one model."""

    params: int
    macs: float
    macs_unit: str
    file_bytes: int | None = None


@dataclass
class PruneResult:
    """The pruned model, its cost before and after, and how it got there."""

    model: nn.Module = field(repr=False)
    before: Cost
    after: Cost
    target_macs: float
    importance: str
    rounds: int

    @property
    def macs_ratio(self) -> float:
        return self.after.macs / self.before.macs

    def to_dict(self) -> dict[str, Any]:
        return {
            "before": asdict(self.before),
            "after": asdict(self.after),
            "target_macs": self.target_macs,
            "macs_ratio": self.macs_ratio,
            "importance": self.importance,
            "rounds": self.rounds,
        }


def _is_detector(model: nn.Module) -> bool:
    return isinstance(model, DetectionModel)


def measure_macs(model: nn.Module) -> tuple[float, str]:
    """The model's MACs as the table reports them, recounted from the running module:
    MACs per pixel at 64x64 (restoration) or the contest MAdds in millions at the model's
    input size (detection)."""
    if _is_detector(model):
        from clearsight.measure.madds import count_madds

        return count_madds(model, tuple(model.input_size)).madds, "MAdds (M)"  # type: ignore[arg-type]
    from clearsight.measure.macs import count_macs

    with torch.no_grad():
        return count_macs(model, *RESTORATION_MAC_SIZE).per_pixel, "MACs/pixel"


def measure_cost(model: nn.Module, path: str | Path | None = None) -> Cost:
    """Parameters, recounted MACs and (when `path` exists) the artifact's size on disk."""
    macs, unit = measure_macs(model)
    return Cost(count_parameters(model), macs, unit, artifact_bytes(path))


def artifact_bytes(path: str | Path | None) -> int | None:
    """Bytes of an artifact file or folder; None when there is none on disk."""
    if path is None:
        return None
    p = Path(path)
    if p.is_file():
        return p.stat().st_size
    if p.is_dir():
        return sum(f.stat().st_size for f in p.rglob("*") if f.is_file())
    return None


def default_report_path(out: str | Path) -> Path:
    """Where the before/after JSON goes by default: OUT.prune.json beside the artifact."""
    p = Path(out)
    stem = p.stem if p.suffix == ".safetensors" else p.name
    return p.parent / f"{stem}.prune.json"


def _torch_pruning() -> Any:
    try:
        import torch_pruning
    except ImportError:
        raise PruneError(
            "pruning needs Torch-Pruning: pip install 'clearsight[compress]' "
            "(pruned artifacts load without it)"
        ) from None
    return torch_pruning


def _importance(name: str) -> Any:
    tp = _torch_pruning()

    if name == "l1":  # each layer's own filters, L1 (Li et al. 2017)
        return root_filter_l1
    if name == "group":  # L2 over every coupled layer of the group (DepGraph)
        return tp.importance.GroupMagnitudeImportance(p=2)
    if name == "taylor":  # |w * dL/dw| over the group, from `_proxy_loss`'s gradients
        return tp.importance.GroupTaylorImportance()
    raise AssertionError(name)  # check_request refused it; `energy` is made per round


def root_filter_l1(group: Any) -> torch.Tensor:
    """The L1 norm of each channel's filter in the group's root layer (the convolution or
    linear layer whose output channels the group was built from; Li et al. 2017).

    Hand-written because Torch-Pruning's `MagnitudeImportance(p=1, group_reduction="first")`
    skips a depthwise root (its pruning function is not the plain convolution's) and so
    ranks those groups, about 40% of YOLOX-Nano's and SSD's, by the first consumer's
    input-channel weights instead: a channel whose filter is all zeros was then kept while
    live ones went (tests/test_prune_exact.py)."""
    root, idxs = group[0].dep.target.module, group[0].idxs
    return root.weight.detach()[idxs].flatten(1).abs().sum(1)


def _example(model: nn.Module, seed: int) -> torch.Tensor:
    """The input the dependency graph is traced on (and Taylor's gradients taken from)."""
    gen = torch.Generator().manual_seed(seed)
    size = tuple(model.input_size) if _is_detector(model) else (TRACE_SIZE, TRACE_SIZE)
    return torch.rand(1, 3, *size, generator=gen)


def _outputs(y: Any) -> list[torch.Tensor]:
    if isinstance(y, torch.Tensor):
        return [y]
    if isinstance(y, list | tuple):
        return [t for o in y for t in _outputs(o)]
    return []


def _proxy_loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Taylor importance needs a loss: the mean squared raw output on the example, so a
    channel's score is how much it contributes to what the network produces (no labels or
    data are needed; a recovery fine-tune follows pruning anyway)."""
    return sum((t.float() ** 2).mean() for t in _outputs(model(x)))  # type: ignore[return-value]


def check_request(
    ratio: float | None, target_macs: float | None, importance: str, has_calibration: bool
) -> None:
    """Refuse a bad request before any work: exactly one of `ratio` (in (0, 1)) and a
    positive `target_macs`, a known importance, and calibration images with `energy` (which
    ranks by them) and only with it."""
    if (ratio is None) == (target_macs is None):
        raise OptionError("ratio", "give exactly one of --ratio and --target-macs")
    if ratio is not None and not 0.0 < ratio < 1.0:
        raise OptionError("ratio", f"the share of MACs to remove, in (0, 1); got {ratio}")
    if target_macs is not None and not target_macs > 0.0:
        raise OptionError("target_macs", f"the MACs to keep, > 0; got {target_macs}")
    if importance not in IMPORTANCES:
        raise OptionError(
            "importance", f"unknown {importance!r}; options: {', '.join(IMPORTANCES)}"
        )
    if (importance == "energy") != has_calibration:
        raise OptionError(
            "calibration", "give --calibration DIR with --importance energy, and only with it"
        )


def resolve_target(before_macs: float, ratio: float | None, target_macs: float | None) -> float:
    """The MACs to reach: `before * (1 - ratio)` or `target_macs` (`check_request` passed)."""
    if ratio is not None:
        return before_macs * (1.0 - ratio)
    assert target_macs is not None
    if not target_macs < before_macs:
        raise OptionError(
            "target_macs",
            f"the MACs to keep, in (0, {before_macs:.6g}) for this model; got {target_macs}",
        )
    return target_macs


def prune_model(
    model: nn.Module,
    *,
    ratio: float | None = None,
    target_macs: float | None = None,
    importance: str = "l1",
    seed: int = 0,
    source: str | Path | None = None,
    progress: Callable[[int, float], None] | None = None,
    calibration: list[torch.Tensor] | None = None,
) -> PruneResult:
    """Prune `model` in place until its recounted MACs reach the target.

    `ratio` is the share of MACs to remove (0.5 halves them); `target_macs` the MACs to keep
    (per pixel for restoration, contest MAdds in millions for detection). Exactly one is
    given. Works in rounds, each on a freshly traced dependency graph, until the recounted
    MACs are at or below the target; `progress(round, macs)` is called after each. The
    model is pruned in place (also when a PruneError stops it half-way). `energy` ranks
    and compensates with statistics of `calibration` (model inputs, `prune_energy`).
    """
    check_request(ratio, target_macs, importance, bool(calibration))
    contract = isinstance(model, RestorationModel | DetectionModel)
    protected = model.prune_protected() if contract else None
    if protected is None:
        raise PruneError(
            f"{type(model).__name__} does not declare prune_protected() in the model contract, "
            "so which widths must stay is unknown; it cannot be pruned"
        )
    model.eval()
    before = measure_cost(model, source)
    target = resolve_target(before.macs, ratio, target_macs)
    x = _example(model, seed)
    macs, rounds = before.macs, 0
    while macs > target:
        if rounds == MAX_ROUNDS:
            raise PruneError(
                f"pruning stopped at {macs:.6g} {before.macs_unit} after {rounds} rounds, "
                f"above the target {target:.6g}"
            )
        rounds += 1
        # MACs fall at most quadratically with the share of channels removed (protected
        # layers and the fixed image channels fall slower), so this share undershoots and
        # the next round closes the rest of the gap; a round that removed nothing (groups
        # too narrow for its share) is retried with a larger share once.
        share = min(max(1.0 - math.sqrt(target / macs), MIN_SHARE), MAX_ROUND_SHARE)
        new_macs = macs
        for attempt in (share, min(4 * share, MAX_ROUND_SHARE)):
            _prune_round(model, x, importance, protected, attempt, calibration)
            new_macs, _ = measure_macs(model)
            if new_macs < macs:
                break
        else:
            raise PruneError(
                f"pruning stopped at {macs:.6g} {before.macs_unit}, above the target "
                f"{target:.6g}: no unprotected channel is left to remove"
            )
        macs = new_macs
        if progress is not None:
            progress(rounds, macs)
    _check_forward(model, x)
    after = measure_cost(model)
    return PruneResult(model, before, after, target, importance, rounds)


def _prune_round(
    model: nn.Module,
    x: torch.Tensor,
    importance: str,
    protected: list[nn.Module],
    share: float,
    calibration: list[torch.Tensor] | None = None,
) -> None:
    """Remove `share` of every prunable group's channels, ranked by `importance` (one
    Torch-Pruning step on a freshly traced graph, so each round sees the current widths).
    `energy` measures the current model on `calibration` and compensates each removal."""
    tp = _torch_pruning()
    stats = None
    if importance == "energy":
        from clearsight.compress.prune_energy import collect_stats, energy_importance

        assert calibration is not None
        stats = collect_stats(model, calibration)
        imp = energy_importance(stats, root_filter_l1)
    else:
        imp = _importance(importance)

    with warnings.catch_warnings(), model.prune_tracing():
        # Torch-Pruning warns about parameters outside nn layers (MBCNN's bandpass weights
        # and scalar scales): they are scalars or sit behind protected layers.
        warnings.filterwarnings("ignore", message="Unwrapped parameters detected")
        pruner = tp.pruner.MetaPruner(
            model,
            x,
            importance=imp,
            pruning_ratio=share,
            iterative_steps=1,
            ignored_layers=list(protected),
            global_pruning=False,
        )
    if importance == "taylor":
        with torch.enable_grad():
            model.zero_grad(set_to_none=True)
            _proxy_loss(model, x).backward()
    with torch.no_grad():
        if stats is None:
            pruner.step()
        else:
            from clearsight.compress.prune_energy import compensate_and_prune

            for group in pruner.step(interactive=True):
                compensate_and_prune(group, stats)
    model.zero_grad(set_to_none=True)


def _check_forward(model: nn.Module, x: torch.Tensor) -> None:
    """The pruned model must still run (a coupling the graph missed fails here, not later)."""
    try:
        with torch.no_grad():
            model(x)
    except RuntimeError as exc:
        raise PruneError(f"the pruned {type(model).__name__} no longer runs: {exc}") from None


def pruned_config(loaded: LoadedModel, result: PruneResult) -> ModelConfig:
    """The source's config for the pruned model: same architecture, arguments, spec and
    classes, with the pruning recorded in the provenance (widths are added on save)."""
    cfg = loaded.config
    provenance = dict(cfg.provenance)
    provenance["pruned"] = {"from": loaded.source, **result.to_dict()}
    return ModelConfig(
        architecture=cfg.architecture,
        arch_args=dict(cfg.arch_args),
        task=cfg.task,
        preprocess=cfg.preprocess,
        metric_preset=cfg.metric_preset,
        provenance=provenance,
        name=f"{cfg.name or cfg.architecture}-pruned",
        class_ids=cfg.class_ids,
        class_names=cfg.class_names,
    )


def save_pruned(loaded: LoadedModel, result: PruneResult, out: str | Path) -> Path:
    """Save the pruned model as an artifact (it records its real widths) and fill in the
    result's file size from what was written."""
    path = save_artifact(result.model, out, pruned_config(loaded, result))
    result.after.file_bytes = artifact_bytes(path)
    return path
