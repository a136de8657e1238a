"""The device training path (docs/training-on-device.md) end to end on the CPU, in small.

`scripts/prepare_device_data.py` packs tiny made-up pairs and photos, then
`scripts/train_on_device.sh --dry-run` runs every step the GPU run takes (rain synthesis,
both trainings from the committed weights, the shipped-vs-candidate check, the files
brought back) with two steps per model, and `scripts/install_device_results.py
--check-only` measures the candidate again as the cards do.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from tests.conftest import REPO_ROOT

SCRIPTS = REPO_ROOT / "scripts"


def _script(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _photo(path: Path, h: int, w: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx * 3 + seed) % 256, (yy * 2) % 256, (xx + yy) % 256], axis=-1)
    img = np.clip(img + rng.normal(0, 8, img.shape), 0, 255).astype(np.uint8)
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(img).save(path, quality=90)
    return img


def _pairs(root: Path, names: list[str], h: int = 96, w: int = 112) -> None:
    for i, n in enumerate(names):
        clean = _photo(root / "clean" / n, h, w, i)
        stripes = (np.sin(np.arange(w) * 1.7) * 30)[None, :, None]
        moire = np.clip(clean + stripes, 0, 255).astype(np.uint8)
        (root / "moire").mkdir(exist_ok=True)
        Image.fromarray(moire).save(root / "moire" / n, quality=90)


@pytest.fixture(scope="module")
def sources(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("sources")
    _pairs(root / "moire_train", ["0000.jpg", "0001.jpg", "0002.jpg"])
    _pairs(root / "moire_val", ["0080.jpg", "0081.jpg"], 176, 176)  # netdisk's MS-SSIM: >160
    for i in range(4):
        _photo(root / "photos" / f"p{i}.jpg", 80, 96, 10 + i)
    return {k: root / k for k in ("moire_train", "moire_val", "photos")}


def _prepare(sources: dict[str, Path], out: Path, budget_mib: float) -> int:
    return _script("prepare_device_data").main(
        [
            "--moire-train", str(sources["moire_train"]), "--moire-val", str(sources["moire_val"]),
            "--rain-bg", str(sources["photos"]), "--out", str(out), "--no-wheels",
            "--budget-mib", str(budget_mib),
        ]
    )  # fmt: skip


def test_prepare_is_seeded_and_fails_over_budget(sources, tmp_path):
    assert _prepare(sources, tmp_path / "a", 1) == 0
    assert _prepare(sources, tmp_path / "b", 1) == 0
    files = sorted(p.relative_to(tmp_path / "a") for p in (tmp_path / "a").rglob("*.jpg"))
    assert len(files) == 3 * 2 + 2 * 2 + 4  # train pairs, val pairs, photos (3 + 1 held out)
    for f in files:  # same sources and seed: the same bytes
        assert (tmp_path / "a" / f).read_bytes() == (tmp_path / "b" / f).read_bytes()
    m = json.loads((tmp_path / "a" / "manifest.json").read_text())
    assert m["budget"]["used_bytes"] <= m["budget"]["budget_bytes"]
    assert m["moire_train"]["pairs"] == 3 and m["rain_val_bg"]["photos"] == 1
    # crops keep full scale: 96x112 sources give crops no larger than the source
    with Image.open(tmp_path / "a" / "moire_train" / "moire" / "0000.jpg") as im:
        assert im.size == (min(112, m["moire_train"]["crop"]), min(96, m["moire_train"]["crop"]))
    with pytest.raises(SystemExit, match="fit"):
        _prepare(sources, tmp_path / "c", 0.02)


def _dry_run(data: Path, out: Path, work: Path, *extra: str) -> tuple[dict, dict]:
    """`train_on_device.sh --dry-run EXTRA` over `data`; its environment and report."""
    env = os.environ | {
        "OUT": str(out),
        "DEVICE_DATA": str(data),
        "PYTHON": sys.executable,
        "OMP_NUM_THREADS": "1",
    }
    proc = subprocess.run(
        ["bash", str(SCRIPTS / "train_on_device.sh"), "--dry-run", "--work", str(work), *extra],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    return env, json.loads((out / "report.json").read_text())


def test_dry_run_writes_what_the_device_run_brings_back(sources, tmp_path):
    data, out = tmp_path / "device_data", tmp_path / "out"
    _prepare(sources, data, 1)
    env, report = _dry_run(data, out, tmp_path / "w")
    steps = {s["step"]: s for s in report["steps"]}
    assert steps["demoire trained"]["to_step"] == 2
    assert steps["derain trained"]["to_step"] == steps["training started"]["derain_from_step"] + 2
    # it continues phase 5 (light rain only) from the committed checkpoint, on its own rain
    from clearsight.engine.checkpoint import load_checkpoint

    phase5 = load_checkpoint(REPO_ROOT / "checkpoints" / "derain-v3")
    assert steps["training started"]["derain_from_step"] == int(phase5["step"])
    assert steps["rain synthesised"]["preset"] == "light"
    # ...with a cosine of its own from --derain-lr (1e-4), not the old run's tail (1e-5)
    start = int(phase5["step"])
    logged = (out / "derain-run" / "train_log.jsonl").read_text().splitlines()
    rows = [r for r in map(json.loads, logged) if "lr" in r]
    before = [r["lr"] for r in rows if r["step"] <= start]
    after = [r["lr"] for r in rows if r["step"] > start]
    assert before and before[-1] < 2e-5
    assert after and all(5e-5 < lr <= 1e-4 for lr in after)
    assert set(report["results"]) == {"derain", "demoire"}
    for r in report["results"].values():
        assert r["kept"] == (r["candidate_psnr"] > r["shipped_psnr"])
    # what comes back obeys the device tool's limits: <= 8 files, 16 MiB each, 2 folders down
    back = [p for p in out.rglob("*") if p.is_file()]
    assert len(back) <= 8 and all(p.stat().st_size <= 16 * 2**20 for p in back)
    assert all(len(p.relative_to(out).parts) <= 3 for p in back)
    assert {"report.json", "report.md", "derain-run/checkpoint.pt"} <= {
        str(p.relative_to(out)) for p in back
    }
    assert set(report["files"]) == {str(p.relative_to(out)) for p in back} - {
        "report.json",
        "report.md",
    }
    for name, r in report["results"].items():
        assert (out / f"{name}-candidate" / "model.safetensors").is_file() == r["kept"]

    # the copy-back's own check, as the cards measure (full images; here the tiny crops)
    check = subprocess.run(
        [sys.executable, str(SCRIPTS / "install_device_results.py"), str(out), "--check-only"]
        + ["--moire-val", str(data / "moire_val")],
        env=env | {"PYTHONPATH": str(REPO_ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert check.returncode == 0, check.stderr[-2000:]
    if report["results"]["demoire"]["kept"]:
        assert "demoire: candidate" in check.stdout
    assert "derain" in check.stdout


def test_only_derain_trains_and_scores_the_derain_run_alone(sources, tmp_path):
    data, out = tmp_path / "device_data", tmp_path / "out"
    _prepare(sources, data, 1)
    _, report = _dry_run(data, out, tmp_path / "w", "--only", "derain")
    steps = {s["step"]: s for s in report["steps"]}
    assert steps["training started"]["models"] == ["derain"]
    assert steps["derain trained"]["to_step"] == steps["training started"]["derain_from_step"] + 2
    assert not any(s["step"].startswith("demoire") for s in report["steps"])
    assert set(report["results"]) == {"derain"}
    assert (out / "derain-run" / "checkpoint.pt").is_file()
    assert not (out / "demoire-candidate").exists()
    assert not (tmp_path / "w" / "demoire").exists()


def test_install_keeps_the_bundled_name_and_refuses_another_architecture(tmp_path):
    inst = _script("install_device_results")
    real = REPO_ROOT / "src" / "clearsight" / "assets" / "models"
    inst.BUNDLED = tmp_path / "models"
    dest = inst.BUNDLED / "default-derain"
    dest.mkdir(parents=True)
    (dest / "config.json").write_bytes((real / "default-derain" / "config.json").read_bytes())
    (dest / "model.safetensors").write_bytes(b"old weights")
    cand = tmp_path / "derain-candidate"
    cand.mkdir()
    cfg = json.loads((real / "default-derain" / "config.json").read_text())
    (cand / "config.json").write_text(json.dumps(cfg | {"name": "last", "provenance": {"x": 1}}))
    (cand / "model.safetensors").write_bytes(b"new weights")
    inst.install("derain", cand)
    assert (dest / "model.safetensors").read_bytes() == b"new weights"
    got = json.loads((dest / "config.json").read_text())
    assert got["name"] == "default-derain" and got["provenance"] == {"x": 1}

    other = json.loads((real / "default-demoire" / "config.json").read_text())
    (cand / "config.json").write_text(json.dumps(other))
    with pytest.raises(SystemExit, match="not the architecture"):
        inst.install("derain", cand)
    assert (dest / "model.safetensors").read_bytes() == b"new weights"
