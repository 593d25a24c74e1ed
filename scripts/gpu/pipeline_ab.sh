#!/usr/bin/env bash
# Pipelined against synchronous torch runner on a GPU host without network, from what
# scripts/gpu/pack.sh made (one device call of about 4-5 minutes with the defaults): BERT-base,
# sequence 128, FP16, built once; its engine in-process (the peak); then the same version served with
# the runner's `pipeline` parameter off and on at 2 and 4 instances, requests of one row at 1, 64 and
# 256 in flight (gRPC, 8 client processes). Usage: scripts/gpu/pipeline_ab.sh [python -m
# tritonkit_bench.gpu_pipeline args]
#   --variants off:2,on:2,off:4,on:4,on:2:2:4   pipeline:instances[:depth[:senders]], in order
#                                      (the default; the last: 4 threads sending the answers)
#   --levels 1,64,256 --seconds 3       load levels and measured seconds per level (the defaults)
#   --part bert|minilm|resnet           the model (default bert)
#   --dry-run --levels 1,4 --seconds 0.5   the whole path on the CPU with a tiny model (no GPU)
# Writes to $OUT (default /tmp/gpu-out): pipeline-ab.md (the table), pipeline-ab.json, pipeline-ab.log
# and pipeline-ab-logs.tgz (the servers' logs, with the runner's host-time split every 5 s).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
WORK=${WORK:-/tmp/tritonkit-pipeline-ab}
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
PYTHONUNBUFFERED=1 python3 -m tritonkit_bench.gpu_pipeline --out "$OUT/pipeline-ab.md" \
  --raw "$OUT/pipeline-ab.json" --work "$WORK" "$@" 2>&1 | grep -v -i 'warn' | tee "$OUT/pipeline-ab.log"
rc=${PIPESTATUS[0]}
tar -C "$WORK" -czf "$OUT/pipeline-ab-logs.tgz" --exclude='repo' . 2>/dev/null
exit "$rc"
