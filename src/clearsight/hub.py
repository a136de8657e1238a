"""`hf://` references: files and clearsight artifacts published on the Hugging Face Hub.

- `hf://OWNER/REPO/FILE[@REVISION]`: one file (`clearsight import torch` weights);
- `hf://OWNER/REPO[@REVISION]`: a whole repository holding a clearsight artifact (a
  `config.json` beside the weights; `--model`, `from_pretrained`).

Both go through `huggingface_hub` (the `hub` extra), so its cache (`HF_HUB_CACHE`,
`HF_HOME`), its offline mode (`HF_HUB_OFFLINE=1`) and its token handling apply unchanged.
Whatever fails (no network, no such repository, revision or file, the library missing) is
one `HubError` line naming the reference.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from clearsight.errors import ClearsightError

PREFIX = "hf://"
_PART = r"[A-Za-z0-9][A-Za-z0-9._-]*"
_REF = re.compile(
    rf"^hf://(?P<owner>{_PART})/(?P<repo>{_PART})(?:/(?P<file>[^@]+))?(?:@(?P<rev>[^@/]+))?$"
)


class HubError(ClearsightError):
    """An `hf://` reference that could not be resolved (one line, names the reference)."""


@dataclass(frozen=True)
class HubRef:
    """A parsed `hf://` reference."""

    repo_id: str
    filename: str | None
    revision: str | None

    def __str__(self) -> str:
        tail = f"/{self.filename}" if self.filename else ""
        rev = f"@{self.revision}" if self.revision else ""
        return f"{PREFIX}{self.repo_id}{tail}{rev}"


def is_hub_ref(ref: object) -> bool:
    return isinstance(ref, str) and ref.startswith(PREFIX)


def parse_hub_ref(ref: str, *, want_file: bool) -> HubRef:
    """`ref` parsed; a file is required (`want_file`) or forbidden."""
    m = _REF.match(ref)
    form = "hf://OWNER/REPO/FILE[@REVISION]" if want_file else "hf://OWNER/REPO[@REVISION]"
    if m is None or bool(m["file"]) != want_file or ".." in (m["file"] or "").split("/"):
        raise HubError(f"{ref}: not a Hugging Face reference of the form {form}")
    return HubRef(f"{m['owner']}/{m['repo']}", m["file"], m["rev"])


def _hub():  # type: ignore[no-untyped-def]
    try:
        import huggingface_hub
    except ImportError:
        raise HubError(
            "hf:// references need huggingface_hub: pip install 'clearsight[hub]'"
        ) from None
    return huggingface_hub


def _why(exc: Exception) -> str:
    text = str(exc).strip().splitlines()
    first = next((line for line in text if line.strip()), "")
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def download_file(ref: str) -> Path:
    """The local path of the file `hf://OWNER/REPO/FILE[@REVISION]` (downloaded into the
    library's cache, or found there offline)."""
    parsed = parse_hub_ref(ref, want_file=True)
    hub = _hub()
    try:
        return Path(hub.hf_hub_download(parsed.repo_id, parsed.filename, revision=parsed.revision))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing: all one line
        raise HubError(
            f"{ref}: could not get the file from the Hugging Face Hub ({_why(exc)})"
        ) from None


def download_artifact(ref: str) -> Path:
    """The local folder of the clearsight artifact published as `hf://OWNER/REPO[@REV]`."""
    parsed = parse_hub_ref(ref, want_file=False)
    hub = _hub()
    try:
        folder = Path(hub.snapshot_download(parsed.repo_id, revision=parsed.revision))
    except Exception as exc:  # noqa: BLE001 - network, auth, missing: all one line
        raise HubError(
            f"{ref}: could not get the repository from the Hugging Face Hub ({_why(exc)})"
        ) from None
    if not (folder / "config.json").is_file():
        raise HubError(f"{ref}: no config.json: not a clearsight artifact")
    return folder
