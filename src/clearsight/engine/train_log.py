"""What a training run writes as it goes: `train_log.jsonl`, TensorBoard scalars, a bar."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import IO, Any

from clearsight.atomic import atomic_write_text

__all__ = ["LOG_FILE", "RunLog", "TrainBar", "truncate_log"]

LOG_FILE = "train_log.jsonl"


class RunLog:
    """JSON lines in `run_dir/train_log.jsonl` (and TensorBoard scalars when asked);
    only the main rank writes."""

    def __init__(self, run_dir: Path, enabled: bool, tensorboard: bool) -> None:
        self.run_dir, self.enabled, self.tensorboard = run_dir, enabled, tensorboard
        self.fh: IO[str] | None = None
        self.tb: Any = None

    def __call__(self, record: dict[str, Any]) -> None:
        if not self.enabled:
            return
        if self.fh is None:
            self.fh = open(self.run_dir / LOG_FILE, "a", encoding="utf-8")  # noqa: SIM115
        self.fh.write(json.dumps(record) + "\n")
        self.fh.flush()
        if self.tensorboard:
            if self.tb is None:
                from torch.utils.tensorboard import SummaryWriter

                self.tb = SummaryWriter(str(self.run_dir / "tensorboard"))
            for k, v in record.items():
                if k != "step" and isinstance(v, int | float):
                    self.tb.add_scalar(k, v, record["step"])

    def close(self) -> None:
        for h in (self.fh, self.tb):
            if h is not None:
                h.close()


def truncate_log(path: Path, step: int) -> None:
    """Drop log lines written after the checkpoint we resume from (they will be redone)."""
    if not path.is_file():
        return
    keep = [
        ln
        for ln in path.read_text(encoding="utf-8").splitlines()
        if ln and json.loads(ln)["step"] <= step
    ]
    atomic_write_text(path, "".join(f"{ln}\n" for ln in keep))


class TrainBar:
    """Rich progress (loss, step rate, ETA) or nothing."""

    def __init__(self, total: int, start: int, enabled: bool) -> None:
        self.progress = None
        if enabled:
            from clearsight.progress import progress_bar

            self.progress = progress_bar(
                fields=("loss {task.fields[loss]:.4g}", "{task.fields[rate]:.2f} it/s")
            )
            self.task = self.progress.add_task(
                "train", total=total, completed=start, loss=math.nan, rate=0.0
            )

    def __enter__(self) -> TrainBar:
        if self.progress is not None:
            self.progress.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()

    def set_total(self, total: int) -> None:
        if self.progress is not None:
            self.progress.update(self.task, total=total)

    def update(self, step: int, **fields: float) -> None:
        if self.progress is not None:
            self.progress.update(self.task, completed=step, **fields)

    def note(self, text: str) -> None:
        if self.progress is not None:
            self.progress.console.print(text, highlight=False)
