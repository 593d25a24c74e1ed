#!/usr/bin/env bash
# One step of carrying onnxruntime-gpu to a GPU host that takes at most 64 MiB per run: copies the
# part in PART_DIR (one of the .ort/NN folders pack.sh made) to /tmp/ort-parts, where setup.sh
# reassembles, checks (sha256) and installs the wheel once all four parts are there. Run it in
# consecutive runs on the same warm machine, one part each: scripts/gpu/ort_part.sh .ort/00, ...
set -euo pipefail
PART_DIR=${1:?usage: ort_part.sh PART_DIR}
mkdir -p /tmp/ort-parts
cp "$PART_DIR"/SHA256SUMS "$PART_DIR"/WHEEL "$PART_DIR"/onnxruntime-gpu.part.* /tmp/ort-parts/
ls -la /tmp/ort-parts
