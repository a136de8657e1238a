"""Restoring many images on a Ray cluster: the `--engine ray` of restore/derain/demoire.

The driver only plans names (`inputs.plan_inputs`, the local engine's naming) and skips
outputs already written; workers, one loaded model each (a Ray Data actor pool), read,
decode, restore, encode and write. Every output is written atomically to a name fixed by
its input, so a batch redone after a worker died rewrites the same files with the same
bytes: each output ends up written once and whole. A file that cannot be read, restored
or written becomes a row of `failures.csv` and never stops the run.

What a worker does with a batch is a `WorkerTask`: `load()` runs once per worker and
returns the per-batch callable. `RestoreTask` restores; `scale.detect_ray.DetectTask`
detects and records each batch as a shard of the results (docs/scale.md).
"""

from __future__ import annotations

import logging
import os
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from clearsight.engine.inference import InferenceOptions
from clearsight.errors import ClearsightError, OptionError
from clearsight.runtime.batch import check_link
from clearsight.runtime.failures import (
    FailedFile,
    FailuresCsvError,
    check_finite,
    check_max_pixels,
    failure_reason,
    sweep_output_folders,
    update_failures_csv,
)
from clearsight.scale.inputs import WorkItem, local_copy, plan_inputs

STATUS_DONE, STATUS_FAILED = "done", "failed"


@dataclass(frozen=True)
class ItemResult:
    """What became of one input: `done` (written) or `failed` with a one-line reason."""

    source: str
    output: str
    status: str
    reason: str = ""
    latency_ms: float = 0.0


BatchFn = Callable[[list[WorkItem]], list[ItemResult]]


class WorkerTask(Protocol):
    """Picklable recipe for a worker: `load()` once per worker (the model), then the
    returned callable once per batch. It must catch per-image errors itself."""

    def load(self) -> BatchFn: ...


@dataclass(frozen=True)
class RestoreTask:
    """Restore each image as `restore_files` does: read at its bit depth, restore, write
    at the same depth, so both engines write identical bytes."""

    model: str
    options: InferenceOptions = field(default_factory=InferenceOptions)
    max_pixels: int | None = None

    def load(self) -> BatchFn:
        from clearsight.engine.inference import Restorer, load_for_options

        restorer = Restorer(load_for_options(self.model, self.options), self.options)

        def run(items: list[WorkItem]) -> list[ItemResult]:
            return [self._one(restorer, item) for item in items]

        return run

    def _one(self, restorer: Any, item: WorkItem) -> ItemResult:
        from clearsight.io import image_to_tensor, read_image, tensor_to_image, write_image

        try:
            with local_copy(item.source) as path:
                check_link(path)
                img = read_image(path, max_pixels=self.max_pixels)
            out_t, ms = restorer.timed_restore(image_to_tensor(img))
            check_finite(out_t)
            dtype = img.dtype
            write_image(
                item.output, tensor_to_image(out_t, dtype=dtype), bit_depth=8 * dtype.itemsize
            )
        except Exception as exc:  # one bad image never stops the run
            reason = failure_reason(exc)
            if item.source not in reason:
                reason = f"{item.source}: {reason}"
            return ItemResult(item.source, item.output, STATUS_FAILED, reason)
        return ItemResult(item.source, item.output, STATUS_DONE, latency_ms=ms)


def local_engine_threads() -> int:
    """torch's default thread count in a plain process on this node: its usable CPUs."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


class _Worker:
    """The Ray Data actor: one loaded task per process, batches of rows in and out."""

    def __init__(self, task: WorkerTask, threads: int | None) -> None:
        import torch

        # Ray sets OMP_NUM_THREADS to the actor's CPU share; by default use the threads the
        # local engine would use on this node instead: convolutions split over another
        # number of threads may round a pixel of a few images differently
        torch.set_num_threads(threads or local_engine_threads())
        self.run = task.load()

    def __call__(self, batch: dict[str, Any]) -> dict[str, list[Any]]:
        items = [
            WorkItem(str(s), str(o)) for s, o in zip(batch["source"], batch["output"], strict=True)
        ]
        results = self.run(items)
        return {
            "source": [r.source for r in results],
            "output": [r.output for r in results],
            "status": [r.status for r in results],
            "reason": [r.reason for r in results],
            "latency_ms": [float(r.latency_ms) for r in results],
        }


@dataclass
class ScaleSummary:
    """A run's outcome; `failures_csv` is written (OUT/failures.csv) when anything failed."""

    done: list[ItemResult]
    skipped: list[WorkItem]
    failed: list[ItemResult]
    seconds: float
    failures_csv: Path | None = None

    @property
    def images_per_second(self) -> float:
        return len(self.done) / self.seconds if self.seconds > 0 else 0.0

    def line(self) -> str:
        """done 12, skipped 3, failed 1, 4.2 images/s"""
        return (
            f"done {len(self.done)}, skipped {len(self.skipped)}, failed {len(self.failed)}, "
            f"{self.images_per_second:.1f} images/s"
        )


