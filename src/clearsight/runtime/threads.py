"""How idle compute threads wait: asleep, not spinning, so a shared machine stays usable.

PyTorch's OpenMP threads and ONNX Runtime's intra-op threads spin (busy-wait) between
parallel regions by default. On an idle machine that saves a wake-up; on a loaded one a
spinning thread takes the core from the sibling it waits for, and the work slows by an
order of magnitude (`detect` on 24 tiny frames: about 4 s alone, 44 s beside seven other
busy processes on two cores; benchmarks/thread_contention.py, docs/reliability.md). The
`clearsight` command therefore sets `OMP_WAIT_POLICY=PASSIVE` before PyTorch loads (unless
the environment sets a policy already), and ONNX Runtime's threads spin only when
`OMP_WAIT_POLICY=ACTIVE` asks for it. A Python program that imports clearsight keeps its
own environment: set the variable before importing torch to get the same.
"""

from __future__ import annotations

import os

WAIT_POLICY_ENV = "OMP_WAIT_POLICY"
PASSIVE = "PASSIVE"


def prefer_sleeping_threads() -> None:
    """`OMP_WAIT_POLICY=PASSIVE` unless set: call before torch is imported (OpenMP reads it
    once, as it loads), as the `clearsight` command does first thing."""
    os.environ.setdefault(WAIT_POLICY_ENV, PASSIVE)


def spinning_allowed() -> bool:
    """Whether ONNX Runtime's intra-op threads may spin: only when `OMP_WAIT_POLICY=ACTIVE`."""
    return os.environ.get(WAIT_POLICY_ENV, "").strip().upper() == "ACTIVE"
