"""Image reading and writing for every clearsight command.

All image I/O goes through this module so that every command sees the same thing: an
HxWx3 RGB array (uint8, or uint16 for 16-bit sources) with EXIF orientation applied, a
pixel limit checked from the header before anything is decoded, and one-line
`ImageReadError`/`ImageWriteError` messages instead of decoder tracebacks. Pillow does most
of the work; OpenCV decodes and encodes 16-bit colour PNG/TIFF, which Pillow reduces to
8 bits. Writes are atomic, so an interrupted run never leaves half an image behind.
"""

from __future__ import annotations

import contextlib
import os
import struct
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

# OpenCV reads its own pixel limit (default 2**30) from the environment once, when the
# library loads. Our limit is checked before OpenCV sees a file, so lift OpenCV's unless the
# user set it. This only takes effect if cv2 has not been imported yet.
os.environ.setdefault("OPENCV_IO_MAX_IMAGE_PIXELS", str(1 << 40))

import cv2  # noqa: E402
import numpy as np  # noqa: E402
import numpy.typing as npt  # noqa: E402
import torch  # noqa: E402
from PIL import Image, ImageOps, UnidentifiedImageError  # noqa: E402

from clearsight.atomic import atomic_path  # noqa: E402
from clearsight.errors import ClearsightError, ImageReadError, ImageWriteError  # noqa: E402

__all__ = [
    "DEFAULT_MAX_PIXELS",
    "IMAGE_EXTENSIONS",
    "MAX_PIXELS_ENV",
    "apply_exif_orientation",
    "image_size",
    "image_to_tensor",
    "is_image_path",
    "list_images",
    "read_image",
    "resolve_max_pixels",
    "tensor_to_image",
    "to_uint8",
    "write_image",
]

IMAGE_EXTENSIONS: tuple[str, ...] = (".png", ".jpg", ".jpeg", ".webp", ".tif", ".tiff", ".bmp")
"""Extensions (lower case) that clearsight reads and writes; matched case-insensitively."""

DEFAULT_MAX_PIXELS = 200_000_000
"""Largest width*height read by default; override with `MAX_PIXELS_ENV` or `max_pixels`."""

MAX_PIXELS_ENV = "CLEARSIGHT_MAX_PIXELS"

_PILLOW_FORMATS = {
    ".png": "PNG",
    ".jpg": "JPEG",
    ".jpeg": "JPEG",
    ".webp": "WEBP",
    ".tif": "TIFF",
    ".tiff": "TIFF",
    ".bmp": "BMP",
}
_SIXTEEN_BIT_FORMATS = ("PNG", "TIFF")
# Only these decoders are tried, whatever the file is called: Pillow's others include
# rarely used parsers and EPS, which runs Ghostscript.
_READ_FORMATS = ("PNG", "JPEG", "WEBP", "TIFF", "BMP")
_EXIF_ORIENTATION_TAG = 0x0112
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


# --------------------------------------------------------------------------- limits


def resolve_max_pixels(max_pixels: int | None = None) -> int:
    """The pixel limit in force: `max_pixels`, else $CLEARSIGHT_MAX_PIXELS, else the default."""
    if max_pixels is None:
        raw = os.environ.get(MAX_PIXELS_ENV, "").strip()
        if not raw:
            return DEFAULT_MAX_PIXELS
        try:
            max_pixels = int(raw)
        except ValueError:
            raise ClearsightError(
                f"{MAX_PIXELS_ENV} must be a positive whole number of pixels, got {raw!r}"
            ) from None
        source = MAX_PIXELS_ENV
    else:
        source = "max_pixels"
    if isinstance(max_pixels, bool) or not isinstance(max_pixels, int) or max_pixels <= 0:
        raise ClearsightError(f"{source} must be a positive whole number, got {max_pixels!r}")
    return max_pixels


def _describe_pixels(pixels: int, limit: int) -> tuple[str, str]:
    """Format a pixel count and the limit so the two visibly differ."""
    mp, mp_limit = f"{pixels / 1e6:.1f}", f"{limit / 1e6:.1f}"
    if limit >= 1_000_000 and mp != mp_limit:
        return f"{mp} megapixels", f"{mp_limit} megapixels"
    return f"{pixels:,} pixels", f"{limit:,} pixels"


def _check_pixels(path: Path, width: int, height: int, limit: int) -> None:
    pixels = width * height
    if pixels > limit:
        size, lim = _describe_pixels(pixels, limit)
        raise ImageReadError(
            f"{path}: {width}x{height} = {size} exceeds the limit of {lim} "
            f"(raise it with --max-pixels or {MAX_PIXELS_ENV})"
        )


