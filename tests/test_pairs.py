"""The one pair scanner: `find_pairs` (eval) and `validate_pairs` (check-data, training) agree."""

from __future__ import annotations

from pathlib import Path

import pytest

from clearsight.data.paired import PairedFolderDataset, validate_pairs
from clearsight.data.pairs import find_pairs
from clearsight.errors import PairingError
from clearsight.io import write_image
from tests.helpers import random_image


def _pairs(root: Path, names=("a", "b", "c")) -> Path:
    for i, n in enumerate(names):
        img = random_image(24, 20, seed=i)
        write_image(root / "rain" / f"{n}.png", img)
        write_image(root / "clean" / f"{n}.png", img[::-1].copy())
    return root


def test_hidden_files_are_skipped_by_every_caller(tmp_path: Path) -> None:
    root = _pairs(tmp_path)
    # A macOS resource fork and an atomic-write temporary: neither is data, and both would
    # be unmatched (or unreadable) if they were scanned.
    (root / "rain" / "._a.png").write_bytes(b"\x00\x05\x16\x07 resource fork")
    write_image(root / "clean" / ".b.png", random_image(24, 20, seed=9))
    names = [p.name for p in find_pairs(root)]
    assert names == ["a", "b", "c"]
    report = validate_pairs(root)
    assert report.ok and (report.n_inputs, report.n_targets) == (3, 3)
    assert [p.name for p in report.pairs] == names
    assert len(PairedFolderDataset(root, patch_size=8)) == 3


def test_duplicate_stems_name_both_files_for_every_caller(tmp_path: Path) -> None:
    root = _pairs(tmp_path)
    write_image(root / "clean" / "b.jpg", random_image(24, 20, seed=5))
    jpg, png = root / "clean" / "b.jpg", root / "clean" / "b.png"
    with pytest.raises(PairingError) as err:
        find_pairs(root)
    assert str(err.value) == f"two images share the name 'b': {jpg} and {png}"
    report = validate_pairs(root)
    assert report.duplicates == [(jpg, png)] and not report.ok
    assert f"duplicate name: {jpg} and {png} share the stem 'b'" in report.problems()
    with pytest.raises(PairingError, match=r"b\.jpg and .*b\.png"):
        PairedFolderDataset(root, patch_size=8)


def test_several_duplicates_are_counted(tmp_path: Path) -> None:
    root = _pairs(tmp_path)
    write_image(root / "rain" / "a.jpg", random_image(24, 20, seed=5))
    write_image(root / "clean" / "c.webp", random_image(24, 20, seed=6))
    with pytest.raises(PairingError, match=r"share the name 'a'.* \(and 1 more duplicate name\)"):
        find_pairs(root)
    assert len(validate_pairs(root).duplicates) == 2
