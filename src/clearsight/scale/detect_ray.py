"""Detecting objects in many images on a Ray cluster: the `--engine ray` of `detect`.

The same actor pool, planning, skipping, failure rows and temp-file sweep as restoration
(`scale.ray_engine`); what differs is the results file, which the local engine writes once
at the end from every image. Here each worker batch is a *shard*: its worker writes the
drawn copies, then the shard's COCO results and last the list of images the shard covers,
all atomically, under OUT/detections.shards/. The driver merges the shards into
OUT/detections.json, the local engine's file (docs/scale.md).

The list of covered images is what makes a rerun's merged file complete: a COCO results
list has no entry for an image without detections, so only that list says an image is
recorded. A rerun skips an image only when its drawn copy exists *and* a shard covers it;
one drawn by a worker killed before its shard was written is simply done again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from clearsight.atomic import atomic_write_text, sweep_leftovers
from clearsight.engine.detector import (
    DEFAULT_DETECT_MODEL,
    DEFAULT_SCORE_THRESHOLD,
    RESULTS_FILE,
    image_ids,
)
from clearsight.errors import ClearsightError, check_unit_interval
from clearsight.families import Family, family_of
from clearsight.runtime.batch import check_link
from clearsight.runtime.failures import failure_reason
from clearsight.scale.inputs import WorkItem, local_copy, plan_inputs
from clearsight.scale.ray_engine import (
    STATUS_DONE,
    STATUS_FAILED,
    BatchFn,
    ItemResult,
    ScaleSummary,
    _check_counts,
    run_plan_ray,
)
from clearsight.zoo import model_task

SHARDS_DIR = "detections.shards"
"""OUT/detections.shards/: one `<key>.json` (COCO results) and `<key>.images.json` per batch."""
COVERAGE_SUFFIX = ".images.json"


def _relative(output: str, out_dir: str) -> str:
    """An output's path inside OUT, '/'-separated: how shards name the images they cover."""
    return Path(os.path.relpath(output, out_dir)).as_posix()


def _file_name(source: str) -> str:
    """The input's file name (a local path's or a URI's), as the local engine records it."""
    return PurePosixPath(source.replace(os.sep, "/")).name


def shard_key(outputs: Sequence[str]) -> str:
    """A batch's shard name, from every output it holds: a batch redone after its worker
    died rewrites the same shard, and no other batch, of this run or a later one, can."""
    return hashlib.sha1("\n".join(outputs).encode()).hexdigest()[:16]


@dataclass(frozen=True)
class DetectTask:
    """Detect in each image as `Detector.detect_files` does (the same drawn bytes and
    detections), then record the batch as one shard. `image_ids`: source -> COCO image id,
    numbered over the whole run by the driver."""

    model: str
    out_dir: str
    image_ids: dict[str, int]
    score_threshold: float = DEFAULT_SCORE_THRESHOLD
    iou_threshold: float | None = None
    max_detections: int = 100
    device: str = "cpu"
    restore: str | None = None
    """A restoration model (or "auto") run before the detector (`engine.pipeline`)."""
    save_restored: str | None = None

    def load(self) -> BatchFn:
        from clearsight.engine.detector import Detector

        detector = Detector.from_pretrained(self.model, device=self.device)
        if self.restore is not None:
            from clearsight.engine.pipeline import Pipeline

            detector = Pipeline.around(detector, self.restore, save_restored=self.save_restored)
        return lambda items: self.run_batch(detector, items)

    def run_batch(self, detector: Any, items: list[WorkItem]) -> list[ItemResult]:
        results: list[ItemResult] = []
        entries: list[dict[str, Any]] = []
        covered: list[dict[str, Any]] = []
        for item in items:
            image_id = self.image_ids[item.source]
            start = time.perf_counter()
            try:
                with local_copy(item.source) as path:
                    check_link(path)
                    dets = detector.detect_file(
                        path,
                        item.output,
                        self.score_threshold,
                        self.iou_threshold,
                        self.max_detections,
                    )
            except Exception as exc:  # one bad image never stops the run
                reason = failure_reason(exc)
                if item.source not in reason:
                    reason = f"{item.source}: {reason}"
                results.append(ItemResult(item.source, item.output, STATUS_FAILED, reason))
                continue
            ms = (time.perf_counter() - start) * 1000.0
            name = _file_name(item.source)
            entries.extend({**r, "file_name": name} for r in dets.to_coco(image_id))
            rel = _relative(item.output, self.out_dir)
            covered.append({"output": rel, "image_id": image_id, "file_name": name})
            results.append(ItemResult(item.source, item.output, STATUS_DONE, latency_ms=ms))
        if covered:
            try:
                self._write_shard([i.output for i in items], entries, covered)
            except Exception as exc:  # drawn but unrecorded: failed, and redone on a rerun
                reason = f"cannot write its detections' shard ({failure_reason(exc)})"
                results = [
                    r if r.status != STATUS_DONE else
                    ItemResult(r.source, r.output, STATUS_FAILED, f"{r.source}: {reason}")
                    for r in results
                ]  # fmt: skip
        return results

    def _write_shard(
        self, outputs: list[str], entries: list[dict[str, Any]], covered: list[dict[str, Any]]
    ) -> None:
        """The results first, the covered images last: a shard counts once both exist."""
        folder = Path(self.out_dir) / SHARDS_DIR
        key = shard_key([_relative(o, self.out_dir) for o in outputs])
        atomic_write_text(folder / f"{key}.json", json.dumps(entries, indent=1) + "\n")
        atomic_write_text(folder / f"{key}{COVERAGE_SUFFIX}", json.dumps(covered, indent=1) + "\n")


