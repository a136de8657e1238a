"""NAFNet: the port against the authors' network, and `clearsight import torch --arch nafnet`
for the official and ClearView layouts.

The reference network comes from the authors' code where it can be found
(tests/reference_code.py); those tests skip where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from clearsight.artifact import load_artifact
from clearsight.cli import app
from clearsight.convert.torch_import import TorchImportError, import_torch
from clearsight.models.nafnet import NAFNet, NAFNetConfigError
from clearsight.models.registry import build_model
from tests.reference_code import reference_nafnet

SMALL = {"width": 8, "enc_blocks": [1, 2], "middle_blocks": 1, "dec_blocks": [1, 1]}
OFFICIAL_SMALL = {"img_channel": 3, "width": 8, "middle_blk_num": 1, "enc_blk_nums": [1, 2],
                  "dec_blk_nums": [1, 1]}  # fmt: skip


def _randomise(net: torch.nn.Module, seed: int = 0, std: float = 0.1) -> torch.nn.Module:
    """Every parameter random (the zero-initialised block scales too, so no block is the
    identity and a wrong mapping shows)."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * std)
    return net.eval()


def _save(state: dict[str, torch.Tensor], path: Path, wrapper: str | None = None) -> Path:
    torch.save({wrapper: state} if wrapper else state, path)
    return path


