"""Reading a Paddle `.pdparams` state dict without Paddle and without running its pickle.

`paddle.save(layer.state_dict(), path)` writes a pickle (protocol 4) of a dict from parameter
names to NumPy arrays: Paddle 3.x refers to `numpy._core.multiarray._reconstruct`,
`numpy.ndarray` and `numpy.dtype`, Paddle 2.x to `numpy.core.multiarray._reconstruct`, and
older dygraph saves add an `OrderedDict` and a `StructuredToParameterName@@` entry (names
only). A pickle can call any importable function, so the unpickler here resolves only those
names (and a dtype factory that refuses object arrays); anything else stops the read before
it is called. Hand-written because neither NumPy nor safetensors reads Paddle's files.
"""

from __future__ import annotations

import collections
import os
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from clearsight.errors import ClearsightError

# Paddle 2.x dygraph saves record the original structured names under this key.
STRUCTURED_NAMES_KEY = "StructuredToParameterName@@"
MAX_BYTES = 4 * 2**30


class PdparamsError(ClearsightError):
    """A `.pdparams` file is unreadable, refused (unsafe), or not a state dict."""


def _safe_dtype(*args: Any) -> np.dtype:
    dt = np.dtype(*args)
    if dt.hasobject:
        raise pickle.UnpicklingError("object arrays are refused (they would unpickle objects)")
    return dt


def _safe_reconstruct(cls: Any, shape: Any, dtype: Any) -> np.ndarray:
    if cls is not np.ndarray:
        raise pickle.UnpicklingError(f"only numpy.ndarray may be rebuilt, not {cls!r}")
    return np.ndarray.__new__(np.ndarray, shape, dtype)


_ALLOWED: dict[tuple[str, str], Any] = {
    ("numpy._core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy.core.multiarray", "_reconstruct"): _safe_reconstruct,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): _safe_dtype,
    ("collections", "OrderedDict"): collections.OrderedDict,
}


class _RestrictedUnpickler(pickle.Unpickler):
    """Builds NumPy arrays and plain containers; every other global is refused."""

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


def read_pdparams(path: str | os.PathLike[str]) -> dict[str, np.ndarray]:
    """The state dict in `path` as {name: float/int array}; raises `PdparamsError`."""
    p = Path(path)
    if not p.is_file():
        raise PdparamsError(f"{p}: no such file")
    if p.stat().st_size > MAX_BYTES:
        raise PdparamsError(f"{p}: larger than {MAX_BYTES // 2**30} GiB, refused")
    try:
        with p.open("rb") as fh:
            obj = _RestrictedUnpickler(fh).load()
    except pickle.UnpicklingError as exc:
        raise PdparamsError(f"{p}: unsafe or unreadable pickle: {exc}") from None
    except (EOFError, ValueError, TypeError, AttributeError, IndexError, KeyError) as exc:
        raise PdparamsError(f"{p}: not a readable .pdparams file ({exc})") from None
    if not isinstance(obj, dict):
        raise PdparamsError(f"{p}: holds a {type(obj).__name__}, not a state dict")
    out: dict[str, np.ndarray] = {}
    bad = []
    for k, v in obj.items():
        if k == STRUCTURED_NAMES_KEY:
            continue
        if not isinstance(k, str) or not isinstance(v, np.ndarray) or v.dtype.kind not in "biuf":
            bad.append(str(k))
            continue
        out[k] = v
    if bad:
        raise PdparamsError(f"{p}: entries that are not numeric arrays: {', '.join(bad[:8])}")
    return out
