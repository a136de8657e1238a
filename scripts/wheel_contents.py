"""What a clearsight wheel holds, by part: files and bytes per bundled model, the web app's
static files, the Python modules and the rest, as the Markdown table in
docs/getting-started.md.

    python -m build --no-isolation --outdir dist . && python scripts/wheel_contents.py dist/*.whl
"""

from __future__ import annotations

import argparse
import zipfile
from collections import defaultdict
from pathlib import Path


def part_of(name: str) -> str:
    """The row a file of the wheel is counted in."""
    parts = name.split("/")
    if parts[0].endswith(".dist-info"):
        return "package metadata (`*.dist-info/`)"
    if parts[1:3] == ["assets", "models"] and len(parts) > 4:
        return f"bundled model `{parts[3]}` (weights, config, card)"
    if parts[1:3] == ["serve", "static"]:
        return "web app (`serve/static/`)"
    if name.endswith(".py"):
        return "Python modules (`*.py`)"
    return "other data (`py.typed`, `assets/backend_table.json`)"


def summary(wheel: Path) -> str:
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    with zipfile.ZipFile(wheel) as whl:
        infos = whl.infolist()
    for info in infos:
        row = rows[part_of(info.filename)]
        row[0] += 1
        row[1] += info.file_size
    lines = ["| part | files | MB (unpacked) |", "|---|---:|---:|"]
    for part, (count, size) in sorted(rows.items(), key=lambda kv: -kv[1][1]):
        lines.append(f"| {part} | {count} | {size / 1e6:.2f} |")
    total = sum(i.file_size for i in infos)
    lines.append(f"| **total** | {len(infos)} | {total / 1e6:.2f} |")
    lines.append(f"\n`{wheel.name}`: {wheel.stat().st_size / 1e6:.1f} MB on disk.")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("wheel", type=Path)
    print(summary(parser.parse_args().wheel))


if __name__ == "__main__":
    main()
