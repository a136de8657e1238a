"""Paired training data: joint augmentation, determinism, validation, cache and check-data."""

from __future__ import annotations

import pickle
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image
from torch.utils.data import DataLoader
from typer.testing import CliRunner

import clearsight.data.paired as paired_mod
from clearsight.cli import app
from clearsight.data.augment import (
    apply_draw,
    draw_params,
    draw_seed,
    make_generator,
    paired_augment,
    to_tensor,
)
from clearsight.data.paired import (
    PairedFolderDataset,
    SideBySideDataset,
    validate_pairs,
    validate_side_by_side,
)
from clearsight.errors import ClearsightError, ImageReadError, PairingError
from clearsight.io import read_image, write_image
from tests.helpers import random_image

runner = CliRunner()
LUT = np.random.default_rng(7).permutation(256).astype(np.uint8)  # target = LUT[input]


def _save(path: Path, img: np.ndarray) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path)
    return path


def _folder(
    root: Path,
    names=("a", "b", "c"),
    sizes=((37, 53), (41, 29), (64, 70)),
    layout=("rain", "clean"),
) -> Path:
    """Pairs whose target is a pixelwise function (LUT) of the input, odd sizes included."""
    for i, (n, (h, w)) in enumerate(zip(names, sizes, strict=False)):
        inp = random_image(h, w, seed=i)
        _save(root / layout[0] / f"{n}.png", inp)
        _save(root / layout[1] / f"{n}.png", LUT[inp])
    return root


def _views(patch: np.ndarray) -> list[np.ndarray]:
    """The 8 dihedral views, computed independently of the code under test."""
    out = []
    for k in range(4):
        r = np.rot90(patch, k)
        out += [r, np.fliplr(r)]
    return out


def _as_uint8(t: torch.Tensor) -> np.ndarray:
    return (t * 255).round().to(torch.uint8).permute(1, 2, 0).numpy()


# --------------------------------------------------------------------------- augmentation


@settings(max_examples=150, deadline=None)
@given(
    h=st.integers(1, 40),
    w=st.integers(1, 40),
    patch_frac=st.one_of(st.none(), st.floats(0.0, 1.0)),
    seed=st.integers(0, 2**31),
    epoch=st.integers(0, 1000),
    index=st.integers(0, 10**6),
    flips=st.booleans(),
    rotations=st.booleans(),
    random_crop=st.booleans(),
)
def test_pixelwise_relation_survives_every_draw(
    h, w, patch_frac, seed, epoch, index, flips, rotations, random_crop
):
    patch = None if patch_frac is None else max(1, round(patch_frac * min(h, w)))
    inp = random_image(h, w, seed=index % 97)
    tgt = LUT[inp]
    a, b, draw = paired_augment(
        inp,
        tgt,
        patch_size=patch,
        generator=make_generator(seed, epoch, index),
        random_crop=random_crop,
        flips=flips,
        rotations=rotations,
    )
    np.testing.assert_array_equal(b, LUT[a])  # input and target moved together
    ta, tb = to_tensor(a), to_tensor(b)
    assert ta.dtype == torch.float32 and ta.is_contiguous() and ta.shape[0] == 3
    np.testing.assert_array_equal(_as_uint8(tb), LUT[_as_uint8(ta)])
    # The output is one of the 8 views of the drawn window, found independently.
    p = patch or 0
    window = inp if patch is None else inp[draw.top : draw.top + p, draw.left : draw.left + p]
    if patch is not None:
        assert 0 <= draw.top <= h - p and 0 <= draw.left <= w - p
    allowed = {
        (True, True): range(8),  # all dihedral views
        (True, False): (0, 1, 4, 5),  # flips: identity, h, half turn (= h + v), v
        (False, True): (0, 2, 4, 6),  # quarter turns only
        (False, False): (0,),
    }[flips, rotations]
    views = [_views(window)[j] for j in allowed]
    assert any(v.shape == a.shape and np.array_equal(v, a) for v in views)


