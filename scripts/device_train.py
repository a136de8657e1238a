"""Train both bundled models in one device call, keep only what beats them, say what it did.

Run by `scripts/train_on_device.sh` on the lent GPU (docs/training-on-device.md), over the
data that `scripts/prepare_device_data.py` packed into `device_data/`:

1. Rain is synthesised on every core (`clearsight synth rain --preset light`, the preset of
   the run it continues; `--rain-preset`) over the carried backgrounds, and validation rain
   over the held-out ones.
2. Both runs then start together (each times its first steps beside the other, so the
   step budget `train.max_minutes` plans is what it gets):
   - RESCAN resumes the committed run `checkpoints/derain-v3` (weights, Adam, step:
     `clearsight train --resume`) on those pairs, fp32 as its config says (`train.amp:
     "off"`, the ConvGRU's setting, see configs/default-derain.yaml);
   - mbcnn-light starts from the shipped `default-demoire` (`model.init`) on the carried
     moiré crops (`configs/default-demoire.yaml` with `model.args.tone_head=true`, as the
     shipped v2 has it; bf16 autocast on CUDA, a fresh cosine from `--demoire-lr`).
   `--only derain` (or `--only demoire`) trains one of them alone, with the whole GPU and
   every loader worker: the demoiré legs of 2026-12-04 came back below the shipped model,
   so the derain run can have the call to itself.
3. The last weights of each run (never a selected best) and the shipped model are scored on
   the same validation set (`clearsight.api.evaluate`, as `clearsight eval` does); the
   candidate comes back only when its mean PSNR beats the shipped one.
4. `$OUT` gets at most 8 files (the device tool's limit): `report.json` and `report.md`
   (rewritten after every step, so a killed run still says how far it got),
   `derain-run/{checkpoint.pt,train_log.jsonl}` (the run's state to continue it),
   and `derain-candidate/` and `demoire-candidate/` (model.safetensors + config.json) when
   they beat the shipped models. The demoiré trainer checkpoint (weights and Adam, 47 MB)
   does not fit the 16 MiB a file may take: the next leg starts from the weights.

`--dry-run` does all of it on the CPU with two steps per model and tiny batches: the unit
test of this path (tests/test_device_train.py).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
FILE_LIMIT = 16 * 2**20
"""The largest file the device tool brings back from $OUT."""
DERAIN_RUN = REPO / "checkpoints" / "derain-v3"
"""The derain run a device leg continues: phase 5, light rain only (its README says why)."""
MODELS = ("derain", "demoire")
"""What one call trains; `--only` picks one of them."""


class Report:
    """What the run did, written as JSON and markdown after every step."""

    def __init__(self, out: Path) -> None:
        self.out, self.t0 = out, time.time()
        self.data: dict[str, Any] = {"steps": [], "started_utc": _utc(self.t0)}

    def step(self, name: str, **fields: Any) -> None:
        minutes = round((time.time() - self.t0) / 60, 2)
        self.data["steps"].append({"step": name, "at_minutes": minutes, **fields})
        print(f"[{minutes:5.2f} min] {name}: {json.dumps(fields)[:300]}", flush=True)
        self.write()

    def write(self) -> None:
        self.data["minutes"] = round((time.time() - self.t0) / 60, 2)
        (self.out / "report.json").write_text(json.dumps(self.data, indent=1) + "\n")
        (self.out / "report.md").write_text(self.markdown())

    def markdown(self) -> str:
        d = self.data
        lines = [f"# Device training run, {d['started_utc']}", ""]
        lines += [f"- {k}: {v}" for k, v in d.get("env", {}).items()]
        lines += ["", "| step | at min | details |", "|---|---|---|"]
        for s in d["steps"]:
            rest = {k: v for k, v in s.items() if k not in ("step", "at_minutes", "log_tail")}
            lines.append(f"| {s['step']} | {s['at_minutes']} | {json.dumps(rest)[:400]} |")
        lines += ["", "| model | val set | preset | input | shipped | candidate | kept |"]
        lines += ["|---|---|---|---|---|---|---|"]
        for name, r in d.get("results", {}).items():
            lines.append(
                f"| {name} | {r['val']} | {r['preset']} | {r.get('input_psnr')} | "
                f"{r['shipped_psnr']} | {r['candidate_psnr']} | {r['kept']} |"
            )
        return "\n".join(lines) + "\n"


def _since(t: float) -> float:
    return round((time.time() - t) / 60, 2)


def _utc(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _env() -> dict[str, Any]:
    import torch

    env: dict[str, Any] = {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cpus": os.cpu_count(),
        "cuda": torch.cuda.is_available(),
    }
    if torch.cuda.is_available():
        env["gpu"] = torch.cuda.get_device_name(0)
    return env


def _clearsight(*args: str) -> list[str]:
    return [sys.executable, "-m", "clearsight", *args]


def _sets(overrides: dict[str, Any]) -> list[str]:
    return [a for k, v in overrides.items() for a in ("--set", f"{k}={v}")]


def _log_tail(path: Path, n: int = 3) -> list[dict[str, Any]]:
    if not path.is_file():
        return []
    return [json.loads(ln) for ln in path.read_text().splitlines()[-n:] if ln]


def demoire_command(a: argparse.Namespace, manifest: dict[str, Any], run: Path) -> list[str]:
    crop = int(manifest["moire_train"]["crop"])
    o: dict[str, Any] = {
        "data.train": a.data / "moire_train",
        "data.val": a.data / "moire_val",
        "model.init": "default-demoire",
        "model.args.tone_head": "true",  # the shipped v2 has MBCNN's tone head
        "optim.lr": a.demoire_lr,
        "schedule.warmup_steps": 100,
        "data.patch_size": min(256, crop),
        "data.workers": a.loader_workers,
        "train.max_minutes": a.minutes,
        "train.val_every": 1000,
        "train.ckpt_every": 10**6,
        "train.tensorboard": "false",
    }
    if a.dry_run:
        o.update(
            {
                "train.steps": 2,
                "data.batch_size": 2,
                "data.patch_size": min(64, crop),
                "data.workers": 0,
                "data.repeat": 1,
                "train.max_minutes": 0,
                "train.device": "cpu",
                "train.log_every": 1,
            }
        )
    return _clearsight(
        "train", str(REPO / "configs" / "default-demoire.yaml"), "--run-dir", str(run),
        "--no-progress", *_sets(o),
    )  # fmt: skip


def derain_command(a: argparse.Namespace, run: Path, start_step: int, minutes: float) -> list:
    o: dict[str, Any] = {
        "data.train": a.work / "rain_train",
        "data.val": a.work / "rain_val",
        "data.cache": "memory",
        "data.workers": a.loader_workers,
        "train.steps": start_step + 40_000,
        "train.max_minutes": round(minutes, 2),
        # a cosine of its own from --derain-lr, whatever step the run has reached (README)
        "schedule.restart_step": start_step,
        "optim.lr": a.derain_lr,
        "train.val_every": 1000,
        "train.ckpt_every": 1000,
        "train.device": "auto",
        "train.tensorboard": "false",
    }
    if a.dry_run:
        o.update(
            {
                "train.steps": start_step + 2,
                "data.batch_size": 2,
                "data.workers": 0,
                "data.repeat": 1,
                "train.max_minutes": 0,
                "train.device": "cpu",
                "train.log_every": 1,
            }
        )
    return _clearsight("train", "--resume", str(run), "--no-progress", *_sets(o))


def synth(a: argparse.Namespace, src: str, out: str, per_image: int, seed: int) -> int:
    """`clearsight synth rain --preset PRESET` in this process (one interpreter start less)."""
    from clearsight.data.synth_rain import synth_rain_folder

    report = synth_rain_folder(
        a.data / src, a.work / out, preset=a.rain_preset, per_image=per_image, seed=seed,
        workers=a.synth_workers,
    )  # fmt: skip
    return report.pairs


def score(model: str, data: Path, preset: str, device: str) -> tuple[float, list[float]]:
    """Mean PSNR and the per-image PSNRs of `model` on `data` under `preset`."""
    from clearsight.api import evaluate

    res = evaluate(model, data, preset=preset, device=device, tile=0)
    per = [r.metrics["psnr"] for r in res.images]
    return sum(per) / len(per), per


def compare(name: str, bundled: str, cand: Path, val: Path, preset: str, device: str) -> dict:
    inp, inp_per = score("identity", val, preset, device)
    shipped, _ = score(bundled, val, preset, device)
    new, new_per = score(str(cand), val, preset, device)
    worse = sum(n < i - 1.0 for n, i in zip(new_per, inp_per, strict=True))
    return {
        "val": str(val.name),
        "preset": preset,
        "images": len(new_per),
        "input_psnr": round(inp, 4),
        "shipped_psnr": round(shipped, 4),
        "candidate_psnr": round(new, 4),
        "candidate_below_input_by_1db": worse,
        "kept": new > shipped,
    }


def bring_back(src: Path, dest: Path, files: tuple[str, ...], report: Report) -> list[str]:
    """Copy `files` of `src` into `dest` if each fits the tool's per-file limit."""
    dest.mkdir(parents=True, exist_ok=True)
    done = []
    for f in files:
        p = src / f
        if not p.is_file():
            continue
        if p.stat().st_size > FILE_LIMIT:
            report.step("skipped (over 16 MiB)", file=str(p), bytes=p.stat().st_size)
            continue
        shutil.copy2(p, dest / f)
        done.append(f"{dest.name}/{f}")
    return done


