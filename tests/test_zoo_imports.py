"""Imported ESDNet and NAFNet checkpoints run through every clearsight feature with no other
step: derain/demoire/restore (odd sizes), eval, ONNX export, int8, serve, video, Ray, tiles;
and `hf://` references through huggingface_hub's own cache, offline.

The imports are tiny random initialisations (a few thousand parameters), saved in the
official layouts and imported with `clearsight import torch`.
"""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from PIL import Image
from typer.testing import CliRunner

from clearsight.artifact import load_artifact
from clearsight.cli import app
from clearsight.convert.torch_import import import_torch
from clearsight.engine.inference import Restorer
from clearsight.io import read_image, write_image
from clearsight.models.esdnet import ESDNet
from clearsight.models.nafnet import NAFNet
from tests.optional import need

runner = CliRunner()
NAF = {"width": 8, "enc_blocks": [1, 1], "middle_blocks": 1, "dec_blocks": [1, 1]}
ESD = {"en_feature_num": 8, "en_inter_num": 4, "de_feature_num": 8, "de_inter_num": 4}


def _randomise(net: torch.nn.Module) -> torch.nn.Module:
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    return net.eval()


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """{"nafnet": artifact, "esdnet": artifact, "images": folder, "pairs": folder}."""
    root = tmp_path_factory.mktemp("zoo")
    torch.save({"params": _randomise(NAFNet(**NAF)).state_dict()}, root / "naf.pth")
    torch.save(_randomise(ESDNet(**ESD)).state_dict(), root / "esd.pth")
    import_torch(root / "naf.pth", "nafnet", root / "nafnet")
    import_torch(root / "esd.pth", "esdnet", root / "esdnet")
    rng = np.random.default_rng(3)
    for name in ("a", "b"):
        img = rng.integers(0, 256, (37, 53, 3), dtype=np.uint8)
        write_image(root / "images" / f"{name}.png", img)
        write_image(root / "pairs" / "input" / f"{name}.png", img)
        write_image(root / "pairs" / "target" / f"{name}.png", img)
    return {
        "nafnet": root / "nafnet",
        "esdnet": root / "esdnet",
        "images": root / "images",
        "pairs": root / "pairs",
    }


def _as_uint8(y: torch.Tensor) -> np.ndarray:
    return (y[0].clamp(0, 1).permute(1, 2, 0).numpy() * 255.0 + 0.5).astype(np.uint8)


@pytest.mark.parametrize(("arch", "command"), [("nafnet", "derain"), ("esdnet", "demoire")])
def test_the_commands_restore_an_odd_size_as_the_model(imported, tmp_path, arch, command):
    """`derain/demoire --model DIR` and `restore` on a 37x53 image give the model's own
    restore (the reference test procedure) up to the 8-bit rounding of the file."""
    src = imported["images"] / "a.png"
    x = torch.from_numpy(read_image(src)).permute(2, 0, 1)[None].float() / 255.0
    model = load_artifact(imported[arch]).model
    with torch.no_grad():
        want = _as_uint8(model.final_output(x)).astype(int)
    for cmd in (command, "restore"):
        out = tmp_path / cmd
        res = runner.invoke(app, [cmd, "--model", str(imported[arch]), str(src), "-o", str(out)])
        assert res.exit_code == 0, res.output
        got = read_image(out / "a.png").astype(int)
        assert got.shape == (37, 53, 3)
        assert np.abs(got - want).max() <= 1


