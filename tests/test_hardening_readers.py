"""Second hardening round, files, configs and data readers (docs/reliability.md): each
test reproduces a failure of a hostile probe (its number in the probe report) and failed
before the fix. Errors must be one line naming the file and the field, tensor or entry."""

from __future__ import annotations

import json
import pickle
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from clearsight.artifact import CONFIG_FILE, LoadedModel, ModelConfig, make_config, save_artifact
from clearsight.cli import app
from clearsight.convert.paddle_pickle import PdparamsError, read_pdparams
from clearsight.data.coco import CocoFormatError, load_coco
from clearsight.engine.checkpoint import FORMAT, VERSION, CheckpointError, load_checkpoint
from clearsight.engine.detector import Detector
from clearsight.errors import ArtifactError, ClearsightError
from clearsight.io import write_image
from clearsight.models.registry import build_model
from clearsight.preprocess import PreprocessSpec
from tests.coco_utils import tiny_coco, write_coco

runner = CliRunner()


def _one_error_line(res: Any) -> str:
    """The single `error:` line of a CLI run that failed as users should see it."""
    assert res.exit_code == 1, res.output
    assert isinstance(res.exception, SystemExit), repr(res.exception)
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), res.output
    assert "Traceback" not in res.output and "internal error" not in res.output
    return lines[0]


# -- 4: a .pdparams cannot make the reader allocate what the file does not hold ------------
class _Reconstruct:
    """Pickles as NumPy's `_reconstruct(ndarray, shape, dtype)` [+ `__setstate__(state)`],
    the calls a real array makes, with whatever shape and state a hostile file declares."""

    def __init__(self, shape: tuple[int, ...], state: tuple[Any, ...] | None = None) -> None:
        self.shape, self.state = shape, state

    def __reduce__(self) -> tuple[Any, ...]:
        from numpy._core.multiarray import _reconstruct

        head = (_reconstruct, (np.ndarray, self.shape, b"b"))
        return head if self.state is None else (*head, self.state)


def _pdparams(path: Path, state: dict[str, Any]) -> Path:
    path.write_bytes(pickle.dumps(state, protocol=4))
    return path


def test_a_pdparams_declaring_10e14_bytes_names_the_file_and_tensor(tmp_path: Path) -> None:
    bad = _pdparams(tmp_path / "huge.pdparams", {"rnns.0.conv_xz.weight": _Reconstruct((10**14,))})
    assert bad.stat().st_size < 200
    res = runner.invoke(
        app, ["import", "paddle", str(bad), "--arch", "rescan", "-o", str(tmp_path / "out")]
    )
    line = _one_error_line(res)
    assert str(bad) in line and "'rnns.0.conv_xz.weight'" in line, line
    assert "100,000,000,000,000 bytes" in line and "more than the whole file" in line, line
    assert "out of memory" not in line and not (tmp_path / "out").exists()


def test_a_pdparams_whose_state_declares_more_than_its_data_names_the_tensor(
    tmp_path: Path,
) -> None:
    """The shape in `__setstate__` is checked against the bytes beside it, under its name."""
    state = (1, (30,), np.dtype("float32"), False, b"\0" * 12)  # 120 bytes, within the file
    bad = _pdparams(tmp_path / "short.pdparams", {"a.weight": _Reconstruct((0,), state)})
    with pytest.raises(PdparamsError) as err:
        read_pdparams(bad)
    msg = str(err.value)
    assert msg.startswith(f"{bad}: tensor 'a.weight'") and "holds 12 bytes" in msg, msg
    assert "declares shape [30] float32 (120 bytes)" in msg and "\n" not in msg


def test_a_pdparams_tensor_larger_than_the_architecture_is_refused_before_conversion(
    tmp_path: Path,
) -> None:
    """An int8 array within the file size would grow 4x as float32 (8x as float64) in the
    conversion; none larger than the architecture's largest tensor gets that far."""
    from clearsight.convert.paddle_import import PaddleImportError, import_paddle

    sets = {"channels": 4, "stages": 1, "depth": 3}
    big = _pdparams(tmp_path / "big.pdparams", {"dec.0.weight": np.zeros(200_000, np.int8)})
    with pytest.raises(PaddleImportError) as err:
        import_paddle(big, "rescan", tmp_path / "o", sets=sets)
    msg = str(err.value)
    assert (
        msg.startswith(f"{big}: tensor(s) larger than any rescan tensor") and "dec.0.weight" in msg
    )
    assert not (tmp_path / "o").exists()


