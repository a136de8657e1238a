"""The process group and a resumable batch stream for the training loop.

`BatchStream` yields batches in a deterministic order with a position (epoch, batch) that a
checkpoint stores, so a resumed run sees exactly the batches it would have seen.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Sampler

from clearsight.engine.train_config import TrainConfigError

__all__ = ["BatchStream", "Dist", "init_dist"]


@dataclass(frozen=True)
class Dist:
    rank: int = 0
    world: int = 1
    device: torch.device = torch.device("cpu")
    owns_group: bool = False

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_dist(device: str) -> Dist:
    """Join the torchrun process group when WORLD_SIZE > 1; pick the device."""
    want_cuda = device.startswith("cuda") or (device == "auto" and torch.cuda.is_available())
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Dist(
            device=torch.device(("cuda" if device == "auto" else device) if want_cuda else "cpu")
        )
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device(f"cuda:{local}") if want_cuda else torch.device("cpu")
    owns = not dist.is_initialized()
    if owns:
        if want_cuda:
            torch.cuda.set_device(dev)
        dist.init_process_group("nccl" if want_cuda else "gloo")
    return Dist(rank=dist.get_rank(), world=dist.get_world_size(), device=dev, owns_group=owns)


class SkipSampler(Sampler[int]):
    """A DistributedSampler whose next pass starts `skip` samples in (mid-epoch resume)."""

    def __init__(self, inner: DistributedSampler) -> None:
        self.inner, self.skip = inner, 0

    def __iter__(self) -> Iterator[int]:
        return iter(list(self.inner)[self.skip :])

    def __len__(self) -> int:
        return len(self.inner) - self.skip


class BatchStream:
    """Batches in a deterministic order with a position that a checkpoint can restore."""

    def __init__(self, ds: Dataset, batch: int, workers: int, seed: int, d: Dist) -> None:
        self.ds, self.batch = ds, batch
        inner = DistributedSampler(ds, d.world, d.rank, shuffle=True, seed=seed, drop_last=True)
        self.sampler = SkipSampler(inner)
        self.per_epoch = len(inner) // batch
        if self.per_epoch == 0:
            raise TrainConfigError(
                f"data.batch_size: {batch * d.world} is more than the {len(ds)} training "
                "samples; lower it or raise data.repeat"
            )
        self.loader = DataLoader(
            ds,
            batch,
            sampler=self.sampler,
            num_workers=workers,
            drop_last=True,
            persistent_workers=workers > 0,
            collate_fn=getattr(ds, "collate_fn", None),  # a set may batch its own way (boxes)
        )
        self.epoch, self.position, self._it = 0, 0, None

    def seek(self, epoch: int, position: int) -> None:
        self.epoch, self.position, self._it = epoch, position, None

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        if self.position >= self.per_epoch:
            self.seek(self.epoch + 1, 0)
        if self._it is None:
            self.sampler.inner.set_epoch(self.epoch)
            self.ds.set_epoch(self.epoch)  # type: ignore[attr-defined]
            self.sampler.skip = self.position * self.batch
            self._it = iter(self.loader)
        self.position += 1
        return next(self._it)
