"""ONNX Runtime tiles of globally pooling models share the whole image's statistics.

Tiny RESCAN (SE gates) and MBCNN (tone vectors) with lively seeded weights, 96x96 images,
48-pixel tiles: the ORT tiles agree with PyTorch's tiled paths, stay within 0.5 dB of the
untiled output, and beat tiles that pool on their own.
"""

from __future__ import annotations

import json
import math
import warnings

import numpy as np
import onnx
import pytest
import torch
from torch import nn

from clearsight.artifact import LoadedModel, make_config
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx, export_onnx_bytes
from clearsight.metrics.image_metrics import psnr_from_mse
from clearsight.models.registry import build_model
from clearsight.onnx_meta import EXPORT_KEY, STATS_INPUT
from clearsight.runtime.ort_backend import OrtModel, UntiledWarning, derive_graph, load_onnx
from clearsight.tiling import tiled_apply

SIZE, TILE = 96, 48
PARITY = 1e-3  # ORT tiles vs PyTorch tiles, max abs difference in [0, 1] units
RESCAN_KW = {"channels": 8, "stages": 2, "depth": 4}  # halo 8: tiles really are tiles
MBCNN_KW = {"n_filters": 4}


def _lively(name: str, kw: dict) -> LoadedModel:
    """Seeded weights whose global statistics matter (default init: near-constant output)."""
    torch.manual_seed(0)
    model = build_model(name, **kw).eval()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, a=0.2, nonlinearity="leaky_relu")
            nn.init.normal_(m.bias, std=0.1)
        elif isinstance(m, nn.Linear):
            scale = 10.0 if name == "rescan" else math.sqrt(2.0)  # SE gates far from 0.5
            nn.init.normal_(m.weight, std=scale / math.sqrt(m.in_features))
            nn.init.normal_(m.bias, std=0.5 if name == "rescan" else 0.1)
    cfg = make_config(model, name, kw, name=f"lively-{name}")
    return LoadedModel(model=model, config=cfg, source=f"lively-{name}")


@pytest.fixture(scope="module", params=["rescan", "mbcnn"])
def pair(request) -> tuple[LoadedModel, OrtModel, bytes]:
    lm = _lively(request.param, RESCAN_KW if request.param == "rescan" else MBCNN_KW)
    data, parity = export_onnx_bytes(lm, parity_sizes=PARITY_SIZES_QUICK)
    assert parity.shared_stats_diff is not None and parity.shared_stats_diff <= 1e-4
    ort = load_onnx(data, source=f"{lm.source}.onnx").model
    assert isinstance(ort, OrtModel)
    return lm, ort, data


def _image(size: int = SIZE, batch: int = 1) -> torch.Tensor:
    """Dark/bright, warm/cool halves plus gratings: every tile sees a different tone."""
    yy, xx = torch.meshgrid(torch.linspace(0, 1, size), torch.linspace(0, 1, size), indexing="ij")
    base = torch.stack([0.2 + 0.6 * xx, 0.3 + 0.4 * yy, 0.8 - 0.6 * xx * yy])
    grating = 0.1 * torch.sin(2 * math.pi * (xx * size / 7.3 + yy * size / 11.1))
    img = (base + grating).clamp(0, 1)[None]
    return torch.cat([img if i % 2 == 0 else img.flip(-1) * 0.7 for i in range(batch)])


def _psnr(a: torch.Tensor, b: torch.Tensor) -> float:
    return psnr_from_mse(float(((a - b) ** 2).mean()), data_range=1.0)


def _torch_tiled(lm: LoadedModel, x: torch.Tensor, stats_pixels: int | None) -> torch.Tensor:
    model = lm.model
    if lm.config.architecture == "rescan":  # exact layer-synchronous: whole-image statistics
        return model.restore_tiled(x, tile=TILE)
    return model.restore_tiled(x, tile=TILE, stats_pixels=stats_pixels)


# -- the export --------------------------------------------------------------------------------
def test_plain_graph_is_unchanged_and_the_metadata_names_the_statistics(pair):
    lm, ort, data = pair
    proto = onnx.load_from_string(data)
    assert [i.name for i in proto.graph.input] == ["input"]
    assert [o.name for o in proto.graph.output] == ort.output_names
    stats = json.loads({p.key: p.value for p in proto.metadata_props}[EXPORT_KEY])["shared_stats"]
    n = 2 * (len(lm.model.units) + 1) if lm.config.architecture == "rescan" else 5
    assert stats["sites"] == [f"stat{k}" for k in range(n)]
    assert stats["input"] == STATS_INPUT
    produced = {o for node in proto.graph.node for o in node.output}
    assert set(stats["sites"]) <= produced
    # untiled ORT is still the PyTorch restore
    x = _image()
    torch.testing.assert_close(ort.restore(x), lm.model.restore(x), atol=1e-5, rtol=0)


def test_tile_graph_takes_the_statistics_instead_of_pooling(pair):
    _, ort, data = pair
    tile = onnx.load_from_string(derive_graph(data, ort.shared_stats, "output", "tile"))
    assert [i.name for i in tile.graph.input] == ["input", STATS_INPUT]
    assert [o.name for o in tile.graph.output] == ["output"]
    assert not [n for n in tile.graph.node if n.op_type == "ReduceMean"]  # the pooling is gone
    stats = onnx.load_from_string(derive_graph(data, ort.shared_stats, "output", "stats"))
    assert [o.name for o in stats.graph.output] == ["output", *ort.shared_stats["sites"]]
    # a tile graph fed another image's statistics gives another result
    x = _image()
    own = ort.global_stats(x, max_pixels=None)
    torch.testing.assert_close(ort.run_shared(x, own), ort.restore(x), atol=1e-5, rtol=0)
    other = ort.global_stats(x.flip(-1) * 0.5, max_pixels=None)
    assert (ort.run_shared(x, other) - ort.restore(x)).abs().max() > 1e-3


