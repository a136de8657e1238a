"""Knowledge distillation in the trainer: a teacher artifact guides the student being trained.

The config's `distill:` section (`engine/train_config.py`, `DistillConfig`) names the teacher;
the trainer (`engine/trainer.py`) builds one `Distiller` and asks it for the step's loss:

    task_weight x the normal loss + weight x output distillation + feature_weight x features

- **Each model its own preprocessing.** The raw image reaches both models and each maps it
  through the spec of its own artifact: restoration batches are RGB in [0, 1] before the
  student's `to_model`, so the teacher gets `teacher_spec.to_model` of the same tensor; a
  detection sample is prepared twice from the same augmented image
  (`detection.preprocess.prepare` with each spec, in the data workers), and the teacher's
  boxes come back into the student's input pixels through both `Transform`s. A teacher
  trained on BGR or with a mean/std of its own thus sees what it was trained on
  (docs/architecture.md §6; `last_inputs` keeps the last step's tensors for the tests).
- **Restoration**: L1 between the student's restored image and the teacher's
  (`final_output`), both compared as RGB in [0, 1].
- **Detection**, `dense` (teacher and student of one architecture, classes and input
  geometry, e.g. a pruned YOLOX-Nano and the original): per anchor and class, the Bernoulli
  KL divergence between the sigmoid scores at `temperature` (x T^2), plus L1 (in input-size
  units) and GIoU between the decoded boxes where the teacher's best score reaches
  `score_threshold`. `pseudo` (any other pair, e.g. YOLOX-Nano teaching SSD-MobileNet): the
  teacher's detections after its own NMS, labels mapped through both artifacts' class ids,
  become targets of the student's own detection loss (multibox or yolox).
- **Features**: each (student_layer, teacher_layer) pair is matched through a 1x1
  convolution from the student's channels to the teacher's (bilinear resize when the maps
  differ in size), MSE or L1. The adapters train with the student and are checkpointed, but
  they are not part of the student, so exported artifacts hold the student alone. A layer
  called several times per forward (RESCAN's recurrent units) contributes its last call.

Hand-written because the distillation libraries (e.g. torchdistill) drive their own training
loop and configs; here the trainer's loop, checkpoints and resume stay the ones in use.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.hooks import RemovableHandle

from clearsight.artifact import LoadedModel
from clearsight.engine.train_config import TrainConfig, TrainConfigError
from clearsight.families import Family, family_of
from clearsight.models.contract import as_restoration_model, last_output
from clearsight.preprocess import PreprocessSpec, pad_to_multiple

__all__ = ["Distiller", "bernoulli_kl", "build_distiller"]

EPS = 1e-6
# where the image lands in the input (dense targets are per anchor, so it must match); the
# resize filter ("interpolation", "antialias") only changes pixel values, and each model
# gets its own, so a student can learn the filter it will be deployed with
_GEOMETRY_KEYS = ("pad_value", "letterbox_anchor")


def bernoulli_kl(student_logits: torch.Tensor, teacher_logits: torch.Tensor) -> torch.Tensor:
    """Elementwise KL(teacher || student) of independent sigmoid scores: zero where they
    agree (sigmoid heads score each class on its own, so no softmax over classes)."""
    p = torch.sigmoid(teacher_logits)
    ce = F.binary_cross_entropy_with_logits(student_logits, p, reduction="none")
    entropy = F.binary_cross_entropy_with_logits(teacher_logits, p, reduction="none")
    return ce - entropy


def _logits(scores: torch.Tensor) -> torch.Tensor:
    """Logits of sigmoid scores, log(q) - log(1 - q). Clamping q to [EPS, 1 - EPS] first
    would zero the gradient wherever a student scores below EPS: a freshly pruned YOLOX-Nano
    scores objectness x class around 1e-7 on nearly every anchor, so the class term could not
    raise it and recovery stalled. Only the log's argument is clamped, at the float32 limits."""
    q = scores.float()
    return torch.log(q.clamp_min(torch.finfo(torch.float32).tiny)) - torch.log1p(
        -q.clamp_max(1.0 - 1e-7)
    )


def _tensor_of(output: Any, name: str) -> torch.Tensor:
    out = output[0] if isinstance(output, list | tuple) else output
    if not isinstance(out, torch.Tensor) or out.dim() != 4:
        raise TrainConfigError(f"distill.features: layer {name!r} does not output an NCHW map")
    return out


