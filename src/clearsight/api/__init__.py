"""The Python API behind `import clearsight`: one function per thing the CLI does.

Each CLI command parses its arguments, calls one function here and prints the result, so
everything the command line can do, Python can do too; the docstrings here are the
reference. The functions live in small modules by subject (`models`, `runs`, `scoring`,
`train`, `deploy`, `compress`, `data`, `serve`), all of which import only the standard
library at module level, so `import clearsight.api` stays fast; the classes (`Restorer`,
`Detector`, ...) and the engine's constants load on first use (PEP 562).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from clearsight.api.compress import (
    Quantized,
    change_input_size,
    prune,
    prune_report_path,
    quantize,
)
from clearsight.api.data import (
    check_data,
    synth_coco,
    synth_moire,
    synth_moire_video,
    synth_rain,
    synth_rain_video,
)
from clearsight.api.deploy import (
    Export,
    benchmark,
    export,
    export_onnx,
    export_paddle,
    import_paddle,
    import_torch,
    parse_import_sets,
    profile,
    profile_table,
)
from clearsight.api.models import (
    audit,
    check_max_pixels,
    check_output_file,
    check_output_folder,
    list_models,
    load_model,
    model_family,
    model_task,
    parse_scales,
    require_bundled,
)
from clearsight.api.runs import (
    DEFAULT_DEMOIRE,
    DEFAULT_DERAIN,
    DEFAULT_DETECT,
    ENGINES,
    check_engine,
    detect_files,
    restore_files,
)
from clearsight.api.scoring import (
    astar_score,
    compare,
    evaluate,
    evaluate_detection,
    thumbnail_collector,
    write_compare_report,
    write_detection_report,
    write_eval_report,
)
from clearsight.api.serve import DEFAULT_SERVE_MODELS, Serving, serve
from clearsight.api.train import train
from clearsight.api.video import (
    DEFAULT_VIDEO_DERAIN,
    VIDEO_SUFFIXES,
    OutputClashError,
    RunPlan,
    VideoOutput,
    detect_video,
    evaluate_video,
    is_video,
    plan_fixed_outputs,
    plan_run,
    restore_video,
    run_videos,
    split_media,
)
from clearsight.defaults import DEFAULT_STAGE_THRESHOLD
from clearsight.families import Family

# name -> "module:attribute", imported on first use (they bring torch or the engines)
_LAZY: dict[str, str] = {
    "Restorer": "clearsight.engine.inference:Restorer",
    "InferenceOptions": "clearsight.engine.inference:InferenceOptions",
    "Detector": "clearsight.engine.detector:Detector",
    "Pipeline": "clearsight.engine.pipeline:Pipeline",
    "check_detector_options": "clearsight.engine.detector:check_detector_options",
    "RestoredFile": "clearsight.engine.restore_files:RestoredFile",
    "RestoreRun": "clearsight.engine.restore_files:RestoreRun",
    "FailuresCsvError": "clearsight.runtime.failures:FailuresCsvError",
    "EvalResult": "clearsight.engine.evaluate:EvalResult",
    "Comparison": "clearsight.engine.compare:Comparison",
    "progress_bar": "clearsight.progress:progress_bar",
    "OVERFIT_MARGIN": "clearsight.engine.restore_train:OVERFIT_MARGIN",
    "OVERFIT_AP": "clearsight.engine.detect_train:OVERFIT_AP",
    "check_video_options": "clearsight.video.options:check_video_options",
    "check_output_containers": "clearsight.video.options:check_output_containers",
    "check_artifact_target": "clearsight.artifact:check_artifact_target",
    "check_not_input": "clearsight.out_paths:check_not_input",
    "player_paths": "clearsight.report.video:player_paths",
    "prefer_sleeping_threads": "clearsight.runtime.threads:prefer_sleeping_threads",
}

if TYPE_CHECKING:
    from clearsight.artifact import check_artifact_target
    from clearsight.engine.compare import Comparison
    from clearsight.engine.detect_train import OVERFIT_AP
    from clearsight.engine.detector import Detector, check_detector_options
    from clearsight.engine.evaluate import EvalResult
    from clearsight.engine.inference import InferenceOptions, Restorer
    from clearsight.engine.pipeline import Pipeline
    from clearsight.engine.restore_files import RestoredFile, RestoreRun
    from clearsight.engine.restore_train import OVERFIT_MARGIN
    from clearsight.out_paths import check_not_input
    from clearsight.progress import progress_bar
    from clearsight.report.video import player_paths
    from clearsight.runtime.failures import FailuresCsvError
    from clearsight.runtime.threads import prefer_sleeping_threads
    from clearsight.video.options import check_output_containers, check_video_options

__all__ = [
    "DEFAULT_DEMOIRE",
    "DEFAULT_DERAIN",
    "DEFAULT_DETECT",
    "DEFAULT_SERVE_MODELS",
    "DEFAULT_STAGE_THRESHOLD",
    "DEFAULT_VIDEO_DERAIN",
    "ENGINES",
    "OVERFIT_AP",
    "OVERFIT_MARGIN",
    "Comparison",
    "Detector",
    "EvalResult",
    "Export",
    "FailuresCsvError",
    "Family",
    "InferenceOptions",
    "Pipeline",
    "OutputClashError",
    "Quantized",
    "RestoreRun",
    "RestoredFile",
    "Restorer",
    "RunPlan",
    "Serving",
    "VIDEO_SUFFIXES",
    "VideoOutput",
    "astar_score",
    "audit",
    "benchmark",
    "change_input_size",
    "check_artifact_target",
    "check_data",
    "check_detector_options",
    "check_engine",
    "check_max_pixels",
    "check_not_input",
    "check_output_containers",
    "check_output_file",
    "check_output_folder",
    "check_video_options",
    "compare",
    "detect_files",
    "detect_video",
    "evaluate",
    "evaluate_detection",
    "evaluate_video",
    "export",
    "export_onnx",
    "export_paddle",
    "import_paddle",
    "import_torch",
    "is_video",
    "list_models",
    "load_model",
    "model_family",
    "model_task",
    "parse_import_sets",
    "parse_scales",
    "plan_fixed_outputs",
    "player_paths",
    "plan_run",
    "profile",
    "profile_table",
    "prefer_sleeping_threads",
    "progress_bar",
    "prune",
    "prune_report_path",
    "quantize",
    "require_bundled",
    "restore_files",
    "restore_video",
    "run_videos",
    "serve",
    "split_media",
    "synth_coco",
    "synth_moire",
    "synth_moire_video",
    "synth_rain",
    "synth_rain_video",
    "thumbnail_collector",
    "train",
    "write_compare_report",
    "write_detection_report",
    "write_eval_report",
]


def __getattr__(name: str) -> Any:
    target = _LAZY.get(name)
    if target is None:
        raise AttributeError(f"module 'clearsight.api' has no attribute {name!r}")
    module, _, attr = target.partition(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
