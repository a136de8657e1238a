"""What a scaled run works on: folders, glob patterns, manifests and URIs -> (source, output).

Local files and folders are named exactly as the local engine names them (`plan_outputs`:
a file lands as OUT/name, a folder's contents as OUT/relative path), so both engines write
the same files. A glob pattern names its matches relative to the pattern's fixed leading
folder (`photos/*.png` gives OUT/name, as the shell-expanded files would; `photos/**/*.png`
keeps the sub-folders). A manifest (`.txt`, `.lst`, `.manifest`) holds one path, folder,
pattern or URI per line (blank lines and `#` comments skipped; relative paths are relative
to the manifest's folder). URIs (`s3://bucket/key.png`, `gs://...`, `file:///...`) are
listed and later read through pyarrow's file systems, named like a file (OUT/name) or a
folder (OUT/relative path); outputs always go to a local (or shared) folder.
"""

from __future__ import annotations

import contextlib
import fnmatch
import glob
import os
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from clearsight.errors import ClearsightError, ImageReadError
from clearsight.io import IMAGE_EXTENSIONS, is_image_path
from clearsight.runtime.batch import plan_outputs

MANIFEST_SUFFIXES = (".txt", ".lst", ".manifest")
_GLOB_CHARS = frozenset("*?[")


@dataclass(frozen=True)
class WorkItem:
    """One image to process: where it is read (a local path or a URI) and where it goes."""

    source: str
    output: str


def is_uri(text: str) -> bool:
    """`s3://...`, `gs://...`, `file:///...`: a scheme of two letters or more (not `C:\\`)."""
    scheme, sep, _ = text.partition("://")
    return bool(sep) and len(scheme) > 1 and scheme.replace("+", "").isalnum()


def has_glob(text: str) -> bool:
    return any(c in _GLOB_CHARS for c in text)


def _fixed_prefix(parts: Sequence[str]) -> list[str]:
    """The leading path parts of a pattern before the first one with a wildcard."""
    fixed: list[str] = []
    for part in parts:
        if has_glob(part):
            break
        fixed.append(part)
    return fixed


def _visible_image(rel_parts: Sequence[str], name: str) -> bool:
    """An image file not hidden and not in a hidden folder (the `list_images` rule)."""
    return is_image_path(name) and not any(p.startswith(".") for p in rel_parts)


def _local_glob(pattern: str, out: Path) -> list[WorkItem]:
    parts = Path(pattern).parts
    base = Path(*_fixed_prefix(parts)) if _fixed_prefix(parts) else Path(".")
    matches = sorted(Path(m) for m in glob.glob(pattern, recursive=True))
    items = [
        WorkItem(str(m), str(out / m.relative_to(base)))
        for m in matches
        if m.is_file() and _visible_image(m.relative_to(base).parts, m.name)
    ]
    if not items:
        raise ImageReadError(f"no images match {pattern}")
    return items


def _glob_match(path: str, pattern: str) -> bool:
    """Glob matching of '/'-separated paths: `*` stays within one folder, `**` crosses."""
    path, pattern = path.strip("/"), pattern.strip("/")
    if "**" in pattern:
        return fnmatch.fnmatchcase(path, pattern.replace("**/", "*").replace("**", "*"))
    parts, pats = path.split("/"), pattern.split("/")
    return len(parts) == len(pats) and all(map(fnmatch.fnmatchcase, parts, pats))


