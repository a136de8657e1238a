"""check-data's content checks: misaligned, duplicate, extreme and colour-swapped pairs."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
from typer.testing import CliRunner

from clearsight.cli import app
from clearsight.data.data_audit import best_shift
from clearsight.data.paired import validate_pairs
from clearsight.io import write_image

runner = CliRunner()


def scene(h: int = 96, w: int = 128, seed: int = 0) -> np.ndarray:
    """A smooth, textured, colourful image (a shift or a channel swap changes it clearly)."""
    rng = np.random.default_rng(seed)
    small = rng.integers(0, 256, size=(h // 8, w // 8, 3), dtype=np.uint8)
    img = cv2.resize(small, (w, h), interpolation=cv2.INTER_CUBIC)
    img[..., 0] = np.clip(img[..., 0].astype(int) + 60, 0, 255)  # red-heavy: swaps show
    return img


def noisy(img: np.ndarray, seed: int = 1, amp: int = 8) -> np.ndarray:
    n = np.random.default_rng(seed).integers(-amp, amp + 1, size=img.shape)
    return np.clip(img.astype(int) + n, 0, 255).astype(np.uint8)


def save_pair(root: Path, name: str, inp: np.ndarray, tgt: np.ndarray) -> None:
    write_image(root / "input" / f"{name}.png", inp)
    write_image(root / "target" / f"{name}.png", tgt)


def test_best_shift_finds_the_offset() -> None:
    tgt = scene()
    inp = np.roll(tgt, (2, -3), axis=(0, 1))
    shift, at_zero, best = best_shift(noisy(inp), tgt)
    assert shift == (2, -3) and best > at_zero + 5
    assert best_shift(noisy(tgt), tgt)[0] == (0, 0)


def test_each_kind_of_bad_pair_is_reported(tmp_path: Path) -> None:
    good = scene(seed=1)
    save_pair(tmp_path, "good", noisy(good), good)
    shifted = scene(seed=2)
    save_pair(tmp_path, "shifted", noisy(np.roll(shifted, (0, 3), axis=(0, 1))), shifted)
    dup = scene(seed=3)
    save_pair(tmp_path, "dup_a", noisy(dup, 4), dup)
    save_pair(tmp_path, "dup_b", noisy(dup, 5), dup)
    same = scene(seed=6)
    save_pair(tmp_path, "same", same, same)
    save_pair(tmp_path, "wrong", scene(seed=7), 255 - scene(seed=8))
    bgr = scene(seed=9)
    save_pair(tmp_path, "bgr", noisy(bgr)[..., ::-1], bgr)
    c = validate_pairs(tmp_path).content
    assert c is not None and c.checked == 7
    assert [(m.pair.name, m.shift) for m in c.misaligned] == [("shifted", (0, 3))]
    assert [[p.name for p in g] for g in c.duplicate_targets] == [["dup_a.png", "dup_b.png"]]
    assert [p.name for p in c.identical] == ["same"]
    assert {p.name for p, _ in c.low_psnr} <= {"wrong", "bgr"}  # a BGR pair can be this bad too
    assert "wrong" in {p.name for p, _ in c.low_psnr}
    assert [p.name for p, _, _ in c.colour_swapped] == ["bgr"]
    assert "0 misaligned" not in c.summary() and "identical files" in c.warnings()[0]

    res = runner.invoke(app, ["check-data", str(tmp_path)])
    assert res.exit_code == 0, res.output  # suspicions warn ...
    out = " ".join(res.output.split())
    for text in (
        "misaligned:",
        "(dy=0, dx=3)",
        "duplicate targets:",
        "identical pair:",
        "extreme pair:",
        "colour order:",
    ):
        assert text in out, text
    strict = runner.invoke(app, ["check-data", str(tmp_path), "--strict"])
    assert strict.exit_code == 1 and "problem(s) found" in strict.output  # ... or fail
    low = runner.invoke(app, ["check-data", str(tmp_path), "--psnr-floor", "0"])
    assert "extreme pair" not in low.output


def test_clean_set_has_no_findings_and_quick_skips_content(tmp_path: Path) -> None:
    for i in range(3):
        img = scene(seed=20 + i)
        save_pair(tmp_path, f"{i}", noisy(img, seed=i), img)
    report = validate_pairs(tmp_path)
    assert report.content is not None and report.warning_lines() == []
    assert validate_pairs(tmp_path, decode=False).content is None


def test_rain100l_duplicates_but_nothing_misaligned(shared_data: Path) -> None:
    root = shared_data / "derain" / "Rain100L"
    c = validate_pairs(root).content
    assert c is not None and c.checked == 100
    assert c.misaligned == [] and c.colour_swapped == [] and c.identical == []
    assert c.low_psnr == []
    groups = [[p.name for p in g] for g in c.duplicate_targets]
    assert ["003.png", "004.png"] in groups
    res = runner.invoke(app, ["check-data", str(root)])
    assert res.exit_code == 0 and "0 misaligned" in " ".join(res.output.split())
