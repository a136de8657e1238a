#!/usr/bin/env bash
# Train both bundled models on the lent GPU in one call (docs/training-on-device.md):
#   device tool `run`: command "bash scripts/train_on_device.sh", carry ["device_data"],
#   timeout_s 600. Prepare device_data/ first with scripts/prepare_device_data.py.
# Extra arguments go to scripts/device_train.py (e.g. --minutes 6 or --dry-run).
# Results land in $OUT (report.json/.md, derain-run/, *-candidate/ when they beat the
# shipped models); install them with scripts/install_device_results.py.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
OUT="${OUT:-device_out}"
DATA="${DEVICE_DATA:-device_data}"
mkdir -p "$OUT"
# the device image lacks pytorch-msssim (pure Python): install the carried wheel aside
SITE="$(mktemp -d)"
if compgen -G "$DATA/wheels/*.whl" >/dev/null; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target "$SITE" \
        "$DATA"/wheels/*.whl
fi
export PYTHONPATH="$PWD/src:$SITE" PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,memory.total --format=csv,noheader 2>/dev/null || true
exec "$PY" scripts/device_train.py --data "$DATA" --out "$OUT" "$@"