def main(argv: list[str] | None = None) -> int:
    from clearsight.data.synth_rain import PRESETS as RAIN_PRESETS

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, default=REPO / "device_data")
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", "device_out")))
    ap.add_argument("--work", type=Path, default=None, help="scratch (default: OUT/../work)")
    ap.add_argument("--minutes", type=float, default=6.5, help="training budget per model")
    ap.add_argument("--deadline-minutes", type=float, default=9.3, help="whole run, backstop")
    ap.add_argument("--demoire-lr", type=float, default=3e-4)
    ap.add_argument(
        "--derain-lr",
        type=float,
        default=1e-4,
        help="where the resumed derain leg's cosine restarts (the run's own peak)",
    )
    ap.add_argument(
        "--rain-preset",
        default="light",
        choices=RAIN_PRESETS,
        help="the rain the derain run trains on: keep the run's own (light)",
    )
    ap.add_argument("--rain-per-image", type=int, default=8)
    ap.add_argument("--rain-seed", type=int, default=3, help="new rain each leg: change it")
    ap.add_argument("--synth-workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--loader-workers", type=int, default=6)
    ap.add_argument(
        "--only",
        choices=MODELS,
        default=None,
        help="train one model and give it the whole GPU (default: both side by side)",
    )
    ap.add_argument("--dry-run", action="store_true", help="CPU, 2 steps each, tiny batches")
    a = ap.parse_args(argv)
    a.data = a.data.resolve()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.work is None:
        import tempfile

        a.work = Path(tempfile.mkdtemp(prefix="device_work_"))
    a.work.mkdir(parents=True, exist_ok=True)
    if a.dry_run:
        a.rain_per_image, a.synth_workers = 1, 0
    device = "cpu" if a.dry_run else "cuda"
    manifest = json.loads((a.data / "manifest.json").read_text())
    report = Report(a.out)
    report.data.update({"env": _env(), "manifest": manifest})
    report.data["args"] = {k: str(v) for k, v in vars(a).items()}
    report.step("start")

    runs = {name: a.work / name for name in MODELS}  # each run's folder, named as the model
    derain_run = runs["derain"]
    models = (a.only,) if a.only else MODELS
    from clearsight.engine.checkpoint import load_checkpoint

    commands = {}
    if "derain" in models:
        t = time.time()
        n_pairs = synth(a, "rain_bg", "rain_train", a.rain_per_image, a.rain_seed)
        n_val = synth(a, "rain_val_bg", "rain_val", 2, 1000 + a.rain_seed)
        report.step(
            "rain synthesised",
            preset=a.rain_preset,
            pairs=n_pairs,
            val_pairs=n_val,
            minutes=_since(t),
        )
        derain_run.mkdir(parents=True)
        for f in ("checkpoint.pt", "train_log.jsonl"):
            if (DERAIN_RUN / f).is_file():
                shutil.copy2(DERAIN_RUN / f, derain_run / f)
        start_step = int(load_checkpoint(derain_run)["step"])
        commands["derain"] = derain_command(a, derain_run, start_step, a.minutes)
    else:
        start_step = None
    if "demoire" in models:
        commands["demoire"] = demoire_command(a, manifest, runs["demoire"])
    # Both start together (unless --only), so each times its first steps (train.max_minutes)
    # while the other also runs: the step budget each one plans is what it gets beside it.
    t = time.time()
    procs = {}
    for name, cmd in sorted(commands.items()):
        log = open(a.work / f"{name}.log", "w")  # noqa: SIM115
        procs[name] = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    report.step(
        "training started", models=list(models), budget_minutes=a.minutes,
        derain_from_step=start_step,
    )  # fmt: skip
    # a backstop under the command's 10-minute limit: scoring and copying need the last minute
    stop_at = report.t0 + (a.deadline_minutes - 1.0) * 60
    rc = {}
    for name, p in procs.items():
        try:
            rc[name] = p.wait(timeout=max(stop_at - time.time(), 1.0))
        except subprocess.TimeoutExpired:
            p.terminate()
            rc[name] = p.wait()
            report.step(f"{name} stopped at the deadline", rc=rc[name])
    for name in procs:
        run = runs[name]
        step = int(load_checkpoint(run)["step"]) if (run / "checkpoint.pt").is_file() else None
        report.step(
            f"{name} trained",
            rc=rc[name],
            to_step=step,
            minutes=_since(t),
            log_tail=_log_tail(run / "train_log.jsonl"),
        )
        report.data[f"{name}_output_tail"] = (a.work / f"{name}.log").read_text()[-3000:]

    results, files = {}, []
    if "derain" in procs:
        files += bring_back(
            derain_run, a.out / "derain-run", ("checkpoint.pt", "train_log.jsonl"), report
        )
    jobs = (
        ("derain", "default-derain", a.work / "rain_val", "y-matlab"),
        ("demoire", "default-demoire", a.data / "moire_val", "rgb"),
    )
    for name, bundled, val, preset in jobs:
        if name not in procs:
            continue
        run, rc_run = runs[name], rc[name]
        if rc_run != 0 or not (run / "last").is_dir():
            report.step(f"{name}: no candidate", rc=rc_run)
            continue
        r = compare(name, bundled, run / "last", val, preset, device)
        results[name] = r
        report.data["results"] = results
        report.step(f"{name} evaluated", **r)
        if r["kept"]:
            got = bring_back(run / "last", a.out / f"{name}-candidate", ("model.safetensors",
                             "config.json"), report)  # fmt: skip
            files += got
    report.data["files"] = files
    report.step("done", files=files)
    return 0 if all(v == 0 for v in rc.values()) else 1


if __name__ == "__main__":
    raise SystemExit(main())