# -- 5: a checkpoint with objects is refused in one line, never with unsafe advice ---------
class _Marker:
    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, ...]:
        return (Path.touch, (self.path,))


def test_resume_from_a_checkpoint_with_objects_is_one_line_without_unsafe_advice(
    tmp_path: Path,
) -> None:
    run, marker = tmp_path / "run", tmp_path / "ran"
    run.mkdir()
    state = {"format": FORMAT, "version": VERSION, "step": 1, "x": _Marker(marker)}
    torch.save(state, run / "checkpoint.pt")
    res = runner.invoke(app, ["train", "--resume", str(run), "--no-progress"])
    line = _one_error_line(res)
    assert str(run / "checkpoint.pt") in line and "objects other than tensors" in line, line
    assert "weights_only" not in res.output and "trust" not in res.output
    assert not marker.exists()


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: p.write_bytes(b"PK\x03\x04 truncated"), "not a readable checkpoint"),
        (lambda p: torch.save({"format": FORMAT, "version": VERSION, "step": 3}, p),
         "checkpoint lacks epoch, position, model"),
    ],
)  # fmt: skip
def test_a_broken_checkpoint_is_one_line_naming_it(tmp_path: Path, make: Any, message: str) -> None:
    path = tmp_path / "checkpoint.pt"
    make(path)
    with pytest.raises(CheckpointError) as err:
        load_checkpoint(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    assert "\n" not in str(err.value)


def test_resuming_with_a_model_that_does_not_fit_names_the_checkpoint(tmp_path: Path) -> None:
    """A checkpoint whose weights do not fit the run (a key lost) used to be PyTorch's
    multi-line state-dict error; now one line naming the file."""
    from clearsight.engine.trainer import train
    from tests.train_utils import make_pairs, tiny_config

    cfg = tiny_config(make_pairs(tmp_path / "pairs", n=4, size=16), train={"steps": 2})
    train(cfg, tmp_path / "run", progress=False)
    ckpt = tmp_path / "run" / "checkpoint.pt"
    state = torch.load(ckpt, weights_only=True)
    state["model"].pop(next(iter(state["model"])))
    torch.save(state, ckpt)
    more = tiny_config(make_pairs(tmp_path / "pairs", n=4, size=16), train={"steps": 3})
    with pytest.raises(CheckpointError) as err:
        train(more, tmp_path / "run", resume=True, progress=False)
    msg = str(err.value)
    assert msg.startswith(f"{ckpt}: does not fit this run (RuntimeError: ") and "\n" not in msg
    assert "Missing key(s)" in msg


# -- 6: every preprocessing field of a config is bounded at load ----------------------------
def _tiny_artifact(path: Path, **preprocess: Any) -> Path:
    args = {"channels": 4, "stages": 1, "depth": 3}
    model = build_model("rescan", **args)
    save_artifact(model, path, make_config(model, "rescan", args))
    cfg = json.loads((path / CONFIG_FILE).read_text())
    for key, value in preprocess.items():
        if key.startswith("extra."):
            cfg["preprocess"]["extra"][key.removeprefix("extra.")] = value
        else:
            cfg["preprocess"][key] = value
    (path / CONFIG_FILE).write_text(json.dumps(cfg))
    return path


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("pad_multiple", 1024, "preprocess.pad_multiple=1024 is outside 1..128"),
        ("pad_multiple", 10**9, "preprocess.pad_multiple=1000000000 is outside 1..128"),
        ("pad_multiple", 0, "preprocess.pad_multiple=0 is outside 1..128"),
        ("pad_multiple", 8.5, "preprocess.pad_multiple must be an integer, got 8.5"),
        ("pad_multiple", True, "preprocess.pad_multiple must be an integer, got True"),
        ("size", [10**6, 10**6], "preprocess.size=[1000000, 1000000] is outside 1..4096"),
        ("size", [300], "preprocess.size must be 2 integers, got [300]"),
        ("value_range", [1, 0], "preprocess.value_range [1.0, 0.0] needs lo < hi"),
        ("value_range", ["a", 1], "preprocess.value_range must be 2 numbers, got ['a', 1]"),
        ("mean", [0, 0, 1e30], "preprocess.mean=[0, 0, 1e+30] is outside"),
        ("std", [1, 0, 1], "preprocess.std=[1, 0, 1] is outside"),
        ("std", [1, 1], "preprocess.std must be 3 numbers"),
        ("resize", "letterbox", "preprocess.resize 'letterbox' needs a size"),
        ("color_order", "CMYK", "preprocess.color_order must be one of RGB, BGR"),
        ("extra.pad_value", 1000, "preprocess.extra.pad_value=1000 is outside 0.0..255.0"),
        ("extra.interpolation", "evil", "preprocess.extra.interpolation must be one of"),
        ("extra", [], "preprocess.extra must be an object"),
    ],
)
def test_preprocessing_fields_are_bounded_at_load_naming_file_and_field(
    tmp_path: Path, field: str, value: Any, message: str
) -> None:
    from clearsight.artifact import load_artifact, read_config

    path = _tiny_artifact(tmp_path / "m", **{field: value})
    for load in (read_config, load_artifact):
        with pytest.raises(ArtifactError) as err:
            load(path)
        msg = str(err.value)
        assert msg.startswith(f"{path / CONFIG_FILE}: ") and message in msg, msg
        assert "\n" not in msg


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("arch_args", "abc", "arch_args must be an object, got str"),
        ("param_count", "many", "param_count must be an integer, got str"),
        ("layer_shapes", {"a": 3}, "layer_shapes must map names to lists of sizes"),
        ("preprocess", [1], "preprocess must be an object, got list"),
    ],
)
def test_config_fields_of_the_wrong_type_name_the_file(
    tmp_path: Path, key: str, value: Any, message: str
) -> None:
    """Each used to escape as a bare ValueError or TypeError (`internal error` in the CLI)."""
    from clearsight.artifact import read_config

    path = _tiny_artifact(tmp_path / "m")
    cfg = json.loads((path / CONFIG_FILE).read_text())
    cfg[key] = value
    (path / CONFIG_FILE).write_text(json.dumps(cfg))
    with pytest.raises(ArtifactError) as err:
        read_config(path)
    assert str(err.value) == f"{path / CONFIG_FILE}: {message}"


