"""`--backend auto`: the backend measured faster for an architecture at an image size.

`benchmarks/restore_speed.py --write-table` times each bundled architecture with PyTorch and
with ONNX Runtime (fp32, through the same `Restorer` as `restore`, side by side in one run)
and writes the medians to `assets/backend_table.json`, with the CPU, library versions and
load average they came from. `choose_backend` reads that table: the entry for the model's
architecture whose measured size is nearest the image's (by pixel count, on a log scale),
and the faster backend there. Nothing measured for the architecture, or onnxruntime not
importable, means torch: the backend every model has.

The table describes the machine it was measured on; on another CPU the ratio may differ,
so a choice's reason names that CPU and says whether it is this one's model.
`--write-table` on the machine at hand re-measures it (docs/architecture.md §5.4).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE_PATH = Path(__file__).resolve().parents[1] / "assets" / "backend_table.json"
FALLBACK = "torch"
SLOWER_MARGIN = 1.2
"""ONNX Runtime asked for by name is worth a warning when torch was measured at least this
many times faster: below it, the two are within a loaded machine's noise."""


class SlowerBackendWarning(UserWarning):
    """ONNX Runtime was asked for by name where torch was measured clearly faster."""


@dataclass(frozen=True)
class BackendChoice:
    """What `auto` picked and why (one line, for the log and the command line)."""

    backend: str
    reason: str


def load_table(path: str | Path | None = None) -> dict[str, Any]:
    """The shipped table (or the one at `path`); an empty table when the file is missing
    or unreadable, so `auto` falls back to torch instead of failing."""
    p = Path(path) if path is not None else TABLE_PATH
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def ort_available() -> bool:
    return importlib.util.find_spec("onnxruntime") is not None


@functools.cache
def this_cpu_name() -> str | None:
    """This machine's CPU model as /proc/cpuinfo names it (as the benchmark records it),
    or None where that file is not there."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def measured_on(cpu: str) -> str:
    """'measured on AMD EPYC x2, not this CPU': the table's CPU (its model and core count,
    without the instruction-set flags), and whether this machine's model is the same."""
    short = cpu.split(" (", 1)[0]
    here = this_cpu_name()
    if here is None:
        return f"measured on {short}"
    same = re.sub(r" x\d+$", "", short) == here
    return f"measured on {short}, {'this CPU model' if same else 'not this CPU'}"


def _entries(table: Mapping[str, Any], architecture: str) -> list[tuple[int, dict[str, float]]]:
    """(side, {backend: seconds}) for every square size measured for `architecture`."""
    sizes = table.get("architectures", {}).get(architecture, {})
    out = []
    for side, seconds in sizes.items() if isinstance(sizes, dict) else ():
        try:
            times = {str(b): float(s) for b, s in seconds.items() if float(s) > 0}
            out.append((int(side), times))
        except (AttributeError, TypeError, ValueError):
            continue  # a malformed entry is skipped, not fatal
    return [(side, t) for side, t in out if side > 0 and len(t) >= 2]


def _nearest(
    table: Mapping[str, Any], architecture: str, height: int, width: int
) -> tuple[int, dict[str, float]] | None:
    """The measured (side, {backend: seconds}) nearest `height` x `width` (log of the pixel
    count, so 700x700 sits between 512 and 1024 as a ratio does; ties go to the smaller
    size), or None where nothing was measured for `architecture`."""
    entries = _entries(table, architecture)
    if not entries:
        return None
    pixels = max(1, height * width)
    return min(entries, key=lambda e: (abs(math.log(e[0] ** 2 / pixels)), e[0]))


def slower_than_torch(
    architecture: str,
    height: int,
    width: int,
    *,
    table: Mapping[str, Any] | None = None,
    margin: float = SLOWER_MARGIN,
) -> str | None:
    """Why ONNX Runtime is the wrong pick for `architecture` at this size, or None.

    A sentence when the table measured torch at least `margin` times faster at the nearest
    size (RESCAN at 1024x1024: 2.4x), for a warning where ONNX Runtime was asked for by name.
    """
    tab = load_table() if table is None else table
    nearest = _nearest(tab, architecture, height, width)
    if nearest is None:
        return None
    side, times = nearest
    ort, pt = times.get("onnxruntime"), times.get("torch")
    if ort is None or pt is None or ort < margin * pt:
        return None
    cpu = str(tab.get("cpu", "an unnamed CPU"))
    return (
        f"onnxruntime runs {architecture} {ort / pt:.1f}x slower than torch near "
        f"{side}x{side} ({ort:.1f} s against {pt:.1f} s, {measured_on(cpu)}); "
        "the PyTorch model with --backend auto (or torch) runs the faster one"
    )


def choose_backend(
    architecture: str,
    height: int,
    width: int,
    *,
    table: Mapping[str, Any] | None = None,
    onnxruntime: bool | None = None,
) -> BackendChoice:
    """The backend to run `architecture` on an image of `height` x `width` pixels.

    `table` defaults to the shipped one (`load_table`); `onnxruntime` to whether it is
    importable. The nearest measured size wins (`_nearest`).
    """
    tab = load_table() if table is None else table
    nearest = _nearest(tab, architecture, height, width)
    if nearest is None:
        return BackendChoice(FALLBACK, f"torch: nothing measured for {architecture}")
    side, times = nearest
    fastest = min(times, key=lambda b: times[b])
    cpu = str(tab.get("cpu", "an unnamed CPU"))
    if fastest == "onnxruntime" and not (ort_available() if onnxruntime is None else onnxruntime):
        return BackendChoice(FALLBACK, "torch: onnxruntime is not installed")
    runner_up = min((b for b in times if b != fastest), key=lambda b: times[b])
    ratio = times[runner_up] / times[fastest]
    return BackendChoice(
        fastest,
        f"{fastest} ({ratio:.2f}x faster than {runner_up} for {architecture} near "
        f"{side}x{side}, {measured_on(cpu)})",
    )
