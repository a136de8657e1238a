"""Reading a Paddle `.pdparams` state dict without Paddle and without running its pickle.

`paddle.save(layer.state_dict(), path)` writes a pickle (protocol 4) of a dict from parameter
names to NumPy arrays: Paddle 3.x refers to `numpy._core.multiarray._reconstruct`,
`numpy.ndarray` and `numpy.dtype`, Paddle 2.x to `numpy.core.multiarray._reconstruct`, and
older dygraph saves add an `OrderedDict` and a `StructuredToParameterName@@` entry (names
only). A pickle can call any importable function, so the unpickler here resolves only those
names (and a dtype factory that refuses object arrays); anything else stops the read before
it is called. No array is allocated while unpickling: each is checked first, under its
name, against the file (its bytes must be in it; docs/reliability.md). Hand-written because
neither NumPy nor safetensors reads Paddle's files.
"""

from __future__ import annotations

import collections
import math
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.errors import ClearsightError

# Paddle 2.x dygraph saves record the original structured names under this key.
STRUCTURED_NAMES_KEY = "StructuredToParameterName@@"
MAX_BYTES = 4 * 2**30
MAX_DIMS = 32  # NumPy's own limit is 64; no layer weight has more than 5


class PdparamsError(ClearsightError):
    """A `.pdparams` file is unreadable, refused (unsafe), or not a state dict."""


def _safe_dtype(*args: Any) -> np.dtype:
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError("object arrays are refused (they would unpickle objects)")
    return dt


class _PendingArray:
    """What the pickle says an array is (shape, dtype, bytes), not yet an array.

    NumPy's `_reconstruct` allocates the shape it is given and `ndarray.__setstate__` trusts
    the shape beside the data, so a 60-byte file could ask for 10**14 bytes before anything
    is checked. The unpickler builds these instead; `_materialize` checks each against the
    file (the bytes must be in it) under its state-dict name, and only then makes the array.
    """

    def __init__(self, shape: Any, dtype: Any) -> None:
        self.shape, self.dtype, self.fortran, self.data = shape, dtype, False, None

    def __setstate__(self, state: Any) -> None:
        if not isinstance(state, tuple) or len(state) not in (4, 5):
            raise pickle.UnpicklingError("an array's state is not (shape, dtype, order, data)")
        self.shape, self.dtype, self.fortran, self.data = state[-4:]


def _pending(cls: Any, shape: Any, dtype: Any) -> _PendingArray:
    if cls is not np.ndarray:
        raise pickle.UnpicklingError(f"only numpy.ndarray may be rebuilt, not {cls!r}")
    return _PendingArray(shape, _safe_dtype(dtype) if isinstance(dtype, bytes | str) else dtype)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy._core.multiarray", "_reconstruct"): _pending,
    ("numpy.core.multiarray", "_reconstruct"): _pending,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _safe_dtype,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds pending arrays and plain containers; every other global is refused."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"refused global {module}.{name} (a .pdparams state dict needs only NumPy "
                "arrays; this file would run other code)"
            ) from None

    def persistent_load(self, pid: Any) -> Any:
        raise pickle.UnpicklingError("persistent ids are refused")


def _materialize(p: Path, name: str, a: _PendingArray, file_bytes: int) -> np.ndarray:
    """The array `a` declares, after checking its shape and size against the file."""
    where = f"{p}: tensor {name!r}"
    shape = a.shape
    if (
        not isinstance(shape, tuple)
        or len(shape) > MAX_DIMS
        or not all(type(n) is int and n >= 0 for n in shape)
    ):
        raise PdparamsError(f"{where}: shape {shape!r} is not a tuple of sizes")
    if not isinstance(a.dtype, np.dtype) or a.dtype.kind not in "biuf":
        raise PdparamsError(f"{where}: dtype {a.dtype!r} is not numeric")
    declared = math.prod(shape) * a.dtype.itemsize
    if declared > file_bytes:
        raise PdparamsError(
            f"{where}: declares shape {list(shape)} {a.dtype} ({declared:,} bytes), more than "
            f"the whole file ({file_bytes:,} bytes)"
        )
    if not isinstance(a.data, bytes | bytearray) or len(a.data) != declared:
        got = len(a.data) if isinstance(a.data, bytes | bytearray) else "no"
        raise PdparamsError(
            f"{where}: declares shape {list(shape)} {a.dtype} ({declared:,} bytes) but holds "
            f"{got} bytes"
        )
    flat = np.frombuffer(a.data, dtype=a.dtype)
    return flat.reshape(shape, order="F" if a.fortran else "C").copy()


def read_pdparams(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The state dict in `path` as {name: float/int array}; raises `PdparamsError`."""
    p = Path(path)
    if not p.is_file():
        raise PdparamsError(f"{p}: no such file")
    file_bytes = p.stat().st_size
    if file_bytes > MAX_BYTES:
        raise PdparamsError(f"{p}: larger than {MAX_BYTES // 2**30} GiB, refused")
    try:
        with p.open("rb") as fh:
            obj = _RestrictedUnpickler(fh).load()
    except pickle.UnpicklingError as exc:
        raise PdparamsError(f"{p}: unsafe or unreadable pickle: {exc}") from None
    except (
        EOFError,
        ValueError,
        TypeError,
        AttributeError,
        IndexError,
        KeyError,
        OverflowError,
    ) as exc:
        raise PdparamsError(f"{p}: not a readable .pdparams file ({exc})") from None
    if not isinstance(obj, dict):
        raise PdparamsError(f"{p}: holds a {type(obj).__name__}, not a state dict")
    out: dict[str, np.ndarray] = {}
    bad = []
    for k, v in obj.items():
        if k == STRUCTURED_NAMES_KEY:
            continue
        if not isinstance(k, str) or not isinstance(v, _PendingArray):
            bad.append(str(k))
            continue
        out[k] = _materialize(p, k, v, file_bytes)
    if bad:
        raise PdparamsError(f"{p}: entries that are not numeric arrays: {', '.join(bad[:8])}")
    return out
