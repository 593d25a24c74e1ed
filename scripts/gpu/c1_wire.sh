#!/usr/bin/env bash
# Where a lone request's time goes beyond the engine: builds each part named (default resnet16 bert) as
# the GPU bench does (native runner, FP16), then `tritonkit profile` at one request in flight through
# HTTP and gRPC, each with the tensors on the wire and in system shared memory (the client writes the
# input into a region the server reads; a same-host client's way around moving the bytes over
# loopback) and, where cuda-bindings is installed, CUDA shared memory (the input already on the GPU).
# Usage: PARTS="resnet16 bert" TRANSPORTS="none system cuda" JIT=1 scripts/gpu/c1_wire.sh (JIT=1 builds
# with `jit_optimize: true`, as tune's winners on ResNet-50). Writes to $OUT: c1-wire.log and
# profile-<part>-<protocol>-<transport>.json (client p50/p99 and Triton's own split per level).
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
WORK=${WORK:-/tmp/tritonkit-c1-wire}
rm -rf "$WORK" && mkdir -p "$WORK"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/machine.txt"
rc=0
for part in ${PARTS:-resnet16 bert}; do
  python3 -c "
import sys; from pathlib import Path
from tritonkit_bench.gpu import log
from tritonkit_bench.gpu_models import PARTS, build_part
extra = {'jit_optimize': 'true'} if sys.argv[3] == '1' else None
build_part(Path(sys.argv[1]), sys.argv[2], log, runner='native', parameters=extra); print(PARTS[sys.argv[2]].model)
" "$WORK/repo-$part" "$part" "${JIT:-0}" > "$WORK/$part.model" 2>>"$OUT/c1-wire.log" || { rc=1; continue; }
  model=$(tail -1 "$WORK/$part.model")
  python3 -c "
import sys; from pathlib import Path
from tritonkit_bench.gpu_measure import alone, in_process
b1 = 1e3 / in_process(Path(sys.argv[1]), sys.argv[2])['1']
lone = alone(Path(sys.argv[1]), sys.argv[2], pauses=(0.0,))[0]
print(f'== {sys.argv[2]} in-process batch 1: {b1:.3f} ms (CUDA graph); one row alone, host in and out: {lone:.3f} ms')
" "$WORK/repo-$part" "$part" 2>>"$OUT/c1-wire.log" | tee -a "$OUT/c1-wire.log"
  [ "${PIPESTATUS[0]}" = 0 ] || rc=1
  for protocol in http grpc; do
    for transport in ${TRANSPORTS:-none system}; do
      python3 -m tritonkit profile --model "$model" --repo "$WORK/repo-$part" --protocol "$protocol" \
        --shared-memory "$transport" --concurrency 1 --window-s 1 --stability-windows 3 --max-windows 6 \
        --accept-unstable --json "$OUT/profile-$part-$protocol-$transport.json" > "$WORK/out.txt" 2>&1 || rc=1
      echo "== $part $protocol $transport" | tee -a "$OUT/c1-wire.log"
      grep -v -i warn "$WORK/out.txt" | tail -4 | tee -a "$OUT/c1-wire.log"
    done
  done
done
exit "$rc"
