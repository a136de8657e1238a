"""`clearsight export --format paddle`: ONNX rewrites for x2paddle, then a Paddle inference
model checked with Paddle Inference against PyTorch (docs/export.md). The rewrite tests need
no Paddle; the export tests skip where Paddle or x2paddle is not installed."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from clearsight.artifact import LoadedModel, make_config, save_artifact
from clearsight.export.onnx_rewrite import rewrite_for_x2paddle
from clearsight.models.registry import build_model
from tests.optional import need

QUICK = ((24, 40), (27, 37))  # one odd size


def _onnx(model: torch.nn.Module, x: torch.Tensor, dynamic: bool) -> bytes:
    buf = io.BytesIO()
    axes = {"input": {2: "H", 3: "W"}} if dynamic else None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(
            model, (x,), buf, input_names=["input"], output_names=["output"], opset_version=17,
            dynamo=False, dynamic_axes=axes,
        )  # fmt: skip
    return buf.getvalue()


class _Chunked(torch.nn.Module):
    """Fused convolutions split with `chunk`, whose channel arithmetic traces to Shape ->
    Gather -> Div (RESCAN now splits with constant sizes, so it no longer has any)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a, b = self.conv(x).chunk(2, dim=1)
        return torch.sigmoid(a) * b


def test_rewrites_keep_the_function_and_fold_shape_arithmetic() -> None:
    import onnx
    import onnxruntime as ort

    torch.manual_seed(0)
    data = _onnx(_Chunked().eval(), torch.rand(1, 3, 16, 16), dynamic=True)
    new, rewrites = rewrite_for_x2paddle(data)
    ops = [n.op_type for n in onnx.load_from_string(new).graph.node]
    assert "Div" not in ops and "Gather" not in ops  # chunk's channel arithmetic folded
    assert rewrites.folded["Div"] > 0 and rewrites.describe()
    for h, w in ((16, 16), (19, 23)):  # still dynamic in H and W, same outputs
        x = np.random.default_rng(0).random((1, 3, h, w), dtype=np.float32)
        a = ort.InferenceSession(data).run(None, {"input": x})
        b = ort.InferenceSession(new).run(None, {"input": x})
        assert all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


def test_rewrites_drop_maxpool_dilations() -> None:
    import onnx

    pool = torch.nn.MaxPool2d(5, stride=1, padding=2)
    new, rewrites = rewrite_for_x2paddle(_onnx(pool, torch.rand(1, 3, 8, 8), dynamic=False))
    node = next(n for n in onnx.load_from_string(new).graph.node if n.op_type == "MaxPool")
    assert rewrites.maxpool_dilations == 1
    assert "dilations" not in {a.name for a in node.attribute}