def test_independent_draws_break_the_relation():
    """The property above has teeth: drawing the target's view separately is caught."""
    inp = random_image(20, 24, seed=1)
    broken = 0
    for i in range(20):
        d1 = draw_params(make_generator(0, 0, i), 20, 24, 8)
        d2 = draw_params(make_generator(0, 0, i + 1000), 20, 24, 8)
        broken += not np.array_equal(apply_draw(LUT[inp], d2), LUT[apply_draw(inp, d1)])
    assert broken >= 15


def test_all_eight_views_and_many_windows_are_drawn():
    draws = [draw_params(make_generator(3, 0, i), 50, 60, 16) for i in range(400)]
    assert {(d.rot90, d.hflip) for d in draws} == {(k, f) for k in range(4) for f in (0, 1)}
    assert len({(d.top, d.left) for d in draws}) > 200


def test_draw_seed_is_pinned_so_resumed_runs_redraw_the_same_crops():
    assert draw_seed(0, 0, 0) == draw_seed(0, 0, 0)
    assert draw_seed(0, 0, 0) == 2226957652490988636
    assert len({draw_seed(s, e, i) for s in range(3) for e in range(3) for i in range(3)}) == 27


def test_patch_larger_than_image_names_file_and_both_sizes(tmp_path):
    with pytest.raises(ClearsightError, match=r"x\.png.*30x20.*32x32"):
        draw_params(make_generator(0, 0, 0), 20, 30, 32, name="x.png")
    root = _folder(tmp_path / "d")  # smallest image is 29x41 (WxH)
    with pytest.raises(ClearsightError) as err:
        PairedFolderDataset(root, patch_size=30)
    msg = str(err.value)
    assert "b.png" in msg and "29x41" in msg and "30x30" in msg
    with pytest.raises(ClearsightError, match=r"a\.png.*53x37.*40x40.*1 more image"):
        PairedFolderDataset(root, patch_size=40)


# --------------------------------------------------------------------------- datasets


@pytest.fixture(scope="module")
def lut_folder(tmp_path_factory) -> Path:
    return _folder(tmp_path_factory.mktemp("lut"))


@settings(max_examples=25, deadline=None)
@given(
    patch=st.sampled_from([None, 1, 7, 16, 29]),
    seed=st.integers(0, 1000),
    epoch=st.integers(0, 50),
    cache=st.sampled_from(["memory", "none"]),
)
def test_dataset_patches_keep_the_pixelwise_relation(lut_folder, patch, seed, epoch, cache):
    ds = PairedFolderDataset(lut_folder, patch_size=patch, seed=seed, cache=cache, repeat=2)
    ds.set_epoch(epoch)
    for i in range(len(ds)):
        x, y = ds[i]
        assert x.shape == y.shape and x.dtype == torch.float32
        assert float(x.min()) >= 0.0 and float(x.max()) <= 1.0
        if patch is not None:
            assert x.shape == (3, patch, patch)
        np.testing.assert_array_equal(_as_uint8(y), LUT[_as_uint8(x)])


def _all(ds) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [ds[i] for i in range(len(ds))]


def _same(a, b) -> bool:
    return all(
        torch.equal(x1, x2) and torch.equal(y1, y2) for (x1, y1), (x2, y2) in zip(a, b, strict=True)
    )


def test_draw_is_a_pure_function_of_seed_epoch_index(lut_folder):
    ds = PairedFolderDataset(lut_folder, patch_size=16, seed=5, repeat=3)
    first = _all(ds)
    assert _same(first, _all(PairedFolderDataset(lut_folder, patch_size=16, seed=5, repeat=3)))
    assert torch.equal(ds[4][0], first[4][0])  # order of access does not matter
    ds.set_epoch(1)
    second = _all(ds)
    differ = sum(not torch.equal(a[0], b[0]) for a, b in zip(first, second, strict=True))
    assert differ >= len(ds) - 1
    ds.set_epoch(0)
    assert _same(first, _all(ds))
    other = _all(PairedFolderDataset(lut_folder, patch_size=16, seed=6, repeat=3))
    assert not _same(first, other)
    # repeat: the same pair again, with its own draw
    assert len(ds) == 9 and not torch.equal(first[0][0], first[3][0])