def _hook_layer(
    model: nn.Module, name: str, store: dict[str, torch.Tensor], key: str, who: str
) -> RemovableHandle:
    """Keep `name`'s output in `store[key]` at every forward (the last call wins)."""
    try:
        layer = model.get_submodule(name)
    except AttributeError:
        some = ", ".join(n for n, _ in list(model.named_modules())[1:9])
        raise TrainConfigError(
            f"distill.features: the {who} has no layer {name!r} (layers: {some}, ...)"
        ) from None

    def hook(_m: nn.Module, _inp: Any, out: Any) -> None:
        store[key] = out

    return layer.register_forward_hook(hook)


class Distiller(nn.Module):
    """The teacher, the distillation losses and the feature adapters of one run.

    Its own parameters (and `state_dict`) are the adapters only: the teacher is frozen and
    held outside the module tree, so checkpoints carry the adapters and nothing else.
    """

    def __init__(
        self,
        cfg: TrainConfig,
        student: nn.Module,
        student_spec: PreprocessSpec,
        teacher: LoadedModel,
        device: torch.device,
        detect_class_ids: list[int] | None = None,
    ) -> None:
        super().__init__()
        self.d = cfg.distill
        self.detect = detect_class_ids is not None
        self.student_spec, self.teacher_spec = student_spec, teacher.config.preprocess
        self._teacher = [teacher.model.to(device).eval().requires_grad_(False)]
        self._student = [student]
        self.residual = not self.detect and as_restoration_model(student).predicts_residual
        self.last_inputs: dict[str, torch.Tensor] = {}
        """The last step's model inputs, {"student": ..., "teacher": ...} (for tests)."""
        self.last_terms: dict[str, float] = {}
        self.mode = "output"
        if self.detect:
            assert detect_class_ids is not None
            self.mode = self._detection_mode(cfg, student, teacher)
            t_ids = teacher.config.class_ids or []
            s_index = {cid: i for i, cid in enumerate(detect_class_ids)}
            # teacher label -> student label (-1: a class the student does not predict)
            self.label_map = torch.tensor(
                [s_index.get(int(cid), -1) for cid in t_ids], dtype=torch.long, device=device
            )
        self._feats: dict[str, torch.Tensor] = {}
        self._hooks: list[RemovableHandle] = []
        for i, (s_name, t_name) in enumerate(self.d.features):
            self._hooks.append(_hook_layer(student, s_name, self._feats, f"s{i}", "student"))
            self._hooks.append(_hook_layer(self.teacher, t_name, self._feats, f"t{i}", "teacher"))
        self.adapters = nn.ModuleList(self._make_adapters(device) if self.d.features else [])

    @property
    def teacher(self) -> nn.Module:
        return self._teacher[0]

    # -- setup ----------------------------------------------------------------------------
    def _detection_mode(self, cfg: TrainConfig, student: nn.Module, teacher: LoadedModel) -> str:
        t, s_spec, t_spec = teacher.model, self.student_spec, self.teacher_spec
        same = (
            teacher.config.architecture == cfg.model.arch
            and int(t.num_classes) == int(student.num_classes)
            and tuple(t.input_size) == tuple(student.input_size)
            and (s_spec.resize, s_spec.size) == (t_spec.resize, t_spec.size)
            and all(s_spec.extra.get(k) == t_spec.extra.get(k) for k in _GEOMETRY_KEYS)
        )
        if self.d.detection == "dense" and not same:
            raise TrainConfigError(
                "distill.detection: dense needs a teacher of the student's architecture, "
                f"classes and input geometry; {teacher.source} is a "
                f"{teacher.config.architecture!r} ({t.num_classes} classes, input "
                f"{tuple(t.input_size)}); use pseudo or auto"
            )
        if self.d.detection == "auto":
            return "dense" if same else "pseudo"
        return self.d.detection

    def _dummy_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """One small image through each model's own spec (for reading feature widths)."""
        if self.detect:
            h, w = self._student[0].input_size
            th, tw = self.teacher.input_size
            rgb_s, rgb_t = torch.rand(1, 3, h, w), torch.rand(1, 3, th, tw)
        else:
            m = math.lcm(
                as_restoration_model(self._student[0]).pad_multiple,
                as_restoration_model(self.teacher).pad_multiple,
            )
            rgb_s = rgb_t = torch.rand(1, 3, 4 * m, 4 * m)
        return self.student_spec.to_model(rgb_s), self.teacher_spec.to_model(rgb_t)

    @torch.no_grad()
    def _make_adapters(self, device: torch.device) -> list[nn.Module]:
        student = self._student[0]
        was = student.training
        student.eval()
        xs, xt = self._dummy_inputs()
        with torch.random.fork_rng(devices=[]):
            student(xs.to(device))
            self.teacher(xt.to(device))
        student.train(was)
        adapters = []
        for i, (s_name, t_name) in enumerate(self.d.features):
            cs = _tensor_of(self._feats[f"s{i}"], s_name).shape[1]
            ct = _tensor_of(self._feats[f"t{i}"], t_name).shape[1]
            adapters.append(nn.Conv2d(cs, ct, 1).to(device))
        self._feats.clear()
        return adapters

    def prepare_data(self, dataset: Any) -> None:
        """Detection training data also prepare each image for the teacher."""
        if self.detect:
            dataset.teacher_spec = self.teacher_spec

    # -- the loss -------------------------------------------------------------------------
    def loss(
        self,
        outputs: Any,
        inputs: torch.Tensor,
        targets: Any,
        raw: torch.Tensor,
        task_loss: Callable[[Any, torch.Tensor, Any], torch.Tensor],
    ) -> torch.Tensor:
        """The step's loss. `raw` is the batch before the student's preprocessing
        (restoration: RGB in [0, 1]; detection: unused, the targets carry the teacher's
        input); `task_loss` is the run's normal loss."""
        terms: dict[str, torch.Tensor] = {}
        if self.d.task_weight > 0:
            terms["task"] = self.d.task_weight * task_loss(outputs, inputs, targets)
        if self.detect:
            t_in = torch.stack([t["teacher_input"] for t in targets]).to(inputs.dtype)
        else:
            t_in = self.teacher_spec.to_model(raw.to(inputs.device, non_blocking=True))
        self.last_inputs = {"student": inputs.detach(), "teacher": t_in.detach()}
        with torch.no_grad():
            t_out = self._run_teacher(t_in)
        if self.detect:
            kd = self._detection_loss(outputs, inputs, targets, t_out, task_loss)
        else:
            kd = self._restoration_loss(outputs, inputs, t_out)
        terms["distill"] = self.d.weight * kd
        if self.adapters:
            terms["features"] = self.d.feature_weight * self._feature_loss()
        self._feats.clear()
        self.last_terms = {k: float(v.detach()) for k, v in terms.items()}
        return sum(terms.values())  # type: ignore[return-value]

    def _run_teacher(self, x: torch.Tensor) -> Any:
        if self.detect:
            return self.teacher(x)
        teacher = as_restoration_model(self.teacher)
        h, w = x.shape[-2:]
        y = teacher.final_output(pad_to_multiple(x, teacher.pad_multiple))[..., :h, :w]
        return self.teacher_spec.from_model(y.float())

    def _restoration_loss(
        self, outputs: Any, inputs: torch.Tensor, teacher_rgb: torch.Tensor
    ) -> torch.Tensor:
        last = last_output(outputs)  # the training forward's restored image, or its residual
        student_rgb = self.student_spec.from_model(inputs - last if self.residual else last)
        return F.l1_loss(student_rgb.float(), teacher_rgb)

    def _detection_loss(
        self, outputs: Any, inputs: torch.Tensor, targets: list[dict[str, torch.Tensor]],
        t_raw: Any, task_loss: Callable[[Any, torch.Tensor, Any], torch.Tensor],
    ) -> torch.Tensor:  # fmt: skip
        affine = torch.stack([t["teacher_to_input"] for t in targets])  # [N, 4]
        if self.mode == "pseudo":
            return task_loss(outputs, inputs, self._pseudo_labels(t_raw, affine, inputs))
        student, teacher = self._student[0], self.teacher
        s_boxes, s_scores = student.decode(outputs)
        t_boxes, t_scores = teacher.decode(t_raw)
        n_labels = int(student.num_labels)
        s_logits = _logits(s_scores[..., -n_labels:]) / self.d.temperature
        t_logits = _logits(t_scores[..., -n_labels:]) / self.d.temperature
        t_best = t_scores[..., -n_labels:].float().max(-1).values
        confident = t_best >= self.d.score_threshold  # [N, A]
        n = confident.sum().clamp_min(1)
        cls = bernoulli_kl(s_logits, t_logits).sum() * self.d.temperature**2 / n
        t_boxes = _map_boxes(t_boxes.float(), affine)
        h, w = inputs.shape[-2:]
        scale = torch.tensor([w, h, w, h], dtype=torch.float32, device=inputs.device)
        sb, tb = s_boxes.float()[confident], t_boxes[confident]
        box = (sb - tb).abs().div(scale).sum() / n
        if sb.shape[0]:
            # not at the top: torchvision.ops imports torch._dynamo (trainer._detect_train)
            from torchvision.ops import generalized_box_iou_loss

            box = box + generalized_box_iou_loss(sb, tb, reduction="sum") / n
        return cls + box

    def _pseudo_labels(
        self, t_raw: Any, affine: torch.Tensor, inputs: torch.Tensor
    ) -> list[dict[str, torch.Tensor]]:
        """The teacher's detections as targets in the student's input pixels and labels."""
        h, w = inputs.shape[-2:]
        dets = self.teacher.postprocess(t_raw, score_threshold=self.d.score_threshold)
        out = []
        for det, a in zip(dets, affine, strict=True):
            boxes = _map_boxes(det["boxes"].float()[None], a[None])[0]
            boxes[:, 0::2] = boxes[:, 0::2].clamp(0, w)
            boxes[:, 1::2] = boxes[:, 1::2].clamp(0, h)
            labels = self.label_map[det["labels"].long()]
            keep = (
                (labels >= 0) & (boxes[:, 2] - boxes[:, 0] >= 1) & (boxes[:, 3] - boxes[:, 1] >= 1)
            )
            out.append({"boxes": boxes[keep], "labels": labels[keep]})
        return out

    def _feature_loss(self) -> torch.Tensor:
        total = None
        for i, (adapter, (s_name, t_name)) in enumerate(
            zip(self.adapters, self.d.features, strict=True)
        ):
            fs = adapter(_tensor_of(self._feats[f"s{i}"], s_name))
            ft = _tensor_of(self._feats[f"t{i}"], t_name).detach().to(fs.dtype)
            if fs.shape[-2:] != ft.shape[-2:]:
                fs = F.interpolate(fs, size=ft.shape[-2:], mode="bilinear", align_corners=False)
            term = F.l1_loss(fs, ft) if self.d.feature_loss == "l1" else F.mse_loss(fs, ft)
            total = term if total is None else total + term
        assert total is not None
        return total / len(self.adapters)

    def sync_grads(self, world: int) -> None:
        """Average the adapters' gradients over the ranks (they are outside the DDP wrapper)."""
        import torch.distributed as dist

        for p in self.adapters.parameters():
            if p.grad is not None:
                dist.all_reduce(p.grad)
                p.grad /= world


