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
    "export_paddle": "clearsight.api",
    "export": "clearsight.api",
    "import_paddle": "clearsight.api",
    "import_torch": "clearsight.api",
    "prune": "clearsight.api",
    "quantize": "clearsight.api",
    "detect_files": "clearsight.api",
    "evaluate_detection": "clearsight.api",
    "model_family": "clearsight.api",
    "restore_video": "clearsight.api",
    "detect_video": "clearsight.api",
    "evaluate_video": "clearsight.api",
    "Restorer": "clearsight.engine.inference",
    "InferenceOptions": "clearsight.engine.inference",
    "restore_files": "clearsight.api",
    "RestoredFile": "clearsight.engine.restore_files",
    "Detector": "clearsight.engine.detector",
    "Pipeline": "clearsight.engine.pipeline",
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
    "export_paddle",
    "export",
    "import_paddle",
    "import_torch",
    "prune",
    "quantize",
    "detect_files",
    "evaluate_detection",
    "model_family",
    "restore_video",
    "detect_video",
    "evaluate_video",
    "Restorer",
    "InferenceOptions",
    "restore_files",
    "RestoredFile",
    "Detector",
    "Pipeline",
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
    from clearsight.api import (
        compare,
        detect_files,
        detect_video,
        evaluate,
        evaluate_detection,
        evaluate_video,
        export,
        export_onnx,
        export_paddle,
        import_paddle,
        import_torch,
        list_models,
        load_model,
        model_family,
        prune,
        quantize,
        restore_files,
        restore_video,
        train,
    )
    from clearsight.artifact import load_artifact, save_artifact
    from clearsight.engine.detector import Detector
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.engine.pipeline import Pipeline
    from clearsight.engine.restore_files import RestoredFile
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