@dataclass
class ShardIndex:
    """The shards in OUT/detections.shards/: which shard covers each output (by its path in
    OUT) under which image id. A shard without its list of images (its worker died between
    the two writes) covers nothing."""

    folder: Path
    covers: dict[str, tuple[str, int]] = field(default_factory=dict)
    lists: dict[str, list[dict[str, Any]]] = field(default_factory=dict)

    @classmethod
    def read(cls, out_dir: Path) -> ShardIndex:
        index = cls(out_dir / SHARDS_DIR)
        if not index.folder.is_dir():
            return index
        # oldest first, so that an image two shards cover is taken from the newer one
        lists = sorted(index.folder.glob(f"[!.]*{COVERAGE_SUFFIX}"), key=_mtime_then_name)
        for path in lists:
            key = path.name[: -len(COVERAGE_SUFFIX)]
            covered = _read_json(path)
            if not (index.folder / f"{key}.json").is_file():
                continue
            index.lists[key] = covered
            for c in covered:
                index.covers[c["output"]] = (key, int(c["image_id"]))
        return index

    def drop_orphans(self) -> None:
        """Remove results files whose list of images was never written (their worker died
        between the two writes): they cover nothing, and their images are done again."""
        if not self.folder.is_dir():
            return
        for path in self.folder.glob("[!.]*.json"):
            key = path.name[: -len(".json")]
            if not path.name.endswith(COVERAGE_SUFFIX) and key not in self.lists:
                path.unlink(missing_ok=True)

    def forget(self, outputs: set[str]) -> None:
        """Take `outputs` out of every shard (rewritten atomically; a shard left covering
        nothing is removed), before they are detected again. The list goes first: should
        the results' rewrite not happen, their stale entries belong to no listed image."""
        for key, covered in list(self.lists.items()):
            kept = [c for c in covered if c["output"] not in outputs]
            if len(kept) == len(covered):
                continue
            coverage, results = self.folder / f"{key}{COVERAGE_SUFFIX}", self.folder / f"{key}.json"
            if kept:
                atomic_write_text(coverage, json.dumps(kept, indent=1) + "\n")
                self.lists[key] = kept
                ids = {int(c["image_id"]) for c in kept}
                entries = [e for e in _read_json(results) if int(e["image_id"]) in ids]
                atomic_write_text(results, json.dumps(entries, indent=1) + "\n")
            else:
                coverage.unlink(missing_ok=True)
                results.unlink(missing_ok=True)
                del self.lists[key]
        for rel in outputs:
            self.covers.pop(rel, None)

    def merged(
        self, plan: Sequence[WorkItem], ids: dict[str, int], out_dir: Path
    ) -> list[dict[str, Any]]:
        """The COCO results of every covered image of `plan`, in plan order, numbered with
        this run's `ids` (a shard of an earlier run may have numbered them otherwise)."""
        by_shard: dict[str, dict[int, list[dict[str, Any]]]] = {}
        merged: list[dict[str, Any]] = []
        for item in plan:
            found = self.covers.get(_relative(item.output, str(out_dir)))
            if found is None:
                continue
            key, shard_id = found
            if key not in by_shard:
                by_shard[key] = {}
                for entry in _read_json(self.folder / f"{key}.json"):
                    by_shard[key].setdefault(int(entry["image_id"]), []).append(entry)
            merged += [{**e, "image_id": ids[item.source]} for e in by_shard[key].get(shard_id, [])]
        return merged


