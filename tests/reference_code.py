"""The authors' reference networks (NAFNet, ESDNet), loaded from their own code for parity
tests; never part of the package, never copied into the repository.

Where the code is looked for, first found wins:

1. `$CLEARSIGHT_REFERENCE_CODE/<name>/`: a checkout of the repository (`NAFNet`, `UHDM`);
2. `../shared/reference-code/<name>/` beside the repository;
3. a bare git mirror `<owner>+<name>/repo` under `$CLEARSIGHT_REFERENCE_GIT` (default
   `/work/.mirror`), read at the pinned commit with `git show`.

Absent everywhere, the test skips. The files are executed as modules of a throwaway package
with the few imports they need stubbed (NAFNet's `basicsr.utils` pulls in OpenCV and LMDB
for a logger the network never calls).
"""

from __future__ import annotations

import functools
import importlib.util
import math
import os
import subprocess
import sys
import types
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

REPO_ROOT = Path(__file__).resolve().parents[1]
PINNED = {
    "NAFNet": ("megvii-research", "2b4af71ebe098a92a75910c233a3965a3e93ede4"),
    "UHDM": ("CVMI-Lab", "fa70a92d3d4f35d5c4e3fa7a54e3b2e5b995f1cd"),
}


def _read(name: str, path: str) -> str | None:
    """The text of `path` in reference repository `name`, or None where it is absent."""
    roots = [
        Path(os.environ["CLEARSIGHT_REFERENCE_CODE"]) / name
        if os.environ.get("CLEARSIGHT_REFERENCE_CODE")
        else None,
        REPO_ROOT.parent / "shared" / "reference-code" / name,
    ]
    for root in roots:
        if root is not None and (root / path).is_file():
            return (root / path).read_text(encoding="utf-8")
    owner, commit = PINNED[name]
    git_dir = Path(os.environ.get("CLEARSIGHT_REFERENCE_GIT", "/work/.mirror")) / (
        f"{owner}+{name}/repo"
    )
    if not git_dir.is_dir():
        return None
    done = subprocess.run(
        ["git", f"--git-dir={git_dir}", "show", f"{commit}:{path}"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout if done.returncode == 0 else None


def _module(qualname: str, source: str, filename: str) -> types.ModuleType:
    spec = importlib.util.spec_from_loader(qualname, loader=None, origin=filename)
    assert spec is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[qualname] = mod
    exec(compile(source, filename, "exec"), mod.__dict__)  # noqa: S102 - the authors' code
    return mod


def _sources(name: str, paths: list[str]) -> list[str]:
    texts = [_read(name, p) for p in paths]
    if any(t is None for t in texts):
        pytest.skip(f"reference code of {name} not found (see tests/reference_code.py)")
    return texts  # type: ignore[return-value]


def _stub_packages(names: list[str]) -> dict[str, types.ModuleType | None]:
    saved = {n: sys.modules.get(n) for n in names}
    for n in names:
        pkg = types.ModuleType(n)
        pkg.__path__ = []  # a package, so submodules can be registered under it
        sys.modules[n] = pkg
    return saved


def _restore(saved: dict[str, types.ModuleType | None], extra: list[str]) -> None:
    for n in extra:
        sys.modules.pop(n, None)
    for n, mod in saved.items():
        if mod is None:
            sys.modules.pop(n, None)
        else:
            sys.modules[n] = mod


def reference_nafnet(**kwargs: object) -> nn.Module:
    """The official `NAFNet(**kwargs)` (basicsr/models/archs/NAFNet_arch.py)."""
    files = [
        "basicsr/models/archs/arch_util.py",
        "basicsr/models/archs/local_arch.py",
        "basicsr/models/archs/NAFNet_arch.py",
    ]
    util, local, arch = _sources("NAFNet", files)
    pkgs = ["basicsr", "basicsr.models", "basicsr.models.archs"]
    saved = _stub_packages([*pkgs, "basicsr.utils"])
    sys.modules["basicsr.utils"].get_root_logger = lambda *a, **k: None  # type: ignore[attr-defined]
    mods = [f"basicsr.models.archs.{m}" for m in ("arch_util", "local_arch", "NAFNet_arch")]
    try:
        _module(mods[0], util, files[0])
        _module(mods[1], local, files[1])
        net = _module(mods[2], arch, files[2]).NAFNet(**kwargs)
    finally:
        _restore(saved, mods)
    return net


def reference_esdnet(**kwargs: object) -> nn.Module:
    """The official ESDNet `my_model(**kwargs)` (model/nets.py of UHDM)."""
    (src,) = _sources("UHDM", ["model/nets.py"])
    name = "uhdm_reference_nets"
    try:
        net = _module(name, src, "model/nets.py").my_model(**kwargs)
    finally:
        sys.modules.pop(name, None)
    return net


@functools.cache
def _reference_img_pad() -> Any:
    """UHDM's `img_pad` (utils/common.py), loaded once."""
    (src,) = _sources("UHDM", ["utils/common.py"])
    saved = _stub_packages(["cv2", "thop"])
    sys.modules["thop"].profile = sys.modules["thop"].clever_format = None  # type: ignore[attr-defined]
    name = "uhdm_reference_common"
    try:
        return _module(name, src, "utils/common.py").img_pad
    finally:
        _restore(saved, [name])


def reference_esdnet_test(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """UHDM's test procedure on `x` (model/model.py `test_model_fn`): pad with the
    authors' `img_pad` (utils/common.py: the training mean colour, centred, to multiples of
    32), run, keep the full-resolution output and crop it as the test does."""
    img_pad = _reference_img_pad()
    _, _, h, w = x.shape
    w_pad = (math.ceil(w / 32) * 32 - w) // 2
    h_pad = (math.ceil(h / 32) * 32 - h) // 2
    w_odd_pad = w_pad + (1 if w % 2 == 1 else 0)
    h_odd_pad = h_pad + (1 if h % 2 == 1 else 0)
    padded = img_pad(x, w_pad=w_pad, h_pad=h_pad, w_odd_pad=w_odd_pad, h_odd_pad=h_odd_pad)
    with torch.no_grad():
        out = net(padded)[0]
    if h_pad != 0:
        out = out[:, :, h_pad:-h_odd_pad, :]
    if w_pad != 0:
        out = out[:, :, :, w_pad:-w_odd_pad]
    return out