_pillow_limit_lock = threading.Lock()
_pillow_limit_depth = 0
_pillow_saved_limit: int | None = None


@contextlib.contextmanager
def _pillow_limit_off() -> Iterator[None]:
    """Switch off Pillow's decompression-bomb check while we read; ours replaces it.

    Pillow warns above ~89 Mpx and refuses above ~179 Mpx, both below our default, and
    checks again while loading some formats. The switch is reference-counted so that
    concurrent reads in threads restore the caller's setting only when the last one ends.
    """
    global _pillow_limit_depth, _pillow_saved_limit
    with _pillow_limit_lock:
        if _pillow_limit_depth == 0:
            _pillow_saved_limit = Image.MAX_IMAGE_PIXELS
            Image.MAX_IMAGE_PIXELS = None
        _pillow_limit_depth += 1
    try:
        yield
    finally:
        with _pillow_limit_lock:
            _pillow_limit_depth -= 1
            if _pillow_limit_depth == 0:
                Image.MAX_IMAGE_PIXELS = _pillow_saved_limit


# --------------------------------------------------------------------------- helpers


def is_image_path(path: str | os.PathLike[str]) -> bool:
    """Whether `path` has one of `IMAGE_EXTENSIONS` (case-insensitive); the file is not opened."""
    return Path(path).suffix.lower() in IMAGE_EXTENSIONS


def _reason(exc: BaseException) -> str:
    """One line saying what went wrong, without the decoder's traceback."""
    if isinstance(exc, UnidentifiedImageError):
        formats = ", ".join(_READ_FORMATS)
        return f"not a recognised image file (corrupt, or not one of {formats})"
    if isinstance(exc, MemoryError):
        return "not enough memory to decode it"
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


def _check_readable_file(path: Path) -> None:
    if not path.exists():
        raise ImageReadError(f"image not found: {path}")
    if path.is_dir():
        raise ImageReadError(f"{path}: is a directory, not an image file")
    if not path.is_file():
        raise ImageReadError(f"{path}: not a regular file")
    if path.stat().st_size == 0:
        raise ImageReadError(f"{path}: file is empty")


def _png_exif_chunk(fp: Any) -> bytes | None:
    """The eXIf chunk of a PNG file, found by skipping from chunk header to chunk header."""
    fp.seek(0)
    if fp.read(8) != _PNG_SIGNATURE:
        return None
    while True:
        head = fp.read(8)
        if len(head) < 8:
            return None
        length, kind = struct.unpack(">I4s", head)
        if kind == b"eXIf":
            data: bytes = fp.read(length)
            return data if len(data) == length else None
        if kind == b"IEND":
            return None
        fp.seek(length + 4, os.SEEK_CUR)  # data and CRC


def _exif_orientation(im: Image.Image) -> int:
    """EXIF orientation (1-8) of an opened, not yet decoded image; 1 if absent or invalid.

    Pillow's PNG reader decodes the whole image to find an eXIf chunk placed after the
    pixel data, so for PNG the chunk is located by reading chunk headers instead and the
    base-class `getexif` (no decode) reads it, XMP fallback included, as Pillow would.
    """
    if im.format == "PNG":
        if "exif" not in im.info and im.fp is not None:
            pos = im.fp.tell()
            try:
                chunk = _png_exif_chunk(im.fp)
            finally:
                im.fp.seek(pos)
            if chunk:
                im.info["exif"] = b"Exif\x00\x00" + chunk
        exif = Image.Image.getexif(im)
    else:
        exif = im.getexif()
    value = exif.get(_EXIF_ORIENTATION_TAG, 1)
    return value if isinstance(value, int) and 1 <= value <= 8 else 1


def apply_exif_orientation(img: np.ndarray, orientation: int) -> np.ndarray:
    """Return `img` (HxW or HxWxC) as displayed under EXIF `orientation` (1-8).

    Matches Pillow's `ImageOps.exif_transpose`; unknown values leave the image as is.
    """
    if orientation == 2:
        out = img[:, ::-1]
    elif orientation == 3:
        out = img[::-1, ::-1]
    elif orientation == 4:
        out = img[::-1]
    elif orientation == 5:
        out = img.swapaxes(0, 1)
    elif orientation == 6:
        out = np.rot90(img, k=-1)
    elif orientation == 7:
        out = img.swapaxes(0, 1)[::-1, ::-1]
    elif orientation == 8:
        out = np.rot90(img, k=1)
    else:
        out = img
    return np.ascontiguousarray(out)


