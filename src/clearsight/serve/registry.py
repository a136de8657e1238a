"""The models a server holds: loaded once at start-up, shared by every request.

Clients pick a model by the name listed at `GET /v1/models`; the name only looks up an
entry here, so nothing a client sends is ever used as a path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from clearsight.artifact import LoadedModel
from clearsight.errors import ClearsightError

RESTORE_TASKS = ("derain", "demoire")
DEFAULT_MODELS = ("default-derain", "default-demoire", "default-detect")


@dataclass
class ServedModel:
    """One loaded model and what the page and API say about it."""

    name: str
    loaded: LoadedModel
    detector: Any = None
    """A `clearsight.engine.detector.Detector` for detection models, else None."""

    @property
    def task(self) -> str:
        return self.loaded.config.task

    @property
    def is_detector(self) -> bool:
        return self.detector is not None

    def tasks(self) -> list[str]:
        """The page's tasks this model serves ("any": identity-like models do both restorations)."""
        if self.is_detector:
            return ["detect"]
        from clearsight.families import RESTORES

        restores = RESTORES.get(self.task)
        return [restores] if restores else list(RESTORE_TASKS)

    def describe(self) -> dict[str, Any]:
        cfg = self.loaded.config
        return {
            "name": self.name,
            "task": cfg.task,
            "tasks": self.tasks(),
            "architecture": cfg.architecture,
            "params": cfg.param_count,
            "kind": "detect" if self.is_detector else "restore",
        }


def served_name(ref: str) -> str:
    """What clients call a model: the reference as typed (a bundled or architecture name),
    or for a path the file's stem or the folder's name (what the user chose to call it;
    an artifact's own `name` is often just its architecture)."""
    if "/" not in ref and "\\" not in ref and not Path(ref).suffix:
        return ref
    return Path(ref).stem


def serve_model(name: str, loaded: LoadedModel, device: str = "cpu") -> ServedModel:
    """Wrap one loaded model; detection models get their `Detector` (pre- and
    postprocessing and label map) built once here."""
    if loaded.is_detector:
        from clearsight.engine.detector import Detector

        return ServedModel(name, loaded, Detector(loaded, device=device))
    from clearsight.engine.inference import Restorer

    Restorer(loaded)  # moves the weights to their inference layout once, before any request
    return ServedModel(name, loaded)


def load_models(
    models: Sequence[str] | Mapping[str, LoadedModel], device: str = "cpu"
) -> dict[str, ServedModel]:
    """Load references (bundled names, artifact paths, `.onnx` files, architecture names) or
    wrap already loaded models, keyed by the name clients use."""
    from clearsight.zoo import resolve_model

    pairs: list[tuple[str, LoadedModel]]
    if isinstance(models, Mapping):
        pairs = list(models.items())
    else:
        pairs = []
        for ref in models:
            loaded = resolve_model(ref, device=device)
            pairs.append((served_name(ref), loaded))
    out: dict[str, ServedModel] = {}
    for name, loaded in pairs:
        if name in out:
            raise ClearsightError(f"two models are both called {name!r}; serve each once")
        out[name] = serve_model(name, loaded, device)
    if not out:
        raise ClearsightError("no models to serve; give --models NAME[,NAME...]")
    return out


def restore_front(
    models: Mapping[str, ServedModel], restore: str | None, *, video: bool = False
) -> tuple[LoadedModel, bool] | None:
    """The served restoration model a detect request's `restore` field names, and whether
    it is gated ("auto": the served default-derain where rain is seen; "auto:NAME"); None
    without the field. Only served models can be named: nothing a client sends is loaded."""
    if not restore:
        return None
    from clearsight.engine.pipeline import parse_restore
    from clearsight.errors import OptionError
    from clearsight.families import Family

    name, gated = parse_restore(restore)
    front = models.get(name)
    if front is None:
        raise OptionError("restore", f"{name!r} is not served here; served: {', '.join(models)}")
    family = front.loaded.family
    if front.is_detector or (family is Family.VIDEO and not video):
        what = "videos" if family is Family.VIDEO else "detection"
        raise OptionError("restore", f"{name!r} is a {what} model, not an image restorer")
    return front.loaded, gated
