"""The documentation's examples work: every shell and Python block in README.md, docs/ and the
model cards runs here or says why not, and every `clearsight` option it names exists.

The rules (docs/writing-docs.md): a fenced block names its language; a `bash` or `python`
block is executed below, in a fresh folder holding `examples/` (the example images, shrunk)
and `configs/`, unless the line before it is `<!-- not-run: REASON -->` (or a README marker
whose block another test runs); every `clearsight ...` command line in every block, run or
not, and in every inline code span is parsed against the Typer app, so a renamed or removed
option fails here.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO_ROOT
from tests.optional import EXTRA_OF, skip_reason

SHELL = {"bash", "sh", "shell"}
PYTHON = {"python", "py"}
INERT = {"text", "yaml", "json", "toml", "csv", "html"}
"""Languages that are shown, never run (their `clearsight` lines are still checked)."""
RUN_ELSEWHERE = {
    "<!-- quickstart -->": "tests/test_readme.py runs its clearsight commands; CI its install",
    "<!-- test-command -->": ".ci/run runs it",
    "<!-- python-example -->": "tests/test_readme.py runs it",
}
NOT_RUN = re.compile(r"^<!--\s*not-run:\s*(\S.*?)\s*-->$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
BLOCK_TIMEOUT_S = 120
TINY_SIDE = 168
"""Executed blocks see the example images shrunk to this many pixels on the short side (MS-SSIM,
in the netdisk preset, needs more than 160)."""


@dataclass(frozen=True)
class Block:
    path: Path
    line: int  # 1-based line of the opening fence
    lang: str
    code: str
    marker: str  # the HTML comment on the line before the fence, or ""

    @property
    def where(self) -> str:
        return f"{self.path.relative_to(REPO_ROOT)}:{self.line}"


def doc_files() -> list[Path]:
    """Every Markdown page the project shows: README, docs/ and the bundled model cards."""
    cards = sorted((REPO_ROOT / "src/clearsight/assets/models").glob("*/MODEL_CARD.md"))
    return [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").rglob("*.md")), *cards]


def parse_blocks(path: Path) -> tuple[list[Block], str]:
    """The fenced blocks of a Markdown file, and its text outside them (for inline code)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, prose, i = [], [], 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            prose.append(lines[i])
            i += 1
            continue
        indent, fence, lang = m.groups()
        j = i + 1
        while j < len(lines) and not lines[j].strip().startswith(fence):
            j += 1
        body = [ln[len(indent) :] if ln.startswith(indent) else ln for ln in lines[i + 1 : j]]
        k = i - 1
        while k >= 0 and not lines[k].strip():
            k -= 1
        marker = lines[k].strip() if k >= 0 and lines[k].strip().startswith("<!--") else ""
        blocks.append(Block(path, i + 1, lang.lower(), "\n".join(body), marker))
        i = j + 1
    return blocks, "\n".join(prose)


ALL_BLOCKS = [b for p in doc_files() for b in parse_blocks(p)[0]]
EXECUTED = [
    b
    for b in ALL_BLOCKS
    if b.lang in SHELL | PYTHON and not NOT_RUN.match(b.marker) and b.marker not in RUN_ELSEWHERE
]


def test_there_are_blocks_to_check():
    assert len(ALL_BLOCKS) > 30 and len(EXECUTED) >= 8


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.where)
def test_block_names_a_known_language(block: Block):
    assert block.lang in SHELL | PYTHON | INERT, (
        f"{block.where}: name the block's language (bash, python, or one of {sorted(INERT)}), "
        f"got {block.lang or 'none'!r}"
    )


@pytest.mark.parametrize("block", ALL_BLOCKS, ids=lambda b: b.where)
def test_markers_are_well_formed(block: Block):
    if block.marker.startswith("<!-- not-run"):
        assert NOT_RUN.match(block.marker), f"{block.where}: `<!-- not-run: REASON -->`"
        assert block.lang in SHELL | PYTHON, f"{block.where}: only bash/python blocks run"
    if block.marker in RUN_ELSEWHERE:
        assert block.path.name == "README.md", f"{block.where}: {block.marker} is README's"


def test_commands_sit_in_fenced_blocks():
    """An indented code block would escape the checks below: commands go in fences."""
    found = []
    for path in doc_files():
        lines = parse_blocks(path)[1].splitlines()
        for i, line in enumerate(lines[1:], 1):
            if re.match(r"^ {4,}(\$ )?(clearsight|python|pip) ", line) and not lines[i - 1].strip():
                found.append(f"{path.relative_to(REPO_ROOT)}: {line.strip()}")
    assert not found, "\n".join(found)


# ---- every `clearsight` option named in the docs exists ------------------------------------


def _root() -> Any:
    import typer

    from clearsight.cli import app

    return typer.main.get_command(app)


def _options(cmd: Any) -> set[str]:
    names = {"--help"}
    for p in cmd.params:
        names.update(p.opts)
        names.update(getattr(p, "secondary_opts", []))
    return {n for n in names if n.startswith("-")}