# -- tiles -------------------------------------------------------------------------------------
@pytest.mark.parametrize("stats_pixels", [None, TILE * TILE])
def test_ort_tiles_match_torch_tiles_and_the_untiled_output(pair, stats_pixels):
    lm, ort, _ = pair
    x = _image()
    untiled = ort.restore(x)
    tiled = ort.restore_tiled(x, tile=TILE, stats_pixels=stats_pixels)
    assert tiled.shape == x.shape
    target = x.flip(1)  # a fixed reference image: the PSNR against it barely moves
    assert abs(_psnr(tiled, target) - _psnr(untiled, target)) < 0.5
    # measured: whole-image statistics RESCAN inf (exact), MBCNN 83 dB; from a 2x downscale
    # (harsh on 96 px with a 7 px grating) RESCAN 40 dB, MBCNN 50 dB
    assert _psnr(tiled, untiled) > (60 if stats_pixels is None else 35)
    if stats_pixels is None or lm.config.architecture == "mbcnn":
        # PyTorch's tiled path with the same statistics (RESCAN's: the whole image's)
        ref = _torch_tiled(lm, x, stats_pixels)
        assert float((tiled - ref).abs().max()) < PARITY
    if stats_pixels is None:
        # tiles that pool on their own are far worse: the sharing is what makes them agree
        halo, blend = ort.shared_stats["halo"], ort.shared_stats["blend"]
        naive = tiled_apply(ort.restore, x, tile=TILE, halo=halo, blend=blend)
        assert _psnr(naive, untiled) < _psnr(tiled, untiled) - 10
        if ort.shared_stats["exact_given_stats"]:  # RESCAN: halo = radius without SE
            torch.testing.assert_close(tiled, untiled, atol=1e-5, rtol=0)


def test_each_image_of_a_batch_gets_its_own_statistics(pair):
    _, ort, _ = pair
    x = _image(batch=2)
    both = ort.restore_tiled(x, tile=TILE, stats_pixels=TILE * TILE)
    for i in range(2):
        one = ort.restore_tiled(x[i : i + 1], tile=TILE, stats_pixels=TILE * TILE)
        torch.testing.assert_close(both[i : i + 1], one, atol=1e-5, rtol=0)


def test_restorer_tiles_under_ort_above_the_statistics_budget(pair):
    lm, ort, _ = pair
    ort.stats_pixels = TILE * TILE
    try:
        loaded = LoadedModel(model=ort, config=lm.config, source=ort.source)
        x = _image()
        calls = []
        with warnings.catch_warnings():
            warnings.simplefilter("error", UntiledWarning)
            got = Restorer(loaded, InferenceOptions(tile=TILE)).restore(
                x, progress=lambda d, t: calls.append((d, t))
            )
        assert calls[-1] == (4, 4)  # four tiles, not one untiled pass
        ref = Restorer(lm, InferenceOptions(tile=0)).restore(x)
        assert abs(_psnr(got, x.flip(1)) - _psnr(ref, x.flip(1))) < 0.5
    finally:
        ort.stats_pixels = ort.shared_stats["stats_pixels"]


def test_an_image_within_the_budget_runs_untiled_with_a_warning(pair):
    lm, ort, _ = pair
    fresh = OrtModel(ort.session, ort.export_info, ort.source, model_data=b"unused")
    x = _image()
    with pytest.warns(UntiledWarning, match="within the .*-pixel budget"):
        got = fresh.restore_tiled(x, tile=TILE)
    torch.testing.assert_close(got, lm.model.restore(x), atol=1e-5, rtol=0)
    assert fresh._derived == {}  # no derived graph was built


# -- files ---------------------------------------------------------------------------------------
def test_an_exported_file_tiles_and_an_old_one_runs_untiled(tmp_path):
    lm = _lively("mbcnn", MBCNN_KW)
    path, _ = export_onnx(lm, tmp_path / "m.onnx", parity_sizes=((64, 96),))
    ort = load_onnx(path).model
    x = _image()
    ref = lm.model.restore_tiled(x, tile=TILE, stats_pixels=TILE * TILE)
    got = ort.restore_tiled(x, tile=TILE, stats_pixels=TILE * TILE)
    assert float((got - ref).abs().max()) < PARITY
    # a file written before `shared_stats` existed: untiled, as it always was
    proto = onnx.load(str(path))
    for p in proto.metadata_props:
        if p.key == EXPORT_KEY:
            info = json.loads(p.value)
            del info["shared_stats"]
            p.value = json.dumps(info)
    old = tmp_path / "old.onnx"
    onnx.save(proto, str(old))
    old_model = load_onnx(old).model
    assert old_model.shared_stats is None and not hasattr(old_model, "default_tile")
    with pytest.warns(UntiledWarning, match="no shared-statistics graphs"):
        y = old_model.restore_tiled(x, tile=TILE, stats_pixels=TILE * TILE)
    np.testing.assert_allclose(y.numpy(), lm.model.restore(x).numpy(), atol=1e-5, rtol=0)