def _is_sixteen_bit_colour(im: Image.Image) -> bool:
    """Whether the header says 16-bit samples that Pillow would reduce to 8 bits.

    16-bit grayscale opens as mode 'I;16*' and Pillow keeps it; 16-bit RGB, RGBA and
    gray+alpha open as 8-bit modes, and only the raw mode or the TIFF BitsPerSample tag
    tells them apart.
    """
    if im.format not in _SIXTEEN_BIT_FORMATS or im.mode.startswith("I") or im.mode == "F":
        return False
    for tile in im.tile:
        args = tile.args
        rawmode = args if isinstance(args, str) else (args[0] if args else "")
        if isinstance(rawmode, str) and ";16" in rawmode:
            return True
    tags = getattr(im, "tag_v2", None)
    if tags is not None:
        bits = tags.get(258, (8,))
        bits = bits if isinstance(bits, tuple) else (bits,)
        return max(bits, default=8) > 8
    return False


def _gray_to_rgb(gray: np.ndarray) -> np.ndarray:
    return np.repeat(gray[:, :, None], 3, axis=2)


def _decode_with_pillow(im: Image.Image, path: Path) -> np.ndarray:
    im.load()
    ImageOps.exif_transpose(im, in_place=True)
    mode = im.mode
    if mode == "RGB":
        return np.array(im)
    if mode in ("RGBA", "RGBX"):
        return np.ascontiguousarray(np.asarray(im)[:, :, :3])
    if mode == "L":
        return _gray_to_rgb(np.asarray(im))
    if mode == "LA":
        return _gray_to_rgb(np.asarray(im)[:, :, 0])
    if mode == "I" or mode.startswith("I;16"):
        gray = np.asarray(im)
        if gray.dtype != np.dtype(np.uint16):
            gray = np.clip(gray, 0, 65535).astype(np.uint16)
        return _gray_to_rgb(gray)
    if mode == "F":
        raise ImageReadError(f"{path}: 32-bit floating-point images are not supported")
    # P, PA, 1, CMYK, YCbCr, LAB, HSV, RGBa, ...: Pillow knows the colour model.
    return np.array(im.convert("RGB"))


def _reset_tiff_orientation(buf: np.ndarray) -> None:
    """Set the first IFD's Orientation tag to 1 in the file bytes `buf`, in place.

    OpenCV's TIFF reader applies the tag itself (whatever the flags; its PNG reader does
    not under IMREAD_UNCHANGED), and whether it does has changed between versions. Resetting
    the tag makes it return the stored layout, which we then orient ourselves.
    """
    head = buf[:16].tobytes()
    endian = {b"II": "<", b"MM": ">"}.get(head[:2])
    if endian is None or len(head) < 16:
        return
    magic = struct.unpack(endian + "H", head[2:4])[0]
    if magic == 42:  # classic TIFF: 2-byte count, 12-byte entries
        ifd = struct.unpack(endian + "I", head[4:8])[0]
        count_fmt, entry_size, value_at = "H", 12, 8
    elif magic == 43:  # BigTIFF: 8-byte count, 20-byte entries
        ifd = struct.unpack(endian + "Q", head[8:16])[0]
        count_fmt, entry_size, value_at = "Q", 20, 12
    else:
        return
    count_size = struct.calcsize(count_fmt)
    if ifd + count_size > buf.size:
        return
    count = struct.unpack(endian + count_fmt, buf[ifd : ifd + count_size].tobytes())[0]
    for i in range(count):
        pos = ifd + count_size + i * entry_size
        if pos + entry_size > buf.size:
            return
        tag, kind = struct.unpack(endian + "HH", buf[pos : pos + 4].tobytes())
        if tag == _EXIF_ORIENTATION_TAG:
            value = {3: struct.pack(endian + "H", 1), 4: struct.pack(endian + "I", 1)}.get(kind)
            if value is not None:
                buf[pos + value_at : pos + value_at + len(value)] = np.frombuffer(value, np.uint8)
            return


