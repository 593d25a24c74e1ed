#!/usr/bin/env bash
# The native backend (tritonkit_torch, C++) against the python-backend torch runner on a GPU host
# without network, from what scripts/gpu/pack.sh made: for each part named (default bert minilm),
# build it, time its engine in-process (the peak), then serve the same version once per variant
# (`python -m tritonkit_bench.gpu_ab`): the native backend is compiled on the host for its torch and
# CUDA (g++, CUDA's headers) and the version traced to model.ts there.
# Usage: PARTS="bert minilm resnet" scripts/gpu/native_ab.sh [gpu_ab args]
#   default args: --variants python:4,native:2,native:4,native:2@0 --levels 1,64,256,512 --seconds 3
#   variants: python|native:instances[:gpus][@delay_us][+1|-1][%config=value/...][^server-flag=value/...]
#   --protocol grpc,http: each variant through each front end in turn (default grpc)
# Each variant's ratio is against the engine it serves (the native backend's traced methods, timed too).
# Writes to $OUT: <part>.md and <part>.json per part, native-ab.log, machine.txt.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/gpu/setup.sh
source "$HERE/setup.sh" || exit 1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee "$OUT/machine.txt"
nproc >> "$OUT/machine.txt"
ARGS=("$@")
[ ${#ARGS[@]} -eq 0 ] && ARGS=(--variants python:4,native:2,native:4,native:2@0 --levels 1,64,256,512 --seconds 3)
rc=0
for part in ${PARTS:-bert minilm}; do
  PYTHONUNBUFFERED=1 python3 -m tritonkit_bench.gpu_ab --part "$part" --out "$OUT/$part.md" \
    --raw "$OUT/$part.json" --work "/tmp/tritonkit-native-ab/$part" "${ARGS[@]}" 2>&1 \
    | grep -v -i 'warn' | tee -a "$OUT/native-ab.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || rc=1
done
exit "$rc"
