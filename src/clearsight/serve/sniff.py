"""What an upload is, from its first bytes (never from the name the client gave it)."""

from __future__ import annotations

# format -> the extension the decoder is handed (a fixed, server-chosen file name)
_SIGNATURES: tuple[tuple[str, str], ...] = (
    ("png", ".png"),
    ("jpeg", ".jpg"),
    ("webp", ".webp"),
    ("tiff", ".tif"),
    ("bmp", ".bmp"),
)
SUPPORTED = ", ".join(name.upper() for name, _ in _SIGNATURES)


def sniff_image(data: bytes) -> str | None:
    """The image format of `data` ("png", "jpeg", "webp", "tiff", "bmp"), or None."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "png"
    if data.startswith(b"\xff\xd8\xff"):
        return "jpeg"
    if len(data) >= 12 and data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "webp"
    if data[:4] in (b"II*\x00", b"MM\x00*"):
        return "tiff"
    if data[:2] == b"BM" and len(data) >= 26:
        return "bmp"
    return None


def extension(fmt: str) -> str:
    """The file extension used for a sniffed format."""
    return dict(_SIGNATURES)[fmt]
