"""Inputs of a scaled run (`clearsight.scale.inputs`): names equal the local engine's, globs,
manifests and URIs (through pyarrow's local file system, as s3:// would go), and the
checks against two inputs on one output. No Ray needed."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from clearsight.errors import ClearsightError, ImageReadError
from clearsight.io import read_image, write_image
from clearsight.runtime.batch import plan_outputs
from clearsight.scale.inputs import WorkItem, is_uri, local_copy, plan_inputs
from tests.optional import need


@pytest.fixture()
def tree(tmp_path: Path) -> Path:
    """in/a.png, in/sub/b.jpg, in/sub/deep/c.png, in/.hidden/d.png, in/notes.md"""
    rng = np.random.default_rng(0)
    root = tmp_path / "in"
    for rel in ("a.png", "sub/b.jpg", "sub/deep/c.png", ".hidden/d.png"):
        write_image(root / rel, rng.integers(0, 256, (6, 5, 3), dtype=np.uint8))
    (root / "notes.md").write_text("not an image")
    return root


def _rel(items: list[WorkItem], out: Path) -> list[str]:
    return [Path(i.output).relative_to(out).as_posix() for i in items]


def test_folders_and_files_are_named_as_the_local_engine_names_them(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    inputs = [tree, tree / "sub" / "b.jpg"]
    local = plan_outputs(inputs, out)
    assert plan_inputs(inputs, out) == [WorkItem(str(s), str(d)) for s, d in local]
    assert _rel(plan_inputs([tree], out), out) == ["a.png", "sub/b.jpg", "sub/deep/c.png"]


def test_globs_name_matches_relative_to_their_fixed_folder(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    # one level: OUT/name, as the shell-expanded files would land
    assert _rel(plan_inputs([f"{tree}/sub/*.*"], out), out) == ["b.jpg"]
    # ** keeps the sub-folders; hidden folders stay out
    assert _rel(plan_inputs([f"{tree}/**/*.png"], out), out) == ["a.png", "sub/deep/c.png"]
    with pytest.raises(ImageReadError, match=r"no images match .*\*\.tif"):
        plan_inputs([f"{tree}/*.tif"], out)


def test_manifest_lists_paths_beside_it_skipping_comments(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    manifest = tree.parent / "list.txt"
    manifest.write_text(f"# inputs\n\nin/a.png\n{tree / 'sub' / 'deep'}\n  in/sub/*.jpg  \n")
    assert _rel(plan_inputs([manifest], out), out) == ["a.png", "c.png", "b.jpg"]
    (tree.parent / "empty.lst").write_text("# nothing\n")
    with pytest.raises(ImageReadError, match="empty.lst: the manifest lists no inputs"):
        plan_inputs([tree.parent / "empty.lst"], out)


def test_uris_go_through_pyarrow_and_keep_the_folder_layout(tree: Path, tmp_path: Path):
    need("pyarrow")  # URIs are read through pyarrow's file systems
    out = tmp_path / "out"
    items = plan_inputs([f"file://{tree}"], out)
    assert _rel(items, out) == ["a.png", "sub/b.jpg", "sub/deep/c.png"]
    assert all(is_uri(i.source) and i.source.startswith("file:///") for i in items)
    assert _rel(plan_inputs([f"file://{tree}/sub/*.jpg"], out), out) == ["b.jpg"]
    assert _rel(plan_inputs([f"file://{tree}/sub/deep/c.png"], out), out) == ["c.png"]
    # a worker reads a URI through a temporary local copy, decoded like the file itself
    with local_copy(items[2].source) as copy:
        assert copy != tree / "sub/deep/c.png"
        assert np.array_equal(read_image(copy), read_image(tree / "sub/deep/c.png"))
    assert not copy.exists()
    with pytest.raises(ImageReadError, match="input not found: file://"):
        plan_inputs([f"file://{tree}/missing.png"], out)


def test_two_inputs_onto_one_output_are_refused(tree: Path, tmp_path: Path):
    out = tmp_path / "out"
    (tmp_path / "other").mkdir()
    write_image(tmp_path / "other" / "a.png", np.zeros((4, 4, 3), np.uint8))
    with pytest.raises(ClearsightError, match="two inputs would be written to .*a.png"):
        plan_inputs([tree / "a.png", f"{tmp_path}/other/*.png"], out)
    # the same file reached twice is one input
    assert len(plan_inputs([tree / "a.png", f"{tree}/a.*"], out)) == 1
    with pytest.raises(ClearsightError, match="would overwrite its input"):
        plan_inputs([tree], tree)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--engine", "spark"], "--engine: unknown engine 'spark'; known: local, ray"),
        (["--engine", "ray", "--workers", "0"], "--workers: must be >= 1, got 0"),
        (["--engine", "ray", "--batch-size", "0"], "--batch-size: must be >= 1, got 0"),
    ],
)
def test_engine_options_are_checked_before_any_work(tree: Path, tmp_path: Path, args, message):
    from typer.testing import CliRunner

    from clearsight.cli import app

    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["restore", str(tree), "-m", "identity", "-o", str(out), *args]
    )
    assert result.exit_code == 1
    assert message in result.output
    assert not out.exists()