OPTION = re.compile(r"(?<![\w./=:-])(--?[A-Za-z][\w-]*)")
COMMAND_WORD = re.compile(r"^[a-z][a-z0-9-]*$")
COMMAND = re.compile(r"^\s*(?:\$\s+)?(?:\w+=\S*\s+)*(?:\S*python3?\s+-m\s+)?clearsight(\s.*|)$")
"""A command line that runs clearsight: after a `$ ` prompt, VAR=value, or `python -m`."""


def command_lines(text: str) -> list[str]:
    """The `clearsight ...` commands in a block's text (continuations joined, comments off,
    `&&` `||` `;` and ` | ` chains split, `$ ` prompts and `python -m` allowed)."""
    text = re.sub(r"\\\n\s*", " ", text)
    found = []
    for line in text.splitlines():
        line = re.sub(r"(^|\s)#.*$", "", line)
        for seg in re.split(r"&&|\|\||;|\s\|\s", line):
            m = COMMAND.match(seg)
            if m:
                found.append(" ".join(["clearsight", *m.group(1).split()]))
    return found


def option_errors(command: str, root: Any) -> list[str]:
    """What is wrong with one documented command: an unknown command or option."""
    words = command.split()[1:]
    node, path, i = root, ["clearsight"], 0
    while hasattr(node, "commands") and i < len(words):
        word = words[i].strip("[](){}'\"")
        if word.startswith("-"):
            if word.split("=")[0] not in _options(node):
                return [f"{' '.join(path)}: no option {word.split('=')[0]}"]
            i += 1
            continue
        if not COMMAND_WORD.match(word):  # a placeholder: COMMAND, ...
            return []
        if word not in node.commands:
            return [f"{' '.join(path)}: no command {word!r}"]
        node, i = node.commands[word], i + 1
        path.append(word)
    known = _options(node)
    rest = " ".join(words[i:])
    return [
        f"{' '.join(path)}: no option {opt}" for opt in OPTION.findall(rest) if opt not in known
    ]


def _documented_commands() -> list[tuple[str, str]]:
    rows = []
    for path in doc_files():
        blocks, prose = parse_blocks(path)
        where = path.relative_to(REPO_ROOT)
        for b in blocks:
            rows += [(b.where, c) for c in command_lines(b.code)]
        for span in re.findall(r"`((?:python -m )?clearsight [^`]+)`", prose):
            span = " ".join(span.replace("\\|", "|").split())
            rows += [(f"{where} (inline)", c) for c in command_lines(span)]
    return rows


def test_every_documented_option_exists():
    root = _root()
    rows = _documented_commands()
    assert len(rows) > 50
    errors = [f"{where}: `{cmd}`: {e}" for where, cmd in rows for e in option_errors(cmd, root)]
    assert not errors, "\n".join(errors)


def test_the_option_check_catches_what_it_must():
    root = _root()
    assert option_errors("clearsight derain x.png -o out --tile 256", root) == []
    assert option_errors("clearsight compress prune M --ratio 0.5 [--json F] -o O", root) == []
    assert option_errors("clearsight derain x.png --tiles 256", root) == [
        "clearsight derain: no option --tiles"
    ]
    assert option_errors("clearsight compress shrink M", root) == [
        "clearsight compress: no command 'shrink'"
    ]
    assert command_lines("pip install x && clearsight models --json | head\n# clearsight x") == [
        "clearsight models --json"
    ]
    assert command_lines("python -m clearsight eval \\\n  --model m --data d") == [
        "clearsight eval --model m --data d"
    ]


# ---- every block that runs, runs ---------------------------------------------------------