def test_without_augment_the_crop_is_centred_and_fixed(lut_folder):
    ds = PairedFolderDataset(lut_folder, patch_size=8, augment=False)
    x0, _ = ds[0]
    ds.set_epoch(3)
    assert torch.equal(ds[0][0], x0)
    inp = read_image(lut_folder / "rain" / "a.png")  # 53x37 (WxH)
    top, left = (37 - 8) // 2, (53 - 8) // 2
    np.testing.assert_array_equal(_as_uint8(x0), inp[top : top + 8, left : left + 8])


def _batches(ds, epochs, **kw) -> list[torch.Tensor]:
    loader = DataLoader(ds, batch_size=4, shuffle=False, **kw)
    out = []
    for e in epochs:
        ds.set_epoch(e)
        out += [torch.cat([x, y]) for x, y in loader]
    return out


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_workers_give_the_same_batches_as_the_main_process(lut_folder, cache):
    ds = PairedFolderDataset(lut_folder, patch_size=16, seed=1, repeat=4, cache=cache)
    ref = _batches(ds, [0, 1])
    kw = {"num_workers": 2, "multiprocessing_context": "fork", "persistent_workers": True}
    got = _batches(ds, [0, 1], **kw)  # persistent: set_epoch must still reach the workers
    assert len(got) == len(ref) == 6
    assert all(torch.equal(a, b) for a, b in zip(ref, got, strict=True))
    assert not torch.equal(ref[0], ref[3])


def test_dataset_survives_pickling_as_under_spawn(lut_folder):
    ds = PairedFolderDataset(lut_folder, patch_size=16, seed=2)
    ds.set_epoch(4)
    clone = pickle.loads(pickle.dumps(ds))
    assert clone.epoch == 4 and _same(_all(ds), _all(clone))


def test_sixteen_bit_sources_are_scaled_to_unit_range(tmp_path):
    img = (random_image(20, 20).astype(np.uint16) * 257) + 3
    write_image(tmp_path / "input" / "a.png", img)
    write_image(tmp_path / "target" / "a.png", img)
    x, y = PairedFolderDataset(tmp_path, patch_size=None, augment=False)[0]
    assert torch.equal(x, y)
    np.testing.assert_allclose(x.permute(1, 2, 0).numpy(), img / 65535.0, atol=1e-6)


# --------------------------------------------------------------------------- names and problems


def test_explicit_folders_with_identical_names(tmp_path):
    for i in (1, 2):
        img = random_image(24, 24, seed=i)
        _save(tmp_path / "images" / f"moire_train_{i:05d}.jpg", img)
        _save(tmp_path / "gts" / f"moire_train_{i:05d}.jpg", img)
    ds = PairedFolderDataset(tmp_path, input_dir="images", target_dir="gts", patch_size=16)
    assert [p.target for p in ds.pairs] == [
        tmp_path / "gts" / f"moire_train_{i:05d}.jpg" for i in (1, 2)
    ]
    assert ds[1][0].shape == (3, 16, 16)


@pytest.mark.parametrize("name_map", ["no{stem}", "no{stem}.png", lambda s: "no" + s])
def test_name_map_pairs_rain_with_norain(tmp_path, name_map):
    for i in (1, 2, 3):
        inp = random_image(20, 20, seed=i)
        _save(tmp_path / "rainy" / f"rain-{i:03d}.png", inp)
        _save(tmp_path / "gt" / f"norain-{i:03d}.png", LUT[inp])
    ds = PairedFolderDataset(
        tmp_path, input_dir="rainy", target_dir="gt", name_map=name_map, patch_size=8
    )
    assert [(p.input.name, p.target.name) for p in ds.pairs] == [
        (f"rain-{i:03d}.png", f"norain-{i:03d}.png") for i in (1, 2, 3)
    ]
    x, y = ds[2]
    np.testing.assert_array_equal(_as_uint8(y), LUT[_as_uint8(x)])