def _remote(uri: str, out: Path) -> list[WorkItem]:
    """A file, folder (recursive) or pattern behind a URI, through pyarrow's file systems."""
    try:
        from pyarrow import fs as pafs
    except ImportError:
        raise ClearsightError(f"{uri}: reading URIs needs pyarrow (pip install pyarrow)") from None
    scheme = uri.partition("://")[0]
    pattern = uri if has_glob(uri) else None
    base_uri = uri
    if pattern is not None:
        head, _, tail = uri.partition("://")
        base_uri = f"{head}://" + "/".join(_fixed_prefix(tail.split("/")))
    try:
        filesystem, base = pafs.FileSystem.from_uri(base_uri)
        info = filesystem.get_file_info(base)
        if info.type == pafs.FileType.File and pattern is None:
            return [WorkItem(uri, str(out / PurePosixPath(base).name))]
        if info.type != pafs.FileType.Directory:
            raise ImageReadError(f"input not found: {uri}")
        listing = filesystem.get_file_info(pafs.FileSelector(base, recursive=True))
    except ClearsightError:
        raise
    except Exception as exc:
        raise ImageReadError(f"{uri}: cannot list ({str(exc).splitlines()[0]})") from exc
    full_pattern = pattern.partition("://")[2] if pattern else None
    items: list[WorkItem] = []
    for f in sorted(listing, key=lambda i: i.path):
        if f.type != pafs.FileType.File:
            continue
        rel = PurePosixPath(f.path).relative_to(base)
        if full_pattern is not None and not _glob_match(f.path, full_pattern):
            continue
        if _visible_image(rel.parts, rel.name):
            # s3://bucket/key: pyarrow paths drop the scheme; put it back for the workers
            items.append(WorkItem(f"{scheme}://{f.path}", str(out.joinpath(*rel.parts))))
    if not items:
        looked = ", ".join(IMAGE_EXTENSIONS)
        raise ImageReadError(f"no images found in {uri} (looked for {looked})")
    return items


def read_manifest(path: Path) -> list[str]:
    """The entries of a manifest: one per line; relative paths resolved beside it."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise ImageReadError(f"{path}: cannot read manifest ({exc})") from exc
    entries: list[str] = []
    for line in lines:
        entry = line.strip()
        if not entry or entry.startswith("#"):
            continue
        if not is_uri(entry) and not os.path.isabs(entry):
            entry = str(path.parent / entry)
        entries.append(entry)
    if not entries:
        raise ImageReadError(f"{path}: the manifest lists no inputs")
    return entries


def _expand(entry: str, out: Path, *, nested: bool) -> list[WorkItem]:
    if is_uri(entry):  # file:// too, through pyarrow like any other file system
        return _remote(entry, out)
    p = Path(entry)
    if p.is_file() and p.suffix.lower() in MANIFEST_SUFFIXES:
        if nested:
            raise ImageReadError(f"{p}: a manifest may not list another manifest")
        return [i for e in read_manifest(p) for i in _expand(e, out, nested=True)]
    if has_glob(entry) and not p.exists():
        return _local_glob(entry, out)
    return [WorkItem(str(s), str(d)) for s, d in plan_outputs([p], out)]


def plan_inputs(
    inputs: Sequence[str | os.PathLike[str]], out: str | os.PathLike[str]
) -> list[WorkItem]:
    """Every input as (source, output) pairs, with the local engine's checks: no two inputs
    onto one output, no output onto its own input."""
    if not inputs:
        raise ImageReadError("no input images given")
    out_dir = Path(out)
    items = [i for entry in inputs for i in _expand(str(entry), out_dir, nested=False)]
    seen: dict[str, str] = {}
    unique: list[WorkItem] = []
    for item in items:
        if item.output in seen:
            if seen[item.output] == item.source:  # the same file reached twice
                continue
            raise ClearsightError(
                f"two inputs would be written to {item.output}: {seen[item.output]} and "
                f"{item.source}"
            )
        if not is_uri(item.source) and Path(item.output).resolve() == Path(item.source).resolve():
            raise ClearsightError(
                f"output {item.output} would overwrite its input; choose another --out"
            )
        seen[item.output] = item.source
        unique.append(item)
    return unique


@contextlib.contextmanager
def local_copy(source: str) -> Iterator[Path]:
    """A local path holding `source`'s bytes: the path itself, or a temporary copy of a URI
    (keeping its suffix, so `read_image` decodes it exactly as a local file)."""
    if not is_uri(source):
        yield Path(source)
        return
    from pyarrow import fs as pafs

    filesystem, path = pafs.FileSystem.from_uri(source)
    with filesystem.open_input_file(path) as fh:
        data: Any = fh.readall()
    fd, tmp = tempfile.mkstemp(suffix=PurePosixPath(path).suffix)
    try:
        with os.fdopen(fd, "wb") as w:
            w.write(data)
        yield Path(tmp)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