@pytest.mark.parametrize("size", [(256, 256), (333, 517)])
def test_imported_official_weights_restore_as_the_reference(tmp_path: Path, size) -> None:
    ref = _randomise(reference_nafnet(**OFFICIAL_SMALL))
    weights = _save(ref.state_dict(), tmp_path / "net_g.pth", wrapper="params")
    result = import_torch(weights, "nafnet", tmp_path / "art")
    assert result.arch_args == SMALL
    ours = load_artifact(tmp_path / "art").model
    x = torch.rand(1, 3, *size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        diff = (ours.final_output(x) - ref(x)).abs().max().item()
    assert diff <= 1e-5


def test_default_width_matches_the_reference(tmp_path: Path) -> None:
    """ClearView's Mid shape (32 wide, 2-2-4-8, 4, 2-2-2-2) at 333x517, as built and in the
    NHWC memory format the engine runs it in on the CPU (its fused LayerNorm included).
    Weights of std 0.05 keep the output near [0, 1], as a trained model's."""
    ref = _randomise(
        reference_nafnet(width=32, middle_blk_num=4, enc_blk_nums=[2, 2, 4, 8],
                         dec_blk_nums=[2, 2, 2, 2]),
        std=0.05,
    )  # fmt: skip
    import_torch(_save(ref.state_dict(), tmp_path / "w.pth"), "nafnet", tmp_path / "art")
    ours = load_artifact(tmp_path / "art").model
    x = torch.rand(1, 3, 333, 517, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        want = ref(x)
        assert (ours(x) - want).abs().max().item() <= 1e-5
        ours.to(memory_format=torch.channels_last)
        assert (ours(x) - want).abs().max().item() <= 1e-5


def _clearview_names(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Our state dict under ClearView's block names (its NAFBlock: dwconv, conv2..conv4)."""
    import re

    layers = {"conv2": "dwconv", "conv3": "conv2", "conv4": "conv3", "conv5": "conv4"}

    def rename(k: str) -> str:
        m = re.match(r"^((?:encoders|decoders)\.\d+\.\d+|middle_blks\.\d+)\.(\w+)(.*)$", k)
        return f"{m[1]}.{layers.get(m[2], m[2])}{m[3]}" if m else k

    return {rename(k): v for k, v in state.items()}


def test_clearview_checkpoints_import_with_their_names(tmp_path: Path) -> None:
    ours = _randomise(NAFNet(**SMALL))
    state = {"_orig_mod." + k: v for k, v in _clearview_names(ours.state_dict()).items()}
    assert any(".dwconv." in k for k in state)
    weights = tmp_path / "best.pth"
    torch.save({"model_state_dict": state, "epoch": 3, "metrics": {"psnr": 30.0}}, weights)
    result = import_torch(weights, "nafnet", tmp_path / "art")
    assert result.arch_args == SMALL
    loaded = load_artifact(tmp_path / "art")
    assert loaded.config.provenance["imported_from"]["layout"] == "nafnet-clearview"
    x = torch.rand(1, 3, 40, 56)
    with torch.no_grad():
        assert torch.equal(loaded.model(x), ours(x))
    card = (tmp_path / "art" / "MODEL_CARD.md").read_text()
    assert "Apache-2.0" in card and "not measured by" in card


class _Payload:
    ran: list[str] = []

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (_Payload.ran.append, ("code ran",))


def test_a_pickle_that_would_run_code_is_refused_unrun(tmp_path: Path) -> None:
    weights = tmp_path / "evil.pth"
    torch.save({"params": {"intro.weight": torch.zeros(1)}, "x": _Payload()}, weights)
    _Payload.ran.clear()
    with pytest.raises(TorchImportError, match="weights-only"):
        import_torch(weights, "nafnet", tmp_path / "art")
    assert _Payload.ran == []
    assert not (tmp_path / "art").exists()


def test_a_wrong_or_partial_checkpoint_names_what_does_not_fit(tmp_path: Path) -> None:
    state = _randomise(NAFNet(**SMALL)).state_dict()
    del state["ending.bias"]
    with pytest.raises(TorchImportError, match="missing ending.bias"):
        import_torch(_save(state, tmp_path / "a.pth"), "nafnet", tmp_path / "a")
    with pytest.raises(TorchImportError, match="no state dict found"):
        torch.save({"epoch": 1}, tmp_path / "b.pth")
        import_torch(tmp_path / "b.pth", "nafnet", tmp_path / "b")


def test_args_given_as_json_override_the_inferred_ones(tmp_path: Path) -> None:
    state = _randomise(NAFNet(**SMALL)).state_dict()
    weights = _save(state, tmp_path / "w.pth")
    with pytest.raises(TorchImportError, match="does not fit nafnet"):
        import_torch(weights, "nafnet", tmp_path / "a", args={"width": 16})


def test_cli_import_torch(tmp_path: Path) -> None:
    weights = _save(_randomise(NAFNet(**SMALL)).state_dict(), tmp_path / "w.pth")
    res = CliRunner().invoke(
        app, ["import", "torch", str(weights), "--arch", "nafnet", "-o", str(tmp_path / "a")]
    )
    assert res.exit_code == 0, res.output
    assert "as nafnet" in res.output
    bad = CliRunner().invoke(
        app, ["import", "torch", str(weights), "--arch", "rescan", "-o", str(tmp_path / "b")]
    )
    assert bad.exit_code == 1 and "no PyTorch importer" in bad.output
    json_bad = CliRunner().invoke(
        app,
        ["import", "torch", str(weights), "--arch", "nafnet", "--args", "{width: 8",
         "-o", str(tmp_path / "c")],
    )  # fmt: skip
    lines = [ln for ln in json_bad.output.splitlines() if ln.strip()]
    assert json_bad.exit_code == 1 and len(lines) == 1 and "--args: not JSON" in lines[0]


def test_untrusted_block_lists_are_refused_before_building() -> None:
    with pytest.raises(NAFNetConfigError, match="enc_blocks"):
        build_model("nafnet", enc_blocks=[1, 10_000], dec_blocks=[1, 1])
    with pytest.raises(NAFNetConfigError, match="as many decoder levels"):
        build_model("nafnet", enc_blocks=[1, 1], dec_blocks=[1])


def test_odd_sizes_are_padded_inside_and_cropped_back() -> None:
    """The official forward's zero padding to 2^levels, bottom and right."""
    net = _randomise(NAFNet(**SMALL))
    x = torch.rand(1, 3, 13, 21)
    padded = torch.nn.functional.pad(x, (0, 3, 0, 3))
    with torch.no_grad():
        assert torch.equal(net(x), net(padded)[..., :13, :21])
