"""`--backend auto`: the faster measured backend per architecture and size, torch otherwise."""

from __future__ import annotations

import inspect
import json
import re
import warnings

import pytest
import torch
from typer.testing import CliRunner

from clearsight.artifact import LoadedModel, make_config
from clearsight.cli import app
from clearsight.engine import backend_table
from clearsight.engine.backend_table import choose_backend, load_table
from clearsight.engine.inference import InferenceOptions, Restorer
from clearsight.models.registry import build_model
from tests.conftest import REPO_ROOT

TABLE = {
    "cpu": "test CPU",
    "architectures": {
        "rescan": {
            "512": {"torch": 1.0, "onnxruntime": 2.0},
            "1024": {"torch": 6.0, "onnxruntime": 3.0},
        },
        "broken": {"512": "not a mapping", "x": {"torch": 1.0, "onnxruntime": 2.0}},
    },
}


@pytest.mark.parametrize(
    ("h", "w", "backend"),
    [
        (512, 512, "torch"),
        (1024, 1024, "onnxruntime"),
        (700, 700, "torch"),
        (800, 900, "onnxruntime"),
        (4000, 3000, "onnxruntime"),
        (16, 16, "torch"),
    ],
)
def test_nearest_measured_size_decides(h, w, backend):
    # 700x700 is nearer 512 on a log scale (0.49 MP against 0.26 and 1.05); 800x900 nearer 1024
    choice = choose_backend("rescan", h, w, table=TABLE, onnxruntime=True)
    assert choice.backend == backend
    assert choice.reason.startswith(backend) and "test CPU" in choice.reason


def test_unmeasured_architecture_and_missing_onnxruntime_fall_back_to_torch(tmp_path):
    assert choose_backend("mbcnn", 1024, 1024, table=TABLE).backend == "torch"
    assert choose_backend("broken", 512, 512, table=TABLE).backend == "torch"  # nothing usable
    no_ort = choose_backend("rescan", 1024, 1024, table=TABLE, onnxruntime=False)
    assert no_ort.backend == "torch" and "not installed" in no_ort.reason
    assert load_table(tmp_path / "absent.json") == {}
    (tmp_path / "bad.json").write_text("{not json")
    assert load_table(tmp_path / "bad.json") == {}
    assert choose_backend("rescan", 1024, 1024, table={}).backend == "torch"


def test_shipped_table_names_its_cpu_and_command():
    table = load_table()
    assert table, "src/clearsight/assets/backend_table.json is missing or unreadable"
    assert table["cpu"] and "restore_speed.py" in table["command"]
    assert "--write-table" in table["command"]
    for arch, sizes in table["architectures"].items():
        for side, times in sizes.items():
            assert int(side) > 0 and set(times) == {"torch", "onnxruntime"}, (arch, side)


def _tiny_rescan() -> LoadedModel:
    kw = {"channels": 4, "stages": 2}
    torch.manual_seed(0)
    model = build_model("rescan", **kw).eval()
    return LoadedModel(model, make_config(model, "rescan", kw, name="tiny"), "tiny-rescan")


def test_restorer_auto_runs_the_faster_backend_and_says_so(tmp_path, monkeypatch):
    path = tmp_path / "table.json"
    path.write_text(json.dumps(TABLE))
    monkeypatch.setattr(backend_table, "TABLE_PATH", path)
    x = torch.rand(1, 3, 40, 48, generator=torch.Generator().manual_seed(0))
    torch_y = Restorer(_tiny_rescan(), InferenceOptions(backend="torch")).restore(x)

    fast = {"architectures": {"rescan": {"64": {"torch": 2.0, "onnxruntime": 1.0}}}}
    path.write_text(json.dumps(fast))
    auto = Restorer(_tiny_rescan(), InferenceOptions(backend="auto"))
    y = auto.restore(x)
    assert auto.last_backend is not None and auto.last_backend.backend == "onnxruntime"
    assert type(auto._ort_delegate.model).__name__ == "OrtModel"
    assert (y - torch_y).abs().max() < 1e-4

    # stages other than all only run on torch, whatever the table says
    staged = Restorer(_tiny_rescan(), InferenceOptions(backend="auto", stages=1))
    staged.restore(x)
    assert staged.last_backend.backend == "torch" and staged._ort_delegate is None

    path.write_text(json.dumps({"architectures": {}}))
    plain = Restorer(_tiny_rescan(), InferenceOptions(backend="auto"))
    assert (plain.restore(x) - torch_y).abs().max() == 0
    assert plain.last_backend.backend == "torch" and plain._ort_delegate is None


def test_backend_option_validation():
    with pytest.raises(Exception, match="auto, torch, onnxruntime"):
        InferenceOptions(backend="tensorrt")
    assert InferenceOptions(backend="auto", stages="auto").backend == "auto"
    assert Restorer(_tiny_rescan()).last_backend is None  # a fixed backend records nothing