def _decode_with_opencv(
    path: Path, fmt: str | None, stored: tuple[int, int], orientation: int
) -> np.ndarray:
    width, height = stored
    data = np.fromfile(path, dtype=np.uint8)  # bytes, not a path: non-ASCII names work
    if fmt == "TIFF" and orientation != 1:
        _reset_tiff_orientation(data)
    arr = cv2.imdecode(data, cv2.IMREAD_UNCHANGED)
    if arr is None:
        raise ImageReadError(f"{path}: cannot decode 16-bit image (corrupt or truncated)")
    if arr.shape[:2] != (height, width):
        raise ImageReadError(
            f"{path}: decoded size {arr.shape[1]}x{arr.shape[0]} does not match "
            f"the header's {width}x{height}"
        )
    if arr.dtype not in (np.dtype(np.uint8), np.dtype(np.uint16)):
        raise ImageReadError(f"{path}: unsupported sample type {arr.dtype}")
    if arr.ndim == 2:
        rgb = _gray_to_rgb(arr)
    elif arr.shape[2] in (1, 2):
        rgb = _gray_to_rgb(arr[:, :, 0])
    else:
        rgb = arr[:, :, 2::-1]  # BGR or BGRA -> RGB, alpha dropped
    return apply_exif_orientation(rgb, orientation)


# --------------------------------------------------------------------------- reading


def _stored_size(im: Image.Image) -> tuple[int, int]:
    """(width, height) of the pixel data as stored, before any EXIF orientation.

    Recent Pillow reports a TIFF's size already oriented (and orients it while loading);
    the TIFF tags still hold the stored size.
    """
    tags = getattr(im, "tag_v2", None)
    if tags is not None:
        width, height = tags.get(256), tags.get(257)
        if isinstance(width, int) and isinstance(height, int):
            return width, height
    return im.size


def _displayed_size(im: Image.Image) -> tuple[int, int]:
    width, height = _stored_size(im)
    return (height, width) if _exif_orientation(im) >= 5 else (width, height)


def read_image(path: str | os.PathLike[str], max_pixels: int | None = None) -> np.ndarray:
    """Read an image as a contiguous HxWx3 RGB array.

    The dtype is uint8 for 8-bit sources and uint16 for 16-bit PNG/TIFF (grayscale is
    replicated to three channels). EXIF orientation is applied. Palette, 1-bit, CMYK and
    other colour models are converted to RGB. Alpha is dropped and the colour channels
    are kept as stored, not composited onto a background: restoration models work on the
    stored colours, and compositing would invent values under transparent pixels.

    width*height is checked against `max_pixels` (see `resolve_max_pixels`) from the header,
    before any pixel is decoded. Every failure raises `ImageReadError` naming the file.
    """
    p = Path(path)
    limit = resolve_max_pixels(max_pixels)
    _check_readable_file(p)
    try:
        with _pillow_limit_off(), Image.open(p, formats=_READ_FORMATS) as im:
            width, height = _displayed_size(im)
            _check_pixels(p, width, height, limit)
            if _is_sixteen_bit_colour(im):
                fmt, stored, orientation = im.format, _stored_size(im), _exif_orientation(im)
                im.close()
                return _decode_with_opencv(p, fmt, stored, orientation)
            return _decode_with_pillow(im, p)
    except ClearsightError:
        raise
    except Exception as exc:
        raise ImageReadError(f"{p}: cannot read image ({_reason(exc)})") from exc


def image_size(path: str | os.PathLike[str]) -> tuple[int, int]:
    """(width, height) as `read_image` would return it, from the header only.

    EXIF orientations 5-8 swap the two, as they do in `read_image`. No pixel limit applies.
    """
    p = Path(path)
    _check_readable_file(p)
    try:
        with _pillow_limit_off(), Image.open(p, formats=_READ_FORMATS) as im:
            return _displayed_size(im)
    except ClearsightError:
        raise
    except Exception as exc:
        raise ImageReadError(f"{p}: cannot read image ({_reason(exc)})") from exc


def list_images(
    inputs: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], recursive: bool = False
) -> list[Path]:
    """Expand files and folders into a list of image files.

    Files are kept as given, in order; they must exist and have an image extension.
    Folders contribute their image files sorted by name (by relative path when
    `recursive`). Hidden files and folders (name starting with '.') are skipped: they
    include macOS '._*' resource forks and the temporary files of in-progress atomic
    writes. A file reached twice is listed once. A folder without images is an error.
    """
    items = [inputs] if isinstance(inputs, str | os.PathLike) else list(inputs)
    if not items:
        raise ImageReadError("no input images given")
    found: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            files = _images_in_folder(p, recursive)
            if not files:
                looked = ", ".join(IMAGE_EXTENSIONS)
                raise ImageReadError(f"no images found in {p} (looked for {looked})")
            found.extend(files)
        elif p.exists():
            if not is_image_path(p):
                raise ImageReadError(
                    f"{p}: not an image file (expected one of {', '.join(IMAGE_EXTENSIONS)})"
                )
            found.append(p)
        else:
            raise ImageReadError(f"image not found: {p}")
    seen: set[Path] = set()
    unique: list[Path] = []
    for f in found:
        key = f.resolve()
        if key not in seen:
            seen.add(key)
            unique.append(f)
    return unique