def _map_boxes(boxes: torch.Tensor, affine: torch.Tensor) -> torch.Tensor:
    """[N, A, 4] xyxy boxes through per-image affines [N, 4] = (ax, ay, bx, by)."""
    a = affine[:, None, [0, 1, 0, 1]].to(boxes)
    b = affine[:, None, [2, 3, 2, 3]].to(boxes)
    return boxes * a + b


def build_distiller(
    cfg: TrainConfig,
    student: nn.Module,
    student_spec: PreprocessSpec,
    task: str,
    device: torch.device,
    detect_class_ids: list[int] | None = None,
) -> Distiller | None:
    """The run's `Distiller`, or None without `distill.teacher`; refuses a teacher of the
    other task family."""
    if not cfg.distill.teacher:
        return None
    from clearsight.zoo import resolve_model

    teacher = resolve_model(str(cfg.distill.teacher), device=device)
    t_task = teacher.config.task
    if family_of(t_task) is not family_of(task):
        raise TrainConfigError(
            f"distill.teacher: {cfg.distill.teacher} is a {t_task} model; the student "
            f"{cfg.model.arch} is a {task} model"
        )
    if family_of(task) is Family.DETECTION and not teacher.config.class_ids:
        raise TrainConfigError(f"distill.teacher: {cfg.distill.teacher} has no class_ids")
    return Distiller(cfg, student, student_spec, teacher, device, detect_class_ids)
