"""The repository speaks of the product: no tracked file refers to the working sessions it
was built in, to machines lent for a while, to the transfer rules of one such machine, or to
tracker issue numbers. A reader can act on none of those; figures keep their date, machine
and command instead. ONNX Runtime's inference sessions are not meant, nor CSS colours."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO_ROOT

THIS_FILE = Path(__file__).resolve().relative_to(REPO_ROOT).as_posix()

FORBIDDEN = {
    "a working session": re.compile(
        r"\b(?:this|that|same|next|previous|earlier|later|one|each|every) session\b"
        r"|\bthe session's\b"
        r"|\b(?:(?:twenty|thirty|forty)-[a-z]+|first|second|third|fourth|fifth|sixth|seventh"
        r"|eighth|ninth|tenth|eleventh|twelfth|[a-z]+teenth|twentieth|thirtieth) session\b",
        re.IGNORECASE,
    ),
    "a lent or borrowed machine": re.compile(r"\blent\b|\bborrowed\b", re.IGNORECASE),
    "a device tool or its time": re.compile(r"\bdevice (?:tool|time|call)s?\b", re.IGNORECASE),
    "one machine's transfer folders": re.compile(r"\bfiles_at\b|\$OUT\b|\bFILES_AT\b"),
    "an issue number": re.compile(
        r"\bissues? ?#?\d+|(?:^|[\s(\[])#\d{2,4}(?=[)\]\s,:.]|'s|$)", re.IGNORECASE
    ),
}


def tracked_text_files() -> list[str]:
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        pytest.skip("not a git checkout: no list of tracked files to search")
    return [p for p in out.decode().split("\0") if p and p != THIS_FILE]


def wording_problems(path: str, text: str) -> list[str]:
    """`path:line: what (the line)` for each forbidden phrase in `text`."""
    found = []
    for n, line in enumerate(text.splitlines(), 1):
        for what, pattern in FORBIDDEN.items():
            if pattern.search(line):
                found.append(f"{path}:{n}: {what}: {line.strip()[:120]}")
    return found


def test_no_tracked_file_speaks_of_sessions_lent_machines_or_issue_numbers():
    problems = []
    for rel in tracked_text_files():
        path = REPO_ROOT / rel
        if not path.is_file():
            continue  # deleted in the working tree
        data = path.read_bytes()
        if b"\0" in data[:8192]:
            continue  # binary: images, weights, checkpoints
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue
        problems += wording_problems(rel, text)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    "line",
    [
        "Version 19 (shipped 2026-12-04, twenty-ninth session)",
        "two legs on the session's GPU",
        "earlier the same session",
        "committed so the next session continues it",
        "On a lent GPU",
        "a borrowed machine",
        "minutes of device time",
        "with the device tool",
        "The reply's files_at folder holds $OUT's files",
        "issue #51's target",
        "Issue 7's speed targets",
        "the hardening round (#52)",
        "measured in #52, then",
    ],
)
def test_the_patterns_catch_what_they_must(line: str):
    assert wording_problems("x", line)


@pytest.mark.parametrize(
    "line",
    [
        "session = make_session(data)",
        "ort.InferenceSession(path, sess_options)",
        "the session options `clearsight` uses",
        "a long-lived process (a server, a test session)",
        '@pytest.fixture(scope="session")',
        'body{color:#222;background:#fafafa} stroke="#444" box-shadow:0 0 3px #000;',
        "[Architecture](architecture.md#54-speed-of-the-reference-code)",
        "### 5.1 Parameter counts",
        "one NVIDIA H200, 2026-12-04, 16.7 steps/s",
        "an excellent, silent result",
        "the pcm_s16le audio stream #1 of in.mkv",
    ],
)
def test_the_patterns_leave_the_product_alone(line: str):
    assert not wording_problems("x", line)