def _images_in_folder(folder: Path, recursive: bool) -> list[Path]:
    candidates = folder.rglob("*") if recursive else folder.iterdir()
    files = [
        f
        for f in candidates
        if is_image_path(f)
        and not any(part.startswith(".") for part in f.relative_to(folder).parts)
        and f.is_file()
    ]
    return sorted(files, key=lambda f: f.relative_to(folder).parts)


# --------------------------------------------------------------------------- writing


def _to_hwc_array(img: np.ndarray | torch.Tensor) -> np.ndarray:
    """HxW or HxWx3 numpy view of `img`; tensors are [3,H,W], [1,3,H,W] (or 1 channel)."""
    if isinstance(img, torch.Tensor):
        t = img.detach().cpu()
        if t.ndim == 4 and t.shape[0] == 1:
            t = t[0]
        if t.ndim != 3 or t.shape[0] not in (1, 3):
            raise ValueError(f"expected a [3,H,W] or [1,3,H,W] tensor, got {tuple(img.shape)}")
        if t.dtype in (torch.float16, torch.bfloat16):
            t = t.float()
        arr = t.numpy().transpose(1, 2, 0)
    elif isinstance(img, np.ndarray):
        arr = img
    else:
        raise TypeError(f"expected a numpy array or torch tensor, got {type(img).__name__}")
    if arr.ndim == 3 and arr.shape[2] == 1:
        arr = arr[:, :, 0]
    if not (arr.ndim == 2 or (arr.ndim == 3 and arr.shape[2] == 3)):
        raise ValueError(f"expected an HxW or HxWx3 image, got shape {arr.shape}")
    return arr


def _float_to_int(arr: np.ndarray, dtype: type[np.integer[Any]]) -> np.ndarray:
    """Clip floats to [0, 1], scale to the full range of `dtype` and round."""
    peak = float(np.iinfo(dtype).max)
    work = arr.astype(np.float32) if arr.dtype.itemsize < 8 else arr.astype(np.float64)
    work = np.nan_to_num(work, nan=0.0)
    np.clip(work, 0.0, 1.0, out=work)
    work *= peak
    np.rint(work, out=work)
    return work.astype(dtype)


def to_uint8(img: np.ndarray) -> np.ndarray:
    """An image's pixels as uint8: the one 16-bit/float to 8-bit conversion of the project.

    uint8 is returned as is; uint16 goes to the nearest 8-bit level, `rint(x / 257)`, so that
    65535 -> 255 and 257 * k -> k exactly (a shift by 8 bits would truncate instead); floats
    are taken as [0, 1], clipped, scaled by 255 and rounded, as `write_image` saves them (NaN
    becomes 0). Evaluation, metric presets, the data audit and synthesis all convert here, so
    a 16-bit target scores the same as the 8-bit file it would be saved as.
    """
    if img.dtype == np.uint8:
        return img
    if img.dtype == np.uint16:
        return np.rint(img / 257.0).astype(np.uint8)
    if img.dtype.kind == "f":
        return _float_to_int(img, np.uint8)
    raise TypeError(f"expected uint8, uint16 or float image data, got {img.dtype}")


def _quantise(arr: np.ndarray, bit_depth: int | None) -> np.ndarray:
    """Convert to uint8/uint16 for the requested bit depth (default: keep integer depth)."""
    if arr.dtype.kind == "f" and bit_depth == 16:
        return _float_to_int(arr, np.uint16)
    if arr.dtype == np.uint8 and bit_depth == 16:
        return arr.astype(np.uint16) * 257
    if arr.dtype == np.uint16 and bit_depth != 8:
        return arr
    return to_uint8(arr)


