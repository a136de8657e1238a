"""README is the front door: its quick-start commands work exactly as written."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

README = REPO_ROOT / "README.md"


def _block_after(marker: str) -> str:
    lines = README.read_text(encoding="utf-8").splitlines()
    i = lines.index(marker)
    assert lines[i + 1].startswith("```"), f"a code block must follow {marker}"
    end = lines.index("```", i + 2)
    return "\n".join(lines[i + 2 : end]).strip()


def test_readme_has_a_one_line_quickstart_and_test_command():
    quick = _block_after("<!-- quickstart -->")
    test = _block_after("<!-- test-command -->")
    assert "\n" not in quick and "\n" not in test
    assert "pip install torch==2.14.1 torchvision==0.29.1" in quick
    assert "pytest" in test


def test_ci_runs_the_readmes_install_and_test_lines_and_installs_nothing_else():
    """A green CI means the README works: `.ci/run` takes both lines from the README (its
    `--print` shows what it parsed) and has no Python install step of its own."""
    quick = _block_after("<!-- quickstart -->")
    install = quick[: quick.index(" && clearsight ")]
    res = subprocess.run(
        [str(REPO_ROOT / ".ci" / "run"), "--print"], capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == [
        f"install: {install}",
        f"test: {_block_after('<!-- test-command -->')}",
    ]
    code = [
        line.split("#")[0]
        for line in (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    ]
    assert not [line for line in code if "pip " in line or "uv " in line or "conda " in line]


def test_quickstart_commands_run(tmp_path: Path):
    """Run the clearsight part of the quick start (the install part is what CI itself does):
    it must work on a fresh install, with no benchmark data and no download."""
    from clearsight.io import read_image

    quick = _block_after("<!-- quickstart -->")
    steps = [s.strip() for s in quick.split("&&")]
    commands = [s for s in steps if s.startswith("clearsight ")]
    assert any(c.startswith("clearsight derain ") for c in commands)
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    workdir = tmp_path / "checkout"
    workdir.mkdir()
    (workdir / "examples").symlink_to(REPO_ROOT / "examples", target_is_directory=True)
    for cmd in commands:
        res = subprocess.run(
            shlex.split(cmd), cwd=workdir, env=env, capture_output=True, text=True, timeout=600
        )
        assert res.returncode == 0, f"{cmd}\n{res.stdout}\n{res.stderr}"
    for src, out in (("rainy-coffee", "derained"), ("moire-astronaut", "demoired")):
        before = read_image(REPO_ROOT / "examples" / f"{src}.png")
        after = read_image(next((workdir / out).iterdir()))
        assert after.shape == before.shape and not (after == before).all()
    results = json.loads((workdir / "detected" / "detections.json").read_text())
    assert 47 in {r["category_id"] for r in results}  # the coffee cup (COCO id 47, "cup")
    drawn = read_image(workdir / "detected" / "coffee.jpg")
    assert drawn.shape == read_image(REPO_ROOT / "examples" / "coffee.jpg").shape


def _python(code: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", code], cwd=cwd, capture_output=True, text=True, timeout=600
    )


def test_python_example_runs_as_written(tmp_path: Path):
    """The README's Python example, taken from its text, derains the example photo."""
    from clearsight.io import read_image

    code = _block_after("<!-- python-example -->")
    assert code.startswith("import clearsight\n") and "from_pretrained" in code
    (tmp_path / "examples").symlink_to(REPO_ROOT / "examples", target_is_directory=True)
    res = _python(code, tmp_path)
    assert res.returncode == 0, res.stderr
    before = read_image(REPO_ROOT / "examples" / "rainy-coffee.png")
    after = read_image(tmp_path / "derained-coffee.png")
    assert after.shape == before.shape and not (after == before).all()


def test_one_line_from_pretrained(tmp_path: Path):
    res = _python(
        "import clearsight; r = clearsight.Restorer.from_pretrained('default-derain'); "
        "print(type(r).__name__, r.loaded.config.architecture)",
        tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert res.stdout.split()[0] == "Restorer" and res.stdout.split()[1].startswith("rescan")
