"""Detector training: SSD's multibox loss on hand-built anchors, box-safe augmentation that ends
in the artifact's own preprocessing, exact resume, and --overfit-batch reaching AP >= 0.9."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from typer.testing import CliRunner

from clearsight.artifact import load_artifact
from clearsight.cli import app
from clearsight.detection.detector import Detector
from clearsight.detection.evaluate import evaluate_coco_set
from clearsight.detection.losses import (
    MultiboxLoss,
    hard_negative_mask,
    match_anchors,
    simota_assign,
)
from clearsight.detection.preprocess import prepare
from clearsight.detection.train_data import CocoDetectionDataset
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.train_config import TrainConfigError, load_config
from clearsight.engine.train_stream import init_dist
from clearsight.engine.trainer import train
from clearsight.models.registry import build_model, get_spec
from clearsight.models.ssd_mobilenet_v1 import decode_boxes, encode_boxes
from clearsight.zoo import resolve_model
from tests.detect_train_utils import make_rectangles, ssd_config, ssd_raw
from tests.train_utils import train_log

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def rects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_rectangles(tmp_path_factory.mktemp("rects"))


def _anchor(x0: float, y0: float, x1: float, y1: float) -> list[float]:
    return [(y0 + y1) / 2, (x0 + x1) / 2, y1 - y0, x1 - x0]  # (yc, xc, h, w)


# -- the loss -----------------------------------------------------------------------------------
def test_matching_thresholds_then_forces_each_boxs_best_anchor() -> None:
    anchors = torch.tensor(
        [
            _anchor(0.0, 0.0, 0.5, 0.5),  # IoU 1 with box 0
            _anchor(0.5, 0.5, 1.0, 1.0),  # box 1's best anchor, IoU only 0.04
            _anchor(0.05, 0.05, 0.45, 0.45),  # IoU 0.64 with box 0: over 0.5
            _anchor(0.4, 0.4, 0.6, 0.6),  # IoU 0.036 with box 0: background
        ]
    )
    boxes = torch.tensor([[0.0, 0.0, 0.5, 0.5], [0.7, 0.7, 0.8, 0.8]])
    assert match_anchors(anchors, boxes).tolist() == [0, 1, 0, -1]
    # two boxes whose best anchor is the same one: the first box gets it (the API's argmax)
    twins = torch.tensor([[0.6, 0.6, 0.7, 0.7], [0.7, 0.7, 0.8, 0.8]])
    assert match_anchors(anchors, twins).tolist() == [-1, 0, -1, -1]
    assert match_anchors(anchors, torch.zeros(0, 4)).tolist() == [-1] * 4


def test_hard_negatives_are_three_per_positive_and_the_hardest() -> None:
    g = torch.Generator().manual_seed(0)
    loss = torch.rand(2, 30, generator=g)
    pos = torch.zeros(2, 30, dtype=torch.bool)
    pos[0, [3, 7]] = True
    pos[1, 5] = True
    neg = hard_negative_mask(loss, pos)
    assert neg.sum(1).tolist() == [6, 3] and not (neg & pos).any()
    for i in range(2):  # the chosen negatives are the highest-loss background anchors
        bg = loss[i][~pos[i]]
        assert loss[i][neg[i]].min() >= bg.sort(descending=True).values[neg[i].sum() - 1]
    few = torch.zeros(1, 4, dtype=torch.bool)
    few[0, :3] = True  # only one background anchor: it is all there is to mine
    assert hard_negative_mask(torch.rand(1, 4), few).sum().item() == 1


def test_box_coder_round_trips() -> None:
    anchors = torch.tensor([_anchor(0.1, 0.2, 0.5, 0.6), _anchor(0.3, 0.3, 0.9, 0.5)])
    boxes = torch.tensor([[0.15, 0.2, 0.45, 0.7], [0.25, 0.35, 0.95, 0.4]])
    assert torch.allclose(decode_boxes(encode_boxes(boxes, anchors), anchors), boxes, atol=1e-6)


def test_multibox_loss_is_zero_for_a_perfect_prediction() -> None:
    model = build_model("ssd-mobilenet-v1", num_classes=3, depth_multiplier=0.125, input_size=96)
    loss_fn = MultiboxLoss(model)
    targets = [
        {"boxes": torch.tensor([[10.0, 12.0, 50.0, 60.0]]), "labels": torch.tensor([1])},
        {"boxes": torch.tensor([[40.0, 30.0, 90.0, 70.0], [5.0, 5.0, 30.0, 40.0]]),
         "labels": torch.tensor([0, 1])},
    ]  # fmt: skip
    enc_t, cls_t, pos = loss_fn.targets(targets, model.anchors)
    assert pos.sum(1).tolist()[0] >= 1 and pos.sum(1).tolist()[1] >= 2
    assert set(cls_t[pos].tolist()) <= {1, 2} and (cls_t[~pos] == 0).all()
    logits = torch.nn.functional.one_hot(cls_t, 3).float() * 40 - 20  # confident and right
    logits[..., 0] = 7.0  # the background column is ignored, whatever it says
    loss = loss_fn((enc_t, logits), None, targets)
    assert loss_fn.last["loc"] < 1e-6 and float(loss) < 1e-6
    assert loss_fn.last["negatives"] == 3 * loss_fn.last["positives"]
    off = enc_t + 0.5  # every positive's box off: smooth L1 of 0.5 on each of 4 coordinates
    loss_fn((off, logits), None, targets)
    assert loss_fn.last["loc"] == pytest.approx(4 * 0.5 * 0.5**2, rel=1e-5)


# -- the data -----------------------------------------------------------------------------------
def _dataset(root: Path, augment: bool) -> CocoDetectionDataset:
    spec = get_spec("ssd-mobilenet-v1").preprocess
    import dataclasses

    spec = dataclasses.replace(spec, size=(96, 96))
    return CocoDetectionDataset.from_folder(root, spec, [1, 2], augment=augment, seed=3)


def test_augmentation_keeps_boxes_valid_inside_the_input_and_is_reproducible(rects: Path) -> None:
    ds = _dataset(rects, augment=True)
    changed = 0
    for epoch in range(4):
        ds.set_epoch(epoch)
        for i in range(len(ds)):
            x, t = ds[i]
            assert x.shape == (3, 96, 96)
            b = t["boxes"]
            assert b.shape[0] == t["labels"].shape[0] >= 0
            assert (b[:, 2] > b[:, 0]).all() and (b[:, 3] > b[:, 1]).all()
            assert (b >= 0).all() and (b <= 96).all()
            x2, t2 = ds[i]  # the draw is a function of (seed, epoch, index)
            assert torch.equal(x, x2) and torch.equal(b, t2["boxes"])
            plain_x, _ = _dataset(rects, augment=False)[i]
            changed += not torch.equal(x, plain_x)
    assert changed >= 8  # augmentation does change most samples


def test_training_input_is_the_inference_preprocessing(rects: Path) -> None:
    ds = _dataset(rects, augment=False)
    for i in range(len(ds)):
        image, boxes, _ = ds.raw_sample(i)
        x, t = ds[i]
        ref, transform = prepare(image, ds.spec)  # what Detector feeds the network
        assert torch.equal(x, ref)
        back = transform.boxes_to_image(t["boxes"])
        assert torch.allclose(back, torch.from_numpy(boxes), atol=1e-4)


# -- the trainer --------------------------------------------------------------------------------
def test_detection_run_exports_an_artifact_that_detect_and_eval_load(
    rects: Path, tmp_path: Path
) -> None:
    res = train(ssd_config(rects), tmp_path, progress=False)
    assert set(res.val_metrics) == {"AP", "AP50", "AP75"}
    assert train_log(tmp_path, "val/AP")
    loaded = load_artifact(tmp_path / "last")
    cfg = loaded.config
    assert cfg.task == "detect" and cfg.class_ids == [1, 2]
    assert cfg.class_names == ["red box", "blue box"]
    assert cfg.preprocess.size == (96, 96) and cfg.provenance["steps"] == 6
    # the artifact's preprocessing is the one the training data went through
    ds = _dataset(rects, augment=False)
    assert cfg.preprocess == ds.spec
    result = evaluate_coco_set(Detector(loaded), rects)
    assert 0.0 <= result.coco.ap <= 1.0 and len(result.rows) == 4
    out = CliRunner().invoke(
        app, ["detect", str(rects / "train" / "000.png"), "--model", str(tmp_path / "last"),
              "-o", str(tmp_path / "det"), "--score-threshold", "0.0"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    assert (tmp_path / "det" / "detections.json").is_file()


def test_detection_resume_is_bit_exact(rects: Path, tmp_path: Path) -> None:
    cfg = ssd_config(rects, train={"ema_decay": 0.9})
    train(cfg, tmp_path / "a", progress=False)
    train(ssd_config(rects, train={"ema_decay": 0.9, "steps": 3}), tmp_path / "b", progress=False)
    res = train(cfg, tmp_path / "b", resume=True, progress=False)
    assert res.steps == 6
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
        assert torch.equal(a["ema"][key], b["ema"][key]), key


def test_overfit_batch_reaches_near_perfect_ap(rects: Path, tmp_path: Path) -> None:
    raw = ssd_raw(rects, train={"steps": 50}, data={"augment": False, "val": None})
    cfg_path = tmp_path / "tiny.yaml"
    cfg_path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    out = CliRunner().invoke(
        app, ["train", str(cfg_path), "--overfit-batch", "--run-dir", str(tmp_path / "run"),
              "--no-progress"],
    )  # fmt: skip
    assert out.exit_code == 0, out.output
    ap = float(out.output.split("COCO AP on that batch:")[1].split()[0])
    assert ap >= 0.9, out.output
    # too few steps: the check fails loudly
    short = ssd_config(rects, train={"steps": 3}, data={"augment": False, "val": None})
    res = train(short, tmp_path / "short", overfit_batch=True, progress=False)
    assert res.overfit_ap is not None and res.overfit_ap < 0.9 and res.overfit_ok is False


def test_a_restoration_loss_on_a_detector_is_refused(rects: Path, tmp_path: Path) -> None:
    with pytest.raises(Exception, match="not a detection loss"):
        train(ssd_config(rects, loss={"name": "l1"}), tmp_path, progress=False)


def test_unknown_category_is_named(rects: Path, tmp_path: Path) -> None:
    data = json.loads((rects / "annotations" / "instances_train.json").read_text())
    data["categories"].append({"id": 7, "name": "train"})
    data["annotations"][0]["category_id"] = 7
    root = tmp_path / "bad"
    (root / "annotations").mkdir(parents=True)
    (root / "annotations" / "instances_train.json").write_text(json.dumps(data))
    (root / "train").symlink_to(rects / "train")
    with pytest.raises(Exception, match="category id 7"):
        _dataset(root, augment=False)
    # three categories for a 2-label head: the config error says what to change
    with pytest.raises(TrainConfigError, match="num_classes"):
        train(ssd_config(root), tmp_path / "run", progress=False)


# -- the shipped fine-tuning config -------------------------------------------------------------
@pytest.mark.realdata
@pytest.mark.parametrize(
    ("config", "bundled"),
    [
        ("ssd-mobilenet-v1-finetune", "ssd-mobilenet-v1-coco"),
        ("yolox-nano-finetune", "default-detect"),
    ],
)
def test_finetune_configs_run_a_step_from_the_bundled_model(
    config: str, bundled: str, shared_data: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not (shared_data / "detection" / "coco128").is_dir():
        pytest.skip("coco128 not present")
    monkeypatch.chdir(REPO)  # the configs' data paths are relative to the checkout
    cfg = load_config(
        REPO / "configs" / f"{config}.yaml",
        [
            "train.steps=1",
            "data.batch_size=2",
            "data.val=../shared/data/detection/coco128",
            "val.max_images=2",
            'train.amp="off"',
        ],
    )
    res = train(cfg, tmp_path, progress=False)
    loaded, reference = load_artifact(tmp_path / "last"), resolve_model(bundled)
    assert loaded.config.class_ids == reference.config.class_ids
    assert loaded.config.class_names == reference.config.class_names
    assert loaded.config.preprocess == reference.config.preprocess
    assert np.isfinite(res.last_loss) and "AP" in res.val_metrics
    # the shipped config validates on nothing by default: coco_mini_val is the test set
    assert load_config(REPO / "configs" / f"{config}.yaml").data.val is None


# -- YOLOX ------------------------------------------------------------------------------------
def _grid(size: int = 32, stride: int = 8) -> tuple[torch.Tensor, torch.Tensor]:
    n = size // stride
    ys, xs = torch.meshgrid(torch.arange(n), torch.arange(n), indexing="ij")
    centers = (torch.stack([xs, ys], -1).reshape(-1, 2).float() + 0.5) * stride
    return centers, torch.full((n * n,), float(stride))


def test_simota_takes_dynamic_k_cheapest_anchors_in_the_centre_region() -> None:
    centers, strides = _grid()  # 4x4 anchors at 4, 12, 20, 28 px
    gt = torch.tensor([[8.0, 8.0, 24.0, 24.0]])  # centre (16, 16): radius 12 px admits 12, 20
    far = torch.tensor([0.0, 0.0, 2.0, 2.0])
    pred = far.repeat(16, 1)
    exact = [5, 0]  # anchor 5 (12, 12) is a candidate; anchor 0 (4, 4) is outside the region
    pred[exact] = gt[0]
    scores = torch.full((16, 2), 0.5)
    a, g, iou = simota_assign(centers, strides, pred, scores, gt, torch.tensor([1]))
    assert a.tolist() == [5] and g.tolist() == [0] and iou.tolist() == pytest.approx([1.0])
    pred[10] = gt[0]  # a second exact candidate (20, 20): top IoUs sum to 2, so k = 2
    a, _, _ = simota_assign(centers, strides, pred, scores, gt, torch.tensor([1]))
    assert sorted(a.tolist()) == [5, 10]


def test_yolox_loss_iou_term_is_zero_for_exact_boxes() -> None:
    from clearsight.detection.losses import YoloxLoss, _yolox_grid

    model = build_model("yolox-nano", num_classes=2, input_size=64)
    loss_fn = YoloxLoss(model)
    inputs = torch.zeros(1, 3, 64, 64)
    centers, strides = _yolox_grid(model.strides, 64, 64, inputs)
    gt = torch.tensor([[16.0, 12.0, 48.0, 40.0]])
    c = (gt[0, :2] + gt[0, 2:]) / 2
    raw = torch.zeros(1, centers.shape[0], 7)
    raw[0, :, :2] = c / strides[:, None] - (centers / strides[:, None] - 0.5)
    raw[0, :, 2:4] = torch.log((gt[0, 2:] - gt[0, :2]) / strides[:, None])
    raw[0, :, 4:] = 0.5
    targets = [{"boxes": gt, "labels": torch.tensor([1])}]
    loss_fn(raw, inputs, targets)
    assert loss_fn.last["iou"] < 1e-6 and loss_fn.last["matches"] >= 1
    assert loss_fn.last["obj"] > 0.1  # objectness 0.5 is wrong everywhere
    raw[0, :, 2:4] += 0.5  # every box too large: the IoU term is no longer zero
    loss_fn(raw, inputs, targets)
    assert loss_fn.last["iou"] > 0.1


def test_yolox_trains_through_the_trainer(rects: Path, tmp_path: Path) -> None:
    cfg = ssd_config(
        rects,
        model={"arch": "yolox-nano", "args": {"num_classes": 2, "input_size": 64}},
        loss={"name": "yolox"},
        data={"augment": False, "val": None},
        train={"steps": 40},
    )
    res = train(cfg, tmp_path, overfit_batch=True, progress=False)
    # from scratch, without its batch norms, YOLOX-Nano learns slowly: the loss falls, AP
    # on the batch stays low this early (it is meant to be fine-tuned from the converted model)
    assert res.last_loss < 0.85 * res.first_loss and res.overfit_ap is not None


def _ddp_worker(rank: int, world: int, port: int, data: str, out: str) -> None:
    from tests.test_train_ddp import _join, _save_result

    _join(rank, world, port)
    cfg = ssd_config(Path(data), train={"steps": 4, "ema_decay": 0.5, "device": "cpu"})
    _save_result(train(cfg, Path(out) / "run", progress=False), out, rank)


def test_two_ranks_train_a_detector_to_identical_weights(rects: Path, tmp_path: Path) -> None:
    import torch.multiprocessing as mp

    from tests.test_train_ddp import _free_port

    ctx = mp.start_processes(
        _ddp_worker,
        args=(2, _free_port(), str(rects), str(tmp_path)),
        nprocs=2,
        join=False,
        start_method="spawn",
    )
    for _ in range(120):
        if ctx.join(timeout=1):
            break
    else:
        for p in ctx.processes:
            p.kill()
        pytest.fail("data-parallel detection training did not finish in 120 s")
    a = torch.load(tmp_path / "rank0.pt", weights_only=True)
    b = torch.load(tmp_path / "rank1.pt", weights_only=True)
    for key, value in a["state"].items():
        assert torch.equal(value, b["state"][key]), key
    assert a["val"] == b["val"] and set(a["val"]) == {"AP", "AP50", "AP75"}
    assert (tmp_path / "run" / "best" / "config.json").is_file()


def test_model_init_with_other_shape_free_arguments_is_refused(rects: Path, tmp_path: Path) -> None:
    """YOLOX-Nano's input_size changes no weight shape: an init artifact built at 64x64 must
    not load into a run whose model decodes at its default 416x416 (it would train at the
    artifact's 64x64 preprocessing and fail only at validation)."""
    from clearsight.artifact import make_config, save_artifact
    from clearsight.engine import trainer
    from clearsight.engine.train_config import config_from_dict

    model = build_model("yolox-nano", num_classes=2, input_size=64)
    args = {"num_classes": 2, "input_size": 64}
    src = save_artifact(model, tmp_path / "src", make_config(model, "yolox-nano", args))
    raw = {
        "model": {"arch": "yolox-nano", "args": {"num_classes": 2}, "init": str(src)},
        "data": {"train": str(rects), "batch_size": 2},
        "loss": {"name": "yolox"},
        "train": {"steps": 1, "tensorboard": False, "amp": "off"},
    }
    with pytest.raises(TrainConfigError, match="input_size"):
        trainer._Run(config_from_dict(raw), tmp_path / "run", init_dist("cpu"), False)
    raw["model"]["args"] = args  # the artifact's own arguments load
    run = trainer._Run(config_from_dict(raw), tmp_path / "ok", init_dist("cpu"), False)
    assert tuple(run.model.input_size) == (64, 64)


def test_resize_filter_is_trained_and_saved(rects: Path, tmp_path: Path) -> None:
    """`model.resize_filter` changes the pixels the detector trains on (antialiased bicubic
    here, as a deployment's PIL resize makes them) and is what the artifact then carries."""
    from clearsight.engine import trainer
    from clearsight.engine.train_config import config_from_dict

    raw = {
        "model": {"arch": "yolox-nano", "args": {"num_classes": 2, "input_size": 64}},
        "data": {"train": str(rects), "batch_size": 2, "augment": False},
        "loss": {"name": "yolox"},
        "train": {"steps": 1, "tensorboard": False, "amp": "off"},
    }
    plain = trainer._Run(config_from_dict(raw), tmp_path / "a", init_dist("cpu"), False)
    raw["model"]["resize_filter"] = "bicubic-antialias"
    cfg = config_from_dict(raw)
    run = trainer._Run(cfg, tmp_path / "b", init_dist("cpu"), False)
    extra = run.task.preprocess.extra
    assert extra["interpolation"] == "bicubic" and extra["antialias"] is True
    assert plain.task.preprocess.extra.get("antialias") is not True
    x_plain, x_aa = plain.stream.next()[0], run.stream.next()[0]
    assert x_plain.shape == x_aa.shape and not torch.allclose(x_plain, x_aa, atol=1e-3)
    train(cfg, tmp_path / "run", progress=False)
    saved = load_artifact(tmp_path / "run" / "last").config.preprocess.extra
    assert saved["interpolation"] == "bicubic" and saved["antialias"] is True
    # a name outside the list, or a restoration model, is refused by name
    raw["model"]["resize_filter"] = "lanczos"
    with pytest.raises(TrainConfigError, match=r"model\.resize_filter: 'lanczos'"):
        config_from_dict(raw)
    raw["model"] = {"arch": "rescan", "resize_filter": "bicubic"}
    with pytest.raises(TrainConfigError, match="only detectors"):
        trainer._Run(config_from_dict(raw), tmp_path / "c", init_dist("cpu"), False)
