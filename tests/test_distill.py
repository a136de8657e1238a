"""Distillation in the trainer (`engine/distill.py`): each model its own preprocessing, the
student approaches its teacher, unlabeled photos suffice, adapters stay out of artifacts,
exact resume, and detection distillation of one architecture and across two."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from PIL import Image

from clearsight.artifact import load_artifact, make_config, read_config, save_artifact
from clearsight.engine.checkpoint import load_checkpoint
from clearsight.engine.distill import bernoulli_kl
from clearsight.engine.train_config import TrainConfig, TrainConfigError, config_from_dict
from clearsight.engine.train_stream import Dist
from clearsight.engine.trainer import _Run, train
from clearsight.models.registry import build_model, get_spec
from clearsight.preprocess import PreprocessSpec
from tests.detect_train_utils import make_rectangles, ssd_config
from tests.train_utils import make_pairs, tiny_raw

TINY = {"channels": 4, "stages": 2, "depth": 3}
ODD_SPEC = PreprocessSpec(
    color_order="BGR", value_range=(0.0, 255.0), mean=(100.0, 110.0, 120.0), std=(50.0, 60.0, 70.0)
)


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_pairs(tmp_path_factory.mktemp("pairs"))


@pytest.fixture(scope="module")
def teacher(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A wider RESCAN (8 channels) with random weights: a fixed function to imitate."""
    torch.manual_seed(1)
    args = {"channels": 8, "stages": 2, "depth": 3}
    model = build_model("rescan", **args)
    return save_artifact(
        model, tmp_path_factory.mktemp("t") / "teacher", make_config(model, "rescan", args)
    )


