"""MkDocs hooks: the pages that are generated at build time, never copied by hand.

- `reference/cli.md`: every command of the Typer app with every option, walked from
  `typer.main.get_command(app)`, so a new option appears in the site the day it lands.
- `reference/api.md`: mkdocstrings directives for `clearsight.api` and every public name of
  `clearsight/__init__.py` (its `_EXPORTS` table), rendered from the docstrings.
- `models/<name>.md`: each bundled model's card (`assets/models/<name>/MODEL_CARD.md`), its
  relative links rewritten for the site; the pages are appended to the "Model zoo" nav.
- `img/examples/*`: the sample inputs in `examples/`, so the guides show them without a copy.

How the site is built and tested: docs/writing-docs.md.
"""

from __future__ import annotations

import json
import posixpath
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "src"
MODELS = SRC / "clearsight" / "assets" / "models"
EXAMPLES = ROOT / "examples"
ZOO_NAV_TITLE = "Model zoo"
BUNDLED_MARKER = "<!-- bundled-models -->"
VIDEO_PAGE = "video.md"

if str(SRC) not in sys.path:  # build from a checkout without an installed clearsight
    sys.path.insert(0, str(SRC))


# ---- CLI reference ---------------------------------------------------------------------


def _cell(text: str) -> str:
    """Text safe inside a Markdown table cell (no pipes, no raw HTML, one line)."""
    text = " ".join(text.split())
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;")


def _prose(text: str) -> str:
    """A help text as a paragraph: angle brackets escaped so they never read as HTML."""
    return text.strip().replace("<", "&lt;").replace(">", "&gt;")


def iter_commands(command: Any, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], Any]]:
    """(path, command) for `command` and every subcommand below it, depth first, in the order
    `--help` lists them; the root's path is ()."""
    rows = [(path, command)]
    for name, sub in getattr(command, "commands", {}).items():
        if not getattr(sub, "hidden", False):
            rows.extend(iter_commands(sub, (*path, name)))
    return rows


def _context(command: Any, path: tuple[str, ...], root: Any) -> Any:
    ctx = root.context_class(root, info_name="clearsight")
    node = root
    for name in path:
        node = node.commands[name]
        ctx = node.context_class(node, info_name=name, parent=ctx)
    return ctx


def _anchor(path: tuple[str, ...]) -> str:
    return "-".join(path) if path else "clearsight"


def cli_reference(root: Any | None = None) -> str:
    """The CLI reference page: one section per command, each with its usage line, help text
    and a table of every argument and option (as `--help` prints them)."""
    if root is None:
        import typer

        from clearsight.cli import app

        root = typer.main.get_command(app)
    lines = [
        "# CLI reference",
        "",
        "Generated at build time from the `clearsight` command itself (every command, every",
        "option, as `clearsight COMMAND --help` prints them); the task guides show them in use.",
        "",
    ]
    commands = iter_commands(root)
    lines += ["| command | what it does |", "|---|---|"]
    for path, cmd in commands[1:]:
        summary = cmd.get_short_help_str(limit=300) if hasattr(cmd, "get_short_help_str") else ""
        lines.append(f"| [`clearsight {' '.join(path)}`](#{_anchor(path)}) | {_cell(summary)} |")
    lines.append("")
    for path, cmd in commands:
        ctx = _context(cmd, path, root)
        title = " ".join(("clearsight", *path))
        lines += [f"## `{title}` {{ #{_anchor(path)} }}", ""]
        usage = cmd.get_usage(ctx).removeprefix("Usage:").strip()
        lines += ["```text", usage, "```", ""]
        if cmd.help:
            lines += [_prose(cmd.help), ""]
        records = [p.get_help_record(ctx) for p in cmd.params]
        records = [r for r in records if r]
        if records:
            lines += ["| argument or option | meaning |", "|---|---|"]
            for name, help_text in records:
                lines.append(f"| `{' '.join(name.split())}` | {_cell(help_text)} |")
            lines.append("")
        subs = getattr(cmd, "commands", {})
        if subs and path:
            links = ", ".join(f"[`{n}`](#{_anchor((*path, n))})" for n in subs)
            lines += [f"Subcommands: {links}.", ""]
        if cmd.epilog:
            lines += [_prose(cmd.epilog), ""]
    return "\n".join(lines)


# ---- Python API reference --------------------------------------------------------------