def test_preprocessing_in_bounds_still_loads(tmp_path: Path) -> None:
    from clearsight.artifact import load_artifact

    spec = {"pad_multiple": 128, "value_range": [0, 255], "std": [58.4, 57.1, 57.4]}
    loaded = load_artifact(_tiny_artifact(tmp_path / "m", **spec))
    assert loaded.config.preprocess.pad_multiple == 128
    assert loaded.config.preprocess.value_range == (0.0, 255.0)
    defaults = PreprocessSpec()
    assert PreprocessSpec.from_dict(defaults.to_dict()) == defaults


def test_restore_with_pad_multiple_1e9_is_one_line_not_a_failure_per_image(
    tmp_path: Path,
) -> None:
    """It used to fail each image with `RuntimeError: Storage size calculation overflowed`."""
    model = _tiny_artifact(tmp_path / "m", pad_multiple=10**9)
    write_image(tmp_path / "in" / "a.png", np.zeros((1, 1, 3), np.uint8))
    res = runner.invoke(
        app, ["restore", str(tmp_path / "in"), "--model", str(model), "-o", str(tmp_path / "o")]
    )
    line = _one_error_line(res)
    assert str(model / CONFIG_FILE) in line and "preprocess.pad_multiple" in line, line


# -- 9: a COCO file_name cannot reach outside the image folder ------------------------------
@pytest.mark.parametrize("how", ["dotdot", "absolute", "symlink"])
def test_coco_file_name_outside_the_image_folder_is_refused(tmp_path: Path, how: str) -> None:
    ann, imgs = write_coco(tmp_path / "set")
    outside = tmp_path / "other" / "c.png"
    outside.parent.mkdir()
    (imgs / "c.png").rename(outside)  # a real image, of the size the JSON says
    gt = json.loads(ann.read_text())
    if how == "dotdot":
        gt["images"][2]["file_name"] = "../../other/c.png"
    elif how == "absolute":
        gt["images"][2]["file_name"] = str(outside)
    else:
        (imgs / "c.png").symlink_to(outside)
    ann.write_text(json.dumps(gt))
    name = gt["images"][2]["file_name"]
    for check_files in (True, False):
        with pytest.raises(CocoFormatError) as err:
            load_coco(ann, imgs, check_files=check_files)
        msg = str(err.value)
        assert (
            msg == f"{ann}: image 12: file_name {name!r} resolves outside the image folder {imgs}"
        )


