#!/usr/bin/env bash
# GPU benchmark: writes docs/benchmarks-gpu.md (and raw JSON, server log) on a GPU host without
# network, from what scripts/gpu/pack.sh made. Measures onnxruntime-gpu too when its parts have
# arrived (scripts/gpu/ort_part.sh). Usage: scripts/gpu/bench.sh [python -m tritonkit_bench.gpu args]
#   --only minilm,resnet,tune   parts to run (default all; about 8 minutes on an H100 together)
#   --merge FILE                keep the parts not run from an earlier run's benchmarks-gpu.json
#   (python -m tritonkit_bench.gpu --render-from a.json b.json --out page.md: one page from several
#   runs' JSON, on any machine)
#   --seconds S                 measured seconds per served scenario (default 5)
#   --tune-protocol grpc|http, --tune-budget-ms, --tune-instances, --tune-max-batch-sizes,
#   --tune-delays-us, --tune-window-s, --tune-workers: the tune part's search (see --help)
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
PYTHONUNBUFFERED=1 python3 -m tritonkit_bench.gpu --out "$OUT/benchmarks-gpu.md" --raw "$OUT/benchmarks-gpu.json" "$@" \
  2>&1 | tee "$OUT/bench.log"
exit "${PIPESTATUS[0]}"
