"""The wheel works outside the repository: `python -m build` makes an sdist and a wheel (the
wheel from the sdist), the wheel holds every file of the package, and installed alone into
a fresh virtual environment (its dependencies seen from this test environment through a
`.pth` line, so nothing is downloaded) it runs the sample jobs from a temporary folder,
every bundled model once. docs/getting-started.md lists what the wheel holds."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

import clearsight
from tests.conftest import REPO_ROOT

pytestmark = pytest.mark.slow

PACKAGE = REPO_ROOT / "src" / "clearsight"
SAMPLES = ("rainy-coffee.png", "moire-astronaut.png", "coffee.jpg", "rainy-coffee-clip.mp4")
# one run per bundled model: (model, command line); the clip is cut to its first 0.4 s
RUNS = {
    "default-derain": ["derain", "rainy-coffee.png", "-o", "derained"],
    "default-demoire": ["demoire", "moire-astronaut.png", "-o", "demoired"],
    "default-detect": ["detect", "coffee.jpg", "-o", "detected"],
    "ssd-mobilenet-v1-coco": [
        "detect", "coffee.jpg", "--model", "ssd-mobilenet-v1-coco", "-o", "detected-ssd"
    ],
    "video-derain": ["derain", "rainy-coffee-clip.mp4", "-o", "derained-video", "--duration",
                     "0.4"],
    "detect-derain": ["detect", "rainy-coffee.png", "--restore", "detect-derain", "-o",
                      "detected-rain"],
}  # fmt: skip

# Runs inside the new environment: the commands in-process (one torch import for all),
# then checks of what they wrote, with the installed package's own readers.
DRIVER = """
import json, sys
from pathlib import Path
import clearsight
from clearsight.cli import main

runs = json.loads(sys.argv[1])
for args in [["models"], *runs]:
    sys.argv = ["clearsight", *args]
    try:
        main()
    except SystemExit as exc:
        assert exc.code in (0, None), f"clearsight {' '.join(args)}: exit {exc.code}"
from clearsight.io import read_image
from clearsight.video.io import VideoReader

for name, out in (("rainy-coffee.png", "derained"), ("moire-astronaut.png", "demoired")):
    before, after = read_image(name), read_image(Path(out) / name)
    assert after.shape == before.shape and (after != before).any(), name
for out in ("detected", "detected-ssd"):
    found = json.loads(Path(out, "detections.json").read_text())
    assert 47 in {r["category_id"] for r in found}, out  # the coffee cup
with VideoReader("derained-video/rainy-coffee-clip.mp4") as reader:
    frames = sum(1 for _ in reader.frames())
assert frames >= 5, frames
print(clearsight.__file__)
"""


def _package_files() -> set[str]:
    """Every file of the package as the wheel names it (clearsight/...)."""
    return {
        p.relative_to(PACKAGE.parent).as_posix()
        for p in PACKAGE.rglob("*")
        if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    }


@pytest.fixture(scope="module")
def dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """`python -m build` on a copy of the project (its build files stay out of the checkout),
    without build isolation so nothing is downloaded."""
    pytest.importorskip("build", reason="needs `build`: pip install -e '.[test]'")
    root = tmp_path_factory.mktemp("wheel")
    project = root / "project"
    project.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO_ROOT / name, project / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    shutil.copytree(REPO_ROOT / "src", project / "src", ignore=ignore)
    out = root / "dist"
    res = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(project)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return out


def test_build_makes_an_sdist_and_a_wheel_holding_every_package_file(dist: Path) -> None:
    sdists, wheels = list(dist.glob("clearsight-*.tar.gz")), list(dist.glob("clearsight-*.whl"))
    assert len(sdists) == 1 and len(wheels) == 1
    with zipfile.ZipFile(wheels[0]) as whl:
        names = set(whl.namelist())
    assert _package_files() <= names, sorted(_package_files() - names)
    bundled = {p.name for p in (PACKAGE / "assets" / "models").iterdir() if p.is_dir()}
    assert bundled == set(RUNS)  # a new bundled model needs a run in the test below


def test_the_wheel_alone_runs_every_bundled_model_outside_the_repository(
    dist: Path, tmp_path: Path
) -> None:
    env_dir = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(env_dir)], check=True)
    python = env_dir / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    # the dependencies (torch, ...) from this environment: a plain path line, so its own .pth
    # files (this checkout's editable install among them) are not read
    Path(site, "_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    wheel = next(dist.glob("clearsight-*.whl"))
    res = subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps",
         "--no-index", "--quiet", str(wheel)],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert res.returncode == 0, res.stderr

    work = tmp_path / "work"
    work.mkdir()
    for name in SAMPLES:
        shutil.copy(REPO_ROOT / "examples" / name, work / name)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    version = subprocess.run(
        [str(env_dir / "bin" / "clearsight"), "--version"],
        cwd=work, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    expected = ["clearsight", clearsight.__version__]
    assert version.returncode == 0 and version.stdout.split() == expected, version.stderr
    res = subprocess.run(
        [str(python), "-c", DRIVER, json.dumps(list(RUNS.values()))],
        cwd=work, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    installed = Path(res.stdout.strip().splitlines()[-1])
    assert installed.is_relative_to(env_dir), installed  # the wheel's copy, not the checkout