@pytest.fixture(scope="module")
def photos(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of photos and nothing else: no rain/clean layout, no targets."""
    root = tmp_path_factory.mktemp("photos")
    rng = np.random.default_rng(3)
    for i in range(6):
        Image.fromarray(rng.integers(0, 255, (20, 20, 3), dtype=np.uint8)).save(root / f"p{i}.png")
    return root


def _cfg(root: Path, **sections: dict[str, Any]) -> TrainConfig:
    """`tests.train_utils.tiny_raw` with sections merged in (a `data` section included)."""
    raw = tiny_raw(root)
    for name, values in sections.items():
        raw[name] = {**raw.get(name, {}), **values}
    return config_from_dict(raw)


def _distill(teacher: Path | str, **kw: object) -> dict[str, object]:
    return {"teacher": str(teacher), **kw}


def test_student_approaches_its_teacher(data: Path, teacher: Path, tmp_path: Path) -> None:
    cfg = _cfg(
        data,
        model={"arch": "rescan", "args": TINY},
        distill=_distill(teacher, task_weight=0.0),
        optim={"lr": 5e-3},
        schedule={"milestones": []},
        train={"steps": 30, "val_every": 30, "ckpt_every": 30, "log_every": 5},
        data={"val": None},
    )
    res = train(cfg, tmp_path, progress=False)
    assert res.last_loss < 0.5 * res.first_loss
    # measured directly: the trained student is closer to the teacher than where it started
    t = load_artifact(teacher).model.eval()
    s0 = _Run(cfg, tmp_path / "fresh", Dist(), False).model.eval()
    s1 = load_artifact(tmp_path / "last").model.eval()
    x = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        ref = t.final_output(x)
        assert (s1.final_output(x) - ref).abs().mean() < 0.5 * (
            s0.final_output(x) - ref
        ).abs().mean()


def test_each_model_gets_its_own_preprocessing(data: Path, tmp_path: Path) -> None:
    # an identity teacher whose artifact says BGR, 0-255, mean/std: its output mapped back
    # through its own spec is the raw image exactly, whatever the student's convention
    ident = build_model("identity")
    path = save_artifact(
        ident, tmp_path / "ident", make_config(ident, "identity", preprocess=ODD_SPEC)
    )
    cfg = _cfg(data, model={"arch": "rescan", "args": TINY}, distill=_distill(path))
    run = _Run(cfg, tmp_path / "run", Dist(), False)
    raw = run.stream.next()
    inp, tgt = run.to_device(raw)
    out = run.model(inp)
    run.distill.loss(out, inp, tgt, raw[0], run.loss_fn)
    seen = run.distill.last_inputs
    assert torch.allclose(seen["teacher"], ODD_SPEC.to_model(raw[0]))
    assert torch.allclose(seen["student"], run.spec.preprocess.to_model(raw[0]))
    assert not torch.allclose(seen["teacher"], seen["student"])
    # the teacher's target is the raw image: the student's loss is its distance to the input
    teacher_rgb = run.distill._run_teacher(seen["teacher"])
    assert torch.allclose(teacher_rgb, raw[0], atol=1e-5)


def test_unlabeled_folder_with_task_weight_zero(
    photos: Path, teacher: Path, tmp_path: Path
) -> None:
    raw = {"model": {"arch": "rescan", "args": TINY}, "data": {"train": str(photos), "val": None}}
    cfg = _cfg(photos, **raw, distill=_distill(teacher, task_weight=0.0), train={"steps": 2})
    res = train(cfg, tmp_path / "ok", progress=False)
    assert res.steps == 2 and res.last_loss is not None
    # with the supervised loss on, the same folder is refused: it has no targets
    bad = _cfg(photos, **raw, distill=_distill(teacher, task_weight=1.0), train={"steps": 2})
    with pytest.raises(Exception, match="no paired folders"):
        train(bad, tmp_path / "bad", progress=False)


def test_feature_adapters_train_but_stay_out_of_the_artifact(
    data: Path, teacher: Path, tmp_path: Path
) -> None:
    pairs = [["decoder.0", "decoder.0"], ["units.0", "units.0"]]
    cfg = _cfg(
        data,
        model={"arch": "rescan", "args": TINY},
        distill=_distill(teacher, features=pairs, feature_weight=2.0),
        train={"steps": 4, "val_every": 4, "ckpt_every": 4},
    )
    run = _Run(cfg, tmp_path / "probe", Dist(), False)
    adapters = run.distill.adapters
    assert [(a.in_channels, a.out_channels) for a in adapters] == [(4, 8), (4, 8)]
    before = [p.detach().clone() for p in adapters.parameters()]
    train(cfg, tmp_path / "run", progress=False)
    ckpt = load_checkpoint(tmp_path / "run" / "checkpoint.pt")
    assert set(ckpt["distill"]) == {
        "adapters.0.weight",
        "adapters.0.bias",
        "adapters.1.weight",
        "adapters.1.bias",
    }
    assert not torch.equal(ckpt["distill"]["adapters.0.weight"], before[0])  # trained
    art = load_artifact(tmp_path / "run" / "last")
    assert set(art.model.state_dict()) == set(build_model("rescan", **TINY).state_dict())
    assert (
        read_config(tmp_path / "run" / "last").provenance["training_config"]["distill"]["features"]
        == pairs
    )
    with pytest.raises(TrainConfigError, match="no layer 'nope'"):
        _Run(_cfg(data, model={"arch": "rescan", "args": TINY},
                         distill=_distill(teacher, features=[["nope", "decoder.0"]])),
             tmp_path / "x", Dist(), False)  # fmt: skip


def test_resume_is_bit_exact_with_distillation(data: Path, teacher: Path, tmp_path: Path) -> None:
    dist = _distill(teacher, task_weight=0.5, features=[["decoder.0", "decoder.0"]])
    cfg = _cfg(data, model={"arch": "rescan", "args": TINY}, distill=dist)
    train(cfg, tmp_path / "a", progress=False)
    half = _cfg(data, model={"arch": "rescan", "args": TINY}, distill=dist, train={"steps": 4})
    train(half, tmp_path / "b", progress=False)
    train(cfg, tmp_path / "b", resume=True, progress=False)
    a, b = load_checkpoint(tmp_path / "a"), load_checkpoint(tmp_path / "b")
    for key in a["model"]:
        assert torch.equal(a["model"][key], b["model"][key]), key
    for key in a["distill"]:
        assert torch.equal(a["distill"][key], b["distill"][key]), key


def test_config_checks() -> None:
    with pytest.raises(TrainConfigError, match=r"distill.features\[0\]"):
        _cfg(Path("."), distill={"teacher": "x", "features": [["a"]]})
    with pytest.raises(TrainConfigError, match="distill.temperature"):
        _cfg(Path("."), distill={"teacher": "x", "temperature": 0})
    with pytest.raises(TrainConfigError, match="distill.detection"):
        _cfg(Path("."), distill={"teacher": "x", "detection": "soft"})


def test_bernoulli_kl_is_zero_only_where_scores_agree() -> None:
    t = torch.tensor([-3.0, 0.0, 2.0])
    assert torch.allclose(bernoulli_kl(t, t), torch.zeros(3), atol=1e-6)
    assert (bernoulli_kl(t + 1.0, t) > 0).all()


def test_a_student_scoring_near_zero_is_still_pulled_up() -> None:
    """A freshly pruned detector scores ~1e-9 where its teacher is confident: the class term
    must still have a gradient there (a clamp of the scores at 1e-6 zeroed it)."""
    from clearsight.engine.distill import _logits

    student = torch.tensor([1e-9, 1e-3, 0.5], requires_grad=True)
    teacher = torch.tensor([0.9, 0.9, 0.9])
    bernoulli_kl(_logits(student), _logits(teacher)).sum().backward()
    assert student.grad is not None and (student.grad < 0).all()
    assert torch.isfinite(_logits(torch.tensor([0.0, 1.0]))).all()


# -- detection ----------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rects(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_rectangles(tmp_path_factory.mktemp("rects"))


def _detector_teacher(
    root: Path, tmp: Path, arch: str, args: dict, spec: PreprocessSpec | None = None
) -> Path:
    """A trained-for-2-steps detector artifact (its config carries class ids and spec)."""
    loss = {"name": "multibox" if arch.startswith("ssd") else "yolox"}
    cfg = ssd_config(root, model={"arch": arch, "args": args}, loss=loss,
                     data={"val": None, "augment": False}, train={"steps": 2})  # fmt: skip
    train(cfg, tmp, progress=False)
    if spec is not None:
        art = load_artifact(tmp / "last")
        art.config.preprocess = spec
        save_artifact(art.model, tmp / "last", art.config)
    return tmp / "last"


def _one_dense_step(cfg: TrainConfig, run_dir: Path) -> tuple[_Run, torch.Tensor]:
    """A run set up for dense distillation and its first batch's loss."""
    run = _Run(cfg, run_dir, Dist(), False)
    assert run.distill.mode == "dense"
    raw = run.stream.next()
    inp, tgt = run.to_device(raw)
    return run, run.distill.loss(run.model(inp), inp, tgt, raw[0], run.loss_fn)


def test_same_architecture_detection_distillation(rects: Path, tmp_path: Path) -> None:
    args = {"num_classes": 2, "input_size": 64}
    # the teacher's artifact swaps the colour order: student and teacher inputs must differ
    base = get_spec("yolox-nano").preprocess
    flipped = "RGB" if base.color_order == "BGR" else "BGR"
    t_spec = dataclasses.replace(base, size=(64, 64), color_order=flipped)
    t_path = _detector_teacher(rects, tmp_path / "t", "yolox-nano", args, t_spec)
    cfg = ssd_config(
        rects, model={"arch": "yolox-nano", "args": args}, loss={"name": "yolox"},
        data={"val": None}, train={"steps": 2},
        distill=_distill(t_path, temperature=2.0, score_threshold=0.0),
    )  # fmt: skip
    run, loss = _one_dense_step(cfg, tmp_path / "s")
    assert torch.isfinite(loss) and set(run.distill.last_terms) == {"task", "distill"}
    seen = run.distill.last_inputs
    assert torch.allclose(seen["teacher"], seen["student"].flip(1), atol=1e-5)  # BGR vs RGB
    res = train(cfg, tmp_path / "s2", progress=False)
    assert res.steps == 2 and res.last_loss is not None


def test_dense_distillation_lets_the_student_use_another_resize_filter(
    rects: Path, tmp_path: Path
) -> None:
    """The filter is not geometry: a student trained on antialiased bicubic input (as a
    deployment's resize feeds it) still distills per anchor from a bilinear teacher."""
    args = {"num_classes": 2, "input_size": 64}
    base = dataclasses.replace(get_spec("yolox-nano").preprocess, size=(64, 64))
    t_path = _detector_teacher(rects, tmp_path / "t", "yolox-nano", args)
    s_spec = dataclasses.replace(
        base, extra={**base.extra, "interpolation": "bicubic", "antialias": True}
    )
    s_init = _detector_teacher(rects, tmp_path / "s0", "yolox-nano", args, s_spec)
    cfg = ssd_config(
        rects, model={"arch": "yolox-nano", "args": args, "init": str(s_init)},
        loss={"name": "yolox"}, data={"val": None, "augment": False},
        distill=_distill(t_path, task_weight=0.0, score_threshold=0.0),
    )  # fmt: skip
    seen = _one_dense_step(cfg, tmp_path / "s")[0].distill.last_inputs
    assert seen["teacher"].shape == seen["student"].shape  # same geometry ...
    assert not torch.allclose(seen["teacher"], seen["student"], atol=1e-3)  # ... other filter
    # a different letterbox anchor moves the image: that is geometry, refused
    moved = dataclasses.replace(base, extra={**base.extra, "letterbox_anchor": "center"})
    m_init = _detector_teacher(rects, tmp_path / "m0", "yolox-nano", args, moved)
    cfg.model.init = str(m_init)
    cfg.distill.detection = "dense"
    with pytest.raises(TrainConfigError, match="dense needs"):
        _Run(cfg, tmp_path / "m", Dist(), False)


def test_identical_teacher_gives_zero_dense_loss(rects: Path, tmp_path: Path) -> None:
    args = {"num_classes": 2, "input_size": 64}
    t_path = _detector_teacher(rects, tmp_path / "t", "yolox-nano", args)
    cfg = ssd_config(
        rects, model={"arch": "yolox-nano", "args": args, "init": str(t_path)},
        loss={"name": "yolox"}, data={"val": None},
        distill=_distill(t_path, task_weight=0.0, score_threshold=0.0),
    )  # fmt: skip
    run = _Run(cfg, tmp_path / "s", Dist(), False)
    run.model.eval()  # teacher runs in eval mode; same weights, same input -> same output
    raw = run.stream.next()
    inp, tgt = run.to_device(raw)
    loss = run.distill.loss(run.model(inp), inp, tgt, raw[0], run.loss_fn)
    assert float(loss.detach()) < 1e-4


def test_cross_architecture_detection_uses_pseudo_labels(rects: Path, tmp_path: Path) -> None:
    t_path = _detector_teacher(
        rects, tmp_path / "t", "yolox-nano", {"num_classes": 2, "input_size": 64}
    )
    cfg = ssd_config(rects, data={"val": None}, train={"steps": 2},
                     distill=_distill(t_path, task_weight=0.0, score_threshold=0.0))  # fmt: skip
    run = _Run(cfg, tmp_path / "s", Dist(), False)
    assert run.distill.mode == "pseudo"
    raw = run.stream.next()
    inp, tgt = run.to_device(raw)
    assert tgt[0]["teacher_input"].shape[-2:] == (64, 64) and inp.shape[-2:] == (96, 96)
    t_raw = run.distill.teacher(torch.stack([t["teacher_input"] for t in tgt]))
    pseudo = run.distill._pseudo_labels(
        t_raw, torch.stack([t["teacher_to_input"] for t in tgt]), inp
    )
    assert sum(len(p["boxes"]) for p in pseudo) > 0
    for p in pseudo:  # boxes in the student's 96x96 input, labels in its label range
        assert (p["boxes"] >= 0).all() and (p["boxes"] <= 96).all()
        assert ((p["labels"] >= 0) & (p["labels"] < 2)).all()
    res = train(cfg, tmp_path / "s2", progress=False)
    assert res.steps == 2 and res.last_loss is not None
    with pytest.raises(TrainConfigError, match="dense needs"):
        _Run(ssd_config(rects, data={"val": None}, distill=_distill(t_path, detection="dense")),
             tmp_path / "x", Dist(), False)  # fmt: skip


def test_input_folder_reads_a_pair_layout_input_side_only(data: Path) -> None:
    from clearsight.data.paired import InputFolderDataset

    ds = InputFolderDataset(data, patch_size=8, seed=1)
    assert [p.input.parent.name for p in ds.pairs] == ["rain"] * 8
    x, y = ds[3]
    assert x.shape == (3, 8, 8) and torch.equal(x, y)
