"""clearsight: compact vision models from data to a deployed, measured artifact.

    import clearsight
    restorer = clearsight.Restorer.from_pretrained("default-derain", tile=128)
    clearsight.write_image("out.png", restorer.restore_image(clearsight.read_image("in.jpg")))

Names load lazily (PEP 562): `import clearsight` stays fast and imports no torch until a
name that needs it is used.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clearsight._version import __version__

# public name -> module that defines it
_EXPORTS: dict[str, str] = {
    "load_model": "clearsight.api",
    "list_models": "clearsight.api",
    "evaluate": "clearsight.api",
    "compare": "clearsight.api",
    "train": "clearsight.api",
    "export_onnx": "clearsight.api",
    "Restorer": "clearsight.engine.inference",
    "InferenceOptions": "clearsight.engine.inference",
    "restore_files": "clearsight.engine.restore_files",
    "RestoredFile": "clearsight.engine.restore_files",
    "restore_files_ray": "clearsight.scale.ray_engine",
    "detect_files_ray": "clearsight.scale.detect_ray",
    "load_artifact": "clearsight.artifact",
    "save_artifact": "clearsight.artifact",
    "read_image": "clearsight.io",
    "write_image": "clearsight.io",
    "ClearsightError": "clearsight.errors",
    "OptionError": "clearsight.errors",
}

__all__ = [  # = ["__version__", *_EXPORTS] (tested), spelled out for type checkers and ruff
    "__version__",
    "load_model",
    "list_models",
    "evaluate",
    "compare",
    "train",
    "export_onnx",
    "Restorer",
    "InferenceOptions",
    "restore_files",
    "RestoredFile",
    "restore_files_ray",
    "detect_files_ray",
    "load_artifact",
    "save_artifact",
    "read_image",
    "write_image",
    "ClearsightError",
    "OptionError",
]

if TYPE_CHECKING:
    from clearsight.api import compare, evaluate, export_onnx, list_models, load_model, train
    from clearsight.artifact import load_artifact, save_artifact
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.engine.restore_files import RestoredFile, restore_files
    from clearsight.errors import ClearsightError, OptionError
    from clearsight.io import read_image, write_image
    from clearsight.scale.detect_ray import detect_files_ray
    from clearsight.scale.ray_engine import restore_files_ray


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'clearsight' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
