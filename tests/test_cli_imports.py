"""The CLI mirrors the API: every command parses its arguments, calls `clearsight.api`
and prints; restore, derain and demoire share one body.

Every module of `src/clearsight/cli` is read with `ast`, imports at module level, inside
functions and under `TYPE_CHECKING` alike: the only package modules it may import are
`clearsight` itself (the lazy names), `clearsight.api` (and its modules),
`clearsight.errors` and the CLI's own modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from typer.testing import CliRunner

from clearsight.cli import app

CLI = Path(__file__).resolve().parents[1] / "src" / "clearsight" / "cli"
ALLOWED = ("clearsight.api", "clearsight.errors", "clearsight.cli")


def _allowed(name: str) -> bool:
    return name == "clearsight" or any(name == a or name.startswith(a + ".") for a in ALLOWED)


def package_imports(source: str, module: str) -> list[tuple[int, str]]:
    """(line, module) of every `clearsight` module that `source` imports, anywhere in it;
    `from clearsight.x import y` counts as `clearsight.x`, relative imports are resolved
    against `module`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = module.split(".")[: -node.level]
                base = ".".join([*anchor, base] if base else anchor)
            names = [base]
        else:
            continue
        found += [(node.lineno, n) for n in names if n.split(".")[0] == "clearsight"]
    return found


def test_the_checker_sees_every_kind_of_import() -> None:
    source = (
        "from typing import TYPE_CHECKING\n"
        "import clearsight.zoo\n"
        "if TYPE_CHECKING:\n    from clearsight.engine.inference import Restorer\n"
        "def f():\n    from clearsight.scale import ray_engine\n"
        "from ..report import html\n"
        "from clearsight.api import evaluate\n"
    )
    bad = sorted(n for _, n in package_imports(source, "clearsight.cli.x") if not _allowed(n))
    assert bad == [
        "clearsight.engine.inference",
        "clearsight.report",
        "clearsight.scale",
        "clearsight.zoo",
    ]


@pytest.mark.parametrize("path", sorted(CLI.glob("*.py")), ids=lambda p: p.name)
def test_cli_imports_only_the_api_errors_and_itself(path: Path) -> None:
    module = f"clearsight.cli.{path.stem}" if path.stem != "__init__" else "clearsight.cli.x"
    bad = [
        f"{path.name}:{line}: {name}"
        for line, name in package_imports(path.read_text(encoding="utf-8"), module)
        if not _allowed(name)
    ]
    assert not bad, "the CLI must go through clearsight.api: " + "; ".join(bad)


@pytest.mark.parametrize(
    ("command", "model", "what"),
    [
        (["restore", "--model", "identity"], "identity", "restoring"),
        (["derain"], "default-derain", "deraining"),
        (["demoire"], "default-demoire", "demoiréing"),
    ],
)
def test_restore_derain_and_demoire_share_one_body(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], model: str, what: str
) -> None:
    from clearsight.cli import restore as cli_restore

    calls: list[tuple[tuple, dict]] = []
    monkeypatch.setattr(cli_restore, "restore_images", lambda *a, **k: calls.append((a, k)))
    res = CliRunner().invoke(app, [*command, "in.png", "-o", str(tmp_path / "o"), "--tile", "64"])
    assert res.exit_code == 0, res.output
    ((args, kw),) = calls
    assert args == (["in.png"], tmp_path / "o")
    assert (kw["model"], kw["what"], kw["tile"]) == (model, what, 64)
    assert ("bundled" in kw) == (model != "identity")  # derain/demoire need the bundled model