def test_many_inputs_may_share_one_target_decoded_once(tmp_path, monkeypatch):
    clean = random_image(16, 16)
    _save(tmp_path / "clean" / "7.png", clean)
    for k in range(3):
        _save(tmp_path / "rain" / f"7_{k}.png", clean)
    calls: list[Path] = []
    real = paired_mod.read_image
    monkeypatch.setattr(paired_mod, "read_image", lambda p, *a, **kw: calls.append(p) or real(p))
    ds = PairedFolderDataset(tmp_path, name_map=lambda s: s.split("_")[0], patch_size=8)
    assert len(ds) == 3 and len(calls) == 4 and len(set(calls)) == 4


def test_bad_name_map_format_is_a_clear_error(tmp_path):
    root = _folder(tmp_path)
    for bad in ("{name}", "plain"):
        with pytest.raises(ClearsightError, match="stem"):
            PairedFolderDataset(root, name_map=bad)


def test_unmatched_names_are_listed_on_both_sides(tmp_path):
    root = _folder(tmp_path)
    _save(root / "rain" / "orphan_in.png", random_image(40, 40))
    _save(root / "clean" / "orphan_out.png", random_image(40, 40))
    report = validate_pairs(root)
    assert not report.ok and report.n_pairs == 3
    assert [p.name for p, _ in report.unmatched_inputs] == ["orphan_in.png"]
    assert [p.name for p in report.unmatched_targets] == ["orphan_out.png"]
    with pytest.raises(PairingError) as err:
        PairedFolderDataset(root)
    assert "orphan_in" in str(err.value) and "orphan_out" in str(err.value)
    assert "check-data" in str(err.value)


def test_size_mismatch_names_both_files(tmp_path):
    root = _folder(tmp_path)
    _save(root / "clean" / "b.png", random_image(42, 29))
    for cache in ("memory", "none"):
        with pytest.raises(PairingError) as err:
            PairedFolderDataset(root, patch_size=8, cache=cache)
        msg = str(err.value)
        assert f"{root / 'rain' / 'b.png'} is 29x41 but {root / 'clean' / 'b.png'} is 29x42" in msg
    (m,) = validate_pairs(root).size_mismatches
    assert (m.input.name, m.target.name, m.input_size, m.target_size) == (
        "b.png",
        "b.png",
        (29, 41),
        (29, 42),
    )