def write_image(
    path: str | os.PathLike[str],
    img: np.ndarray | torch.Tensor,
    *,
    bit_depth: int | None = None,
    quality: int = 95,
) -> None:
    """Write an RGB image atomically; the format follows the extension.

    `img` is HxWx3 (or HxW, written as grayscale) uint8/uint16, or float in [0, 1] as a numpy
    array or a [3,H,W]/[1,3,H,W] tensor; floats are clipped, scaled and rounded. The bit
    depth defaults to the array's (8 for floats); 16 bits only for PNG and TIFF. `quality`
    (1-100) applies to JPEG and WebP; WebP is lossless at 100. Parent folders are created.
    Raises `ImageWriteError` for an unsupported extension or bit depth, or a failed write.
    """
    p = Path(path)
    fmt = _PILLOW_FORMATS.get(p.suffix.lower())
    if fmt is None:
        raise ImageWriteError(
            f"{p}: unsupported image extension {p.suffix!r} "
            f"(supported: {', '.join(IMAGE_EXTENSIONS)})"
        )
    if bit_depth not in (None, 8, 16):
        raise ImageWriteError(f"{p}: bit depth must be 8 or 16, got {bit_depth!r}")
    if isinstance(quality, bool) or not isinstance(quality, int) or not 1 <= quality <= 100:
        raise ValueError(f"quality must be an integer in 1..100, got {quality!r}")
    arr = _quantise(_to_hwc_array(img), bit_depth)
    if arr.dtype == np.uint16 and fmt not in _SIXTEEN_BIT_FORMATS:
        raise ImageWriteError(
            f"{p}: 16-bit images can only be written as PNG or TIFF, not {fmt} "
            "(write 8 bits with bit_depth=8, or use .png/.tif)"
        )
    try:
        with atomic_path(p) as tmp:
            if arr.dtype == np.uint16:
                _encode_with_opencv(arr, tmp, fmt)
            else:
                _encode_with_pillow(arr, tmp, fmt, quality)
    except ClearsightError:
        raise
    except Exception as exc:
        raise ImageWriteError(f"{p}: cannot write image ({_reason(exc)})") from exc


def _encode_with_pillow(arr: np.ndarray, tmp: Path, fmt: str, quality: int) -> None:
    params: dict[str, Any] = {}
    if fmt == "JPEG":
        params["quality"] = quality
    elif fmt == "WEBP":
        params["quality"] = quality
        params["lossless"] = quality == 100
    Image.fromarray(np.ascontiguousarray(arr)).save(tmp, format=fmt, **params)


def _encode_with_opencv(arr: np.ndarray, tmp: Path, fmt: str) -> None:
    bgr = arr if arr.ndim == 2 else arr[:, :, ::-1]
    ext = ".png" if fmt == "PNG" else ".tiff"
    ok, buf = cv2.imencode(ext, np.ascontiguousarray(bgr))
    if not ok:
        raise OSError(f"OpenCV could not encode a 16-bit {fmt}")
    tmp.write_bytes(buf.tobytes())


# --------------------------------------------------------------------------- tensors


def image_to_tensor(img: np.ndarray) -> torch.Tensor:
    """HxWx3 (or HxW) uint8/uint16 array -> float32 [1,3,H,W] tensor in [0, 1].

    uint8 is divided by 255 and uint16 by 65535; float arrays are taken as already in [0, 1].
    """
    if img.ndim == 2:
        img = _gray_to_rgb(img)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"expected an HxWx3 image, got shape {img.shape}")
    if img.dtype == np.uint8:
        scale = 255.0
    elif img.dtype == np.uint16:
        scale = 65535.0
    elif img.dtype.kind == "f":
        scale = 1.0
    else:
        raise TypeError(f"expected uint8, uint16 or float image data, got {img.dtype}")
    chw = np.ascontiguousarray(img.transpose(2, 0, 1), dtype=np.float32)
    if scale != 1.0:
        chw /= np.float32(scale)
    return torch.from_numpy(chw).unsqueeze(0)


def tensor_to_image(t: torch.Tensor, dtype: npt.DTypeLike = np.uint8) -> np.ndarray:
    """[1,3,H,W] or [3,H,W] float tensor in [0, 1] -> HxWx3 array of `dtype` (uint8/uint16).

    Values are clipped to [0, 1], scaled to the dtype's range and rounded to nearest.
    """
    target = np.dtype(dtype)
    if target not in (np.dtype(np.uint8), np.dtype(np.uint16)):
        raise TypeError(f"dtype must be uint8 or uint16, got {target}")
    arr = _to_hwc_array(t)
    if arr.ndim == 2:
        arr = _gray_to_rgb(arr)
    if arr.dtype.kind != "f":
        raise TypeError(f"expected a floating-point tensor, got {t.dtype}")
    return np.ascontiguousarray(_float_to_int(arr, target.type))