def test_coco_links_and_subfolders_inside_the_image_folder_are_fine(tmp_path: Path) -> None:
    ann, imgs = write_coco(tmp_path / "set")
    (imgs / "sub").mkdir()
    (imgs / "c.png").rename(imgs / "sub" / "c.png")
    (imgs / "c.png").symlink_to(imgs / "sub" / "c.png")
    gt = json.loads(ann.read_text())
    gt["images"][1]["file_name"] = "sub/../b.png"
    ann.write_text(json.dumps(gt))
    assert [e.path for e in load_coco(ann, imgs).images][1:] == [
        imgs / "sub/../b.png",
        imgs / "c.png",
    ]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda g: g["images"][0].update(id="7"), "image '7': id must be an integer, got '7'"),
        (lambda g: g["images"][1].update(width=0), "image 11: width must be an integer >= 1"),
        (lambda g: g["annotations"][0].update(bbox=["a", 3, 40, 60]),
         "annotation 1 (image a.png): bbox must be [x, y, width, height], finite"),
        (lambda g: g["annotations"][0].update(bbox=[float("nan"), 3, 40, 60]),
         "annotation 1 (image a.png): bbox must be [x, y, width, height], finite"),
        (lambda g: g["annotations"][1].update(id=1), "annotation id 1 appears twice"),
        (lambda g: g["categories"].append({"id": 18, "name": "cat"}),
         "category id 18 appears twice"),
        (lambda g: g["annotations"][0].update(iscrowd="yes"), "iscrowd must be 0 or 1"),
    ],
)  # fmt: skip
def test_coco_entries_are_type_checked_naming_the_entry(tmp_path: Path, edit, message) -> None:
    """Each used to pass silently or stop with a bare ValueError (`could not convert`)."""
    ann, imgs = write_coco(tmp_path)
    gt = tiny_coco()
    edit(gt)
    ann.write_text(json.dumps(gt))
    with pytest.raises(CocoFormatError) as err:
        load_coco(ann, imgs)
    assert str(err.value).startswith(f"{ann}: ") and message in str(err.value)


def test_eval_report_never_reads_an_image_outside_the_set(tmp_path: Path) -> None:
    ann, imgs = write_coco(tmp_path / "set" / "tmp")
    data = tmp_path / "set"
    (data / "annotations").mkdir()
    gt = json.loads(ann.read_text())
    gt["images"][0]["file_name"] = "../../secret.png"
    write_image(tmp_path / "secret.png", np.zeros((96, 128, 3), np.uint8))
    (data / "annotations" / "instances_images.json").write_text(json.dumps(gt))
    imgs.rename(data / "images")
    report = tmp_path / "r.html"
    res = runner.invoke(
        app, ["eval", "--model", "default-detect", "--data", str(data), "--report", str(report)]
    )
    line = _one_error_line(res)
    assert "'../../secret.png' resolves outside the image folder" in line, line
    assert not report.exists()


# -- 10: a detector knowing more classes than the set lists is scored on the listed ones ----
class _TwoBoxes(torch.nn.Module):
    """A stand-in detector: a "person" (label 0) and a "dog" (label 1) box on every image."""

    task = "detect"
    num_classes = 3

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.mean(dim=(1, 2, 3))

    def postprocess(self, raw, score_threshold=0.0, iou_threshold=0.5, max_detections=100):
        boxes = torch.tensor([[2.0, 3.0, 42.0, 63.0], [80.0, 60.0, 102.0, 76.0]])
        out = {"boxes": boxes, "scores": torch.tensor([0.9, 0.8]), "labels": torch.tensor([0, 1])}
        return [out for _ in raw]


def _detector(class_ids: list[int]) -> Detector:
    spec = PreprocessSpec(resize="fixed", size=(96, 128))
    config = ModelConfig(
        architecture="yolox-nano", arch_args={}, task="detect", preprocess=spec,
        metric_preset="coco-bbox", class_ids=class_ids,
        class_names=[f"c{i}" for i in class_ids],
    )  # fmt: skip
    return Detector(LoadedModel(_TwoBoxes(), config, "two-boxes"))