def test_unreadable_files_are_named_with_the_reason(tmp_path):
    root = _folder(tmp_path)
    (root / "rain" / "c.png").write_bytes(b"not a png at all")
    whole = (root / "clean" / "a.png").read_bytes()
    (root / "clean" / "a.png").write_bytes(whole[: len(whole) // 2])  # header intact, data cut
    report = validate_pairs(root)  # decodes
    assert sorted(p.name for p, _ in report.unreadable) == ["a.png", "c.png"]
    assert all(
        str(p) in line for (p, _), line in zip(report.unreadable, report.problems(), strict=True)
    )
    with pytest.raises(ImageReadError) as err:
        PairedFolderDataset(root, patch_size=8)
    assert "c.png" in str(err.value) and "a.png" in str(err.value)
    quick = validate_pairs(root, decode=False)  # headers only: the truncated file slips through
    assert [p.name for p, _ in quick.unreadable] == ["c.png"]


def test_memory_cache_decodes_each_file_once(lut_folder, monkeypatch):
    calls: list[Path] = []
    real = paired_mod.read_image
    monkeypatch.setattr(paired_mod, "read_image", lambda p, *a, **kw: calls.append(p) or real(p))
    ds = PairedFolderDataset(lut_folder, patch_size=8, repeat=3)
    for epoch in range(3):
        ds.set_epoch(epoch)
        _all(ds)
    assert len(calls) == 6 and len(set(calls)) == 6
    assert ds.cache_nbytes >= sum(h * w * 3 for h, w in ((37, 53), (41, 29), (64, 70))) * 2

    def never(p, *a, **kw):
        raise AssertionError(f"decoded {p} again in a worker")

    monkeypatch.setattr(paired_mod, "read_image", never)
    loader = DataLoader(ds, batch_size=3, num_workers=2, multiprocessing_context="fork")
    assert sum(len(x) for x, _ in loader) == 9
    nocache = PairedFolderDataset(lut_folder, patch_size=8, cache="none")
    monkeypatch.setattr(paired_mod, "read_image", lambda p, *a, **kw: calls.append(p) or real(p))
    calls.clear()
    _all(nocache)
    _all(nocache)
    assert len(calls) == 12


# --------------------------------------------------------------------------- side by side


def _smooth(h: int, w: int, seed: int = 0) -> np.ndarray:
    """A clean-looking image: smooth gradients, little fine texture."""
    y, x = np.mgrid[0:h, 0:w].astype(np.float32)
    r = np.random.default_rng(seed).uniform(0.5, 2.0, 3)
    img = np.stack(
        [128 + 80 * np.sin(x / (20 * r[0]) + y / (30 * r[1])), x * 200 / w, y * 200 / h], 2
    )
    return img.clip(0, 255).astype(np.uint8)


def _rainy(clean: np.ndarray, seed: int = 0) -> np.ndarray:
    """Add thin bright diagonal streaks, as synthetic rain does."""
    rain = clean.astype(np.int32)
    rng = np.random.default_rng(seed)
    h, w = clean.shape[:2]
    for _ in range(h * w // 60):
        y0, x0 = rng.integers(0, h), rng.integers(0, w)
        for t in range(8):
            y, x = y0 + t, x0 + t // 3
            if y < h and x < w:
                rain[y, x] += 90
    return rain.clip(0, 255).astype(np.uint8)


def test_side_by_side_halves_split_in_either_order(tmp_path):
    clean, rain = _smooth(24, 30), None
    rain = _rainy(clean)
    _save(tmp_path / "cr" / "p.png", np.concatenate([clean, rain], 1))
    _save(tmp_path / "rc" / "p.png", np.concatenate([rain, clean], 1))
    for folder, order in (("cr", "clean-rain"), ("rc", "rain-clean")):
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            ds = SideBySideDataset(tmp_path / folder, order=order, patch_size=None, augment=False)
        x, y = ds[0]
        np.testing.assert_array_equal(_as_uint8(x), rain)
        np.testing.assert_array_equal(_as_uint8(y), clean)
    ds = SideBySideDataset([tmp_path / "cr" / "p.png"], patch_size=12, seed=3, repeat=5)
    for i in range(len(ds)):
        x, y = ds[i]
        assert x.shape == (3, 12, 12) and not torch.equal(x, y)


def test_side_by_side_odd_width_is_refused_naming_the_file(tmp_path):
    _save(tmp_path / "ok.png", np.concatenate([_smooth(20, 20), _rainy(_smooth(20, 20))], 1))
    _save(tmp_path / "odd.png", random_image(20, 41))
    with pytest.raises(PairingError, match=r"odd\.png is 41x20.*even width"):
        SideBySideDataset(tmp_path, patch_size=8)
    report = validate_side_by_side(tmp_path)
    assert [p.name for p, _ in report.odd_widths] == ["odd.png"] and report.n_pairs == 1


@pytest.mark.parametrize("cache", ["memory", "none"])
def test_swapped_halves_warn_naming_the_file(tmp_path, cache):
    clean = _smooth(40, 48, seed=1)
    _save(tmp_path / "swapped.png", np.concatenate([_rainy(clean), clean], 1))
    with pytest.warns(UserWarning, match=r"swapped\.png.*swapped|swapped.*swapped\.png"):
        SideBySideDataset(tmp_path, order="clean-rain", cache=cache, patch_size=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        SideBySideDataset(tmp_path, order="rain-clean", cache=cache, patch_size=8)


def test_rain100l_side_by_side_order_check(shared_data, tmp_path):
    src = shared_data / "derain" / "Rain100L"
    for n in ("001", "010", "050", "077"):
        rain, clean = read_image(src / "rain" / f"{n}.png"), read_image(src / "clean" / f"{n}.png")
        _save(tmp_path / "good" / f"{n}.png", np.concatenate([clean, rain], 1))
        _save(tmp_path / "bad" / f"{n}.png", np.concatenate([rain, clean], 1))
    assert validate_side_by_side(tmp_path / "good").suspect_order == []
    # Light rain: only 050 is swapped by the wide per-file margin; the set leans as a whole.
    bad = sorted(tmp_path.glob("bad/*.png"))
    assert validate_side_by_side(bad[2:3]).suspect_order == bad[2:3]
    assert validate_side_by_side([bad[0]]).suspect_order == []
    assert validate_side_by_side(tmp_path / "bad").suspect_order == bad
    with pytest.warns(UserWarning, match="4 of 4 checked side-by-side files look swapped"):
        SideBySideDataset(tmp_path / "bad")


# --------------------------------------------------------------------------- check-data


def test_check_data_on_a_clean_folder(tmp_path):
    root = _folder(tmp_path / "d")
    res = runner.invoke(app, ["check-data", str(root)])
    assert res.exit_code == 0, res.output
    assert "ok: 3 pairs" in res.output and "29-70 x 37-64" in res.output


def test_check_data_lists_every_problem_and_exits_1(tmp_path):
    root = _folder(tmp_path / "d", names=("a", "b", "c", "d"), sizes=[(20, 20)] * 4)
    _save(root / "rain" / "orphan.png", random_image(20, 20))
    _save(root / "clean" / "b.png", random_image(21, 20))
    (root / "rain" / "c.png").write_bytes(b"garbage")
    res = runner.invoke(app, ["check-data", str(root)])
    assert res.exit_code == 1 and "Traceback" not in res.output
    out = res.output
    assert "orphan.png" in out and "unmatched input" in out
    assert f"{root / 'rain' / 'b.png'} is 20x20 but {root / 'clean' / 'b.png'} is 20x21" in out
    assert f"unreadable: {root / 'rain' / 'c.png'}" in out
    assert "3 problem(s) found" in out


def test_check_data_with_explicit_folders_name_map_and_side_by_side(tmp_path):
    img = random_image(16, 16)
    _save(tmp_path / "x" / "rain-1.png", img)
    _save(tmp_path / "y" / "norain-1.png", img)
    args = ["check-data", str(tmp_path), "--input-dir", "x", "--target-dir", "y"]
    res = runner.invoke(app, args)
    assert res.exit_code == 1 and "norain-1.png" in res.output
    res = runner.invoke(app, [*args, "--name-map", "no{stem}"])
    assert res.exit_code == 0 and "ok: 1 pairs" in res.output
    _save(tmp_path / "sbs" / "odd.png", random_image(16, 33))
    res = runner.invoke(app, ["check-data", str(tmp_path / "sbs"), "--side-by-side"])
    assert res.exit_code == 1 and "odd.png" in res.output
    res = runner.invoke(app, ["check-data", str(tmp_path / "nowhere")])
    assert res.exit_code == 1 and "error:" in res.output and "nowhere" in res.output


def test_check_data_on_rain100l(shared_data):
    res = runner.invoke(app, ["check-data", str(shared_data / "derain" / "Rain100L")])
    assert res.exit_code == 0, res.output
    assert "ok: 100 pairs" in res.output and "321-481 x 321-481" in res.output
