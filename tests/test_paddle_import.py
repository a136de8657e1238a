"""`clearsight import paddle`: the restricted .pdparams reader, the name tables and layouts,
and outputs equal to the Paddle model (docs/paddle.md).

The reader tests need no Paddle (the files are written with pickle here); the parity tests
build each architecture as a small Paddle model (tests/paddle_models.py), save it with
`paddle.save`, import it and compare outputs, and skip where Paddle is not installed.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch

from clearsight.artifact import load_artifact
from clearsight.convert.paddle_import import PaddleImportError, import_paddle, parse_sets
from clearsight.convert.paddle_pickle import PdparamsError, read_pdparams
from clearsight.errors import ClearsightError
from tests.optional import need

TOL = 1e-5


# -- the restricted reader (no Paddle needed) --------------------------------------------
class _Exploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # what a malicious "state dict" does when unpickled
        return (exec, (f"open({str(self.marker)!r}, 'w').write('ran')",))


class _ShellExploit:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


@pytest.mark.parametrize("exploit", [_Exploit, _ShellExploit])
def test_malicious_pickle_runs_nothing(tmp_path: Path, exploit: type) -> None:
    marker = tmp_path / "marker"
    bad = tmp_path / "evil.pdparams"
    state = {"conv.weight": np.zeros((2, 2), np.float32), "payload": exploit(marker)}
    bad.write_bytes(pickle.dumps(state, protocol=4))
    with pytest.raises(PdparamsError, match=r"evil\.pdparams: unsafe .*refused global"):
        read_pdparams(bad)
    assert not marker.exists()
    # the same through the command: a one-line error, exit 1, nothing written, nothing run
    from typer.testing import CliRunner

    from clearsight.cli import app

    res = CliRunner().invoke(
        app, ["import", "paddle", str(bad), "--arch", "rescan", "-o", str(tmp_path / "out")]
    )
    assert res.exit_code == 1 and "refused global" in res.output, res.output
    assert "Traceback" not in res.output
    assert not marker.exists() and not (tmp_path / "out").exists()


def test_reader_builds_arrays_and_refuses_object_arrays(tmp_path: Path) -> None:
    good = tmp_path / "good.pdparams"
    w = np.arange(6, dtype=np.float32).reshape(2, 3)
    good.write_bytes(pickle.dumps({"a.weight": w, "StructuredToParameterName@@": {}}, protocol=4))
    got = read_pdparams(good)
    assert list(got) == ["a.weight"] and np.array_equal(got["a.weight"], w)
    objs = tmp_path / "objs.pdparams"
    objs.write_bytes(pickle.dumps({"a": np.array([1, "x"], dtype=object)}, protocol=4))
    with pytest.raises(PdparamsError, match="object arrays are refused"):
        read_pdparams(objs)
    notdict = tmp_path / "list.pdparams"
    notdict.write_bytes(pickle.dumps([w], protocol=4))
    with pytest.raises(PdparamsError, match="holds a list, not a state dict"):
        read_pdparams(notdict)


def test_every_problem_in_one_error(tmp_path: Path) -> None:
    """Missing names, unmapped names and wrong shapes, all listed in the one message."""
    from clearsight.models.registry import build_model

    model = build_model("rescan", channels=4, stages=1, depth=3)
    state = {}
    for k, v in model.state_dict().items():
        p = k.replace("units.", "rnns.").replace("decoder.", "dec.")
        a = v.numpy()
        state[p] = a.T.copy() if ".fc." in k and k.endswith("weight") else a
    del state["rnns.0.conv_xz.weight"]
    state["rnns.0.conv_hz.bias"] = np.zeros(5, np.float32)
    state["extra.thing"] = np.zeros(1, np.float32)
    f = tmp_path / "bad.pdparams"
    f.write_bytes(pickle.dumps(state, protocol=4))
    with pytest.raises(PaddleImportError) as info:
        import_paddle(f, "rescan", tmp_path / "o", sets={"channels": 4, "stages": 1, "depth": 3})
    msg = str(info.value)
    assert "missing in the file: rnns.0.conv_xz.weight" in msg
    assert "not mapped to rescan: extra.thing" in msg
    assert "rnns.0.conv_hz.bias [5] -> units.0.conv_hz.bias needs [4]" in msg
    assert not (tmp_path / "o").exists()


def test_parse_sets_and_bad_keys() -> None:
    assert parse_sets(["n_filters=8", "bn_eps=0.001", "unit=GRU"]) == {
        "n_filters": 8,
        "bn_eps": 0.001,
        "unit": "GRU",
    }
    with pytest.raises(ClearsightError, match="expected key=value"):
        parse_sets(["oops"])


# -- parity with the Paddle models -------------------------------------------------------
def _paddle():
    return need("paddle")


def _save(pd_model, path: Path, seed: int) -> Path:
    paddle = _paddle()
    from tests.paddle_models import randomize

    randomize(pd_model, seed)
    pd_model.eval()
    paddle.save(pd_model.state_dict(), str(path))
    return path


def _run_paddle(pd_model, x: np.ndarray) -> list[np.ndarray]:
    paddle = _paddle()
    with paddle.no_grad():
        y = pd_model(paddle.to_tensor(x))
    ys = y if isinstance(y, list | tuple) else [y]
    return [t.numpy() for t in ys]


def _run_torch(artifact: Path, x: np.ndarray) -> list[np.ndarray]:
    model = load_artifact(artifact).model.eval()
    with torch.no_grad():
        y = model(torch.from_numpy(x))
    ys = y if isinstance(y, list | tuple) else [y]
    return [t.numpy() for t in ys]


def _max_diff(a: list[np.ndarray], b: list[np.ndarray]) -> float:
    assert [x.shape for x in a] == [x.shape for x in b]
    return max(float(np.abs(x - y).max()) for x, y in zip(a, b, strict=True))


def _input(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(0, 1, shape).astype(np.float32)


def test_rescan_matches_paddle(tmp_path: Path) -> None:
    _paddle()
    from tests.paddle_models import PaddleRESCAN

    pd = PaddleRESCAN(channels=8, stages=2, depth=5)
    f = _save(pd, tmp_path / "rescan.pdparams", seed=1)
    sets = {"channels": 8, "stages": 2, "depth": 5}
    res = import_paddle(f, "rescan", tmp_path / "rescan", sets=sets)
    assert res.findings == [] and res.arch_args["channels"] == 8
    x = _input((1, 3, 19, 23))
    assert _max_diff(_run_paddle(pd, x), _run_torch(res.path, x)) < TOL


def test_mbcnn_matches_paddle(tmp_path: Path) -> None:
    _paddle()
    from tests.paddle_models import PaddleMBCNN

    pd = PaddleMBCNN(n=4)
    f = _save(pd, tmp_path / "mbcnn.pdparams", seed=2)
    res = import_paddle(f, "mbcnn-light", tmp_path / "mb.safetensors", sets={"n_filters": 4})
    assert res.findings == []
    x = _input((1, 3, 16, 24))
    assert _max_diff(_run_paddle(pd, x), _run_torch(res.path, x)) < TOL
    # a swapped pair of Linear weights is not silently accepted (shapes differ: [in, out])
    cfg = load_artifact(res.path).config
    assert cfg.provenance["imported_from"]["file"] == "mbcnn.pdparams"


def test_ssd_matches_paddle(tmp_path: Path) -> None:
    _paddle()
    from tests.paddle_models import PaddleSSD

    pd = PaddleSSD(num_classes=5, depth_multiplier=0.25)
    f = _save(pd, tmp_path / "ssd.pdparams", seed=3)
    sets = {"num_classes": 5, "depth_multiplier": 0.25, "input_size": 96}
    res = import_paddle(f, "ssd-mobilenet-v1", tmp_path / "ssd", sets=sets)
    x = _input((1, 3, 96, 96))
    assert _max_diff(_run_paddle(pd, x), _run_torch(res.path, x)) < TOL


def test_yolox_matches_paddle_and_bn_eps_matters(tmp_path: Path) -> None:
    _paddle()
    from tests.paddle_models import PaddleYOLOXNano

    pd = PaddleYOLOXNano(num_classes=80)
    f = _save(pd, tmp_path / "yolox.pdparams", seed=4)
    res = import_paddle(f, "yolox-nano", tmp_path / "yolox")
    x = _input((1, 3, 64, 64))
    ref = _run_paddle(pd, x)
    assert _max_diff(ref, _run_torch(res.path, x)) < TOL
    assert load_artifact(res.path).config.class_ids[0] == 1  # COCO ids for 80 classes
    wrong = import_paddle(f, "yolox-nano", tmp_path / "y2", sets={"bn_eps": 0.5})
    assert _max_diff(ref, _run_torch(wrong.path, x)) > 1e-4


# -- seed 000's baseline bugs, seen through `clearsight audit` ----------------------------
def test_baseline_bugs_are_named_by_the_audit(tmp_path: Path) -> None:
    """The Paddle demoiré baseline: bandpass kernel overwritten in forward and a global block
    lost to a reused name. The import refuses the lost block unless told to share it; the
    imported model equals the Paddle model's next forward; the audit names both."""
    paddle = _paddle()
    from typer.testing import CliRunner

    from clearsight.cli import app
    from clearsight.model_audit import audit
    from tests.paddle_models import PaddleMBCNN

    pd = PaddleMBCNN(n=4, baseline_bugs=True)
    from tests.paddle_models import randomize

    randomize(pd, 5)
    pd.train()
    with paddle.no_grad():
        for _ in range(3):  # three training forwards: the kernel is overwritten each time
            pd(paddle.to_tensor(_input((1, 3, 16, 16), seed=9)))
    pd.eval()
    f = tmp_path / "baseline.pdparams"
    paddle.save(pd.state_dict(), str(f))
    with pytest.raises(PaddleImportError, match=r"lost block\(s\) _t1_global_block "):
        import_paddle(f, "mbcnn", tmp_path / "refused", sets={"n_filters": 4})
    res = import_paddle(f, "mbcnn", tmp_path / "mb", sets={"n_filters": 4, "lost_blocks": "share"})
    assert {x["check"] for x in res.findings} == {"forward purity", "structure"}
    x = _input((1, 3, 16, 24))
    assert _max_diff(_run_paddle(pd, x), _run_torch(res.path, x)) < TOL  # its next forward

    report = audit(str(res.path), size=16)
    purity, structure = report.by_name("forward purity"), report.by_name("structure")
    assert not purity.passed and "_e1_pre_block.adap.kernel was overwritten" in purity.details
    assert not structure.passed
    assert "_t1_global_block is one block where" in structure.details
    assert "t1_global1 and t1_global2 hold identical weights" in structure.details
    assert report.by_name("two optimizer steps").passed  # the module itself trains
    cli = CliRunner().invoke(app, ["audit", str(res.path), "--size", "16"])
    assert cli.exit_code == 1 and "overwritten in forward" in cli.output


