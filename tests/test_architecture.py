"""The package's shape stays what docs/architecture.md says.

- Folders (and top-level modules) sit in ranked layers: an import may only point to a unit
  of a lower or equal rank, and no two units import each other (also through a chain).
  Imports inside functions count: a late import is still a dependency.
- Outside the family table (`families.py`), `runtime/` and `models/`, nothing asks which
  family a model is by comparing task strings, by `isinstance` on the ONNX Runtime
  wrappers, or by probing contract attributes with `getattr`/`hasattr`.
- The family table's references all resolve, and every registered task has a family.
- The training loop knows nothing of detection.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.test_layers import SRC, find_cycles, import_graph

PACKAGE = SRC / "clearsight"

# Lowest first. A new folder or top-level module must be given a rank here (the test says
# so), which is the moment to decide where it belongs (docs/architecture.md).
RANKS: dict[str, int] = {
    # base: no model, no I/O of models
    "_version": 0,
    "errors": 0,
    "atomic": 0,
    "cpu_features": 0,
    "defaults": 0,
    "progress": 0,
    "tiling": 0,
    "families": 0,
    "preprocess": 0,
    "out_paths": 0,
    "losses": 0,
    "io": 1,
    "hub": 1,  # hf:// references through huggingface_hub
    "models": 1,
    "metrics": 2,
    "measure": 2,
    "artifact": 2,
    "data": 3,
    "onnx_meta": 3,
    "runtime": 4,
    "output_plan": 4,  # one output plan for every command (io, runtime.failures, atomic)
    "zoo": 5,
    "detection": 6,
    "export": 7,
    "engine": 8,
    "video": 9,
    "compress": 10,
    "convert": 10,
    "report": 10,
    "model_audit": 10,
    "profile": 10,
    "profile_table": 11,
    "backend_bench": 11,
    "scale": 12,
    "serve": 12,
    "api": 13,
    "cli": 14,
    "__main__": 15,
    "clearsight": 15,  # the package's lazy names
}


def unit(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def unit_graph() -> dict[str, dict[str, list[str]]]:
    """unit -> imported unit -> the module-level edges behind it."""
    out: dict[str, dict[str, list[str]]] = {}
    for mod, deps in import_graph().items():
        for dep in deps:
            a, b = unit(mod), unit(dep)
            if a != b:
                out.setdefault(a, {}).setdefault(b, []).append(f"{mod} -> {dep}")
    return out


def test_every_unit_has_a_rank() -> None:
    units = {unit(m) for m in import_graph()}
    assert units <= set(RANKS), f"give these a rank in RANKS: {sorted(units - set(RANKS))}"


def test_no_import_points_upward() -> None:
    # `from clearsight import x` also names the package itself, which Python has imported
    # before any of its modules: not an edge to its lazy names
    upward = [
        edge
        for a, targets in unit_graph().items()
        for b, edges in targets.items()
        if b != "clearsight" and RANKS.get(b, 99) > RANKS.get(a, 99)
        for edge in edges
    ]
    assert not upward, "imports to a higher layer:\n" + "\n".join(upward)


def test_no_loop_between_folders() -> None:
    graph = {a: set(targets) for a, targets in unit_graph().items()}
    cycles = find_cycles(graph)
    assert not cycles, f"loops between folders: {cycles}"


def test_the_rule_catches_a_late_upward_import(tmp_path: Path) -> None:
    """The graph sees an import inside a function (the check above would miss nothing)."""
    from tests.test_layers import _imports

    src = tmp_path / "m.py"
    src.write_text("def f():\n    from clearsight.cli import main\n")
    known = {"clearsight.cli": Path("x"), "clearsight.engine.m": src}
    assert _imports("clearsight.engine.m", src, known) == {"clearsight.cli"}


# ------------------------------------------------------------------ family questions
ALLOWED = ("families.py", "runtime/", "models/")
TASK_COMPARE = re.compile(
    r"""[!=]=\s*["'](detect|derain|demoire|any|video-derain|restoration|detection)["']"""
)
ORT_ISINSTANCE = re.compile(r"isinstance\([^)]*\b(OrtModel|OrtDetector)\b")
CONTRACT = (
    "task", "task_family", "pad_multiple", "receptive_radius", "output_kind",
    "supports_stages", "stages", "last_stages_used", "prefers_channels_last",
    "prefers_compile", "tiling", "predicts_residual", "input_size", "num_classes",
    "num_labels", "decode", "postprocess", "prune_protected", "prune_tracing",
    "export_graph", "stats_layout", "global_stats_hooks", "final_output", "restore",
    "tiled_path", "init_optional_keys", "init_optional_args", "layout", "export_info",
    "model_data",
)  # fmt: skip
PROBE = re.compile(r"\b(getattr|hasattr)\([^,()]+,\s*[\"'](" + "|".join(CONTRACT) + r")[\"']")


def _checked_sources() -> list[Path]:
    return [
        p
        for p in sorted(PACKAGE.rglob("*.py"))
        if not str(p.relative_to(PACKAGE)).startswith(ALLOWED)
    ]


@pytest.mark.parametrize(
    ("name", "pattern"),
    [("task string compare", TASK_COMPARE), ("isinstance on ORT wrappers", ORT_ISINSTANCE),
     ("contract probe", PROBE)],
)  # fmt: skip
def test_no_family_question_outside_the_table(name: str, pattern: re.Pattern[str]) -> None:
    hits = [
        f"{p.relative_to(SRC)}:{n}: {line.strip()}"
        for p in _checked_sources()
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if pattern.search(line)
    ]
    assert not hits, f"{name} outside families.py, runtime/, models/:\n" + "\n".join(hits)


def test_the_patterns_catch_what_they_are_for() -> None:
    assert TASK_COMPARE.search('if loaded.config.task == "detect":')
    assert TASK_COMPARE.search("if spec.task != 'video-derain':")
    assert ORT_ISINSTANCE.search("isinstance(loaded.model, OrtModel | OrtDetector)")
    assert PROBE.search('getattr(model, "pad_multiple", 1)')
    assert not PROBE.search('getattr(args, "device", None)')


# ------------------------------------------------------------------ the family table
def test_every_table_reference_resolves_and_every_task_has_a_family() -> None:
    from clearsight.families import FAMILIES, REFERENCES, family_of
    from clearsight.models.registry import list_specs

    for row in FAMILIES.values():
        for part in REFERENCES:
            assert callable(row.load(part)), (row.family, part)
        assert row.serve_endpoint.startswith("/v1/")
    for spec in list_specs():
        assert family_of(spec.task) in FAMILIES


def test_loaded_models_say_their_family_and_backend(tmp_path: Path) -> None:
    from clearsight.api import export_onnx, load_model
    from clearsight.families import Backend, Family

    torch_model = load_model("identity")
    assert torch_model.family is Family.RESTORATION and torch_model.backend is Backend.TORCH
    path, _ = export_onnx("identity", tmp_path / "i.onnx")
    ort = load_model(path)
    assert ort.family is Family.RESTORATION and ort.backend is Backend.ONNXRUNTIME
    assert load_model("default-detect").family is Family.DETECTION


# ------------------------------------------------------------------ the training loop
def test_the_training_loop_knows_no_family() -> None:
    src = (PACKAGE / "engine" / "trainer.py").read_text(encoding="utf-8")
    assert "detect" not in src.lower()
    assert len(src.splitlines()) < 500
    tree = ast.parse(src)
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
    assert not any("detect" in m for m in imported)
