"""ESDNet / ESDNet-L: the port and the authors' test procedure against their code, and
`clearsight import torch --arch esdnet|esdnet-l`.

The reference network and pad come from the authors' code where it can be found
(tests/reference_code.py); those tests skip where it is absent.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from clearsight.artifact import load_artifact
from clearsight.convert.torch_import import TorchImportError, import_torch
from clearsight.models.esdnet import ESDNet, ESDNetInputError, reference_padding
from tests.reference_code import reference_esdnet, reference_esdnet_test

SMALL = {"en_feature_num": 8, "en_inter_num": 4, "de_feature_num": 8, "de_inter_num": 4}


def _randomise(net: torch.nn.Module, seed: int = 0) -> torch.nn.Module:
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.1)
    return net.eval()


def _image(h: int, w: int, seed: int = 1) -> torch.Tensor:
    return torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize(("arch", "sam"), [("esdnet", 1), ("esdnet-l", 2)])
@pytest.mark.parametrize("size", [(256, 256), (333, 517)])
def test_imported_weights_restore_as_the_authors_test(tmp_path: Path, arch, sam, size) -> None:
    ref = _randomise(reference_esdnet(**SMALL, sam_number=sam))
    weights = tmp_path / "uhdm_checkpoint.pth"
    torch.save(ref.state_dict(), weights)
    result = import_torch(weights, arch, tmp_path / "art")
    assert result.arch_args == {**SMALL, "sam_number": sam}
    ours = load_artifact(tmp_path / "art").model
    x = _image(*size)
    with torch.no_grad():
        diff = (ours.final_output(x) - reference_esdnet_test(ref, x)).abs().max().item()
    assert diff <= 1e-5


def test_default_size_matches_the_reference(tmp_path: Path) -> None:
    """ESDNet at the authors' widths (48/32/64/32), a .tar-style checkpoint, 256x256."""
    ref = _randomise(
        reference_esdnet(
            en_feature_num=48, en_inter_num=32, de_feature_num=64, de_inter_num=32, sam_number=1
        )
    )
    torch.save({"epoch": 150, "state_dict": ref.state_dict()}, tmp_path / "ck.tar")
    import_torch(tmp_path / "ck.tar", "esdnet", tmp_path / "art")
    ours = load_artifact(tmp_path / "art").model
    x = _image(256, 256)
    with torch.no_grad():
        assert (ours.final_output(x) - reference_esdnet_test(ref, x)).abs().max().item() <= 1e-5


def test_a_size_just_below_a_multiple_of_32_keeps_the_input_size() -> None:
    """At H = 32k - 1 the authors' crop skips the side with no leading pad and keeps one
    extra row; ours crops to the input size, and the shared pixels are equal."""
    ref = _randomise(reference_esdnet(**SMALL, sam_number=1))
    ours = ESDNet(**SMALL, sam_number=1).eval()
    ours.load_state_dict(ref.state_dict())
    x = _image(63, 95)
    theirs = reference_esdnet_test(ref, x)
    with torch.no_grad():
        mine = ours.restore(x)
    assert tuple(theirs.shape[-2:]) == (64, 96) and tuple(mine.shape[-2:]) == (63, 95)
    assert (theirs[..., :63, :95] - mine).abs().max().item() <= 1e-6


def test_the_pad_is_centred_with_the_odd_pixel_last() -> None:
    assert reference_padding(333, 517) == (13, 14, 9, 10)  # 544 - 517, 352 - 333
    assert reference_padding(256, 256) == (0, 0, 0, 0)


def test_the_forward_names_an_unpadded_size() -> None:
    with pytest.raises(ESDNetInputError, match="multiples of 32"):
        ESDNet(**SMALL)(torch.rand(1, 3, 40, 64))


def test_the_variant_must_match_the_sam_count(tmp_path: Path) -> None:
    weights = tmp_path / "uhdm_large_checkpoint.pth"
    torch.save(ESDNet(**SMALL, sam_number=2).state_dict(), weights)
    with pytest.raises(TorchImportError, match="--arch esdnet-l"):
        import_torch(weights, "esdnet", tmp_path / "art")