def _run(block: Block, cwd: Path) -> subprocess.CompletedProcess[str]:
    bin_dir = Path(sys.executable).parent
    env = dict(os.environ, PATH=f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    if block.lang in PYTHON:
        argv = [sys.executable, "-c", block.code]
    else:
        argv = ["bash", "-c", "set -eo pipefail\n" + block.code]
    return subprocess.run(
        argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT_S
    )


def _missing_optional(stderr: str) -> str | None:
    """The optional package a failed block lacked (not installed here), or None: the block
    then skips naming its extra, as the tests that need one do."""
    named = re.findall(r"No module named '(\w+)", stderr)
    named += [m for m, e in EXTRA_OF.items() if f"clearsight[{e}]" in stderr]
    return next((m for m in named if m in EXTRA_OF and not importlib.util.find_spec(m)), None)


def test_a_block_lacking_an_optional_package_skips_naming_its_extra(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    installed = [m for m in EXTRA_OF if importlib.util.find_spec(m)]
    if installed:  # an installed package's import error is a real failure, never a skip
        assert _missing_optional(f"ModuleNotFoundError: No module named '{installed[0]}'") is None
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    assert _missing_optional("ModuleNotFoundError: No module named 'ray'") == "ray"
    assert _missing_optional("error: needs Ray: pip install 'clearsight[scale]'") == "ray"
    assert _missing_optional("ModuleNotFoundError: No module named 'numpy'") is None


@pytest.fixture(scope="module")
def tiny_examples(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example images shrunk to TINY_SIDE pixels on the short side, same names and formats
    (the sample clip copied as it is): the documented commands run as written, on inputs that
    cost a fraction of the real ones."""
    from PIL import Image

    out = tmp_path_factory.mktemp("examples")
    for src in sorted((REPO_ROOT / "examples").iterdir()):
        if src.suffix.lower() in {".mp4", ".mkv", ".mov", ".webm", ".avi"}:
            shutil.copy(src, out / src.name)  # the sample clip is already small (320x240)
            continue
        with Image.open(src) as im:
            scale = min(1.0, TINY_SIDE / min(im.size))
            small = im.resize([round(n * scale) for n in im.size], Image.Resampling.LANCZOS)
            small.save(out / src.name)
    return out


@pytest.mark.parametrize("block", EXECUTED, ids=lambda b: b.where)
def test_documented_block_runs(block: Block, tmp_path: Path, tiny_examples: Path):
    """Each block as written, in a fresh folder holding `examples/` (tiny copies) and the
    repository's `configs/`."""
    (tmp_path / "examples").symlink_to(tiny_examples, target_is_directory=True)
    (tmp_path / "configs").symlink_to(REPO_ROOT / "configs", target_is_directory=True)
    res = _run(block, tmp_path)
    if res.returncode != 0 and (missing := _missing_optional(res.stderr)):
        pytest.skip(skip_reason(missing))
    assert res.returncode == 0, (
        f"{block.where}\n{block.code}\n{res.stdout[-2000:]}\n{res.stderr[-3000:]}"
    )


# ---- the site: README as the front door, generated references ----------------------------


def _hooks() -> Any:
    path = REPO_ROOT / "scripts" / "mkdocs_hooks.py"
    spec = importlib.util.spec_from_file_location("mkdocs_hooks", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_readme_is_a_short_front_door_whose_links_resolve():
    text = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 150
    links = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
    local = [t for t in links if not re.match(r"^[a-z]+:", t)]
    assert local and all((REPO_ROOT / t).exists() for t in local), [
        t for t in local if not (REPO_ROOT / t).exists()
    ]
    assert "docs/guides/derain.md" in local  # one click to the derain guide


def test_ci_builds_the_site_strictly():
    ci = (REPO_ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "mkdocs build --strict" in ci
    assert ci.index("mkdocs build") > ci.index('bash -c "$install_cmd"')
    assert "site/" in (REPO_ROOT / ".gitignore").read_text(encoding="utf-8").splitlines()


def test_derain_guide_goes_from_a_folder_to_a_score():
    """README -> derain guide: restore a folder, then score it under the deraining preset."""
    blocks, _ = parse_blocks(REPO_ROOT / "docs/guides/derain.md")
    commands = [c for b in blocks for c in command_lines(b.code)]
    assert any(c.startswith("clearsight derain ") and "/" in c for c in commands)
    assert any(c.startswith("clearsight eval ") and "y-matlab" in c for c in commands)


def test_cli_reference_lists_every_command_and_option():
    hooks, root = _hooks(), _root()
    page = hooks.cli_reference(root)
    for path, cmd in hooks.iter_commands(root):
        assert f"`{' '.join(('clearsight', *path))}`" in page
        for p in cmd.params:
            assert p.opts[0] in page, (path, p.opts)


def test_cli_reference_follows_the_app():
    import typer

    app = typer.Typer()

    @app.command()
    def shine(level: int = typer.Option(3, "--level", help="How bright <very>.")) -> None:
        """Make it shine."""

    @app.command()
    def dull() -> None:
        """Make it dull."""

    page = _hooks().cli_reference(typer.main.get_command(app))
    assert "## `clearsight shine`" in page and "Make it shine." in page
    assert "`--level <int>`" in page and "How bright &lt;very&gt;." in page


def test_api_reference_covers_every_public_name():
    import clearsight

    page = _hooks().api_reference()
    assert "::: clearsight.api" in page
    for name, module in clearsight._EXPORTS.items():
        assert module == "clearsight.api" or f"::: {module}.{name}" in page


def test_model_card_pages_point_at_the_sites_images(tmp_path: Path):
    hooks = _hooks()
    cards = hooks.bundled_cards()
    assert set(cards) >= {"default-derain", "default-demoire", "default-detect"}
    page = hooks.card_page(cards["default-derain"], "models/default-derain.md")
    assert "](../img/derain-v19-crop-1.png)" in page and "../../../" not in page
    assert page.startswith("# default-derain\n") and "model-index" not in page  # no front matter
    card = tmp_path / "src/clearsight/assets/models/m/MODEL_CARD.md"
    card.parent.mkdir(parents=True)
    card.write_text("# m\n\n[recipe](../../../../../configs/x.yaml) [web](https://x.org)\n")
    hooks.ROOT = tmp_path
    page = hooks.card_page(card, "models/m.md")
    assert "recipe (`configs/x.yaml`)" in page and "[web](https://x.org)" in page
