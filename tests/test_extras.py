"""The README's install line (`pip install -e '.[test]'`) brings every optional package a
test needs, and a test that needs one skips, where it is missing, naming its extra
(tests/optional.py): never a failure for want of a package."""

from __future__ import annotations

import re
import tomllib

from tests.conftest import REPO_ROOT
from tests.optional import EXTRA_OF, skip_reason

# the distribution behind each module of EXTRA_OF, as pyproject.toml names it
DISTRIBUTION = {
    "fastapi": "fastapi",
    "uvicorn": "uvicorn",
    "multipart": "python-multipart",
    "ray": "ray[data]",
    "pyarrow": "ray[data]",  # Ray Data's dependency: the file systems behind s3:// inputs
    "tflite": "tflite",
    "flatbuffers": "flatbuffers",
    "torch_pruning": "torch-pruning",
    "paddle": "paddlepaddle",
    "x2paddle": "x2paddle",
    "mkdocs": "mkdocs",
    "huggingface_hub": "huggingface-hub",
    "httpx": "httpx",
    "playwright": "playwright",
    "ai_edge_litert": "ai-edge-litert",
}


def _extras() -> dict[str, list[str]]:
    with open(REPO_ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]["optional-dependencies"]


def _name(requirement: str) -> str:
    """`ray[data]>=2.10` -> `ray[data]`: the distribution with its extras, no version."""
    return re.split(r"[<>=!~;\s]", requirement, maxsplit=1)[0].lower()


def test_each_optional_module_is_in_the_extra_its_skip_names() -> None:
    extras = _extras()
    assert set(DISTRIBUTION) == set(EXTRA_OF)
    for module, extra in EXTRA_OF.items():
        assert DISTRIBUTION[module] in {_name(r) for r in extras[extra]}, (module, extra)
    assert "pip install -e '.[serve]'" in skip_reason("fastapi")


def test_the_test_extra_that_the_readme_installs_has_every_other_extra() -> None:
    extras = _extras()
    bundle = next(r for r in extras["test"] if r.startswith("clearsight["))
    included = set(bundle[len("clearsight[") : bundle.index("]")].split(","))
    assert included == set(extras) - {"test"}
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme.split("<!-- quickstart -->", 1)[1].split("```", 2)[1]
    assert "pip install -e '.[test]'" in quick


def test_no_test_skips_an_optional_package_without_naming_its_extra() -> None:
    """`pytest.importorskip` of an optional package goes through `tests.optional.need`."""
    bare = []
    for path in sorted((REPO_ROOT / "tests").glob("*.py")):
        if path.name == "optional.py":
            continue
        for module in re.findall(r"importorskip\(\s*[\"']([\w.]+)", path.read_text("utf-8")):
            if module.split(".")[0] in EXTRA_OF:
                bare.append(f"{path.name}: {module}")
    assert bare == []
