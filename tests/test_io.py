"""Tests for clearsight.io: every image is generated here, in tmp_path."""

from __future__ import annotations

import io as stdio
import os
import struct
import time
import warnings
import zlib
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from PIL import Image, ImageFile, ImageOps

import clearsight.io as cio
from clearsight.errors import ClearsightError, ImageReadError, ImageWriteError
from clearsight.io import (
    DEFAULT_MAX_PIXELS,
    IMAGE_EXTENSIONS,
    apply_exif_orientation,
    image_size,
    image_to_tensor,
    list_images,
    read_image,
    resolve_max_pixels,
    tensor_to_image,
    write_image,
)

H, W = 321, 481  # odd sizes catch stride and transpose mistakes
RNG_SEED = 1234


# --------------------------------------------------------------------------- helpers


def random_rgb(h: int = H, w: int = W, dtype: type = np.uint8, seed: int = RNG_SEED) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.integers(0, np.iinfo(dtype).max, size=(h, w, 3), dtype=dtype, endpoint=True)


def gradient_rgb(h: int = H, w: int = W) -> np.ndarray:
    """A smooth image that JPEG compresses with little error."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 255 * x / (w - 1)
    g = 255 * y / (h - 1)
    b = 127.5 + 100 * np.sin(x / 60.0) * np.cos(y / 45.0)
    return np.rint(np.stack([r, g, b], axis=2)).astype(np.uint8)


def quadrants(h: int = 64, w: int = 96) -> np.ndarray:
    """Four flat colour blocks, no symmetry: any flip or rotation changes it."""
    img = np.zeros((h, w, 3), np.uint8)
    img[: h // 2, : w // 3] = (255, 0, 0)
    img[: h // 2, w // 3 :] = (0, 255, 0)
    img[h // 2 :, : 2 * w // 3] = (0, 0, 255)
    img[h // 2 :, 2 * w // 3 :] = (255, 255, 0)
    return img


def png_chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def exif_bytes(orientation: int) -> bytes:
    exif = Image.Exif()
    exif[0x0112] = orientation
    return exif.tobytes()


def add_png_exif(png: bytes, orientation: int, after_idat: bool = False) -> bytes:
    """Insert an eXIf chunk after IHDR, or just before IEND."""
    chunk = png_chunk(b"eXIf", exif_bytes(orientation)[6:])  # without the b"Exif\0\0" header
    if after_idat:
        iend = png.rindex(b"IEND") - 4
        return png[:iend] + chunk + png[iend:]
    ihdr_end = 8 + 8 + 13 + 4
    return png[:ihdr_end] + chunk + png[ihdr_end:]


def encode16_bgr(img_rgb: np.ndarray, ext: str) -> bytes:
    ok, buf = cv2.imencode(ext, np.ascontiguousarray(img_rgb[:, :, ::-1]))
    assert ok
    return buf.tobytes()


def tiff16_rgb(img: np.ndarray, orientation: int) -> bytes:
    """A minimal uncompressed little-endian 16-bit RGB TIFF with an Orientation tag."""
    h, w, _ = img.shape
    n_entries = 11
    bits_at = 8 + 2 + 12 * n_entries + 4
    data_at = bits_at + 6
    pixels = img.astype("<u2").tobytes()
    short, long_ = 3, 4
    entries = [
        (256, long_, 1, w),
        (257, long_, 1, h),
        (258, short, 3, bits_at),
        (259, short, 1, 1),  # no compression
        (262, short, 1, 2),  # RGB
        (273, long_, 1, data_at),
        (274, short, 1, orientation),
        (277, short, 1, 3),
        (278, long_, 1, h),
        (279, long_, 1, len(pixels)),
        (284, short, 1, 1),  # interleaved
    ]
    assert len(entries) == n_entries
    ifd = struct.pack("<H", n_entries)
    for tag, kind, count, value in entries:
        if kind == short and count == 1:
            ifd += struct.pack("<HHIHH", tag, kind, count, value, 0)
        else:
            ifd += struct.pack("<HHII", tag, kind, count, value)
    ifd += struct.pack("<I", 0)
    return b"II*\x00" + struct.pack("<I", 8) + ifd + struct.pack("<3H", 16, 16, 16) + pixels


def assert_one_line_naming(exc: pytest.ExceptionInfo[BaseException], path: Path) -> None:
    msg = str(exc.value)
    assert str(path) in msg
    assert "\n" not in msg
    assert "Traceback" not in msg


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("ext", [".png", ".tif", ".tiff", ".bmp", ".webp", ".PNG"])
def test_8bit_lossless_round_trip_is_exact(tmp_path: Path, ext: str) -> None:
    img = random_rgb()
    path = tmp_path / f"img{ext}"
    write_image(path, img, quality=100)
    out = read_image(path)
    assert out.dtype == np.uint8
    assert out.shape == (H, W, 3)
    assert out.flags.c_contiguous and out.flags.writeable
    np.testing.assert_array_equal(out, img)


@pytest.mark.parametrize("ext", [".jpg", ".jpeg"])
def test_jpeg_round_trip_is_close(tmp_path: Path, ext: str) -> None:
    img = gradient_rgb()
    path = tmp_path / f"img{ext}"
    write_image(path, img, quality=95)
    out = read_image(path)
    assert out.shape == (H, W, 3) and out.dtype == np.uint8
    err = np.abs(out.astype(np.int16) - img.astype(np.int16))
    assert err.mean() < 1.5
    # and the quality knob is really passed: a low quality is visibly worse and smaller
    low = tmp_path / f"low{ext}"
    write_image(low, img, quality=10)
    assert low.stat().st_size < path.stat().st_size
    low_err = np.abs(read_image(low).astype(np.int16) - img.astype(np.int16)).mean()
    assert low_err > err.mean()


def test_webp_lossy_below_100(tmp_path: Path) -> None:
    img = random_rgb(64, 64)
    write_image(tmp_path / "a.webp", img, quality=80)
    assert not np.array_equal(read_image(tmp_path / "a.webp"), img)


@pytest.mark.parametrize("ext", [".png", ".tif"])
def test_16bit_rgb_round_trip_is_exact(tmp_path: Path, ext: str) -> None:
    img = random_rgb(dtype=np.uint16)
    assert img.max() > 255
    path = tmp_path / f"img16{ext}"
    write_image(path, img)
    # the file really holds 16-bit samples in RGB order (OpenCV reads BGR)
    on_disk = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert on_disk.dtype == np.uint16
    np.testing.assert_array_equal(on_disk[:, :, ::-1], img)
    out = read_image(path)
    assert out.dtype == np.uint16 and out.shape == (H, W, 3)
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, img)


def test_16bit_rgba_png_drops_alpha_keeps_depth(tmp_path: Path) -> None:
    rgb = random_rgb(31, 17, dtype=np.uint16)
    alpha = np.full((31, 17, 1), 1000, np.uint16)
    bgra = np.concatenate([rgb[:, :, ::-1], alpha], axis=2)
    path = tmp_path / "rgba16.png"
    assert cv2.imwrite(str(path), bgra)
    np.testing.assert_array_equal(read_image(path), rgb)


@pytest.mark.parametrize("ext", [".png", ".tif"])
def test_16bit_grayscale_reads_as_uint16_rgb(tmp_path: Path, ext: str) -> None:
    rng = np.random.default_rng(7)
    gray = rng.integers(256, 65536, size=(45, 67), dtype=np.uint16)
    path = tmp_path / f"gray16{ext}"
    Image.fromarray(gray).save(path)
    out = read_image(path)
    assert out.dtype == np.uint16 and out.shape == (45, 67, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[:, :, c], gray)


def test_float_and_tensor_inputs_are_clipped_and_rounded(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    x = rng.uniform(-0.2, 1.2, size=(23, 29, 3)).astype(np.float32)
    expected8 = np.rint(np.clip(x, 0, 1) * 255).astype(np.uint8)
    expected16 = np.rint(np.clip(x.astype(np.float64), 0, 1) * 65535).astype(np.uint16)

    write_image(tmp_path / "f.png", x)
    np.testing.assert_array_equal(read_image(tmp_path / "f.png"), expected8)

    chw = torch.from_numpy(x.transpose(2, 0, 1).copy())
    write_image(tmp_path / "t3.png", chw)
    write_image(tmp_path / "t4.png", chw.unsqueeze(0))
    np.testing.assert_array_equal(read_image(tmp_path / "t3.png"), expected8)
    np.testing.assert_array_equal(read_image(tmp_path / "t4.png"), expected8)

    write_image(tmp_path / "t16.tif", chw.unsqueeze(0), bit_depth=16)
    out16 = read_image(tmp_path / "t16.tif")
    assert out16.dtype == np.uint16
    assert np.abs(out16.astype(np.int64) - expected16.astype(np.int64)).max() <= 1


def test_grayscale_array_is_written_and_read_back_as_rgb(tmp_path: Path) -> None:
    gray = random_rgb(20, 30)[:, :, 0]
    write_image(tmp_path / "g.png", gray)
    assert Image.open(tmp_path / "g.png").mode == "L"
    out = read_image(tmp_path / "g.png")
    np.testing.assert_array_equal(out, np.repeat(gray[:, :, None], 3, axis=2))


def test_write_creates_parent_folders_and_non_ascii_names(tmp_path: Path) -> None:
    path = tmp_path / "a" / "b" / "ünïcødé 图像.png"
    img16 = random_rgb(9, 11, dtype=np.uint16)
    write_image(path, img16)
    np.testing.assert_array_equal(read_image(path), img16)
    assert image_size(path) == (11, 9)


# --------------------------------------------------------------------------- colour order


@pytest.mark.parametrize("ext", [".png", ".bmp", ".tif", ".webp", ".jpg"])
def test_pure_red_written_by_pillow_reads_as_channel_0(tmp_path: Path, ext: str) -> None:
    red = np.zeros((16, 24, 3), np.uint8)
    red[..., 0] = 255
    path = tmp_path / f"red{ext}"
    Image.fromarray(red).save(path, **({"lossless": True} if ext == ".webp" else {}))
    out = read_image(path)
    assert out[..., 0].min() >= 250
    assert out[..., 1:].max() <= (8 if ext == ".jpg" else 0)


@pytest.mark.parametrize("ext", [".png", ".tif"])
def test_pure_red_16bit_written_by_opencv_reads_as_channel_0(tmp_path: Path, ext: str) -> None:
    bgr = np.zeros((16, 24, 3), np.uint16)
    bgr[..., 2] = 65535
    path = tmp_path / f"red16{ext}"
    assert cv2.imwrite(str(path), bgr)
    out = read_image(path)
    assert out.dtype == np.uint16
    assert (out[..., 0] == 65535).all() and (out[..., 1:] == 0).all()


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_write_image_stores_rgb_order(tmp_path: Path, dtype: type) -> None:
    red = np.zeros((8, 8, 3), dtype)
    red[..., 0] = np.iinfo(dtype).max
    path = tmp_path / "red.png"
    write_image(path, red)
    bgr = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
    assert bgr.dtype == dtype
    assert (bgr[..., 2] == np.iinfo(dtype).max).all() and (bgr[..., :2] == 0).all()


# --------------------------------------------------------------------------- modes


def _palette_image() -> tuple[Image.Image, np.ndarray]:
    idx = np.tile(np.arange(4, dtype=np.uint8), (6, 2))  # 6x8
    colours = [(10, 20, 30), (200, 0, 0), (0, 150, 0), (1, 2, 250)]
    im = Image.new("P", (8, 6))
    im.putpalette([c for rgb in colours for c in rgb] + [0] * (768 - 12))
    im.putdata(idx.reshape(-1).tolist())
    return im, np.array(colours, np.uint8)[idx]


def test_grayscale_l_is_replicated(tmp_path: Path) -> None:
    gray = random_rgb(6, 8)[:, :, 0]
    Image.fromarray(gray).save(tmp_path / "l.png")
    np.testing.assert_array_equal(read_image(tmp_path / "l.png"), np.stack([gray] * 3, axis=2))


def test_palette_is_expanded(tmp_path: Path) -> None:
    im, expected = _palette_image()
    im.save(tmp_path / "p.png")
    assert Image.open(tmp_path / "p.png").mode == "P"
    np.testing.assert_array_equal(read_image(tmp_path / "p.png"), expected)


def test_palette_with_alpha_is_expanded(tmp_path: Path) -> None:
    im, expected = _palette_image()
    im.info["transparency"] = 0
    im.save(tmp_path / "pt.png", transparency=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = read_image(tmp_path / "pt.png")
    np.testing.assert_array_equal(out, expected)


def test_rgba_alpha_dropped_colour_kept(tmp_path: Path) -> None:
    rgb = random_rgb(12, 10)
    alpha = np.zeros((12, 10, 1), np.uint8)
    alpha[::2] = 255  # half fully transparent: colours there must survive untouched
    Image.fromarray(np.concatenate([rgb, alpha], axis=2), mode="RGBA").save(tmp_path / "a.png")
    np.testing.assert_array_equal(read_image(tmp_path / "a.png"), rgb)


def test_la_alpha_dropped(tmp_path: Path) -> None:
    gray = random_rgb(12, 10)[:, :, 0]
    la = np.stack([gray, np.full_like(gray, 7)], axis=2)
    Image.fromarray(la, mode="LA").save(tmp_path / "la.png")
    np.testing.assert_array_equal(read_image(tmp_path / "la.png"), np.stack([gray] * 3, axis=2))


def test_cmyk_is_converted(tmp_path: Path) -> None:
    cmyk = np.zeros((4, 6, 4), np.uint8)
    cmyk[:, :3, 0] = 255  # full cyan -> (0, 255, 255)
    cmyk[:, 3:, 3] = 255  # full black -> (0, 0, 0)
    Image.fromarray(cmyk, mode="CMYK").save(tmp_path / "c.tif")
    out = read_image(tmp_path / "c.tif")
    assert out.shape == (4, 6, 3) and out.dtype == np.uint8
    np.testing.assert_array_equal(out[:, :3], np.broadcast_to([0, 255, 255], (4, 3, 3)))
    np.testing.assert_array_equal(out[:, 3:], 0)


def test_one_bit_is_converted(tmp_path: Path) -> None:
    bits = (np.indices((9, 13)).sum(axis=0) % 2).astype(bool)
    Image.fromarray(bits).convert("1").save(tmp_path / "b.png")
    assert Image.open(tmp_path / "b.png").mode == "1"
    out = read_image(tmp_path / "b.png")
    np.testing.assert_array_equal(out, np.repeat(bits[:, :, None] * 255, 3, axis=2))


@pytest.mark.parametrize(
    "mode",
    ["L", "P", "RGB", "RGBA", "LA", "1", "I;16", "I", "CMYK", "YCbCr"],
)
def test_every_mode_gives_hx_wx3(tmp_path: Path, mode: str) -> None:
    im = Image.new(mode, (13, 7))
    fmt = "TIFF" if mode in ("CMYK", "I") else "PNG"
    if mode == "YCbCr":
        im = Image.new(mode, (13, 7)).convert("RGB").convert("YCbCr")
        fmt = "JPEG"
    path = tmp_path / ("m" + {"TIFF": ".tif", "PNG": ".png", "JPEG": ".jpg"}[fmt])
    im.save(path, format=fmt)
    out = read_image(path)
    assert out.shape == (7, 13, 3)
    assert out.dtype in (np.uint8, np.uint16)


def test_modes_no_file_format_stores() -> None:
    """PA (and RGBa) only arise inside decoders; check the conversion on in-memory images."""
    im, expected = _palette_image()
    pa = im.convert("PA")
    assert pa.mode == "PA"
    np.testing.assert_array_equal(cio._decode_with_pillow(pa, Path("pa")), expected)
    rgba = Image.fromarray(np.concatenate([expected, np.full((6, 8, 1), 255, np.uint8)], axis=2))
    rgb_a = rgba.convert("RGBa")
    np.testing.assert_array_equal(cio._decode_with_pillow(rgb_a, Path("rgba")), expected)


# --------------------------------------------------------------------------- EXIF orientation


@pytest.mark.parametrize("orientation", range(1, 9))
def test_orientation_helper_matches_pillow(orientation: int) -> None:
    img = random_rgb(5, 7)  # non-square and random: every orientation differs
    im = Image.fromarray(img)
    im.getexif()[0x0112] = orientation
    expected = np.asarray(ImageOps.exif_transpose(im))
    out = apply_exif_orientation(img, orientation)
    assert out.flags.c_contiguous
    np.testing.assert_array_equal(out, expected)
    # 2-D arrays too (16-bit grayscale path)
    np.testing.assert_array_equal(
        apply_exif_orientation(img[:, :, 0], orientation), expected[:, :, 0]
    )


ROTATED = {
    3: lambda a: np.rot90(a, 2),
    6: lambda a: np.rot90(a, -1),  # stored rotated; display turns it 90 degrees clockwise
    8: lambda a: np.rot90(a, 1),
}


@pytest.mark.parametrize("orientation", [3, 6, 8])
@pytest.mark.parametrize("ext", [".png", ".webp", ".tif"])
def test_exif_orientation_lossless_is_exact(tmp_path: Path, ext: str, orientation: int) -> None:
    img = random_rgb(10, 15)
    path = tmp_path / f"o{orientation}{ext}"
    params = {"lossless": True} if ext == ".webp" else {}
    Image.fromarray(img).save(path, exif=exif_bytes(orientation), **params)
    expected = ROTATED[orientation](img)
    out = read_image(path)
    np.testing.assert_array_equal(out, expected)
    assert image_size(path) == (expected.shape[1], expected.shape[0])


@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_jpeg(tmp_path: Path, orientation: int) -> None:
    img = quadrants()
    path = tmp_path / f"o{orientation}.jpg"
    Image.fromarray(img).save(path, quality=95, exif=exif_bytes(orientation))
    expected = ROTATED[orientation](img)
    out = read_image(path)
    assert out.shape == expected.shape
    assert np.abs(out.astype(np.int16) - expected.astype(np.int16)).mean() < 3
    assert image_size(path) == (expected.shape[1], expected.shape[0])


@pytest.mark.parametrize("after_idat", [False, True])
@pytest.mark.parametrize("orientation", [3, 6, 8])
def test_exif_orientation_16bit_png(tmp_path: Path, orientation: int, after_idat: bool) -> None:
    img = random_rgb(10, 15, dtype=np.uint16)
    path = tmp_path / "o16.png"
    path.write_bytes(add_png_exif(encode16_bgr(img, ".png"), orientation, after_idat))
    expected = ROTATED[orientation](img)
    out = read_image(path)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, expected)
    assert image_size(path) == (expected.shape[1], expected.shape[0])


@pytest.mark.parametrize("orientation", [1, 3, 6, 8])
def test_exif_orientation_16bit_tiff(tmp_path: Path, orientation: int) -> None:
    img = random_rgb(10, 15, dtype=np.uint16)
    path = tmp_path / "o16.tif"
    path.write_bytes(tiff16_rgb(img, orientation))
    expected = ROTATED[orientation](img) if orientation != 1 else img
    out = read_image(path)
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, expected)
    assert image_size(path) == (expected.shape[1], expected.shape[0])


def test_exif_after_idat_8bit_png(tmp_path: Path) -> None:
    img = random_rgb(10, 15)
    buf = stdio.BytesIO()
    Image.fromarray(img).save(buf, format="PNG")
    path = tmp_path / "late.png"
    path.write_bytes(add_png_exif(buf.getvalue(), 6, after_idat=True))
    np.testing.assert_array_equal(read_image(path), ROTATED[6](img))
    assert image_size(path) == (10, 15)


# --------------------------------------------------------------------------- pixel limit


def test_pixel_limit_names_file_and_numbers(tmp_path: Path) -> None:
    path = tmp_path / "small.png"
    Image.fromarray(random_rgb(80, 100)).save(path)
    with pytest.raises(ImageReadError) as exc:
        read_image(path, max_pixels=1000)
    assert_one_line_naming(exc, path)
    msg = str(exc.value)
    assert "100x80" in msg and "8,000" in msg and "1,000" in msg
    assert "--max-pixels" in msg and "CLEARSIGHT_MAX_PIXELS" in msg
    assert read_image(path, max_pixels=8000).shape == (80, 100, 3)  # the limit is inclusive


def test_pixel_limit_env_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "small.png"
    Image.fromarray(random_rgb(20, 30)).save(path)
    monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", "599")
    assert resolve_max_pixels() == 599
    with pytest.raises(ImageReadError, match="600 pixels exceeds the limit of 599"):
        read_image(path)
    assert read_image(path, max_pixels=600).shape == (20, 30, 3)  # explicit beats env
    monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", "600")
    assert read_image(path).shape == (20, 30, 3)
    monkeypatch.setenv("CLEARSIGHT_MAX_PIXELS", "lots")
    with pytest.raises(ClearsightError, match="CLEARSIGHT_MAX_PIXELS"):
        read_image(path)
    monkeypatch.delenv("CLEARSIGHT_MAX_PIXELS")
    assert resolve_max_pixels() == DEFAULT_MAX_PIXELS == 200_000_000
    with pytest.raises(ClearsightError):
        resolve_max_pixels(0)


def _bomb_png(side: int) -> bytes:
    """A genuine side x side 1-bit PNG of zeros: a few tens of KB on disk."""
    row = b"\x00" * (1 + (side + 7) // 8)
    comp = zlib.compressobj(9)
    idat = b"".join(comp.compress(row * 500) for _ in range(side // 500)) + comp.flush()
    ihdr = struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0)
    return (
        b"\x89PNG\r\n\x1a\n"
        + png_chunk(b"IHDR", ihdr)
        + png_chunk(b"IDAT", idat)
        + png_chunk(b"IEND", b"")
    )


def test_decompression_bomb_refused_from_header(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CLEARSIGHT_MAX_PIXELS", raising=False)
    path = tmp_path / "bomb.png"
    path.write_bytes(_bomb_png(15000))
    assert path.stat().st_size < 200_000

    def no_decoding(self: ImageFile.ImageFile) -> None:
        raise AssertionError("pixels were decoded")

    monkeypatch.setattr(ImageFile.ImageFile, "load", no_decoding)
    start = time.perf_counter()
    with pytest.raises(ImageReadError) as exc:
        read_image(path)
    assert time.perf_counter() - start < 1.0
    assert_one_line_naming(exc, path)
    msg = str(exc.value)
    assert "15000x15000 = 225.0 megapixels exceeds the limit of 200.0 megapixels" in msg
    assert "decoded" not in msg
    assert image_size(path) == (15000, 15000)  # size queries never refuse


def test_pillow_own_bomb_limit_does_not_interfere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "img.png"
    img = random_rgb(60, 50)
    Image.fromarray(img).save(path)
    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 100)  # Pillow would error above 200
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(read_image(path), img)
    assert Image.MAX_IMAGE_PIXELS == 100  # restored afterwards


# --------------------------------------------------------------------------- bad inputs


def _truncated_png(tmp_path: Path) -> Path:
    buf = stdio.BytesIO()
    Image.fromarray(random_rgb(64, 64)).save(buf, format="PNG")
    path = tmp_path / "truncated.png"
    path.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    return path


def _truncated_png16(tmp_path: Path) -> Path:
    data = encode16_bgr(random_rgb(64, 64, dtype=np.uint16), ".png")
    path = tmp_path / "truncated16.png"
    path.write_bytes(data[: len(data) // 2])
    return path


def _random_bytes(tmp_path: Path) -> Path:
    path = tmp_path / "noise.png"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    return path


def _empty(tmp_path: Path) -> Path:
    path = tmp_path / "empty.png"
    path.write_bytes(b"")
    return path


def _text_as_jpeg(tmp_path: Path) -> Path:
    path = tmp_path / "notes.jpg"
    path.write_text("not an image\n")
    return path


def _gif_as_png(tmp_path: Path) -> Path:
    path = tmp_path / "actually_gif.png"
    Image.new("RGB", (8, 8)).save(path, format="GIF")
    return path


def _missing(tmp_path: Path) -> Path:
    return tmp_path / "missing.png"


def _directory(tmp_path: Path) -> Path:
    path = tmp_path / "folder.png"
    path.mkdir()
    return path


@pytest.mark.parametrize(
    "make",
    [
        _truncated_png,
        _truncated_png16,
        _random_bytes,
        _empty,
        _text_as_jpeg,
        _gif_as_png,
        _missing,
        _directory,
    ],
)
def test_bad_inputs_raise_image_read_error_naming_path(
    tmp_path: Path, make: Callable[[Path], Path]
) -> None:
    path = make(tmp_path)
    with pytest.raises(ImageReadError) as exc:
        read_image(path)
    assert_one_line_naming(exc, path)
    if make is _missing:
        assert str(exc.value) == f"image not found: {path}"
    if make not in (_truncated_png, _truncated_png16):  # their headers are intact
        with pytest.raises(ImageReadError) as exc2:
            image_size(path)
        assert_one_line_naming(exc2, path)


# --------------------------------------------------------------------------- atomic writes


def test_failed_pillow_encode_leaves_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.png"
    write_image(target, random_rgb(30, 40))
    before = target.read_bytes()

    def broken_save(self: Image.Image, fp: object, *args: object, **kwargs: object) -> None:
        Path(fp).write_bytes(b"\x89PNG\r\n\x1a\npartial")  # type: ignore[arg-type]
        raise OSError("disk on fire")

    monkeypatch.setattr(Image.Image, "save", broken_save)
    with pytest.raises(ImageWriteError) as exc:
        write_image(target, random_rgb(30, 40, seed=9))
    assert_one_line_naming(exc, target)
    assert "disk on fire" in str(exc.value)
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out.png"]


def test_failed_16bit_encode_leaves_previous_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out16.tif"
    write_image(target, random_rgb(30, 40, dtype=np.uint16))
    before = target.read_bytes()
    real_imencode = cv2.imencode

    def failing_imencode(ext: str, img: np.ndarray, *args: object) -> tuple[bool, np.ndarray]:
        ok, buf = real_imencode(ext, img, *args)
        return False, buf[: len(buf) // 2]

    monkeypatch.setattr(cio.cv2, "imencode", failing_imencode)
    with pytest.raises(ImageWriteError) as exc:
        write_image(target, random_rgb(30, 40, dtype=np.uint16, seed=5))
    assert_one_line_naming(exc, target)
    assert target.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["out16.tif"]


@pytest.mark.parametrize("name", ["out.gif", "out.xyz", "out"])
def test_unknown_extension_refused(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    with pytest.raises(ImageWriteError) as exc:
        write_image(path, random_rgb(4, 4))
    assert_one_line_naming(exc, path)
    assert ".png" in str(exc.value) and ".jpg" in str(exc.value)
    assert os.listdir(tmp_path) == []


def test_16bit_only_for_png_and_tiff(tmp_path: Path) -> None:
    for name in ("a.jpg", "a.webp", "a.bmp"):
        with pytest.raises(ImageWriteError, match="16-bit"):
            write_image(tmp_path / name, np.zeros((4, 4, 3), np.float32), bit_depth=16)
        with pytest.raises(ImageWriteError, match="16-bit"):
            write_image(tmp_path / name, np.zeros((4, 4, 3), np.uint16))
    assert os.listdir(tmp_path) == []
    with pytest.raises(ImageWriteError, match="bit depth"):
        write_image(tmp_path / "a.png", np.zeros((4, 4, 3), np.uint8), bit_depth=12)
    # an explicit 8-bit depth reduces uint16 data
    write_image(tmp_path / "a.jpg", np.full((4, 4, 3), 65535, np.uint16), bit_depth=8)
    assert read_image(tmp_path / "a.jpg").dtype == np.uint8


# --------------------------------------------------------------------------- list_images


def _touch_png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", (2, 2)).save(path, format="PNG")


def test_list_images_folder_sorted_and_filtered(tmp_path: Path) -> None:
    for name in ["b.png", "a.JPG", "c10.webp", "c2.tif", ".hidden.png", "sub/d.png"]:
        _touch_png(tmp_path / name)
    (tmp_path / "readme.txt").write_text("x")
    (tmp_path / "weird.png.bak").write_text("x")
    (tmp_path / "dir.png").mkdir()

    flat = list_images(tmp_path)
    assert [p.name for p in flat] == ["a.JPG", "b.png", "c10.webp", "c2.tif"]
    assert all(p.parent == tmp_path for p in flat)
    deep = list_images(str(tmp_path), recursive=True)
    assert [p.relative_to(tmp_path).as_posix() for p in deep] == [
        "a.JPG",
        "b.png",
        "c10.webp",
        "c2.tif",
        "sub/d.png",
    ]


def test_list_images_files_as_given(tmp_path: Path) -> None:
    for name in ["z.png", "a.png", "dir/m.png"]:
        _touch_png(tmp_path / name)
    got = list_images([tmp_path / "z.png", str(tmp_path / "a.png"), tmp_path / "dir"])
    assert got == [tmp_path / "z.png", tmp_path / "a.png", tmp_path / "dir" / "m.png"]
    assert list_images(tmp_path / "z.png") == [tmp_path / "z.png"]


def test_list_images_errors(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ImageReadError) as exc:
        list_images(empty)
    assert str(exc.value).startswith(f"no images found in {empty} (looked for .png, .jpg")
    for ext in IMAGE_EXTENSIONS:
        assert ext in str(exc.value)

    only_text = tmp_path / "text"
    only_text.mkdir()
    (only_text / "a.txt").write_text("x")
    with pytest.raises(ImageReadError, match="no images found"):
        list_images(only_text)

    notes = tmp_path / "notes.txt"
    notes.write_text("x")
    with pytest.raises(ImageReadError) as exc:
        list_images([notes])
    assert_one_line_naming(exc, notes)

    with pytest.raises(ImageReadError, match="image not found"):
        list_images(tmp_path / "nope.png")


# --------------------------------------------------------------------------- tensors


@pytest.mark.parametrize("dtype", [np.uint8, np.uint16])
def test_tensor_round_trip(dtype: type) -> None:
    img = random_rgb(37, 53, dtype=dtype)
    t = image_to_tensor(img)
    assert t.shape == (1, 3, 37, 53) and t.dtype == torch.float32
    assert t.is_contiguous()
    assert float(t.min()) >= 0.0 and float(t.max()) <= 1.0
    peak = float(np.iinfo(dtype).max)
    assert torch.allclose(t[0, 0], torch.from_numpy(img[:, :, 0].astype(np.float32) / peak))
    back = tensor_to_image(t, dtype=dtype)
    assert back.dtype == dtype and back.shape == img.shape and back.flags.c_contiguous
    np.testing.assert_array_equal(back, img)
    np.testing.assert_array_equal(tensor_to_image(t[0], dtype=dtype), img)


def test_tensor_to_image_clips_and_rounds() -> None:
    t = torch.tensor([-0.5, 0.0, 0.4 / 255, 0.6 / 255, 1.0, 7.0, float("nan")])
    t = t.view(1, 1, 7).expand(3, 1, 7)
    out = tensor_to_image(t)
    np.testing.assert_array_equal(out[0, :, 0], [0, 0, 0, 1, 255, 255, 0])
    assert out.shape == (1, 7, 3)


def test_to_uint8_is_the_one_8_bit_conversion(tmp_path: Path) -> None:
    levels = np.arange(256, dtype=np.uint8)
    assert cio.to_uint8(levels) is levels
    np.testing.assert_array_equal(cio.to_uint8(levels.astype(np.uint16) * 257), levels)
    # the nearest level, not a shift by 8 bits: 129 goes to 1 (129 >> 8 is 0)
    mids = np.array([0, 128, 129, 32767, 65407, 65535], dtype=np.uint16)
    np.testing.assert_array_equal(cio.to_uint8(mids), [0, 0, 1, 127, 255, 255])
    floats = np.array([-0.5, 0.0, 0.3 / 255, 0.7 / 255, 0.5, 1.0, 2.0, np.nan], np.float32)
    np.testing.assert_array_equal(cio.to_uint8(floats), [0, 0, 0, 1, 128, 255, 255, 0])
    with pytest.raises(TypeError, match="int32"):
        cio.to_uint8(levels.astype(np.int32))
    # a float image converts to exactly the bytes write_image saves for it
    img = np.random.default_rng(3).random((9, 11, 3), dtype=np.float32)
    cio.write_image(tmp_path / "f.png", img)
    np.testing.assert_array_equal(cio.read_image(tmp_path / "f.png"), cio.to_uint8(img))