def test_cli_default_is_auto_and_help_and_docs_say_so():
    from clearsight.cli import restore as cli_restore

    for cmd in (cli_restore.restore_cmd, cli_restore.derain_cmd, cli_restore.demoire_cmd):
        default = inspect.signature(cmd).parameters["backend"].default
        assert default == "auto", cmd.__name__
    for command in ("restore", "derain", "demoire"):
        text = " ".join(CliRunner().invoke(app, [command, "--help"]).output.split())
        assert re.search(r"--backend .*auto \(the default\)", text), command
    # the options guide holds what README's command table said (moved there from README)
    guide = (REPO_ROOT / "docs" / "guides" / "options.md").read_text(encoding="utf-8")
    assert "--backend auto" in guide and "restore_speed.py --write-table" in guide


def test_onnxruntime_by_name_warns_where_torch_was_measured_faster(tmp_path, monkeypatch):
    from clearsight.engine.backend_table import SlowerBackendWarning, slower_than_torch
    from clearsight.export.onnx import to_onnxruntime

    path = tmp_path / "table.json"
    slow = {
        "cpu": "test CPU",
        "architectures": {"rescan": {"64": {"torch": 1.0, "onnxruntime": 2.4}}},
    }
    path.write_text(json.dumps(slow))
    monkeypatch.setattr(backend_table, "TABLE_PATH", path)
    why = slower_than_torch("rescan", 40, 48)
    assert why is not None and "2.4x slower than torch near 64x64" in why and "test CPU" in why
    assert slower_than_torch("rescan", 40, 48, margin=3.0) is None  # within the margin
    assert slower_than_torch("mbcnn", 40, 48) is None  # nothing measured

    x = torch.rand(1, 3, 40, 48, generator=torch.Generator().manual_seed(0))
    ort = Restorer(to_onnxruntime(_tiny_rescan()), InferenceOptions(backend="onnxruntime"))
    with pytest.warns(SlowerBackendWarning, match="2.4x slower than torch"):
        ort.restore(x)
    with warnings.catch_warnings():
        warnings.simplefilter("error", SlowerBackendWarning)
        ort.restore(x)  # said once, not once per image

        # auto never warns: it runs torch here, and ONNX Runtime only where it is faster
        Restorer(_tiny_rescan(), InferenceOptions(backend="auto")).restore(x)
        fast = {"architectures": {"rescan": {"64": {"torch": 2.0, "onnxruntime": 1.0}}}}
        path.write_text(json.dumps(fast))
        auto = Restorer(_tiny_rescan(), InferenceOptions(backend="auto"))
        auto.restore(x)
        assert auto.last_backend.backend == "onnxruntime"
        Restorer(to_onnxruntime(_tiny_rescan()), InferenceOptions(backend="onnxruntime")).restore(x)


def _conv_graph(into_split: bool):
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(torch.rand(6, 2, 3, 3).numpy(), "w")
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 8, 8])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1])]
    if into_split:  # RESCAN's fused gates: one conv, then its channels split three ways
        nodes.append(helper.make_node("Split", ["c"], ["a", "b", "y"], axis=1, num_outputs=3))
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 8, 8])
    else:
        nodes.append(helper.make_node("Relu", ["c"], ["y"]))
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 8, 8])
    graph = helper.make_graph(nodes, "g", [x], [y], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])


def test_nchwc_pass_is_left_out_where_convolutions_feed_splits():
    from clearsight.runtime.ort_backend import NCHWC, _disabled_passes, blocked_layout_pays

    assert not blocked_layout_pays(_conv_graph(True).graph)
    assert blocked_layout_pays(_conv_graph(False).graph)
    assert _disabled_passes(_conv_graph(True).SerializeToString()) == [NCHWC]
    assert _disabled_passes(b"not onnx") == []  # the session says what is wrong with it

    from clearsight.export.onnx import to_onnxruntime

    ort = to_onnxruntime(_tiny_rescan()).model  # exported, parity-checked (1e-4) as it runs
    assert _disabled_passes(ort.model_data) == [NCHWC]


def test_restore_cli_prints_the_slower_backend_warning(tmp_path, monkeypatch):
    import numpy as np
    from PIL import Image

    from clearsight.artifact import save_artifact

    path = tmp_path / "table.json"
    slow = {
        "cpu": "test CPU",
        "architectures": {"rescan": {"32": {"torch": 1.0, "onnxruntime": 2.5}}},
    }
    path.write_text(json.dumps(slow))
    monkeypatch.setattr(backend_table, "TABLE_PATH", path)
    lm = _tiny_rescan()
    model_dir = save_artifact(lm.model, tmp_path / "model", lm.config)
    img = tmp_path / "in" / "a.png"
    img.parent.mkdir()
    Image.fromarray(np.random.default_rng(0).integers(0, 256, (24, 28, 3), np.uint8)).save(img)
    args = ["restore", str(img), "--model", str(model_dir), "-o", str(tmp_path / "out")]
    r = CliRunner().invoke(app, [*args, "--backend", "onnxruntime"])
    assert r.exit_code == 0, r.output
    text = " ".join(r.output.split())
    assert "warning:" in text and "2.5x slower than torch near 32x32" in text
    r = CliRunner().invoke(app, [*args, "--backend", "auto", "--overwrite"])
    assert r.exit_code == 0 and "slower than torch" not in r.output, r.output