def _coco_set(root: Path, gt: dict[str, Any]) -> Path:
    write_coco(root / "tmp", gt)
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_val.json").write_text(json.dumps(gt))
    (root / "tmp" / "images").rename(root / "images")
    return root


def test_classes_the_set_does_not_list_are_dropped_and_counted(tmp_path: Path) -> None:
    from clearsight.engine.detect_evaluate import evaluate_coco_set

    gt = tiny_coco()
    gt["categories"] = [c for c in gt["categories"] if c["id"] != 18]  # people only
    gt["annotations"] = [a for a in gt["annotations"] if a["category_id"] == 1]
    data = _coco_set(tmp_path / "coco", gt)
    result = evaluate_coco_set(_detector([1, 18, 90]), data)
    assert result.coco.dropped_detections == 3  # one dog box on each of the 3 images
    assert result.coco.num_detections == 3 and {d["category_id"] for d in result.results} == {1}
    assert set(result.coco.per_class) == {1, 90} and result.coco.per_class[1] > 0
    summary = result.summary()
    assert summary["dropped_detections"] == 3 and summary["detections"] == 3
    assert all(r["detections"] == 1 for r in result.rows)  # the dog is no false positive


def test_a_detector_whose_ids_match_none_of_the_sets_is_refused_before_running(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from clearsight.engine.detect_evaluate import evaluate_coco_set

    data = _coco_set(tmp_path / "coco", tiny_coco())  # ids 1, 18, 90
    detector = _detector([0, 17, 89])  # contiguous labels, one below each id
    monkeypatch.setattr(detector, "detect_batch", lambda *a, **k: pytest.fail("ran the model"))
    with pytest.raises(ClearsightError) as err:
        evaluate_coco_set(detector, data)
    msg = str(err.value)
    assert msg.startswith(str(data / "annotations" / "instances_val.json"))
    assert "none of the model's 3 class ids (0, 17, 89)" in msg and "contiguous labels" in msg


# -- 11, 12: astar-score reads the annotations with eval's reader and checks ----------------
def _astar_set(root: Path, edit: Any) -> Path:
    gt = tiny_coco()
    write_coco(root / "tmp", gt)
    (root / "annotations").mkdir(parents=True)
    (root / "tmp" / "images").rename(root / "val2017")
    ann = root / "annotations" / "instances_val2017.json"
    text = json.dumps(gt)
    ann.write_text(edit(gt) if edit is not None else text)
    return root


_EDITS = {
    "truncated JSON": (lambda gt: json.dumps(gt)[:100], "invalid JSON"),
    "bbox abc": (
        lambda gt: json.dumps({**gt, "annotations": [{**gt["annotations"][0], "bbox": "abc"}]}),
        "annotation 1 (image a.png): bbox must be [x, y, width, height], finite, got 'abc'",
    ),
    "dangling annotation": (
        lambda gt: json.dumps({**gt, "annotations": [{**gt["annotations"][0], "image_id": 99}]}),
        "annotation 1 refers to unknown image id 99",
    ),
    "file_name outside": (
        lambda gt: json.dumps(
            {**gt, "images": [{**gt["images"][0], "file_name": "../../x.png"}, *gt["images"][1:]]}
        ),
        "image 7: file_name '../../x.png' resolves outside the image folder",
    ),
}


@pytest.mark.parametrize("case", list(_EDITS))
def test_astar_score_refuses_what_eval_refuses_in_one_line(tmp_path: Path, case: str) -> None:
    from clearsight.detection.astar import astar_score

    edit, message = _EDITS[case]
    data = _astar_set(tmp_path / "set", edit)
    ann = data / "annotations" / "instances_val2017.json"
    with pytest.raises(CocoFormatError) as by_eval:
        load_coco(ann, data / "val2017")  # what `eval` reads a set with
    with pytest.raises(CocoFormatError) as by_astar:
        astar_score("default-detect", data)
    assert str(by_astar.value) == str(by_eval.value)
    assert str(by_astar.value).startswith(f"{ann}: ") and message in str(by_astar.value)


def test_astar_score_command_on_a_truncated_json_is_one_line(tmp_path: Path) -> None:
    data = _astar_set(tmp_path / "set", _EDITS["truncated JSON"][0])
    res = runner.invoke(app, ["astar-score", "default-detect", "--data", str(data)])
    line = _one_error_line(res)
    assert "instances_val2017.json: invalid JSON" in line, line
