"""Atomic file writes: a reader sees the old file or the new one, never half of one.

Every output goes to a temporary name beside its target, then is renamed onto it. The
temporary names follow one pattern, `.<stem>.clearsight-<pid>-<token>.tmp<suffix>`, so a
later run can recognise what a killed one left behind and `sweep_leftovers` can remove it
without touching anything else (docs/reliability.md).

Modes: temporary files and folders are created with 0o666 / 0o777 and the kernel applies
the umask (and any default ACL), so outputs get exactly what a plain `open()` or `mkdir`
would give them, 0o644 / 0o755 under umask 022, instead of `mkstemp`'s private 0o600.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import secrets
import shutil
import stat
import time
from collections.abc import Iterator
from pathlib import Path
from types import TracebackType
from typing import Self

TEMP_TAG = "clearsight"
# .<stem>.clearsight-<pid>-<token>.tmp<suffix>; the suffix keeps the target's extension so
# format-sniffing writers (Pillow, OpenCV) pick the right encoder.
_LEFTOVER = re.compile(rf"^\..*\.{TEMP_TAG}-(?P<pid>\d+)-[0-9a-f]+\.tmp(\.[^/]*)?$")
# When this process started writing, as far as the sweep is concerned: leftovers older than
# this cannot belong to a write of ours.
RUN_STARTED = time.time()


def temp_path_for(path: str | os.PathLike[str], suffix: str | None = None) -> Path:
    """A fresh temporary path beside `path` in the recognisable pattern (nothing created)."""
    target = Path(path)
    tail = target.suffix if suffix is None else suffix
    name = f".{target.stem}.{TEMP_TAG}-{os.getpid()}-{secrets.token_hex(4)}.tmp{tail}"
    return target.with_name(name)


def is_leftover(name: str) -> bool:
    """True when `name` is one of this project's temporary names."""
    return _LEFTOVER.match(name) is not None


def _create_file(target: Path) -> tuple[Path, int]:
    """Create an empty temporary file beside `target`; return it and its mode.

    The mode is 0o666 less the umask, applied by the kernel: reading the umask would take
    `os.umask` set-and-restore, which is process-wide and races with other threads.
    """
    for _ in range(100):
        tmp = temp_path_for(target)
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        except FileExistsError:
            continue
        try:
            mode = stat.S_IMODE(os.fstat(fd).st_mode)
        finally:
            os.close(fd)
        return tmp, mode
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target.parent))


def _create_dir(target: Path) -> Path:
    """Create an empty temporary folder beside `target`, mode 0o777 less the umask."""
    for _ in range(100):
        tmp = temp_path_for(target, suffix="")
        try:
            tmp.mkdir(0o777)
        except FileExistsError:
            continue
        return tmp
    raise FileExistsError(errno.EEXIST, "no free temporary name", str(target.parent))


def naming_target(exc: OSError, target: Path) -> OSError:
    """`exc` naming `target`: the temporary name is ours, not a path the user knows, so an
    error creating or renaming it names the file that was to be written."""
    if exc.errno is None:
        return exc
    return type(exc)(exc.errno, exc.strerror, str(target))


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary path beside `path`; on success it is renamed onto `path`.

    The temporary file exists (empty) and keeps the target's suffix. Writers may truncate
    or replace it; either way the result gets the mode a plain `open()` would give. On any exception
    it is removed and the previous file at `path`, if any, is untouched.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp, mode = _create_file(target)
    except OSError as exc:
        raise naming_target(exc, target) from None
    try:
        yield tmp
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
            # Some writers replace the file with a private one (safetensors writes 0o600).
            if stat.S_IMODE(os.fstat(fh.fileno()).st_mode) != mode:
                os.fchmod(fh.fileno(), mode)
        try:
            os.replace(tmp, target)
        except OSError as exc:
            raise naming_target(exc, target) from None
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            tmp.unlink()
        raise


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike[str]) -> Iterator[Path]:
    """Yield a temporary folder beside `path`; on success it replaces the folder at `path`.

    An existing folder is first renamed aside (to a temporary name), then removed once the
    new one is in place: a crash in between leaves either folder, never a mix of both.
    """
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        tmp = _create_dir(target)
    except OSError as exc:
        raise naming_target(exc, target) from None
    try:
        yield tmp
        old = None
        if target.exists():
            old = temp_path_for(target, suffix=".old")
            os.replace(target, old)
        os.replace(tmp, target)
        if old is not None:
            _remove(old)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_bytes(path: str | os.PathLike[str], data: bytes) -> None:
    """Write `data` to `path` atomically."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write UTF-8 `text` to `path` atomically."""
    atomic_write_bytes(path, text.encode("utf-8"))


def _remove(p: Path) -> None:
    """Remove a file, link or folder tree; one that is already gone is fine."""
    if p.is_dir() and not p.is_symlink():
        shutil.rmtree(p, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            p.unlink()


def _pid_alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's live process
        return True
    return True


def sweep_leftovers(
    folder: str | os.PathLike[str], *, before: float | None = None, recursive: bool = False
) -> list[Path]:
    """Remove temporary files and folders that killed clearsight writes left in `folder`.

    Only names in the project's pattern are candidates, and of those only ones last
    modified before `before` (default: when this process started) whose writer's pid is
    not a live process here: another run may be writing the newer ones, or the ones of a
    live pid. (The pid test cannot see other hosts on a shared folder; the age test covers
    them.) Returns the removed paths. A missing folder has nothing to sweep.
    """
    root = Path(folder)
    cutoff = RUN_STARTED if before is None else before
    removed: list[Path] = []
    try:
        entries = list(root.iterdir())
    except (FileNotFoundError, NotADirectoryError):
        return removed
    for p in entries:
        m = _LEFTOVER.match(p.name)
        if m is None:
            if recursive and p.is_dir() and not p.is_symlink():
                removed += sweep_leftovers(p, before=cutoff, recursive=True)
            continue
        try:
            st = p.lstat()
        except FileNotFoundError:  # its writer finished or cleaned up meanwhile
            continue
        if st.st_mtime >= cutoff or _pid_alive(int(m["pid"])):
            continue
        _remove(p)
        removed.append(p)
    return removed


class ClosedOrAborted:
    """A writer as a context manager: `close()` (publish) when the block ends well,
    `abort(exc)` (discard, nothing half-written left) when it raises. Subclasses define both."""

    def close(self) -> None:
        raise NotImplementedError

    def abort(self, exc: BaseException | None = None) -> None:
        raise NotImplementedError

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc is None:
            self.close()
        else:
            self.abort(exc)
