#!/usr/bin/env bash
# GPU benchmark: writes docs/benchmarks-gpu.md (and raw JSON, server log) on a GPU host without
# network, from what scripts/gpu/pack.sh made. Measures onnxruntime-gpu too when its parts have
# arrived (scripts/gpu/ort_part.sh). Usage: scripts/gpu/bench.sh [python -m tritonkit.bench.gpu args]
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
PYTHONUNBUFFERED=1 python3 -m tritonkit.bench.gpu --out "$OUT/benchmarks-gpu.md" --raw "$OUT/benchmarks-gpu.json" "$@" \
  2>&1 | tee "$OUT/bench.log"
exit "${PIPESTATUS[0]}"
