"""Video rain synthesis: streaks fall coherently along their lines, seeded, paired with clean."""

from fractions import Fraction

import numpy as np
import pytest

from clearsight.data.synth_rain import RainConfig, streak_layer
from clearsight.data.synth_rain_video import clip_layers, rainy_clip
from clearsight.errors import ClearsightError, OptionError, VideoReadError
from clearsight.io import read_image, write_image
from clearsight.video.frames import open_source
from clearsight.video.io import VideoWriter
from clearsight.video.synth_rain import synth_rain_video

ONE_LAYER = RainConfig(
    layers=(1, 1),
    density=(0.003, 0.003),
    length=(20.0, 20.0),
    width=(0.8, 0.8),
    brightness=(0.5, 0.5),
    angle_range=20.0,
    blend="add",
)


def _grey(n: int, h: int = 96, w: int = 128) -> list[np.ndarray]:
    return [np.full((h, w, 3), 100, np.uint8) for _ in range(n)]


def _corr(m: np.ndarray, dy: int, dx: int) -> float:
    """Autocorrelation of `m` at lag (dy, dx), wrapping around."""
    z = m - m.mean()
    return float((z * np.roll(z, (dy, dx), axis=(0, 1))).mean() / (z * z).mean())


@pytest.mark.parametrize("seed", [0, 3])
def test_rain_falls_along_its_streaks_frame_to_frame(seed):
    frames = _grey(6)
    rain = [r.astype(np.int16) - 100 for r in rainy_clip(frames, seed, ONE_LAYER)]
    (layer,) = clip_layers(96, 128, np.random.default_rng(seed), ONE_LAYER)
    vy, vx = layer.velocity
    assert vy > 0  # it falls
    # ... along its own streaks: the field is much more alike along the motion than across it
    n = np.hypot(vy, vx)
    along = _corr(layer.field, round(4 * vy / n), round(4 * vx / n))
    across = _corr(layer.field, round(-4 * vx / n), round(4 * vy / n))
    assert along > 0.3 > across + 0.15, (along, across)
    for t in range(5):
        assert rain[t].max() > 30  # there is rain to follow
        (y0, x0), (y1, x1) = layer.offset(t), layer.offset(t + 1)
        dy, dx = y1 - y0, x1 - x0
        assert dy >= 5
        prev, nxt = rain[t], rain[t + 1]
        h, w = prev.shape[:2]
        # frame t+1 is frame t moved by (dy, dx): compare where both see the same rain
        moved = nxt[dy:, max(dx, 0) : w + min(dx, 0)]
        src = prev[: h - dy, max(-dx, 0) : w - max(dx, 0)]
        assert np.abs(moved - src).max() <= 1
        assert np.abs(nxt - prev).max() > 30  # and it did move


def test_periodic_layer_tiles_without_a_seam():
    kw = dict(density=0.003, length=25.0, width=0.8, brightness=0.5, angle=10.0)
    tiled = streak_layer(96, 96, np.random.default_rng(1), periodic=True, **kw)
    plain = streak_layer(96, 96, np.random.default_rng(1), **kw)

    def seam_vs_inside(f: np.ndarray) -> tuple[float, float]:
        z = f - f.mean()
        seam = float((z[-1] * z[0]).sum() / np.sqrt((z[-1] ** 2).sum() * (z[0] ** 2).sum()))
        inside = float((z[47] * z[48]).sum() / np.sqrt((z[47] ** 2).sum() * (z[48] ** 2).sum()))
        return seam, inside

    seam, inside = seam_vs_inside(tiled)
    assert seam > 0.8 and inside > 0.8  # streaks run on across the wrap as inside the layer
    assert seam_vs_inside(plain)[0] < 0.5  # (an ordinary layer's edges do not meet)


