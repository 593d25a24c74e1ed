#!/usr/bin/env bash
# GPU benchmark: writes docs/benchmarks-gpu.md (and the raw JSON, logs, tune reports) on a GPU host
# without network, from what scripts/gpu/pack.sh made. Usage: scripts/gpu/bench.sh [python -m tritonkit_bench.gpu args]
#   --only bert,minilm,resnet,resnet16   parts to run, in order (default all)
#   --tune PARTS | --no-tune    parts tuned with `tritonkit tune` + `tritonkit profile` (default every part run)
#   --malloc-ab                 one level again without tritonkit's malloc settings
#   --merge FILE                keep the parts not run from an earlier run's benchmarks-gpu.json
#   --seconds S                 measured seconds per served level (default 3)
#   (python -m tritonkit_bench.gpu --render-from a.json b.json --notes notes.md --out page.md: one page from
#   several runs' JSON, on any machine)
# Everything goes to $OUT (default /tmp/gpu-out): the page, benchmarks-gpu.json, bench.log and work.tgz
# (server logs, tune reports, profile JSON).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
WORK=${WORK:-/tmp/tritonkit-gpu-bench}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
# BENCH_TIMEOUT (seconds, default none): stop the run there and still pack what it measured (a device
# call's own limit would take the packing with it)
PYTHONUNBUFFERED=1 timeout "${BENCH_TIMEOUT:-0}" python3 -m tritonkit_bench.gpu --out "$OUT/benchmarks-gpu.md" \
  --raw "$OUT/benchmarks-gpu.json" --work "$WORK" "$@" 2>&1 | grep --line-buffered -v -i 'warn' | tee "$OUT/bench.log"
rc=${PIPESTATUS[0]}
tar -C "$WORK" -czf "$OUT/work.tgz" --exclude='repo-*' --exclude='*.pt2' --exclude='*.pt' . 2>/dev/null
exit "$rc"
