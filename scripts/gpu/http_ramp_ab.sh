#!/usr/bin/env bash
# tritonkit's own load generator (tune / profile / compare) over HTTP with a level's users started all at
# once against started over its first 0.25 s (TRITONKIT_HTTP_RAMP_S), on a GPU host without network, from
# what scripts/gpu/pack.sh made: builds one bench part (default minilm, the native runner, as built), then
# `tritonkit profile --protocol http` at the same levels once per ramp, then once through gRPC.
# Usage: PART=minilm scripts/gpu/http_ramp_ab.sh [--concurrency 256,512,1024]
# Writes to $OUT: profile-<ramp>.json per run, http-ramp-ab.log, machine.txt.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
PART=${PART:-minilm}
LEVELS=(--concurrency 256,512,1024)
[ $# -gt 0 ] && LEVELS=("$@")
REPO=/tmp/tritonkit-http-ramp/repo
rm -rf "$REPO" && mkdir -p "$REPO"
python3 -c "
from pathlib import Path
from tritonkit_bench.gpu_models import build_part
build_part(Path('$REPO'), '$PART', print, runner='native')
" 2>&1 | grep -v -i warn | tee -a "$OUT/http-ramp-ab.log"
MODEL=$(ls "$REPO")
rc=0
for run in http:0 http:0.25 grpc:0.25; do
  proto=${run%%:*} ramp=${run#*:}
  echo "== $proto, users started over ${ramp} s" | tee -a "$OUT/http-ramp-ab.log"
  TRITONKIT_HTTP_RAMP_S=$ramp python3 -m tritonkit profile --model "$MODEL" --repo "$REPO" --protocol "$proto" \
    --workers 12 --window-s 0.3 --max-windows 6 --accept-unstable "${LEVELS[@]}" \
    --json "$OUT/profile-$proto-$ramp.json" 2>&1 | grep -v -i warn | tee -a "$OUT/http-ramp-ab.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit "$rc"
