"""Every registered architecture honours the model contract (`models/contract.py`), and a new
architecture needs one module plus one `register_model` call to be listed, restore images,
round-trip through an artifact and export."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from clearsight.artifact import LoadedModel, load_artifact, make_config, save_artifact
from clearsight.cli import app
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.export.onnx import export_onnx_bytes
from clearsight.model_audit import audit, audit_model
from clearsight.models.contract import (
    DetectionModel,
    RestorationModel,
    as_restoration_model,
)
from clearsight.models.registry import (
    build_model,
    count_parameters,
    get_spec,
    list_specs,
    register_model,
    unregister_model,
)
from clearsight.runtime.ort_backend import load_onnx
from tests.helpers import TinyConvNet, random_image

ODD = (37, 45)
# Small widths for architectures whose defaults are large (MBCNN: 14M parameters); any
# constructor argument not named here keeps its default.
SMALL_ARGS = {"n_filters": 4, "channels": 4, "stages": 2}
ARCHITECTURES = [s.name for s in list_specs() if s.task != "detect"]
DETECTORS = [s.name for s in list_specs() if s.task == "detect"]


def _small(name: str) -> LoadedModel:
    args = {k: v for k, v in SMALL_ARGS.items() if k in get_spec(name).default_args()}
    torch.manual_seed(0)
    model = build_model(name, **args).eval()
    return LoadedModel(model=model, config=make_config(model, name, args), source=name)


def _image(h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(1, 3, h, w, generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_declares_a_sane_contract(name: str) -> None:
    model = _small(name).model
    assert isinstance(model, RestorationModel)
    assert isinstance(model.pad_multiple, int) and model.pad_multiple >= 1
    r = model.receptive_radius
    assert r is None or (isinstance(r, int) and r >= 0)
    assert model.output_kind in ("image", "residual")
    assert model.predicts_residual == (model.output_kind == "residual")
    assert not model.supports_stages or model.stages >= 1
    for limit in (model.tiling.default_tile, model.tiling.max_untiled_pixels):
        assert limit is None or limit >= 1
    graph, names = model.export_graph()
    assert names[0] == "output" and len(set(names)) == len(names)
    assert isinstance(graph, torch.nn.Module)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_restores_an_odd_sized_image_at_its_size(name: str) -> None:
    lm = _small(name)
    x = _image(*ODD)
    y = Restorer(lm, InferenceOptions(tile=0)).restore(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    # the engine's path is the model's final output on the padded input, cropped back
    net = lm.model
    m = net.pad_multiple
    ph, pw = -(-ODD[0] // m) * m, -(-ODD[1] // m) * m
    padded = torch.nn.functional.pad(x, (0, pw - ODD[1], 0, ph - ODD[0]), mode="replicate")
    with torch.no_grad():
        direct = net.final_output(padded)
    assert direct.shape == padded.shape


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_round_trips_through_an_artifact(name: str, tmp_path: Path) -> None:
    lm = _small(name)
    path = save_artifact(lm.model, tmp_path / name, lm.config)
    back = load_artifact(path)
    assert type(back.model) is type(lm.model)
    assert count_parameters(back.model) == count_parameters(lm.model)
    x = _image(*ODD, seed=1)
    a = Restorer(lm, InferenceOptions(tile=0)).restore(x)
    b = Restorer(back, InferenceOptions(tile=0)).restore(x)
    assert torch.equal(a, b)


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_architecture_exports_with_parity(name: str) -> None:
    lm = _small(name)
    with torch.no_grad():
        data, result = export_onnx_bytes(lm, parity_sizes=(ODD,))
    assert result.ok and result.max_abs_diff <= 1e-4
    # the global pooling sites the model declares are the ones the export found
    layout = lm.model.stats_layout()
    assert (result.shared_stats_diff is not None) == (layout is not None)
    ort = load_onnx(data, source=f"{name}.onnx").model
    x = _image(*ODD, seed=2)
    ours = Restorer(lm, InferenceOptions(tile=0)).restore(x)
    theirs = Restorer(LoadedModel(ort, lm.config, "ort"), InferenceOptions(tile=0)).restore(x)
    assert (ours - theirs).abs().max().item() < 1e-4


# --------------------------------------------------------------------------- a new architecture


class ToyNet(RestorationModel):
    """A new architecture: one 3x3 conv added to the input, on even sizes only."""

    pad_multiple = 2
    receptive_radius = 1

    def __init__(self, *, width: int = 3) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, width, 3, padding=1)
        self.mix = torch.nn.Conv2d(width, 3, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.shape[-2] % 2 == 0 and x.shape[-1] % 2 == 0, tuple(x.shape)
        return x + 0.1 * self.mix(torch.tanh(self.conv(x)))


TOY = "toy-contract"
TOY_PARAMS = 3 * 3 * 9 + 3 + 3 * 3 + 3  # conv + mix at width 3


@pytest.fixture
def toy() -> Iterator[str]:
    """Registers the toy for one test only, so no other test sees an extra architecture."""

    @register_model(
        TOY, task="any", description="toy for the contract test", reference_params=TOY_PARAMS
    )
    def toy_contract(*, width: int = 3) -> ToyNet:
        return ToyNet(width=width)

    try:
        yield TOY
    finally:
        unregister_model(TOY)


def test_a_new_architecture_is_one_class_and_one_registration(toy: str, tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["models", "--json"])
    assert res.exit_code == 0, res.output
    rows = {r["name"]: r for r in json.loads(res.output)}
    assert rows[toy]["params"] == TOY_PARAMS and rows[toy]["kind"] == "architecture"
    # an artifact: saved, loaded back, restored through the CLI at an odd size
    torch.manual_seed(0)
    model = build_model(toy)
    art = save_artifact(model, tmp_path / "toy", make_config(model, toy, {}))
    img = tmp_path / "in" / "a.png"
    img.parent.mkdir()
    Image.fromarray(random_image(*ODD, seed=3)).save(img)
    res = runner.invoke(app, ["restore", str(img), "--model", str(art), "-o", str(tmp_path / "o")])
    assert res.exit_code == 0, res.output
    out = np.asarray(Image.open(tmp_path / "o" / "a.png"))
    assert out.shape == (*ODD, 3)
    ref = Restorer(load_artifact(art)).restore(_as_tensor(random_image(*ODD, seed=3)))
    assert np.abs(out.astype(int) - _as_uint8(ref).astype(int)).max() <= 1
    # the audit reads the registry's reference count: the toy matches it, a wider one not
    assert "matches the official figure" in audit(toy).by_name("structure").details
    cfg = make_config(model, toy, {})
    wider = audit_model(lambda: ToyNet(width=4), config=cfg, size=16).by_name("structure")
    assert f"official figure {TOY_PARAMS:,} parameters, built" in wider.details
    # and it exports, parity-checked, through the CLI
    onnx_path = tmp_path / "toy.onnx"
    res = runner.invoke(app, ["export", str(art), "-o", str(onnx_path)])
    assert res.exit_code == 0, res.output
    ort = load_onnx(onnx_path)
    assert ort.model.pad_multiple == 2 and ort.model.receptive_radius == 1
    got = Restorer(ort).restore(_as_tensor(random_image(*ODD, seed=3)))
    assert (got - ref).abs().max().item() < 1e-4


def test_the_toy_registration_does_not_leak() -> None:
    """Runs with or without the toy test before it: the registry is back to the built-ins."""
    assert TOY not in {s.name for s in list_specs()}
    spec = get_spec("rescan")
    assert spec.reference_params == 149_823


def test_unregistering_an_unknown_name_is_an_error() -> None:
    from clearsight.errors import UnknownNameError

    with pytest.raises(UnknownNameError, match="unknown architecture 'no-such'"):
        unregister_model("no-such")


def _as_tensor(img: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(img).permute(2, 0, 1)[None].float() / 255.0


def _as_uint8(t: torch.Tensor) -> np.ndarray:
    return (t[0].permute(1, 2, 0).numpy() * 255.0 + 0.5).astype(np.uint8)


# --------------------------------------------------------------------------- plain modules


def test_a_plain_module_is_seen_through_the_contract() -> None:
    net = TinyConvNet()
    view = as_restoration_model(net)
    assert view is not net and view.module is net
    assert view.pad_multiple == 1 and view.receptive_radius == 6
    assert view.tiled_path() is None and not view.supports_stages
    x = _image(9, 11)
    assert torch.equal(view.final_output(x), net.restore(x))
    model = _small("rescan").model
    assert as_restoration_model(model) is model


# --------------------------------------------------------------------------- detection


@pytest.mark.parametrize("name", DETECTORS)
def test_detector_follows_the_detection_contract(name: str, tmp_path: Path) -> None:
    assert DETECTORS, "at least one detection architecture is registered"
    lm = _small(name)
    model = lm.model
    assert isinstance(model, DetectionModel) and model.task == "detect"
    assert get_spec(name).preprocess.size == model.input_size
    h, w = model.input_size
    x = _image(h, w)
    with torch.no_grad():
        raw = model(x)
        boxes, scores = model.decode(raw)
        (out,) = model.postprocess(raw, score_threshold=0.0, max_detections=7)
    assert boxes.shape[:2] == scores.shape[:2] and boxes.shape[-1] == 4
    k = len(out["scores"])
    assert 0 < k <= 7 and out["boxes"].shape == (k, 4) and out["labels"].shape == (k,)
    assert (out["scores"][:-1] >= out["scores"][1:]).all()  # sorted, best first
    assert int(out["labels"].min()) >= 0 and int(out["labels"].max()) < model.num_classes
    back = load_artifact(save_artifact(model, tmp_path / name, lm.config))
    with torch.no_grad():
        again = back.model(x)
    for a, b in zip(_tensors(raw), _tensors(again), strict=True):
        assert torch.equal(a, b)


def _tensors(raw: object) -> list[torch.Tensor]:
    return list(raw) if isinstance(raw, tuple | list) else [raw]  # type: ignore[arg-type]