@pytest.mark.parametrize("arch", ["nafnet", "esdnet"])
def test_eval_export_and_quantize(imported, tmp_path, arch) -> None:
    res = runner.invoke(
        app, ["eval", "--model", str(imported[arch]), "--data", str(imported["pairs"]),
              "--preset", "rgb"],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    onnx = tmp_path / f"{arch}.onnx"
    res = runner.invoke(app, ["export", str(imported[arch]), "--format", "onnx", "-o", str(onnx)])
    assert res.exit_code == 0 and "parity" in res.output, res.output
    int8 = tmp_path / f"{arch}.int8.onnx"
    res = runner.invoke(
        app, ["compress", "quantize", str(imported[arch]), "-c", str(imported["images"]),
              "-o", str(int8)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert int8.is_file()


def test_serve_restores_with_an_imported_model(imported) -> None:
    need("fastapi")
    from fastapi.testclient import TestClient

    from clearsight.serve import ServeLimits, create_app

    img = read_image(imported["images"] / "a.png")
    buf = io.BytesIO()
    Image.fromarray(img).save(buf, "PNG")
    with TestClient(create_app([str(imported["nafnet"])], ServeLimits(workers=1))) as client:
        rows = client.get("/v1/models").json()["models"]
        assert rows[0]["architecture"] == "nafnet" and rows[0]["tasks"] == ["derain"]
        resp = client.post(
            "/v1/restore",
            files={"image": ("a.png", buf.getvalue())},
            data={"model": rows[0]["name"]},
        )
    assert resp.status_code == 200, resp.text
    assert np.asarray(Image.open(io.BytesIO(resp.content))).shape == img.shape


@pytest.mark.slow
def test_video_with_an_imported_model(imported, tmp_path) -> None:
    from tests.video_utils import decoded_frames, make_video

    make_video(tmp_path / "clip.mp4", w=48, h=32, n=4)
    out = tmp_path / "out"
    res = runner.invoke(
        app, ["demoire", "--model", str(imported["esdnet"]), str(tmp_path / "clip.mp4"),
              "-o", str(out)],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert len(decoded_frames(out / "clip.mp4")) == 4


@pytest.mark.slow
def test_ray_engine_with_an_imported_model(imported, tmp_path) -> None:
    need("ray")
    from tests import scale_utils

    out = tmp_path / "out"
    with scale_utils.local_ray(__name__):
        res = runner.invoke(
            app, ["derain", "--model", str(imported["nafnet"]), str(imported["images"]),
                  "-o", str(out), "--engine", "ray", "--workers", "1"],
        )  # fmt: skip
    assert res.exit_code == 0, res.output
    local = tmp_path / "local"
    runner.invoke(app, ["derain", "--model", str(imported["nafnet"]), str(imported["images"]),
                        "-o", str(local)])  # fmt: skip
    for name in ("a.png", "b.png"):
        assert (out / name).read_bytes() == (local / name).read_bytes()


@pytest.mark.parametrize(("arch", "bound"), [("nafnet", 1e-5), ("esdnet", 1e-3)])
def test_tiles_share_the_pooled_vectors_and_stay_close(imported, arch, bound) -> None:
    """Tiled (cut on the padding grid, with the whole image's pooled vectors) against
    untiled at 160x224: the tiny NAFNet's reach is inside the 64 px halo, so its tiles are
    exact to float precision; ESDNet's 1/32-scale branches reach beyond it."""
    model = load_artifact(imported[arch]).model
    x = torch.rand(1, 3, 160, 224, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        whole = model.final_output(x)
        tiled = model.restore_tiled(x, tile=96)
    assert tiled.shape == whole.shape
    assert (tiled - whole).abs().max().item() <= bound


def test_the_engine_tiles_large_images_through_the_models_path(imported) -> None:
    r = Restorer.from_pretrained(str(imported["nafnet"]), tile=64)
    calls = []
    model = r.net
    original = model.restore_tiled  # type: ignore[attr-defined]
    model.restore_tiled = lambda x, **kw: calls.append(kw["tile"]) or original(x, **kw)  # type: ignore[attr-defined]
    r.restore(torch.rand(1, 3, 100, 90))
    assert calls == [64]


# --------------------------------------------------------------------------- hf://


def _hf_cache(root: Path, repo: str, files: dict[str, bytes], revision: str = "main") -> str:
    """A huggingface_hub cache holding `files` of model repo `repo` at a fake commit, laid
    out as the library lays it (blobs, snapshots/<commit>/, refs/<revision>)."""
    import hashlib

    commit = hashlib.sha1(repo.encode()).hexdigest()
    base = root / ("models--" + repo.replace("/", "--"))
    (base / "refs").mkdir(parents=True, exist_ok=True)
    (base / "refs" / revision).write_text(commit)
    for name, data in files.items():
        blob = base / "blobs" / hashlib.sha256(data).hexdigest()
        blob.parent.mkdir(parents=True, exist_ok=True)
        blob.write_bytes(data)
        link = base / "snapshots" / commit / name
        link.parent.mkdir(parents=True, exist_ok=True)
        link.symlink_to(blob)
    return commit


@pytest.fixture
def offline_hub(tmp_path, monkeypatch) -> Path:
    need("huggingface_hub")
    cache = tmp_path / "hub"
    cache.mkdir()
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    return cache


def test_hf_weights_import_from_the_cache_offline(offline_hub, tmp_path) -> None:
    buf = io.BytesIO()
    torch.save({"params": _randomise(NAFNet(**NAF)).state_dict()}, buf)
    _hf_cache(offline_hub, "someone/nafnet-derain", {"w/net.pth": buf.getvalue()})
    res = runner.invoke(
        app, ["import", "torch", "hf://someone/nafnet-derain/w/net.pth", "--arch", "nafnet",
              "-o", str(tmp_path / "art")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    prov = load_artifact(tmp_path / "art").config.provenance["imported_from"]
    assert prov["file"] == "hf://someone/nafnet-derain/w/net.pth"


def test_hf_artifact_as_model_offline(offline_hub, imported, tmp_path) -> None:
    files = {p.name: p.read_bytes() for p in imported["nafnet"].iterdir()}
    _hf_cache(offline_hub, "someone/cs-nafnet", files)
    res = runner.invoke(
        app, ["derain", "--model", "hf://someone/cs-nafnet", str(imported["images"] / "a.png"),
              "-o", str(tmp_path / "out")],
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    local = tmp_path / "local"
    runner.invoke(app, ["derain", "--model", str(imported["nafnet"]),
                        str(imported["images"] / "a.png"), "-o", str(local)])  # fmt: skip
    assert (tmp_path / "out" / "a.png").read_bytes() == (local / "a.png").read_bytes()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["import", "torch", "hf://someone/absent/net.pth", "--arch", "nafnet", "-o", "x"],
         ["hf://someone/absent/net.pth", "could not get the file"]),
        (["derain", "--model", "hf://someone/absent@v2", "a.png"],
         ["hf://someone/absent@v2", "could not get the repository"]),
        (["import", "torch", "hf://only-owner", "--arch", "nafnet", "-o", "x"],
         ["not a Hugging Face reference"]),
    ],
)  # fmt: skip
def test_hf_missing_is_one_line(offline_hub, tmp_path, monkeypatch, args, words) -> None:
    monkeypatch.chdir(tmp_path)
    write_image(tmp_path / "a.png", np.zeros((8, 8, 3), np.uint8))  # inputs are checked first
    res = runner.invoke(app, args)
    assert res.exit_code == 1, res.output
    lines = [ln for ln in res.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and all(w in lines[0] for w in words), res.output
