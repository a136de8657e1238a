"""configs/esdnet-finetune.yaml and configs/nafnet-finetune.yaml: a few steps of each on
tiny pairs from a tiny imported model, resumed bit for bit; and their losses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from clearsight.artifact import load_artifact
from clearsight.convert.torch_import import import_torch
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.train_config import load_config
from clearsight.engine.trainer import train
from clearsight.losses import build_loss, esdnet_loss, psnr_loss
from clearsight.models.esdnet import ESDNet
from clearsight.models.nafnet import NAFNet
from tests.train_utils import make_pairs

REPO = Path(__file__).resolve().parents[1]
TINY = {
    "esdnet": (ESDNet, {"en_feature_num": 8, "en_inter_num": 4, "de_feature_num": 8,
                        "de_inter_num": 4, "sam_number": 1}),
    "nafnet": (NAFNet, {"width": 8, "enc_blocks": [1, 1], "middle_blocks": 1,
                        "dec_blocks": [1, 1]}),
}  # fmt: skip


def _overrides(arch: str, data: Path, init: Path, steps: int) -> list[str]:
    return [
        f"model.args={json.dumps(TINY[arch][1])}",
        f"model.init={init}",
        f"data.train={data}",
        f"data.val={data}",
        "data.patch_size=32",
        "data.batch_size=2",
        f"train.steps={steps}",
        "train.log_every=1",
        "train.val_every=2",
        "train.ckpt_every=2",
        "train.tensorboard=false",
        "train.compile=off",
        "val.max_images=2",
        # a warmup longer than the run, so the LR of a step does not depend on the planned
        # total and the 2-step leg plus its resume retrace the 4-step run exactly
        "schedule.warmup_steps=8",
    ]


@pytest.mark.parametrize("arch", [pytest.param("esdnet", marks=pytest.mark.slow), "nafnet"])
def test_the_finetune_config_trains_from_an_import_and_resumes(tmp_path: Path, arch) -> None:
    data = make_pairs(tmp_path / "pairs", n=4, size=64)
    cls, args = TINY[arch]
    torch.manual_seed(0)
    torch.save(cls(**args).state_dict(), tmp_path / "w.pth")
    import_torch(tmp_path / "w.pth", arch, tmp_path / "init")
    path = REPO / "configs" / f"{arch}-finetune.yaml"
    full = load_config(path, _overrides(arch, data, tmp_path / "init", 4))
    assert train(full, tmp_path / "a", progress=False).steps == 4
    half = load_config(path, _overrides(arch, data, tmp_path / "init", 2))
    train(half, tmp_path / "b", progress=False)
    assert train(full, tmp_path / "b", resume=True, progress=False).steps == 4
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    trained = load_artifact(tmp_path / "a" / "last")
    assert trained.config.architecture == arch and trained.config.arch_args == args


def test_the_esdnet_loss_is_l1_at_each_scale() -> None:
    target = torch.rand(2, 3, 64, 64)
    outs = [torch.rand(2, 3, 16, 16), torch.rand(2, 3, 32, 32), torch.rand(2, 3, 64, 64)]
    down = [
        torch.nn.functional.interpolate(target, scale_factor=s, mode="bilinear")
        for s in (0.25, 0.5)
    ]
    want = sum(
        torch.nn.functional.l1_loss(o, t) for o, t in zip(outs, [*down, target], strict=True)
    )
    assert torch.allclose(esdnet_loss(outs, target, target), want)
    assert build_loss("esdnet") is esdnet_loss


def test_the_psnr_loss_is_minus_the_mean_psnr() -> None:
    target = torch.zeros(2, 3, 8, 8)
    pred = torch.stack([torch.full((3, 8, 8), 0.1), torch.full((3, 8, 8), 0.01)])
    # PSNRs 20 and 40 dB: the loss is minus their mean (up to the 1e-8 guard)
    assert abs(psnr_loss(pred, target).item() + 30.0) < 1e-3
    assert abs(build_loss("psnr")(pred, target, target).item() + 30.0) < 1e-3