def _mtime_then_name(path: Path) -> tuple[int, str]:
    return path.stat().st_mtime_ns, path.name


def _read_json(path: Path) -> list[dict[str, Any]]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ClearsightError(f"{path}: cannot read detection shard ({exc})") from exc
    if not isinstance(data, list):
        raise ClearsightError(f"{path}: a detection shard holds a JSON list")
    return data


@dataclass
class DetectSummary(ScaleSummary):
    """A Ray detection run's outcome, and OUT/detections.json: the merged results."""

    results_path: Path | None = None
    detections: int = 0


def detect_files_ray(
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    model: str = DEFAULT_DETECT_MODEL,
    *,
    score_threshold: float = DEFAULT_SCORE_THRESHOLD,
    iou_threshold: float | None = None,
    max_detections: int = 100,
    workers: int = 1,
    batch_size: int = 8,
    address: str | None = None,
    overwrite: bool = False,
    device: str = "cpu",
    threads: int | None = None,
    restore: str | None = None,
    save_restored: str | os.PathLike[str] | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
) -> DetectSummary:
    """`Detector.detect_files` on a Ray cluster: the same drawn copies (names, bytes) and
    OUT/detections.json (merged from per-batch shards, see the module's docstring), written
    by `workers` actors that each hold one `model`. A rerun skips images already drawn and
    recorded, unless `overwrite`. Inputs, `address` and `threads` as `restore_files_ray`;
    `restore` (a restoration model reference or "auto") runs before the detector in each
    worker, `save_restored` a folder (on the workers' file system) for what it saw."""
    _check_counts(workers, batch_size)
    check_unit_interval("score_threshold", score_threshold)
    task_name = model_task(model)  # before any worker loads it
    if family_of(task_name) is not Family.DETECTION:
        raise ClearsightError(
            f"model {model} is a {task_name!r} model, not a detector (task 'detect')"
        )
    out_dir = Path(out)
    plan = plan_inputs(inputs, out_dir)
    numbers = image_ids([PurePosixPath(_file_name(i.source)).stem for i in plan])
    ids = dict(zip((i.source for i in plan), numbers, strict=True))
    shards = ShardIndex.read(out_dir)
    rel = {i.output: _relative(i.output, str(out_dir)) for i in plan}
    skipped = [] if overwrite else [
        i for i in plan if rel[i.output] in shards.covers and os.path.exists(i.output)
    ]  # fmt: skip
    finished = {i.output for i in skipped}
    shards.drop_orphans()
    shards.forget({rel[i.output] for i in plan if i.output not in finished})
    if restore is not None:
        from clearsight.engine.pipeline import parse_restore

        restore_task = model_task(parse_restore(restore)[0])  # before any worker loads it
        if family_of(restore_task) is Family.DETECTION:
            raise ClearsightError(f"--restore {restore}: a detector, not a restoration model")
    task = DetectTask(
        model, str(out_dir), ids, score_threshold, iou_threshold, max_detections, device,
        restore, None if save_restored is None else str(save_restored),
    )  # fmt: skip
    summary = run_plan_ray(
        task,
        plan,
        skipped,
        out_dir,
        workers=workers,
        batch_size=batch_size,
        address=address,
        device=device,
        threads=threads,
        on_start=on_start,
        on_result=on_result,
    )
    sweep_leftovers(shards.folder, before=time.time())  # the run's workers have stopped
    merged = ShardIndex.read(out_dir).merged(plan, ids, out_dir)
    results_path = out_dir / RESULTS_FILE
    atomic_write_text(results_path, json.dumps(merged, indent=1) + "\n")
    return DetectSummary(
        summary.done,
        summary.skipped,
        summary.failed,
        summary.seconds,
        summary.failures_csv,
        results_path=results_path,
        detections=len(merged),
    )
