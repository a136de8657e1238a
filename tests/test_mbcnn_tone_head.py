"""MBCNN's optional global colour/tone branch (`tone_head=True`): identity at initialisation
(a model without it initialises one with it, bit for bit), one matrix per image shared by
tiles, artifact round trip, fine-tuning init and ONNX export with shared statistics."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch
from torch import nn

from clearsight.artifact import LoadedModel, load_artifact, make_config, save_artifact
from clearsight.data.pairs import find_pairs
from clearsight.engine.inference import Restorer
from clearsight.engine.train_config import TrainConfigError
from clearsight.engine.train_init import init_from
from clearsight.engine.trainer import train
from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx_bytes
from clearsight.io import read_image
from clearsight.metrics import psnr
from clearsight.metrics.tone import mean_level_shift, tone_fitted
from clearsight.models.mbcnn import MBCNN, MBCNNConfigError
from clearsight.models.registry import build_model, count_parameters
from tests.train_utils import make_pairs, tiny_config

KW = {"n_filters": 4}


def _lively(model: MBCNN, seed: int = 0) -> MBCNN:
    """Seeded He init (outputs with a real range); the tone head's zero layer stays zero."""
    torch.manual_seed(seed)
    for name, m in model.named_modules():
        if isinstance(m, nn.Conv2d | nn.Linear) and name != "tone.mlp.2":
            nn.init.kaiming_normal_(m.weight, nonlinearity="relu")
            nn.init.normal_(m.bias, std=0.1)
    return model.eval()


def _with_head_from(plain: MBCNN) -> MBCNN:
    model = MBCNN(**KW, tone_head=True)
    missing, unexpected = model.load_state_dict(plain.state_dict(), strict=False)
    assert sorted(missing) == sorted(model.init_optional_keys()) and not unexpected
    return model.eval()


def _x(h: int = 48, w: int = 64, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed))


def _stir(model: MBCNN, seed: int = 1) -> MBCNN:
    """A trained-looking head: a non-zero last layer, so M and b differ per image."""
    torch.manual_seed(seed)
    assert model.tone is not None
    nn.init.normal_(model.tone.mlp[-1].weight, std=0.05)
    nn.init.normal_(model.tone.mlp[-1].bias, std=0.05)
    return model


def test_head_at_init_reproduces_the_plain_model_bit_for_bit():
    plain = _lively(MBCNN(**KW))
    head = _with_head_from(plain)
    x = _x()
    with torch.no_grad():
        for a, b in zip(plain(x), head(x), strict=True):
            assert torch.equal(a, b)


def test_head_is_off_by_default_and_adds_a_small_branch_when_on():
    plain, head = build_model("mbcnn-light"), build_model("mbcnn-light", tone_head=True)
    assert plain.tone is None and plain.config() == {"n_filters": 32}  # shipped args unchanged
    assert head.config() == {"n_filters": 32, "tone_head": True}
    extra = count_parameters(head) - count_parameters(plain)
    assert extra == (640 * 128 + 128) + (128 * 12 + 12)  # five 128-wide vectors -> 128 -> 12
    assert head.tone.mlp[-1] in head.prune_protected()
    assert plain.init_optional_keys() == []
    with pytest.raises(MBCNNConfigError, match="tone_head"):
        MBCNN(n_filters=4, tone_head=1)


def test_head_learns_a_colour_change_the_gradient_reaches_it():
    model = _with_head_from(_lively(MBCNN(**KW))).train()
    x = _x()
    target = model(x)[-1].detach() * torch.tensor([1.2, 1.0, 0.8])[:, None, None] + 0.05
    out = model(x)
    torch.nn.functional.l1_loss(out[-1], target).backward()
    grad = model.tone.mlp[-1].weight.grad
    assert grad is not None and grad.abs().sum() > 0


def test_tiles_share_one_colour_matrix_the_whole_images():
    """Shared global vectors feed the head, so tiles get the whole image's matrix: the
    tiled output matches the untiled one, and per-tile pooling does not."""
    model = _stir(_with_head_from(_lively(MBCNN(**KW))))
    x = _x(96, 96)
    x[..., :48] *= 0.3  # a dark half: tiles that pool on their own see other tones
    ref = model.restore(x)
    tiled = model.restore_tiled(x, tile=48, stats_pixels=None)
    assert (tiled - ref).abs().max() < 0.1 * (ref.max() - ref.min())
    vectors = model.global_vectors(x, max_pixels=None)
    with model.shared_global_vectors(vectors):
        assert torch.allclose(model.restore(x), ref, atol=1e-5)
    assert model.tone.params(vectors)[0].shape == (1, 3, 3)


def test_artifact_round_trip_and_finetuning_init_from_a_plain_artifact(tmp_path):
    plain = _lively(MBCNN(**KW))
    path = tmp_path / "plain"
    save_artifact(plain, path, make_config(plain, "mbcnn", dict(KW)))
    head = build_model("mbcnn", **KW, tone_head=True)
    cfg = SimpleNamespace(
        model=SimpleNamespace(init=str(path), arch="mbcnn", args={**KW, "tone_head": True})
    )
    init_from(head, cfg)  # the artifact lacks only the tone head's keys
    wider = SimpleNamespace(
        model=SimpleNamespace(**{**vars(cfg.model), "args": {"n_filters": 8, "tone_head": True}})
    )
    with pytest.raises(TrainConfigError, match="does not fit"):  # the switch excuses only itself
        init_from(build_model("mbcnn", n_filters=8, tone_head=True), wider)
    x = _x()
    with torch.no_grad():
        assert torch.equal(head.eval().restore(x), plain.restore(x))
    _stir(head)
    saved = tmp_path / "head"
    save_artifact(head, saved, make_config(head, "mbcnn", head.config()))
    back = load_artifact(saved)
    assert back.config.arch_args == {"n_filters": 4, "tone_head": True}
    with torch.no_grad():
        assert torch.equal(back.model.eval().restore(x), head.restore(x))


def test_exports_to_onnx_with_shared_statistics():
    model = _stir(_with_head_from(_lively(MBCNN(**KW))))
    lm = LoadedModel(model, make_config(model, "mbcnn", model.config()), "lively-tone")
    _, parity = export_onnx_bytes(lm, parity_sizes=PARITY_SIZES_QUICK)
    assert parity.shared_stats_diff is not None and parity.shared_stats_diff <= 1e-4


def test_training_validation_logs_the_tone_figures_tone_gap_prints(tmp_path):
    """`val.tone`: tone_psnr and tone_shift, as benchmarks/tone_gap.py computes them."""
    data = make_pairs(tmp_path / "pairs")
    cfg = tiny_config(
        data,
        model={"arch": "mbcnn", "args": {"n_filters": 2, "tone_head": True}},
        loss={"name": "mbcnn"},
        train={"steps": 2, "val_every": 2},
        val={"tone": True},
    )
    res = train(cfg, tmp_path / "run", progress=False)
    model = load_artifact(tmp_path / "run" / "last")
    assert model.config.arch_args == {"n_filters": 2, "tone_head": True}
    rows = []
    for pair in find_pairs(data)[:2]:
        inp, tgt = read_image(pair.input), read_image(pair.target)
        out = Restorer(model).restore_image(inp)
        rows.append((psnr(np.rint(tone_fitted(out, tgt)), tgt), mean_level_shift(tgt, out)))
    want = np.mean(rows, axis=0)
    assert res.val_metrics["tone_psnr"] == pytest.approx(want[0], abs=1e-6)
    assert res.val_metrics["tone_shift"] == pytest.approx(want[1], abs=1e-6)