def test_fixed_size_bilinear_resize_becomes_matmuls() -> None:
    """The contest adapter's resize (static sizes, half-pixel bilinear, down and up) as
    MatMuls: ONNX Runtime gives the same output before and after."""
    import onnx
    import onnxruntime as ort

    class Resize(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.nn.functional.interpolate(x, size=(7, 19), mode="bilinear")

    x = torch.rand(1, 3, 11, 13)
    data = _onnx(Resize(), x, dynamic=False)
    rewritten, rewrites = rewrite_for_x2paddle(data)
    assert rewrites.resize_linear == 1
    ops = {n.op_type for n in onnx.load_from_string(rewritten).graph.node}
    assert "Resize" not in ops and "MatMul" in ops

    def run(d: bytes) -> np.ndarray:
        return ort.InferenceSession(d, providers=["CPUExecutionProvider"]).run(
            None, {"input": x.numpy()}
        )[0]

    want = Resize()(x).numpy()
    assert np.abs(run(data) - want).max() < 1e-6
    assert np.abs(run(rewritten) - want).max() < 1e-5


def _need_paddle() -> None:
    need("paddle")
    need("x2paddle")


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
def test_export_paddle_parity(tmp_path: Path) -> None:
    """MBCNN (bandpass, tone blocks, space-to-depth): parity at two sizes, one odd before
    padding, then the folder alone against PyTorch at a third size."""
    _need_paddle()
    from clearsight.export.paddle import META_FILE, PaddlePredictor, export_paddle

    arch, args = "mbcnn", {"n_filters": 2}
    torch.manual_seed(0)
    model = build_model(arch, **args).eval()
    loaded = LoadedModel(model, make_config(model, arch, args), f"{arch}-test")
    out = tmp_path / f"{arch}.paddle"
    result = export_paddle(loaded, out, parity_sizes=QUICK)
    assert result.max_abs_diff < 1e-4 and len(result.per_size) == 2
    meta = json.loads((out / META_FILE).read_text())
    assert meta["onnx_metadata"]["clearsight_config"]["architecture"] == arch
    assert meta["outputs"][0]["onnx"] == "output"
    # loaded back independently: the folder alone reproduces PyTorch at a third, odd size
    x = torch.rand(1, 3, 40, 56)
    got = PaddlePredictor(out).run(x.numpy())[0]
    with torch.no_grad():
        ref = model.export_graph()[0](x)
    ref = ref[0] if isinstance(ref, tuple) else ref
    assert np.abs(got - ref.numpy()).max() < 1e-4


def test_export_paddle_from_an_onnx_file_and_the_cli(tmp_path: Path) -> None:
    """Any ONNX file with clearsight metadata converts (ONNX Runtime is the reference):
    RESCAN, whose fused gates split with constant sizes, so nothing needs rewriting."""
    _need_paddle()
    from typer.testing import CliRunner

    from clearsight.cli import app
    from clearsight.export.onnx import PARITY_SIZES_QUICK, export_onnx

    torch.manual_seed(1)
    args = {"channels": 4, "stages": 2, "depth": 4}
    model = build_model("rescan", **args).eval()
    art = save_artifact(model, tmp_path / "m", make_config(model, "rescan", args))
    from clearsight.api import load_model

    onnx_path, _ = export_onnx(
        load_model(art), tmp_path / "m.onnx", parity_sizes=PARITY_SIZES_QUICK
    )
    res = CliRunner().invoke(
        app, ["export", str(onnx_path), "--format", "paddle", "-o", str(tmp_path / "p")]
    )
    assert res.exit_code == 0, res.output
    assert "max abs difference" in res.output and "ONNX rewrite before x2paddle" not in res.output
    assert (tmp_path / "p" / "model.pdiparams").is_file()
    meta = json.loads((tmp_path / "p" / "clearsight.json").read_text())
    assert meta["parity"]["reference"] == "ONNX Runtime"
    assert meta["parity"]["sizes"] == ["256x256", "321x481"]  # RESCAN pads to 1: odd stays odd
    assert max(meta["parity"]["per_size"]) < 1e-4


def test_a_detector_onnx_file_converts(tmp_path: Path) -> None:
    """A detector's ONNX graph (fixed input size, clearsight metadata) converts: YOLOX-Nano,
    whose SPP max pools need the dilations rewrite and whose upsampling runs in Paddle
    Inference's oneDNN executor only as a ConvTranspose."""
    _need_paddle()
    from clearsight.api import export_paddle
    from clearsight.export.onnx import _add_metadata
    from clearsight.onnx_meta import metadata_props

    torch.manual_seed(2)
    model = build_model("yolox-nano", num_classes=3).eval()
    data = _onnx(model, torch.rand(1, 3, 64, 64), dynamic=False)
    info = {"format_version": 1, "outputs": ["output"], "main_output": "output"}
    info |= {"layout": "decoded", "input_size": [64, 64], "num_classes": 3}
    config = make_config(model, "yolox-nano", {"num_classes": 3})
    (tmp_path / "det.onnx").write_bytes(_add_metadata(data, metadata_props(config, info)))
    result = export_paddle(tmp_path / "det.onnx", tmp_path / "det.paddle")
    assert result.sizes == [(64, 64), (64, 64)] and result.max_abs_diff < 1e-4
    assert any("MaxPool" in r for r in result.rewrites)
    assert any("ConvTranspose" in r for r in result.rewrites)  # its 2x nearest upsampling


@pytest.mark.slow  # over ~20 s (pytest -m 'not slow' skips it)
@pytest.mark.realdata
def test_contest_scorer_same_on_paddle_and_pytorch(shared_data: Path, tmp_path: Path) -> None:
    """The bundled SSD in the Astar contest layout as a Paddle inference model: the contest
    scorer gives the same detections, mAP and MAdds as on the PyTorch model (8 images)."""
    _need_paddle()
    from clearsight.detection.astar import astar_score
    from clearsight.export.paddle import PaddleContestRunner, export_contest_paddle
    from clearsight.zoo import resolve_model

    data = shared_data / "detection/coco_mini_val"
    if not data.is_dir():
        pytest.skip("coco_mini_val not found")
    loaded = resolve_model("ssd-mobilenet-v1-coco")
    result = export_contest_paddle(loaded, tmp_path / "contest.paddle")
    assert result.sizes == [(300, 300), (300, 300)] and result.max_abs_diff < 1e-4
    ref = astar_score(loaded, data, limit=8, drop_last_single=False)
    got = astar_score(
        loaded, data, limit=8, drop_last_single=False,
        runner=PaddleContestRunner(tmp_path / "contest.paddle"),
    )  # fmt: skip
    assert got.detections == ref.detections and got.madds == ref.madds
    assert got.map == pytest.approx(ref.map, abs=1e-6) and ref.map > 0.1


def test_contest_paddle_from_the_cli_scores_like_pytorch(tmp_path: Path) -> None:
    """`export DETECTOR --format paddle --layout astar` then `astar-score DIR`: the Paddle
    folder gives PyTorch's detections, mAP and MAdds, and the JSON names the runtime."""
    _need_paddle()
    from typer.testing import CliRunner

    from clearsight.cli import app
    from clearsight.detection.astar import astar_score
    from tests.helpers import tiny_ssd
    from tests.test_detect_export import _contest_coco

    lm = tiny_ssd()
    art = save_artifact(lm.model, tmp_path / "tiny-ssd", lm.config)
    folder = tmp_path / "contest.paddle"
    cli = CliRunner()
    res = cli.invoke(
        app, ["export", str(art), "--format", "paddle", "--layout", "astar", "-o", str(folder)]
    )
    assert res.exit_code == 0, res.output
    assert "max abs difference" in res.output
    data = _contest_coco(tmp_path / "coco")
    out = tmp_path / "score.json"
    res = cli.invoke(
        app,
        ["astar-score", str(folder), "--data", str(data), "--keep-last-single", "--json", str(out)],
    )
    assert res.exit_code == 0, res.output
    got = json.loads(out.read_text())
    ref = astar_score(lm, data, drop_last_single=False)
    assert got["runtime"] == "paddle-inference" and ref.runtime == "pytorch"
    assert got["images"] == ref.images == 3 and got["detections"] == ref.detections > 0
    assert got["madds"] == ref.madds and got["score"] == pytest.approx(ref.score, abs=1e-4)
    assert got["map"] == pytest.approx(ref.map, abs=1e-6)


def test_astar_score_refuses_a_paddle_folder_without_the_contest_record(tmp_path: Path) -> None:
    """A Paddle export not made with --layout astar is named, with the command that makes one."""
    _need_paddle()
    from typer.testing import CliRunner

    from clearsight.cli import app
    from tests.test_detect_export import _contest_coco

    folder = tmp_path / "plain.paddle"
    folder.mkdir()
    for name in ("model.json", "model.pdiparams"):
        (folder / name).write_bytes(b"")
    (folder / "clearsight.json").write_text('{"onnx_metadata": {}}')
    data = _contest_coco(tmp_path / "coco")
    res = CliRunner().invoke(app, ["astar-score", str(folder), "--data", str(data)])
    assert res.exit_code != 0
    assert "not a contest-layout Paddle export" in res.output and "--layout astar" in res.output