def check_count(name: str, value: object) -> None:
    """A count of a Ray run (workers, batch size, segments): an int >= 1."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise OptionError(name, f"must be >= 1, got {value!r}")


def _check_counts(workers: int, batch_size: int) -> None:
    check_count("workers", workers)
    check_count("batch_size", batch_size)


def _connect(address: str | None) -> bool:
    """Connect to (or start) Ray; True when this call started it and must shut it down."""
    try:
        import ray
    except ImportError:
        raise ClearsightError("--engine ray needs Ray: pip install 'clearsight[scale]'") from None
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        kwargs["address"] = address
    try:
        ray.init(**kwargs)
    except Exception as exc:
        where = address or "a local Ray"
        reason = failure_reason(exc)
        raise ClearsightError(f"--address: cannot connect to {where} ({reason})") from exc
    return True


def _resources(workers: int, device: str) -> tuple[float, float]:
    """(CPUs, GPUs) each worker asks Ray for: one GPU and one CPU with CUDA, else an equal
    share of one node's CPUs (one worker: the whole node, as the local engine)."""
    import ray

    if device.startswith("cuda"):
        return 1.0, 1.0
    nodes = [n for n in ray.nodes() if n.get("Alive")]
    node_cpus = max((n["Resources"].get("CPU", 0.0) for n in nodes), default=1.0)
    total = ray.cluster_resources().get("CPU", node_cpus)
    return float(max(1, int(min(node_cpus, total // workers)))), 0.0


def run_ray(
    task: WorkerTask,
    items: Sequence[WorkItem],
    *,
    workers: int = 1,
    batch_size: int = 8,
    device: str = "cpu",
    threads: int | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
) -> list[ItemResult]:
    """Run `task` over `items` on the connected Ray cluster with `workers` actors; one row
    per item, whatever happened to it. Actors that die are restarted by Ray and their
    batches redone (Ray Data's actor pools retry by default). `threads`: torch threads per
    worker; None uses the local engine's count, which keeps outputs byte-identical to it."""
    results: list[ItemResult] = []
    with warnings.catch_warnings():
        # Ray Data's advice and deprecation notes are not the user's to act on (the model
        # loads in the workers, so no warning of ours is raised in this block)
        warnings.simplefilter("ignore")
        import ray.data

        logging.getLogger("ray.data").setLevel(logging.ERROR)
        cpus, gpus = _resources(workers, device)
        ray.data.DataContext.get_current().enable_progress_bars = False
        # one block per batch, made in the driver: no Ray task has to run before the
        # actors, which may hold every CPU of a small cluster
        rows = [{"source": i.source, "output": i.output} for i in items]
        ds = ray.data.from_items(rows, override_num_blocks=max(1, -(-len(rows) // batch_size)))
        mapped = ds.map_batches(
            _Worker,
            fn_constructor_args=(task, threads),
            batch_size=batch_size,
            batch_format="numpy",
            compute=ray.data.ActorPoolStrategy(size=workers),
            num_cpus=cpus,
            num_gpus=gpus or None,
        )
        for row in mapped.iter_rows():
            r = ItemResult(
                str(row["source"]),
                str(row["output"]),
                str(row["status"]),
                str(row["reason"]),
                float(row["latency_ms"]),
            )
            results.append(r)
            if on_result is not None:
                on_result(r)
    return results


def run_files_ray(
    task: WorkerTask,
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    workers: int = 1,
    batch_size: int = 8,
    address: str | None = None,
    overwrite: bool = False,
    device: str = "cpu",
    threads: int | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
) -> ScaleSummary:
    """Plan `inputs` into `out`, skip finished outputs (unless `overwrite`), run `task` on
    the rest, sweep temporaries and write `failures.csv`. `on_start(to_do, skipped)`."""
    _check_counts(workers, batch_size)
    out_dir = Path(out)
    plan = plan_inputs(inputs, out_dir)
    # an output that exists is complete: outputs appear only by an atomic rename
    skipped = [] if overwrite else [i for i in plan if os.path.exists(i.output)]
    return run_plan_ray(
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


def run_plan_ray(
    task: WorkerTask,
    plan: Sequence[WorkItem],
    skipped: Sequence[WorkItem],
    out_dir: Path,
    *,
    workers: int = 1,
    batch_size: int = 8,
    address: str | None = None,
    device: str = "cpu",
    threads: int | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
) -> ScaleSummary:
    """Run `task` on the items of `plan` not in `skipped` (the caller decides what is
    finished), then sweep temporaries and write `failures.csv`."""
    _check_counts(workers, batch_size)
    done_already = {i.output for i in skipped}
    todo = [i for i in plan if i.output not in done_already]
    if on_start is not None:
        on_start(len(todo), len(skipped))
    start = time.perf_counter()
    results: list[ItemResult] = []
    if todo:
        owned = _connect(address)
        start = time.perf_counter()  # images per second of the run, not of starting Ray
        try:
            results = run_ray(
                task,
                todo,
                workers=workers,
                batch_size=batch_size,
                device=device,
                threads=threads,
                on_result=on_result,
            )
        finally:
            if owned:
                import ray

                ray.shutdown()
            ended = time.time()  # every worker has stopped: their dead writes' temporaries go
            sweep_output_folders(out_dir, (Path(i.output) for i in todo), ended)
    seconds = time.perf_counter() - start
    done = [r for r in results if r.status == STATUS_DONE]
    failed = [r for r in results if r.status != STATUS_DONE]
    missing = {i.source for i in todo} - {r.source for r in results}
    failed += [
        ItemResult(i.source, i.output, STATUS_FAILED, f"{i.source}: no result from the workers")
        for i in todo
        if i.source in missing
    ]
    summary = ScaleSummary(list(done), list(skipped), failed, seconds)
    if failed or todo:  # a rerun with nothing to do keeps the list it found
        record_failures(summary, out_dir, failed)
    return summary


def record_failures(
    summary: ScaleSummary, out_dir: Path, failed: Sequence[ItemResult | FailedFile]
) -> None:
    """OUT/failures.csv lists `failed` (removed when none); a CSV that cannot be written
    raises with the run's summary attached, so the CLI still reports what was done."""
    listed = [FailedFile(Path(r.source), Path(r.output), r.reason) for r in failed]
    try:
        summary.failures_csv = update_failures_csv(out_dir, listed)
    except FailuresCsvError as exc:
        exc.run = summary
        raise


def restore_files_ray(
    model: str,
    inputs: Sequence[str | os.PathLike[str]],
    out: str | os.PathLike[str],
    *,
    workers: int = 1,
    batch_size: int = 8,
    address: str | None = None,
    overwrite: bool = False,
    max_pixels: int | None = None,
    options: InferenceOptions | None = None,
    threads: int | None = None,
    on_start: Callable[[int, int], None] | None = None,
    on_result: Callable[[ItemResult], None] | None = None,
    **option_values: Any,
) -> ScaleSummary:
    """`restore_files` on a Ray cluster: the same outputs (names, bytes), written by
    `workers` actors that each hold one `model` (`address`: an existing cluster, e.g.
    "auto" or "ray://head:10001"; None starts a local one for the run).

    Inputs: files, folders, glob patterns, manifests and URIs (`clearsight.scale.inputs`).
    Options come as `options=InferenceOptions(...)` or as its keyword arguments (tile=...).
    `threads`: torch threads per worker; None (default) uses the local engine's count, so
    the bytes match it; fewer (e.g. 1 with several workers per node) avoid oversubscribing
    the cores, and may change a pixel of an image by one level.
    """
    if options is not None and option_values:
        raise TypeError("pass either options= or option keyword arguments, not both")
    opts = options or InferenceOptions(**option_values)
    check_max_pixels(max_pixels)  # before Ray starts, not once per image
    task = RestoreTask(model, opts, max_pixels)
    return run_files_ray(
        task,
        inputs,
        out,
        workers=workers,
        batch_size=batch_size,
        address=address,
        overwrite=overwrite,
        device=opts.device,
        threads=threads,
        on_start=on_start,
        on_result=on_result,
    )
