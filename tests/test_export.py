"""ONNX export (parity, metadata, atomic writes) and the ONNX Runtime backend."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper
from PIL import Image
from typer.testing import CliRunner

from clearsight.artifact import LoadedModel, make_config, save_artifact
from clearsight.cli import app
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.errors import ArtifactError
from clearsight.export.onnx import PARITY_SIZES_QUICK, ExportError, export_onnx, to_onnxruntime
from clearsight.models.registry import build_model
from clearsight.preprocess import PreprocessSpec
from clearsight.runtime.ort_backend import OrtModel, UntiledWarning, load_onnx
from clearsight.zoo import resolve_model
from tests.helpers import TinyConvNet, loaded, random_image

runner = CliRunner()
BGR_SPEC = PreprocessSpec(color_order="BGR", mean=(0.5, 0.4, 0.3), std=(0.2, 0.25, 0.3))


def _tiny(name: str = "rescan", preprocess: PreprocessSpec | None = None, **kw) -> LoadedModel:
    kw = kw or ({"channels": 4, "stages": 2} if name.startswith("rescan") else {"n_filters": 4})
    torch.manual_seed(0)
    model = build_model(name, **kw).eval()
    cfg = make_config(model, name, kw, name=f"tiny-{name}", preprocess=preprocess)
    return LoadedModel(model=model, config=cfg, source=f"tiny-{name}")


@pytest.fixture(scope="module")
def bgr_onnx(tmp_path_factory) -> tuple[LoadedModel, Path]:
    lm = _tiny(preprocess=BGR_SPEC)
    path, _ = export_onnx(
        lm, tmp_path_factory.mktemp("onnx") / "rescan.onnx", parity_sizes=((32, 48),)
    )
    return lm, path


def _rgb(h: int, w: int, seed: int = 0) -> torch.Tensor:
    return torch.from_numpy(random_image(h, w, seed)).permute(2, 0, 1)[None].float() / 255


def test_rescan_export_parity_at_odd_sizes_and_dynamic_dims(tmp_path):
    path, parity = export_onnx(_tiny(), tmp_path / "m.onnx", parity_sizes=PARITY_SIZES_QUICK)
    assert parity.sizes == [(64, 96), (67, 93)]
    assert parity.max_abs_diff <= 1e-4
    proto = onnx.load(str(path))
    assert proto.opset_import[0].version == 17
    outs = {
        o.name: [d.dim_param or d.dim_value for d in o.type.tensor_type.shape.dim]
        for o in proto.graph.output
    }
    assert outs == {
        "output": ["N", 3, "output_H", "output_W"],
        "stage1": ["N", 3, "stage1_H", "stage1_W"],
    }
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.onnx"]


def test_rescan_export_splits_fused_gates_with_constant_sizes(tmp_path):
    """The fused gate convolutions are split by one Split node with constant sizes: no
    Shape of a feature map (in an int8 graph it forced a dequantization of the whole map)."""
    for unit in ("GRU", "LSTM"):
        lm = _tiny(channels=4, stages=2, unit=unit)
        path, _ = export_onnx(lm, tmp_path / f"{unit}.onnx", parity_sizes=((32, 48),))
        ops = [n.op_type for n in onnx.load(str(path)).graph.node]
        assert "Shape" not in ops, unit
        assert ops.count("Split") >= 2, unit


def test_mbcnn_export_three_outputs_each_with_own_dims(tmp_path):
    lm = _tiny("mbcnn")
    path, parity = export_onnx(lm, tmp_path / "m.onnx", parity_sizes=((67, 93),))
    assert parity.max_abs_diff <= 1e-4
    ort = load_onnx(path).model
    assert ort.pad_multiple == 8 and ort.receptive_radius is None
    x = torch.rand(1, 3, 67, 93)
    outs = ort.run_all(torch.nn.functional.pad(x, (0, 3, 0, 5), mode="reflect"))
    assert {k: tuple(v.shape) for k, v in outs.items()} == {
        "output": (1, 3, 72, 96),
        "out_quarter": (1, 3, 18, 24),
        "out_half": (1, 3, 36, 48),
    }
    dims = {o.name: o.shape[2:] for o in ort.session.get_outputs()}
    assert len({d for v in dims.values() for d in v}) == 6
    torch.testing.assert_close(ort.restore(x), lm.model.restore(x), atol=1e-5, rtol=0)


def test_failed_parity_fails_the_export_and_leaves_no_file(tmp_path):
    target = tmp_path / "m.onnx"
    target.write_bytes(b"previous")
    with pytest.raises(ExportError, match=r"max abs difference .* > -1"):
        export_onnx(_tiny(), target, parity_sizes=((16, 16),), tolerance=-1.0)
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["m.onnx"]


def test_metadata_round_trip_gives_the_preprocessing_without_flags(bgr_onnx):
    lm, path = bgr_onnx
    ort = resolve_model(str(path))
    assert isinstance(ort.model, OrtModel)
    assert ort.config.preprocess == BGR_SPEC
    assert ort.config.to_dict()["arch_args"] == lm.config.arch_args
    x = _rgb(37, 45)
    ref = Restorer(lm).restore(x)
    got = Restorer(ort).restore(x)
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)
    # a wrong preprocessing would differ by far more than the tolerance
    assert (Restorer(lm).restore(x.flip(1)).flip(1) - ref).abs().max() > 1e-3


def test_tiling_and_ensemble_match_torch_for_a_global_pooling_model(bgr_onnx):
    lm, path = bgr_onnx
    ort = resolve_model(str(path))
    opts = InferenceOptions(tile=24, ensemble="x8")
    x = _rgb(53, 61, seed=3)
    ref = Restorer(lm, opts).restore(x)  # RESCAN's exact layer-synchronous tiles
    with pytest.warns(UntiledWarning, match="untiled at"):
        got = Restorer(ort, opts).restore(x)  # ORT: untiled (SE pools globally), equally exact
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=0)


def test_generic_tiler_runs_the_same_for_onnxruntime():
    lm = loaded(TinyConvNet())
    ort = to_onnxruntime(lm)
    assert not hasattr(ort.model, "restore_tiled") and ort.model.receptive_radius == 6
    opts = InferenceOptions(tile=16, ensemble="flip", blend=2)
    x = _rgb(41, 50, seed=5)
    torch.testing.assert_close(
        Restorer(ort, opts).restore(x), Restorer(lm, opts).restore(x), atol=1e-5, rtol=0
    )


def _pairs(root: Path, n: int = 2, size: tuple[int, int] = (33, 47)) -> Path:
    for i in range(n):
        clean = random_image(*size, seed=i)
        noise = np.random.default_rng(10 + i).integers(-20, 21, size=clean.shape)
        noisy = np.clip(clean.astype(int) + noise, 0, 255).astype(np.uint8)
        for folder, img in (("input", noisy), ("target", clean)):
            (root / folder).mkdir(parents=True, exist_ok=True)
            Image.fromarray(img).save(root / folder / f"{i}.png")
    return root


def _psnrs(out: Path) -> dict[str, float]:
    with open(out / "per_image.csv") as f:
        return {r["name"]: float(r["psnr"]) for r in csv.DictReader(f)}


def test_eval_backends_agree_per_image(tmp_path):
    lm = _tiny(preprocess=BGR_SPEC)
    model_dir = save_artifact(lm.model, tmp_path / "model", lm.config)
    data = _pairs(tmp_path / "data")
    res = {}
    for backend in ("torch", "onnxruntime"):
        out = tmp_path / backend
        r = runner.invoke(
            app,
            [
                "eval",
                "--model",
                str(model_dir),
                "--data",
                str(data),
                "-o",
                str(out),
                "--backend",
                backend,
            ],
        )
        assert r.exit_code == 0, r.output
        res[backend] = _psnrs(out)
    assert res["torch"].keys() == res["onnxruntime"].keys() and len(res["torch"]) == 2
    for k, v in res["torch"].items():
        assert abs(v - res["onnxruntime"][k]) < 1e-3


def test_unknown_backend_is_one_line(tmp_path):
    r = runner.invoke(
        app, ["eval", "--model", "identity", "--data", str(_pairs(tmp_path)), "--backend", "tvm"]
    )
    assert r.exit_code == 1 and "unknown backend 'tvm'" in r.output


def test_corrupt_onnx_file_is_a_clear_error(tmp_path):
    bad = tmp_path / "broken.onnx"
    bad.write_bytes(b"\x08\x07not a protobuf at all" * 10)
    with pytest.raises(ArtifactError, match="broken.onnx: not a readable ONNX model"):
        resolve_model(str(bad))
    img = tmp_path / "in.png"
    Image.fromarray(random_image(8, 8)).save(img)
    r = runner.invoke(app, ["restore", str(img), "--model", str(bad), "-o", str(tmp_path / "o")])
    assert r.exit_code == 1
    assert "broken.onnx" in r.output and "Traceback" not in r.output
    assert len(r.output.strip().splitlines()) == 1


def test_foreign_onnx_file_is_a_clear_error(tmp_path):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, None, None])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, None, None])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "foreign", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "foreign.onnx"
    onnx.save(model, str(path))
    with pytest.raises(
        ArtifactError, match="foreign.onnx: ONNX model carries no clearsight metadata"
    ):
        load_onnx(path)


def test_export_cli_writes_file_and_reports_parity(tmp_path):
    lm = _tiny()
    model_dir = save_artifact(lm.model, tmp_path / "model", lm.config)
    out = tmp_path / "x.onnx"
    r = runner.invoke(app, ["export", str(model_dir), "--format", "onnx", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "max abs difference" in r.output and out.is_file()


def test_export_cli_errors_are_one_line(tmp_path):
    r = runner.invoke(app, ["export", "no-such-model", "-o", str(tmp_path / "a.onnx")])
    assert r.exit_code == 1 and "unknown model 'no-such-model'" in r.output
    r = runner.invoke(app, ["export", "identity", "--format", "tflite"])
    assert r.exit_code == 1 and "unknown export format 'tflite'; known: onnx" in r.output
    assert not list(tmp_path.iterdir())


def test_restore_cli_backends_write_the_same_images(tmp_path):
    lm = _tiny(preprocess=BGR_SPEC)
    model_dir = save_artifact(lm.model, tmp_path / "model", lm.config)
    img = tmp_path / "in" / "a.png"
    img.parent.mkdir()
    Image.fromarray(random_image(29, 35, seed=7)).save(img)
    outs = {}
    for backend in ("torch", "onnxruntime"):
        out = tmp_path / backend
        args = ["restore", str(img.parent), "--model", str(model_dir), "-o", str(out)]
        r = runner.invoke(app, [*args, "--backend", backend, "--tta", "flip"])
        assert r.exit_code == 0, r.output
        outs[backend] = np.asarray(Image.open(out / "a.png"), dtype=int)
    assert np.abs(outs["torch"] - outs["onnxruntime"]).max() <= 1
