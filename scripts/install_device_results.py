"""Copy a device training run's results into the repository, after the card's own check.

`scripts/train_on_device.sh` brings back (docs/training-on-device.md) `report.json`,
`derain-run/` (the resumable RESCAN run) and `*-candidate/` artifacts that beat the shipped
models on the carried validation crops. This is the step that replaces anything, so it
measures again with the model cards' commands on the full sets, on this machine:
- derain: Rain100L, preset y-matlab (the test set: looked at here once, to decide whether to
  ship, as the card's phases were), plus how many images fall more than 1 dB below input;
- demoire: the held-out pairs 0080-0099 at full size, preset netdisk (RGB PSNR, MS-SSIM and
  the Netdisk score).
A candidate replaces the bundled weights only if its mean PSNR beats the shipped model's.
The derain run's checkpoint and log replace `checkpoints/derain-v3/` (the run's latest
state, kept whether or not its weights ship; `--no-checkpoint` skips that). It prints the
figures and a leg row for the model card; the cards themselves are edited by hand.

    python scripts/install_device_results.py RESULTS --rain100l DIR --moire-val DIR
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BUNDLED = REPO / "src" / "clearsight" / "assets" / "models"
DERAIN_RUN = REPO / "checkpoints" / "derain-v3"


def card_figures(model: str, data: Path, preset: str) -> dict[str, Any]:
    """What `clearsight eval --model MODEL --data DATA --preset PRESET` reports."""
    from clearsight.api import evaluate

    res = evaluate(model, data, preset=preset, device="cpu")
    s = res.summary()
    per = {r.name: r.metrics["psnr"] for r in res.images}
    metrics = {m: s[m] for m in res.metric_names}
    return {"metrics": metrics, "psnr": s["psnr"]["mean"], "per_image": per}


def check(name: str, cand: Path, data: Path, preset: str) -> dict[str, Any]:
    inp = card_figures("identity", data, preset)
    shipped = card_figures(f"default-{name}", data, preset)
    new = card_figures(str(cand), data, preset)
    below = [k for k, v in new["per_image"].items() if v < inp["per_image"][k] - 1.0]
    return {
        "data": str(data),
        "preset": preset,
        "input": inp["psnr"],
        "shipped": shipped["psnr"],
        "candidate": new["psnr"],
        "candidate_metrics": new["metrics"],
        "below_input_by_1db": below,
        "beats": new["psnr"] > shipped["psnr"],
    }


def install(name: str, cand: Path) -> None:
    """The candidate's weights and config as the bundled model `default-NAME`."""
    dest = BUNDLED / f"default-{name}"
    cfg = json.loads((cand / "config.json").read_text())
    old = json.loads((dest / "config.json").read_text())
    if (cfg["architecture"], cfg["arch_args"]) != (old["architecture"], old["arch_args"]):
        raise SystemExit(f"{cand}: not the architecture of {dest}; nothing installed")
    cfg["name"] = old["name"]
    shutil.copy2(cand / "model.safetensors", dest / "model.safetensors")
    (dest / "config.json").write_text(json.dumps(cfg, indent=2) + "\n")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", type=Path, help="the folder the device run's $OUT came back to")
    ap.add_argument("--rain100l", type=Path, help="Rain100L (rain/ + clean/)")
    ap.add_argument("--moire-val", type=Path, help="pairs 0080-0099 (moire/ + clean/)")
    ap.add_argument("--no-checkpoint", action="store_true", help="keep checkpoints/derain-v3")
    ap.add_argument("--check-only", action="store_true", help="measure, replace nothing")
    a = ap.parse_args(argv)

    report = json.loads((a.results / "report.json").read_text())
    print(f"device run of {report['started_utc']}: {report['minutes']} min, env {report['env']}")
    for s in report["steps"]:
        if s["step"].endswith("trained"):
            last = (s.get("log_tail") or [{}])[-1]
            print(f"  {s['step']}: to step {s['to_step']}, rc {s['rc']}, last log {last}")
    run = a.results / "derain-run"
    if (run / "checkpoint.pt").is_file() and not (a.no_checkpoint or a.check_only):
        for f in ("checkpoint.pt", "train_log.jsonl"):
            shutil.copy2(run / f, DERAIN_RUN / f)
        print(f"derain run state -> {DERAIN_RUN.relative_to(REPO)}/ (add the leg to its README)")

    sets = {"derain": (a.rain100l, "y-matlab"), "demoire": (a.moire_val, "netdisk")}
    for name, (data, preset) in sets.items():
        cand = a.results / f"{name}-candidate"
        if not (cand / "model.safetensors").is_file():
            print(f"{name}: no candidate came back (it did not beat the shipped model there)")
            continue
        if data is None:
            flag = "--rain100l" if name == "derain" else "--moire-val"
            print(f"{name}: candidate not checked (give {flag}); nothing installed")
            continue
        r = check(name, cand, data, preset)
        print(json.dumps({name: r}, indent=1))
        verdict = "beats" if r["beats"] else "does not beat"
        print(
            f"{name}: candidate {r['candidate']:.3f} dB {verdict} shipped {r['shipped']:.3f} "
            f"(input {r['input']:.3f}; {len(r['below_input_by_1db'])} image(s) >1 dB below input)"
        )
        if r["beats"] and not a.check_only:
            install(name, cand)
            print(f"{name}: installed as default-{name}; add the leg to its MODEL_CARD.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