# -- the inverse (clearsight -> .pdparams), and a round trip without Paddle ---------------
@pytest.mark.parametrize(
    ("arch", "args", "shape"),
    [
        ("rescan", {"channels": 4, "stages": 2, "depth": 4}, (1, 3, 9, 11)),
        ("mbcnn-light", {"n_filters": 2}, (1, 3, 16, 16)),
        ("ssd-mobilenet-v1", {"num_classes": 3, "depth_multiplier": 0.25, "input_size": 64},
         (1, 3, 64, 64)),
        ("yolox-nano", {"num_classes": 2}, (1, 3, 32, 32)),
    ],
)  # fmt: skip
def test_round_trip_through_pdparams(tmp_path: Path, arch: str, args: dict, shape: tuple) -> None:
    from clearsight.artifact import make_config, save_artifact
    from clearsight.convert.paddle_state import save_pdparams
    from clearsight.models.registry import build_model

    torch.manual_seed(0)
    model = build_model(arch, **args).eval()
    art = save_artifact(model, tmp_path / "a", make_config(model, arch, args))
    pd = save_pdparams(str(art), tmp_path / "w.pdparams")
    back = import_paddle(pd, arch, tmp_path / "b", sets=args)
    x = _input(shape)
    with torch.no_grad():
        ref = model(torch.from_numpy(x))
    assert (
        _max_diff(
            _run_torch(back.path, x),
            [t.numpy() for t in (ref if isinstance(ref, list | tuple) else [ref])],
        )
        < TOL
    )


def test_pdparams_written_here_load_in_paddle(tmp_path: Path) -> None:
    """paddle.load reads what save_pdparams writes, into the Paddle model with its names."""
    paddle = _paddle()
    from clearsight.artifact import make_config, save_artifact
    from clearsight.convert.paddle_state import save_pdparams
    from clearsight.models.registry import build_model
    from tests.paddle_models import PaddleMBCNN

    torch.manual_seed(1)
    model = build_model("mbcnn", n_filters=4).eval()
    art = save_artifact(model, tmp_path / "a", make_config(model, "mbcnn", {"n_filters": 4}))
    f = save_pdparams(str(art), tmp_path / "w.pdparams")
    pd = PaddleMBCNN(n=4)
    missing, unexpected = pd.set_state_dict(paddle.load(str(f)))
    assert not missing and not unexpected
    pd.eval()
    x = _input((1, 3, 16, 24))
    with torch.no_grad():
        ref = [t.numpy() for t in model(torch.from_numpy(x))]
    assert _max_diff(_run_paddle(pd, x), ref) < TOL