def api_reference() -> str:
    """The API page: `clearsight.api`, then every public name `import clearsight` offers that
    lives elsewhere, each rendered by mkdocstrings from its docstring."""
    import clearsight

    lines = [
        "# Python API reference",
        "",
        "Generated at build time from the docstrings. `import clearsight` offers the names",
        "below (they load lazily, so the import itself is fast and imports no torch); each",
        "CLI command calls one of them.",
        "",
        "## Public names",
        "",
    ]
    exports: dict[str, str] = clearsight._EXPORTS
    for name, module in exports.items():
        if module != "clearsight.api":
            lines += [f"::: {module}.{name}", "    options:", "      heading_level: 3", ""]
    lines += ["## `clearsight.api`", "", "::: clearsight.api", "    options:"]
    lines += ["      heading_level: 3", "      show_root_heading: false"]
    lines += ["      show_root_toc_entry: false", ""]
    return "\n".join(lines)


# ---- Model zoo ---------------------------------------------------------------------------

_LINK = re.compile(r"(!?\[[^\]]*\]\()([^)\s]+)(\))")


def bundled_cards() -> dict[str, Path]:
    """Bundled model name -> its card, in name order."""
    return {p.parent.name: p for p in sorted(MODELS.glob("*/MODEL_CARD.md"))}


def strip_front_matter(text: str) -> str:
    """A card's Markdown without its YAML front matter (the Hugging Face metadata block
    between `---` lines at the top), which the site does not show."""
    if text.startswith("---\n"):
        end = text.find("\n---\n", 4)
        if end != -1:
            return text[end + 5 :]
    return text


def card_page(card: Path, page_uri: str) -> str:
    """A model card as a site page at `page_uri`, without its front matter: links into docs/
    point at the site's copy; links elsewhere in the repository become the repository path
    (the site does not hold it)."""
    page_dir = posixpath.dirname(page_uri)

    def rewrite(m: re.Match[str]) -> str:
        target = m.group(2)
        if re.match(r"^[a-z]+:|^#", target):
            return m.group(0)
        path, _, frag = target.partition("#")
        resolved = (card.parent / path).resolve()
        try:
            in_docs = resolved.relative_to(ROOT / "docs").as_posix()
        except ValueError:
            label = m.group(1).lstrip("!")[1:-2]
            return f"{label} (`{resolved.relative_to(ROOT).as_posix()}`)"
        new = posixpath.relpath(in_docs, page_dir or ".")
        return f"{m.group(1)}{new}{'#' + frag if frag else ''}{m.group(3)}"

    source = card.relative_to(ROOT).as_posix()
    note = f"\n\n*This page is the model card shipped with the model, `{source}`.*\n"
    text = _LINK.sub(rewrite, strip_front_matter(card.read_text(encoding="utf-8")))
    first, _, rest = text.partition("\n")
    return f"{first}{note}\n{rest}"


def bundled_table() -> str:
    """A table of the bundled models from their config.json files (no weights loaded)."""
    rows = [
        "| model | task | architecture | parameters | metric preset |",
        "|---|---|---|---|---|",
    ]
    for name in bundled_cards():
        cfg = json.loads((MODELS / name / "config.json").read_text(encoding="utf-8"))
        params = cfg.get("param_count")
        rows.append(
            f"| [`{name}`]({name}.md) | {cfg.get('task', '')} | `{cfg.get('architecture', '')}` "
            f"| {f'{params:,}' if isinstance(params, int) else ''} "
            f"| `{cfg.get('metric_preset', '')}` |"
        )
    return "\n".join(rows)


# ---- MkDocs entry points -------------------------------------------------------------------


def on_config(config: Any) -> Any:
    """Append one nav entry per bundled model card under "Model zoo"."""
    for item in config.nav or []:
        if isinstance(item, dict) and ZOO_NAV_TITLE in item:
            entries = item[ZOO_NAV_TITLE]
            entries.extend({name: f"models/{name}.md"} for name in bundled_cards())
    return config


def on_files(files: Any, config: Any) -> Any:
    from mkdocs.structure.files import File

    generated = {
        "reference/cli.md": cli_reference(),
        "reference/api.md": api_reference(),
    }
    for name, card in bundled_cards().items():
        generated[f"models/{name}.md"] = card_page(card, f"models/{name}.md")
    if files.get_file_from_path(VIDEO_PAGE) is None:  # until the video guide lands
        generated[VIDEO_PAGE] = (
            "# Video\n\nVideo input is not part of this build yet; "
            "`clearsight --help` lists what is.\n"
        )
    for uri, content in generated.items():
        files.append(File.generated(config, uri, content=content))
    for image in sorted(EXAMPLES.glob("*")):
        if image.suffix.lower() in {".png", ".jpg", ".jpeg"}:
            files.append(File.generated(config, f"img/examples/{image.name}", abs_src_path=image))
    return files


def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if BUNDLED_MARKER in markdown:
        markdown = markdown.replace(BUNDLED_MARKER, bundled_table())
    return markdown