def test_seeds_presets_and_determinism():
    frames = _grey(3, 48, 64)
    a = list(rainy_clip(frames, 0))
    assert all(np.array_equal(x, y) for x, y in zip(a, rainy_clip(frames, 0), strict=True))
    b = list(rainy_clip(frames, 1))
    assert not np.array_equal(a[0], b[0])
    assert all(not np.array_equal(x, f) for x, f in zip(a, frames, strict=True))
    heavy = list(rainy_clip(frames, 0, "heavy"))
    assert heavy[0].mean() > a[0].mean() + 20  # heavier rain and its haze brighten more
    assert frames[0].max() == 100  # the input is not modified


def test_synth_rain_video_from_frames_folder(tmp_path):
    rng = np.random.default_rng(0)
    src = tmp_path / "frames"
    originals = [rng.integers(0, 256, (40, 56, 3), dtype=np.uint8) for _ in range(5)]
    for i, img in enumerate(originals):
        write_image(src / f"f_{i + 1}.png", img)
    seen = []
    report = synth_rain_video(src, tmp_path / "out", seed=2, fps=10, on_pair=seen.append)
    rain = sorted((tmp_path / "out" / "rain").glob("[!.]*"))
    clean = sorted((tmp_path / "out" / "clean").glob("[!.]*"))
    assert report.pairs == 5 == len(rain) == len(clean) == len(seen)
    assert (
        [p.name for p in rain] == [p.name for p in clean] == [f"{i:06d}.png" for i in range(1, 6)]
    )
    for orig, c, r in zip(originals, clean, rain, strict=True):
        assert np.array_equal(read_image(c), orig)
        assert not np.array_equal(read_image(r), orig)
    expected = list(rainy_clip(originals, 2, "light"))
    assert all(np.array_equal(read_image(r), e) for r, e in zip(rain, expected, strict=True))

    again = synth_rain_video(src, tmp_path / "out", seed=2, fps=10, max_frames=3)
    assert again.pairs == 3 == len(list((tmp_path / "out" / "clean").glob("[!.]*")))


def test_synth_rain_video_from_video_file(tmp_path):
    video = tmp_path / "clip.mp4"
    rng = np.random.default_rng(0)
    with VideoWriter(video, width=64, height=48, time_base=Fraction(1, 12), rate=Fraction(12)) as w:
        for i in range(4):
            w.write(rng.integers(0, 256, (48, 64, 3), dtype=np.uint8), i)
    with open_source(video) as reader:
        decoded = [f.image for f in reader.frames()]
    report = synth_rain_video(video, tmp_path / "out", seed=0, preset="heavy")
    clean = sorted((tmp_path / "out" / "clean").glob("[!.]*"))
    assert report.pairs == len(decoded) == len(clean) == 4
    assert all(np.array_equal(read_image(c), d) for c, d in zip(clean, decoded, strict=True))


def test_bad_input_is_one_line_and_writes_nothing(tmp_path):
    out = tmp_path / "out"
    with pytest.raises(VideoReadError, match="missing.mp4") as e:
        synth_rain_video(tmp_path / "missing.mp4", out)
    assert "\n" not in str(e.value)
    src = tmp_path / "frames"
    write_image(src / "1.png", np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(OptionError, match="preset.*drizzle"):
        synth_rain_video(src, out, fps=5, preset="drizzle")
    with pytest.raises(OptionError, match="max_frames"):
        synth_rain_video(src, out, fps=5, max_frames=0)
    with pytest.raises(OptionError, match="fps"):
        synth_rain_video(src, out)  # a folder of frames needs its frame rate
    assert not out.exists()
    with pytest.raises(ClearsightError, match=r"frame 1: 32x16 differs .* 16x16"):
        list(rainy_clip([np.zeros((16, 16, 3), np.uint8), np.zeros((16, 32, 3), np.uint8)], 0))
    with pytest.raises(ClearsightError, match="frame 0: expected an HxWx3 uint8"):
        list(rainy_clip([np.zeros((16, 16), np.uint8)], 0))
